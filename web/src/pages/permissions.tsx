// Permissions: the global permissions every user has, and "Why?": a user's
// effective permissions (optionally in a channel) with the explain steps of
// each, in words ("denied by the overwrite of role Muted in #ops").
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import { need } from "../access";
import { ifMatch, ok, type Channel, type Explanation, type Permission, type Schemas, type User } from "../api";
import { channelLabel, listChannels, useConsole, type Console } from "../state";
import { Btn, isStale, ProblemBox, ReadOnly, useAction, Why as Disabled } from "../ui";
import { AsOf, instantOf } from "./history";

export function PermissionsPage(): JSX.Element {
  return (
    <div class="stack">
      <GlobalPermissions />
      <Why />
    </div>
  );
}

function GlobalPermissions(): JSX.Element {
  const c = useConsole();
  const [state, setState] = useState<{ perms: Permission[]; etag: string } | null>(null);
  const [draft, setDraft] = useState<Set<Permission>>(new Set());
  const [stale, setStale] = useState<unknown>(null);
  const act = useAction();
  const load = async () => {
    const r = await ok(c.api.GET("/permissions/global"));
    setState({ perms: r.data.permissions, etag: r.etag });
    setDraft(new Set(r.data.permissions));
  };
  useEffect(() => {
    void act.run(load);
    return c.onEvent((e) => {
      if (e.type === "global.permissions.set") void act.run(load);
    });
  }, []);
  const reason = c.access.owner || c.access.admin ? null : "you need ADMINISTRATOR";
  const changed = state ? c.catalog.some((p) => draft.has(p.name) !== state.perms.includes(p.name)) : false;
  const save = async () => {
    if (!state) return;
    const permissions = c.catalog.filter((p) => draft.has(p.name)).map((p) => p.name);
    const err = await act.run(async () => {
      await ok(c.api.PUT("/permissions/global", { params: { header: ifMatch(state.etag) }, body: { permissions } }));
    });
    if (err === null || isStale(err)) {
      setStale(isStale(err) ? err : null);
      await load();
      await c.refresh();
    }
  };
  return (
    <section class="card" aria-labelledby="global-h">
      <h2 id="global-h">Global permissions</h2>
      <p class="hint">Every user has these, before roles and channel overwrites.</p>
      <ReadOnly reason={reason} what="change them" />
      <ProblemBox error={stale} names={c.names} onClose={() => setStale(null)} />
      {state === null ? (
        <p class="loading">Loading…</p>
      ) : (
        <fieldset class="perms" disabled={reason !== null}>
          <legend class="visually-hidden">Global permissions</legend>
          {c.catalog.map((p) => {
            const off = p.name === "ADMINISTRATOR" ? "ADMINISTRATOR cannot be a global permission" : null;
            return (
              <label key={p.name} class={`perm${off ? " off" : ""}`} title={off ?? undefined}>
                <input
                  type="checkbox"
                  name={p.name}
                  checked={draft.has(p.name)}
                  disabled={off !== null}
                  onChange={(e) => {
                    const next = new Set(draft);
                    if (e.currentTarget.checked) next.add(p.name);
                    else next.delete(p.name);
                    setDraft(next);
                  }}
                />
                <span>
                  <code>{p.name}</code>
                  <span class="sub">{p.description}</span>
                </span>
              </label>
            );
          })}
        </fieldset>
      )}
      <div class="row">
        <Btn kind="primary" reason={reason ?? (changed ? null : "nothing changed")} busy={act.busy} onClick={() => void save()}>
          Save
        </Btn>
      </div>
      {!isStale(act.error) && <ProblemBox error={act.error} names={c.names} />}
    </section>
  );
}

/**
 * A step of an explanation in words. `channels` names the category an
 * overwrite was copied from ("… (copied from category Staff)").
 */
