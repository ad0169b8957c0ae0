// A channel's "Who has access": the users who hold a channel-scoped
// permission there, as the server computes it (roles, overwrites, timeouts),
// a page at a time.
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import { holds, type Access } from "../access";
import { ok, type Permission, type User } from "../api";
import { channelScoped, useConsole } from "../state";
import { Btn, ProblemBox, useAction } from "../ui";

/** Whether the caller may ask who has access (MANAGE_ROLES or VIEW_AUDIT_LOG). */
export function mayAskAccess(a: Access): boolean {
  return holds(a, "MANAGE_ROLES") || holds(a, "VIEW_AUDIT_LOG");
}

/** Events after which the answer may differ (a category's overwrites copied to a synced channel are events of that channel too). */
function changesAccess(e: { type: string; subject: string }, channelID: string): boolean {
  if (e.type === "channel.deleted") return false;
  if (e.type.startsWith("channel.")) return e.subject === `channel:${channelID}` && !e.type.startsWith("channel.attachment.");
  return e.type.startsWith("role.") || e.type === "user.role.assigned" || e.type === "user.role.removed" || e.type === "user.timeout" || e.type === "user.created" || e.type === "user.deleted" || e.type === "user.updated" || e.type === "global.permissions.set";
}

/** Drawn anew (key) for each channel: nothing is asked until the button is pressed. */
export function WhoHasAccess(props: { channelID: string; label: string }): JSX.Element | null {
  const c = useConsole();
  const [perm, setPerm] = useState<Permission>("VIEW_CHANNEL");
  // What is shown: asked for with the button, so that opening a channel costs no request.
  const [asked, setAsked] = useState<Permission | null>(null);
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]);
  const [page, setPage] = useState<{ items: User[]; next: string | null } | null>(null);
  const act = useAction();
  const cursor = cursors[cursors.length - 1];
  const load = () =>
    act.run(async () => {
      if (asked === null) return;
      const query = { permission: asked, limit: 20, ...(cursor ? { cursor } : {}) };
      const r = await ok(c.api.GET("/channels/{channelID}/access", { params: { path: { channelID: props.channelID }, query } }));
      setPage({ items: r.data.items, next: r.data.next_cursor ?? null });
    });
  useEffect(() => {
    if (asked !== null) void load();
  }, [asked, cursor, props.channelID]);
  useEffect(
    () =>
      c.onEvent((e) => {
        if (asked === null) return;
        if (e.type === "channel.deleted" && e.subject === `channel:${props.channelID}`) {
          // Asking again would only answer 404: the channel is gone.
          setAsked(null);
          setPage(null);
        } else if (changesAccess(e, props.channelID)) void load();
      }),
    [asked, cursor, props.channelID],
  );
  if (!mayAskAccess(c.access)) return null;
  const show = (e: Event) => {
    e.preventDefault();
    setCursors([undefined]);
    setPage(null);
    setAsked(perm);
    if (asked === perm && !cursor) void load();
  };
  return (
    <section class="card" aria-labelledby="access-h" data-testid="who-has-access">
      <h2 id="access-h">Who has access</h2>
      <form class="row wrap" onSubmit={show}>
        <label>
          Permission{" "}
          <select name="access-permission" value={perm} onChange={(e) => setPerm(e.currentTarget.value as Permission)}>
            {channelScoped(c.catalog).map((p) => (
              <option key={p.name} value={p.name}>
                {p.name}
              </option>
            ))}
          </select>
        </label>
        <Btn type="submit" kind="primary" busy={act.busy}>
          Show who has it
        </Btn>
      </form>
      <ProblemBox error={act.error} names={c.names} />
      {asked !== null &&
        (page === null ? (
          <p class="loading">Loading…</p>
        ) : (
          <>
            <p class="hint" role="status">
              {page.items.length === 0 && cursors.length === 1 && !page.next
                ? `Nobody holds ${asked} in ${props.label}.`
                : `Users who hold ${asked} in ${props.label}${cursors.length > 1 ? ` (page ${cursors.length})` : ""}:`}
            </p>
            {page.items.length > 0 && (
              <ul class="items" data-testid="access-list" data-permission={asked}>
                {page.items.map((u) => (
                  <li key={u.id} data-user={u.username} class="row between">
                    <span>
                      <strong>{u.display_name || u.username}</strong> <span class="muted">@{u.username}</span>
                      {u.is_owner && <span class="badge">owner</span>}
                      {u.status === "suspended" && <span class="badge warn">suspended</span>}
                      <span class="sub">{u.roles.map(c.names.role).join(", ") || "no roles"}</span>
                    </span>
                  </li>
                ))}
              </ul>
            )}
            {page.items.length === 0 && page.next && <p class="muted">No one on this page; the list goes on: Next →</p>}
            <div class="row">
              <Btn reason={cursors.length > 1 ? null : "this is the first page"} onClick={() => setCursors(cursors.slice(0, -1))}>
                ← Previous
              </Btn>
              <Btn reason={page.next ? null : "this is the last page"} onClick={() => page.next && setCursors([...cursors, page.next])}>
                Next →
              </Btn>
            </div>
          </>
        ))}
    </section>
  );
}