export function stepWords(c: Console, s: Schemas["ExplanationStep"], channel: Pick<Channel, "id"> | null, channels: readonly Channel[] = []): string {
  const verb = s.effect === "allow" ? (s.kind.startsWith("overwrite") ? "allowed" : "granted") : "denied";
  const from = s.from_category ? ` (copied from category ${channels.find((x) => x.id === s.from_category)?.name ?? s.from_category})` : "";
  // The channel as its heading names it ("#Operations"), its ID only when it is not listed.
  const listed = channel ? channels.find((x) => x.id === channel.id) : undefined;
  const inCh = (channel ? ` in ${listed ? channelLabel(listed) : `#${channel.id}`}` : "") + from;
  switch (s.kind) {
    case "owner":
      return "granted: the owner has every permission";
    case "administrator":
      return `granted by ADMINISTRATOR${channel ? ", which bypasses channel overwrites" : ""}`;
    case "global":
      return "granted by the global permissions";
    case "role":
      return `granted by role ${s.role_id ? c.names.role(s.role_id) : "?"}`;
    case "overwrite_everyone":
      return `${verb} by the @everyone overwrite${inCh}`;
    case "overwrite_role":
      return `${verb} by the overwrite of role ${s.role_id ? c.names.role(s.role_id) : "?"}${inCh}`;
    case "overwrite_user":
      return `${verb} by the user's own overwrite${inCh}`;
    case "implicit":
      return s.detail;
    case "timeout":
      return `denied: timed out${s.until ? ` until ${new Date(s.until).toLocaleString()}` : ""}`;
  }
}

function Why(): JSX.Element {
  const c = useConsole();
  const [channels, setChannels] = useState<Channel[]>([]);
  const [query, setQuery] = useState("");
  const [found, setFound] = useState<User[]>([]);
  const [user, setUser] = useState<User | null>(null);
  const [channelID, setChannelID] = useState("");
  const [at, setAt] = useState(""); // "as of", a datetime-local value; "" for now
  const [result, setResult] = useState<{ user: User; channel: Channel | null; items: Explanation[]; at: string } | null>(null);
  const act = useAction();
  useEffect(() => {
    void listChannels(c)
      .then(setChannels)
      .catch(() => setChannels([]));
  }, []);
  useEffect(() => {
    if (!query || (user && query === user.username)) {
      setFound([]);
      return undefined;
    }
    const t = window.setTimeout(() => {
      ok(c.api.GET("/users", { params: { query: { q: query, limit: 8 } } }))
        .then((r) => setFound(r.data.items))
        .catch(() => setFound([]));
    }, 200);
    return () => window.clearTimeout(t);
  }, [query]);
  const reason = user && user.id !== c.access.me.id ? need(c.access, "MANAGE_ROLES") : null;
  const ask = async (e: Event) => {
    e.preventDefault();
    if (!user) return;
    const channel = channels.find((x) => x.id === channelID) ?? null;
    const instant = instantOf(at);
    await act.run(async () => {
      const r = await ok(
        c.api.GET("/users/{userID}/permissions", {
          params: { path: { userID: user.id }, query: { explain: true, ...(channelID ? { channelID } : {}), ...(instant ? { at: instant } : {}) } },
        }),
      );
      setResult({ user, channel, items: r.data.explain ?? [], at: instant });
    });
  };
  return (
    <section class="card" aria-labelledby="why-h">
      <h2 id="why-h">Why?</h2>
      <p class="hint">Pick a user and, optionally, a channel: see each permission they have or lack, and which rule decided it.</p>
      <form class="row wrap" onSubmit={ask}>
        <label class="usersearch">
          User{" "}
          <input
            name="why-user"
            value={query}
            placeholder="username"
            autocomplete="off"
            onInput={(e) => {
              setQuery(e.currentTarget.value);
              setUser(null);
            }}
          />
          {found.length > 0 && (
            <ul class="suggest">
              {found.map((u) => (
                <li key={u.id}>
                  <button
                    type="button"
                    class="btn plain small"
                    onClick={() => {
                      setUser(u);
                      setQuery(u.username);
                      setFound([]);
                    }}
                  >
                    {u.display_name || u.username} (@{u.username})
                  </button>
                </li>
              ))}
            </ul>
          )}
        </label>
        <label>
          Channel{" "}
          <select name="why-channel" value={channelID} onChange={(e) => setChannelID(e.currentTarget.value)}>
            <option value="">none (base permissions)</option>
            {channels.map((ch) => (
              <option key={ch.id} value={ch.id}>
                {ch.parent_id ? "  " : ""}
                {channelLabel(ch)}
              </option>
            ))}
          </select>
        </label>
        <AsOf name="why-at" value={at} onChange={setAt} />
        <Btn type="submit" kind="primary" reason={user ? reason : "pick a user first"} busy={act.busy}>
          Explain
        </Btn>
        <Disabled reason={user ? reason : "pick a user first"} />
      </form>
      <ProblemBox error={act.error} names={c.names} />
      {result && (
        <div class="scroll">
          <table class="table explain" data-testid="explain" data-at={result.at}>
            <caption>
              {result.user.display_name || result.user.username}
              {result.channel ? ` in ${channelLabel(result.channel)}` : " (base permissions)"}
              {result.at ? `, as of ${new Date(result.at).toLocaleString()}` : ""}
            </caption>
            <thead>
              <tr>
                <th scope="col">Permission</th>
                <th scope="col">Result</th>
                <th scope="col">Why</th>
              </tr>
            </thead>
            <tbody>
              {result.items.map((x) => (
                <tr key={x.permission} data-permission={x.permission} class={x.granted ? "granted" : "denied"}>
                  <th scope="row">
                    <code>{x.permission}</code>
                  </th>
                  <td>{x.granted ? "✓ granted" : "✗ not granted"}</td>
                  <td>
                    {x.steps.length === 0 ? (
                      <span class="muted">not granted by anything</span>
                    ) : (
                      <ol class="steps">
                        {x.steps.map((s, i) => (
                          <li key={i} class={s.effect}>
                            {stepWords(c, s, result.channel, channels)}
                          </li>
                        ))}
                      </ol>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
