// Users: paged and searchable (q, role, status), create, edit, suspend,
// delete, assign and remove roles, tokens (a new secret is shown once; revoke).
import type { JSX } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { bulkRoleReason, grantReason, holderReason, need, problemWords, roleReason, timeoutReason, tokenReason, userReason, type Names } from "../access";
import { ApiError, done, ifMatch, mergePatch, ok, type Token, type User } from "../api";
import { byOthers, useConsole } from "../state";
import { Btn, Confirm, isStale, ProblemBox, ReadOnly, revealDetail, useAction, when, Why } from "../ui";

type Status = "active" | "suspended";

interface Filters {
  q: string;
  role: string;
  status: "" | Status;
}

export function UsersPage(): JSX.Element {
  const c = useConsole();
  const [filters, setFilters] = useState<Filters>({ q: "", role: "", status: "" });
  const [draft, setDraft] = useState<Filters>(filters);
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]); // the cursor of each page seen
  const [page, setPage] = useState<{ items: User[]; next: string | null } | null>(null);
  const [selected, setSelected] = useState<string | null>(null);
  // Users ticked for a bulk change, across pages (cleared by a new search).
  const [picked, setPicked] = useState<ReadonlyMap<string, User>>(new Map());
  // Bumped after a bulk change, so that the user shown reloads too.
  const [version, setVersion] = useState(0);
  const act = useAction();
  const cursor = cursors[cursors.length - 1];
  const load = () =>
    act.run(async () => {
      const query = {
        limit: 20,
        ...(filters.q ? { q: filters.q } : {}),
        ...(filters.role ? { role: filters.role } : {}),
        ...(filters.status ? { status: filters.status } : {}),
        ...(cursor ? { cursor } : {}),
      };
      const r = await ok(c.api.GET("/users", { params: { query } }));
      setPage({ items: r.data.items, next: r.data.next_cursor ?? null });
    });
  useEffect(() => {
    void load();
  }, [filters, cursor]);
  useEffect(
    () =>
      c.onEvent((e) => {
        if (e.type.startsWith("user.") && byOthers(c, e)) void load();
      }),
    [filters, cursor],
  );
  const search = (e: Event) => {
    e.preventDefault();
    setCursors([undefined]);
    setPicked(new Map());
    setFilters({ ...draft, q: draft.q.trim() });
  };
  const pick = (u: User, on: boolean) =>
    setPicked((cur) => {
      const next = new Map(cur);
      if (on) next.set(u.id, u);
      else next.delete(u.id);
      return next;
    });
  const onPage = page?.items ?? [];
  // A timeout ends by itself: draw the list again when the first one shown ends, so its badge goes with it.
  const [now, setNow] = useState(Date.now());
  const nextEnd = Math.min(...onPage.map((u) => (timeoutLeft(u, now) > 0 ? Date.parse(u.timeout_until ?? "") : Infinity)));
  useEffect(() => {
    if (!Number.isFinite(nextEnd)) return;
    const t = window.setTimeout(() => setNow(Date.now()), Math.min(Math.max(nextEnd - Date.now() + 50, 0), 2 ** 31 - 1));
    return () => window.clearTimeout(t);
  }, [nextEnd]);
  const pickedHere = onPage.filter((u) => picked.has(u.id)).length;
  const allHere = onPage.length > 0 && pickedHere === onPage.length;
  const pickAll = (on: boolean) =>
    setPicked((cur) => {
      const next = new Map(cur);
      for (const u of onPage) {
        if (on) next.set(u.id, u);
        else next.delete(u.id);
      }
      return next;
    });
  return (
    <div class="split">
      <section class="list" aria-labelledby="users-h">
        <h2 id="users-h">Users</h2>
        <form class="filters" onSubmit={search} role="search">
          <label>
            Search{" "}
            <input name="q" type="search" value={draft.q} placeholder="username, name or email" onInput={(e) => setDraft({ ...draft, q: e.currentTarget.value })} />
          </label>
          <label>
            Role{" "}
            <select name="role" value={draft.role} onChange={(e) => setDraft({ ...draft, role: e.currentTarget.value })}>
              <option value="">any</option>
              {c.roles.map((r) => (
                <option key={r.id} value={r.id}>
                  {r.name}
                </option>
              ))}
            </select>
          </label>
          <label>
            Status{" "}
            <select name="status" value={draft.status} onChange={(e) => setDraft({ ...draft, status: e.currentTarget.value as Filters["status"] })}>
              <option value="">any</option>
              <option value="active">active</option>
              <option value="suspended">suspended</option>
            </select>
          </label>
          <button type="submit" class="btn plain">
            Search
          </button>
        </form>
        <BulkRoles
          picked={[...picked.values()]}
          onClear={() => setPicked(new Map())}
          onDone={async () => {
            await load();
            setVersion((v) => v + 1);
          }}
        />
        <ProblemBox error={act.error} names={c.names} />
        <label class="pickall">
          <input
            type="checkbox"
            name="pick-all"
            checked={allHere}
            disabled={onPage.length === 0}
            ref={(el) => {
              if (el) el.indeterminate = pickedHere > 0 && !allHere;
            }}
            onChange={(e) => pickAll(e.currentTarget.checked)}
          />
          Select all on this page
        </label>
        {page === null ? (
          <p class="loading">Loading…</p>
        ) : page.items.length === 0 ? (
          // A search's page reads a bounded part of the index: an empty one
          // with a next cursor is not the end.
          <p class="muted">{page.next ? "No users on this page; the search goes on: Next →" : "No users match."}</p>
        ) : (
          <ul class="items picks" data-testid="user-list">
            {page.items.map((u) => (
              <li key={u.id} data-user={u.username}>
                <input
                  type="checkbox"
                  name={`pick-${u.username}`}
                  aria-label={`Select ${u.display_name || u.username}`}
                  checked={picked.has(u.id)}
                  onChange={(e) => pick(u, e.currentTarget.checked)}
                />
                <a
                  href="#/users"
                  aria-current={selected === u.id ? "true" : undefined}
                  onClick={(e) => {
                    e.preventDefault();
                    setSelected(u.id);
                  }}
                >
                  <strong>{u.display_name || u.username}</strong> <span class="muted">@{u.username}</span>
                  {u.status === "suspended" && <span class="badge warn">suspended</span>}
                  {timeoutLeft(u, now) > 0 && (
                    <span class="badge warn" data-testid="timed-out">
                      timed out
                    </span>
                  )}
                  {u.is_owner && <span class="badge">owner</span>}
                  <span class="sub">{u.roles.map(c.names.role).join(", ") || "no roles"}</span>
                </a>
              </li>
            ))}
          </ul>
        )}
        <div class="row">
          <Btn reason={cursors.length > 1 ? null : "this is the first page"} onClick={() => setCursors(cursors.slice(0, -1))}>
            ← Previous
          </Btn>
          <Btn reason={page?.next ? null : "this is the last page"} onClick={() => page?.next && setCursors([...cursors, page.next])}>
            Next →
          </Btn>
        </div>
        <CreateUser
          onCreated={(id) => {
            setSelected(id);
            void load();
          }}
        />
      </section>
      <section class="detail">
        {selected ? (
          <UserDetail
            key={selected}
            id={selected}
            version={version}
            onChanged={load}
            onDeleted={() => {
              setSelected(null);
              void load();
            }}
          />
        ) : (
          <p class="muted">Pick a user to edit them, their roles and their tokens.</p>
        )}
      </section>
    </div>
  );
}

function CreateUser(props: { onCreated: (id: string) => void }): JSX.Element {
  const c = useConsole();
  const [username, setUsername] = useState("");
  const [displayName, setDisplayName] = useState("");
  const [email, setEmail] = useState("");
  const act = useAction();
  const reason = need(c.access, "MANAGE_USERS");
  const submit = async (e: Event) => {
    e.preventDefault();
    let id = "";
    const err = await act.run(async () => {
      const r = await ok(
        c.api.POST("/users", {
          body: { username, ...(displayName ? { display_name: displayName } : {}), ...(email ? { email } : {}) },
        }),
      );
      id = r.data.id;
    });
    if (err === null) {
      props.onCreated(id);
      setUsername("");
      setDisplayName("");
      setEmail("");
    }
  };
  return (
    <form class="card create" onSubmit={submit} aria-labelledby="new-user-h">
      <h3 id="new-user-h">New user</h3>
      <ReadOnly reason={reason} what="create users" />
      <fieldset disabled={reason !== null}>
        <label>
          Username <input name="username" value={username} required pattern="[A-Za-z0-9_.\-]{2,32}" onInput={(e) => setUsername(e.currentTarget.value)} />
        </label>
        <label>
          Display name <input name="display_name" value={displayName} maxLength={100} onInput={(e) => setDisplayName(e.currentTarget.value)} />
        </label>
        <label>
          Email <input name="email" type="email" value={email} maxLength={254} onInput={(e) => setEmail(e.currentTarget.value)} />
        </label>
        <Btn type="submit" kind="primary" reason={reason} busy={act.busy}>
          Create user
        </Btn>
      </fieldset>
      <ProblemBox error={act.error} names={c.names} />
    </form>
  );
}

/** Give a role to, or take it from, every user ticked: one request, every change or none. */
function BulkRoles(props: { picked: User[]; onClear: () => void; onDone: () => Promise<void> }): JSX.Element {
  const c = useConsole();
  const { picked } = props;
  const [roleID, setRoleID] = useState("");
  const [result, setResult] = useState<string | null>(null);
  const act = useAction();
  const role = c.roles.find((r) => r.id === roleID);
  const reason =
    picked.length === 0 ? "select users first" : (need(c.access, "MANAGE_ROLES") ?? (role ? bulkRoleReason(c.access, role, picked, c.roles) : "pick a role"));
  const change = async (add: boolean) => {
    if (!role) return;
    const ids = picked.map((u) => u.id);
    setResult(null);
    const err = await act.run(async () => {
      const r = await ok(c.api.POST("/roles/{roleID}/members", { params: { path: { roleID: role.id } }, body: add ? { add: ids } : { remove: ids } }));
      const n = add ? r.data.added : r.data.removed;
      const same = ids.length - n;
      setResult(
        `${role.name} ${add ? "given to" : "taken from"} ${n} user${n === 1 ? "" : "s"}` +
          (same > 0 ? `; ${same} ${same === 1 ? "user" : "users"} already ${add ? "had it" : "lacked it"}` : "") +
          ".",
      );
    });
    if (err === null) {
      if (picked.some((u) => u.id === c.access.me.id)) await c.refresh();
      await props.onDone();
    }
  };
  return (
    <div class="card bulk" data-testid="bulk">
      <div class="row wrap">
        <span class="count" data-testid="bulk-count">
          {picked.length} selected
        </span>
        <Btn reason={picked.length ? null : "nothing selected"} onClick={props.onClear}>
          Clear
        </Btn>
      </div>
      <div class="row wrap">
        <label>
          Role{" "}
          <select name="bulk-role" value={roleID} onChange={(e) => setRoleID(e.currentTarget.value)}>
            <option value="">choose…</option>
            {c.roles.map((r) => (
              <option key={r.id} value={r.id}>
                {r.name}
              </option>
            ))}
          </select>
        </label>
        <Btn kind="primary" reason={reason} busy={act.busy} onClick={() => void change(true)} testid="bulk-add">
          Add role
        </Btn>
        <Btn reason={reason} busy={act.busy} onClick={() => void change(false)} testid="bulk-remove">
          Remove role
        </Btn>
      </div>
      <Why reason={picked.length && roleID ? reason : need(c.access, "MANAGE_ROLES")} />
      {result && (
        <p class="done" role="status" data-testid="bulk-result">
          {result}
        </p>
      )}
      <ProblemBox error={act.error} names={c.names} />
    </div>
  );
}

function UserDetail(props: { id: string; version: number; onChanged: () => Promise<unknown>; onDeleted: () => void }): JSX.Element {
  const c = useConsole();
  const [user, setUser] = useState<{ user: User; etag: string } | null>(null);
  const [stale, setStale] = useState<unknown>(null);
  const loader = useAction();
  const load = () =>
    loader.run(async () => {
      const r = await ok(c.api.GET("/users/{userID}", { params: { path: { userID: props.id } } }));
      setUser({ user: r.data, etag: r.etag });
    });
  // Picked from the list: on a narrow screen, show it (once it is loaded).
  const revealed = useRef(false);
  useEffect(() => {
    if ((user || loader.error) && !revealed.current) {
      revealed.current = true;
      revealDetail(".detail h2, .detail [role=alert]");
    }
  }, [user, loader.error]);
  // After one's own change: this user and the list it shows in.
  const changed = async () => {
    await load();
    await props.onChanged();
  };
  useEffect(() => {
    void load();
    return c.onEvent((e) => {
      if (e.subject === `user:${props.id}` && e.type !== "user.deleted" && byOthers(c, e)) void load();
    });
  }, [props.id]);
  useEffect(() => {
    if (props.version > 0) void load();
  }, [props.version]);
  if (!user) return loader.error ? <ProblemBox error={loader.error} names={c.names} /> : <p class="loading">Loading…</p>;
  const onStale = async (e: unknown) => {
    setStale(e);
    if (e) await load();
  };
  return (
    <div>
      <UserEditor key={user.etag} user={user.user} etag={user.etag} stale={stale} onStale={onStale} onSaved={changed} onDeleted={props.onDeleted} />
      <Timeout user={user.user} onChanged={changed} />
      <UserRoles user={user.user} onChanged={changed} />
      <Tokens user={user.user} />
    </div>
  );
}

function UserEditor(props: {
  user: User;
  etag: string;
  stale: unknown;
  onStale: (e: unknown) => Promise<void>;
  onSaved: () => Promise<unknown>;
  onDeleted: () => void;
}): JSX.Element {
  const c = useConsole();
  const { user, etag } = props;
  const self = user.id === c.access.me.id;
  const [username, setUsername] = useState(user.username);
  const [displayName, setDisplayName] = useState(user.display_name);
  const [email, setEmail] = useState(user.email ?? "");
  const [confirm, setConfirm] = useState(false);
  const act = useAction();
  // Oneself: username, email and display name need no permission; status never.
  const reason = self ? null : userReason(c.access, user, c.roles);
  const statusReason = self && !c.access.owner ? "you cannot change your own status" : user.is_owner ? "the owner cannot be suspended" : userReason(c.access, user, c.roles);
  const deleteReason = user.is_owner ? "the owner cannot be deleted" : self ? "you cannot delete yourself here" : userReason(c.access, user, c.roles);
  const emailHidden = user.email === undefined;
  const put = (status: Status) =>
    act.run(async () => {
      await ok(
        c.api.PUT("/users/{userID}", {
          params: { path: { userID: user.id }, header: ifMatch(etag) },
          body: {
            username,
            display_name: displayName,
            status,
            // A PUT replaces: keep an email we cannot see by sending none only when it is visible.
            ...(emailHidden ? {} : { email: email === "" ? null : email }),
          },
        }),
      );
    });
  const after = async (err: unknown) => {
    if (isStale(err)) await props.onStale(err);
    else if (err === null) {
      await props.onStale(null);
      await props.onSaved();
      if (self) await c.refresh();
    }
  };
  const dirty = username !== user.username || displayName !== user.display_name || email !== (user.email ?? "");
  const del = async () => {
    setConfirm(false);
    const err = await act.run(async () => {
      await done(c.api.DELETE("/users/{userID}", { params: { path: { userID: user.id }, header: ifMatch(etag) } }));
    });
    if (err === null) props.onDeleted();
    else await after(err);
  };
  return (
    <section class="card" aria-labelledby="user-h">
      <h2 id="user-h">
        {user.display_name || user.username} <span class="muted">@{user.username}</span>
        {user.status === "suspended" && <span class="badge warn">suspended</span>}
        {user.is_owner && <span class="badge">owner</span>}
      </h2>
      <ReadOnly reason={reason} what="edit this user" />
      {isStale(props.stale) && <ProblemBox error={props.stale} names={c.names} onClose={() => void props.onStale(null)} />}
      <form
        onSubmit={async (e) => {
          e.preventDefault();
          await after(await put(user.status));
        }}
      >
        <fieldset disabled={reason !== null}>
          <label>
            Username <input name="username" value={username} required pattern="[A-Za-z0-9_.\-]{2,32}" onInput={(e) => setUsername(e.currentTarget.value)} />
          </label>
          <label>
            Display name <input name="display_name" value={displayName} maxLength={100} onInput={(e) => setDisplayName(e.currentTarget.value)} />
          </label>
          <label>
            Email{" "}
            <input
              name="email"
              type="email"
              value={email}
              disabled={emailHidden}
              placeholder={emailHidden ? "hidden (needs MANAGE_USERS)" : ""}
              onInput={(e) => setEmail(e.currentTarget.value)}
            />
          </label>
          <p class="muted">
            Created {when(user.created_at)}, updated {when(user.updated_at)}.
          </p>
          <div class="row wrap">
            <Btn type="submit" kind="primary" reason={reason ?? (dirty ? null : "nothing changed")} busy={act.busy}>
              Save
            </Btn>
            <Btn reason={statusReason} busy={act.busy} onClick={async () => await after(await put(user.status === "active" ? "suspended" : "active"))}>
              {user.status === "active" ? "Suspend" : "Reactivate"}
            </Btn>
            <Btn kind="danger" reason={deleteReason} onClick={() => setConfirm(true)}>
              Delete user…
            </Btn>
          </div>
          <Why reason={reason ? null : statusReason} />
        </fieldset>
      </form>
      {!isStale(act.error) && <ProblemBox error={act.error} names={c.names} />}
      {confirm && (
        <Confirm title={`Delete ${user.username}?`} confirm="Delete user" onConfirm={() => void del()} onCancel={() => setConfirm(false)}>
          <p>
            The user <strong>@{user.username}</strong> is deleted together with their role assignments ({user.roles.length}), their channel overwrites,
            their tokens and their profile links. It cannot be undone.
          </p>
        </Confirm>
      )}
    </section>
  );
}

function UserRoles(props: { user: User; onChanged: () => Promise<unknown> }): JSX.Element {
  const c = useConsole();
  const { user } = props;
  // Boxes ticked or unticked whose request has not been answered yet: shown
  // as wanted at once, marked pending, set back if the server refuses.
  const [pending, setPending] = useState<ReadonlyMap<string, boolean>>(new Map());
  const [refused, setRefused] = useState<{ roleID: string; wanted: boolean; error: unknown } | null>(null);
  // As the server decides an assignment: MANAGE_ROLES and the user below one's top (oneself included).
  const base = need(c.access, "MANAGE_ROLES") ?? holderReason(c.access, user, c.roles);
  const settle = (roleID: string) =>
    setPending((cur) => {
      const next = new Map(cur);
      next.delete(roleID);
      return next;
    });
  const toggle = async (roleID: string, wanted: boolean) => {
    setPending((cur) => new Map(cur).set(roleID, wanted));
    setRefused((cur) => (cur?.roleID === roleID ? null : cur));
    const path = { params: { path: { userID: user.id, roleID } } };
    try {
      await done(wanted ? c.api.POST("/users/{userID}/roles/{roleID}", path) : c.api.DELETE("/users/{userID}/roles/{roleID}", path));
    } catch (e) {
      settle(roleID); // back to what the server holds
      setRefused({ roleID, wanted, error: e });
      // A refusal means what I may do changed: recompute it (see useAction).
      if (e instanceof ApiError && e.status === 403) void c.refresh();
      await props.onChanged();
      return;
    }
    // Pending until the reloaded user shows the change.
    await props.onChanged();
    if (user.id === c.access.me.id) await c.refresh();
    settle(roleID);
  };
  return (
    <section class="card" aria-labelledby="uroles-h">
      <h2 id="uroles-h">Roles of {user.display_name || user.username}</h2>
      <ReadOnly reason={base} what="assign or remove roles" />
      <ul class="checks">
        {c.roles.map((r) => {
          const has = user.roles.includes(r.id);
          const wanted = pending.get(r.id);
          const reason = base ?? roleReason(c.access, r) ?? grantReason(c.access, r.permissions);
          const note = refused?.roleID === r.id ? `not ${refused.wanted ? "assigned" : "removed"}: ${problemTitle(refused.error, c.names)}` : null;
          return (
            <li key={r.id}>
              <label
                class={`${reason ? "off" : ""}${wanted !== undefined ? " pending" : ""}`}
                title={reason ? `Disabled: ${reason}` : undefined}
                data-pending={wanted !== undefined ? "true" : undefined}
              >
                <input
                  type="checkbox"
                  name={`role-${r.id}`}
                  checked={wanted ?? has}
                  disabled={reason !== null || wanted !== undefined}
                  aria-busy={wanted !== undefined ? "true" : undefined}
                  onChange={(e) => void toggle(r.id, e.currentTarget.checked)}
                />
                <span class="swatch" style={{ background: r.color ?? "transparent" }} aria-hidden="true" /> {r.name}
                {wanted !== undefined && <span class="saving">saving…</span>}
                {note && (
                  <span class="why" role="status" data-testid="role-refused">
                    {note}
                  </span>
                )}
                {reason && !base && <span class="why">{reason}</span>}
              </label>
            </li>
          );
        })}
      </ul>
      {refused && <ProblemBox error={refused.error} names={c.names} onClose={() => setRefused(null)} />}
    </section>
  );
}

/** The timeout presets: label, words for screen readers, seconds. */
const presets: [string, string, number][] = [
  ["60 s", "60 seconds", 60],
  ["5 min", "5 minutes", 5 * 60],
  ["10 min", "10 minutes", 10 * 60],
  ["1 h", "1 hour", 60 * 60],
  ["1 day", "1 day", 24 * 60 * 60],
  ["1 week", "1 week", 7 * 24 * 60 * 60],
];

/** Milliseconds left of a user's timeout at `now` (0 when not timed out). */
export function timeoutLeft(u: Pick<User, "timeout_until">, now: number): number {
  if (!u.timeout_until) return 0;
  const end = Date.parse(u.timeout_until);
  return Number.isNaN(end) ? 0 : Math.max(0, end - now);
}

/** A duration as a countdown: "6 d 23:59:59", "1:02:03", "4:59". */
export function countdown(ms: number): string {
  const t = Math.ceil(ms / 1000);
  const d = Math.floor(t / 86400);
  const h = Math.floor((t % 86400) / 3600);
  const m = Math.floor((t % 3600) / 60);
  const sec = t % 60;
  const two = (n: number) => String(n).padStart(2, "0");
  if (d > 0) return `${d} d ${two(h)}:${two(m)}:${two(sec)}`;
  if (h > 0) return `${h}:${two(m)}:${two(sec)}`;
  return `${m}:${two(sec)}`;
}

/** The current time, ticking every second while `on`. */
function useNow(on: boolean): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    setNow(Date.now());
    if (!on) return undefined;
    const t = window.setInterval(() => setNow(Date.now()), 1000);
    return () => window.clearInterval(t);
  }, [on]);
  return now;
}

/** Time a member out (presets), see the time left as it runs, end it early. */
function Timeout(props: { user: User; onChanged: () => Promise<unknown> }): JSX.Element {
  const c = useConsole();
  const { user } = props;
  const act = useAction();
  const reason = timeoutReason(c.access, user, c.roles);
  const [ticking, setTicking] = useState(timeoutLeft(user, Date.now()) > 0);
  const now = useNow(ticking);
  const left = timeoutLeft(user, now);
  useEffect(() => setTicking(timeoutLeft(user, Date.now()) > 0), [user.timeout_until]);
  useEffect(() => {
    if (ticking && left === 0) setTicking(false); // over by itself: nothing to write
  }, [left]);
  const set = async (until: string | null) => {
    const err = await act.run(async () => {
      await ok(c.api.PATCH("/users/{userID}", { params: { path: { userID: user.id } }, body: { timeout_until: until }, headers: mergePatch }));
    });
    if (err === null) await props.onChanged();
  };
  const who = user.display_name || user.username;
  return (
    <section class="card" aria-labelledby="timeout-h" data-testid="timeout">
      <h2 id="timeout-h">Timeout</h2>
      <p class="hint">A member who is timed out keeps only VIEW_CHANNEL and READ_MESSAGE_HISTORY, everywhere, until it ends by itself.</p>
      <p class="timeout-state" data-testid="timeout-state" data-active={left > 0 ? "true" : "false"} aria-live="polite">
        {left > 0 && user.timeout_until ? (
          <>
            <span class="badge warn">timed out</span> until {when(user.timeout_until)}:{" "}
            <strong class="left" data-testid="timeout-left" aria-live="off">
              {countdown(left)}
            </strong>{" "}
            left
          </>
        ) : user.timeout_until ? (
          <>Not timed out (the last timeout ended {when(user.timeout_until)}).</>
        ) : (
          <>{who} is not timed out.</>
        )}
      </p>
      <div class="row wrap presets" role="group" aria-label="Time out for">
        {presets.map(([label, words, secs]) => (
          <Btn
            key={label}
            reason={reason}
            busy={act.busy}
            label={`Time out for ${words}`}
            onClick={() => void set(new Date(Date.now() + secs * 1000).toISOString())}
          >
            {label}
          </Btn>
        ))}
        <Btn kind="danger" reason={reason ?? (left > 0 ? null : "not timed out")} busy={act.busy} onClick={() => void set(null)} testid="timeout-end">
          End timeout
        </Btn>
      </div>
      <Why reason={reason} />
      <ProblemBox error={act.error} names={c.names} />
    </section>
  );
}

/** A refusal's title in words (for a short note next to the control it concerns). */
function problemTitle(e: unknown, names: Names): string {
  return e instanceof ApiError ? problemWords(e.problem, names).title : "the request failed";
}

function Tokens(props: { user: User }): JSX.Element {
  const c = useConsole();
  const { user } = props;
  const reason = tokenReason(c.access, user);
  const [tokens, setTokens] = useState<Token[] | null>(null);
  const [name, setName] = useState("");
  const [secret, setSecret] = useState<{ name: string; token: string } | null>(null);
  const [confirm, setConfirm] = useState<Token | null>(null);
  const act = useAction();
  const load = () =>
    act.run(async () => {
      const r = await ok(c.api.GET("/users/{userID}/tokens", { params: { path: { userID: user.id } } }));
      setTokens(r.data.items);
    });
  useEffect(() => {
    if (reason === null) void load();
  }, [user.id]);
  const create = async (e: Event) => {
    e.preventDefault();
    const err = await act.run(async () => {
      const r = await ok(c.api.POST("/users/{userID}/tokens", { params: { path: { userID: user.id } }, body: { name } }));
      setSecret({ name: r.data.name, token: r.data.token });
    });
    if (err === null) {
      setName("");
      await load();
    }
  };
  const revoke = async (t: Token) => {
    setConfirm(null);
    await act.run(async () => {
      await done(c.api.DELETE("/users/{userID}/tokens/{tokenID}", { params: { path: { userID: user.id, tokenID: t.id } } }));
    });
    await load();
  };
  return (
    <section class="card" aria-labelledby="tokens-h">
      <h2 id="tokens-h">Tokens of {user.display_name || user.username}</h2>
      <ReadOnly reason={reason} what="see or create them" />
      {secret && (
        <div class="secret" role="status" data-testid="token-secret">
          <p>
            The new token <strong>{secret.name}</strong> — copy it now, it is shown only once:
          </p>
          <code>{secret.token}</code>
          <div class="row">
            <button type="button" class="btn plain small" onClick={() => void navigator.clipboard?.writeText(secret.token)}>
              Copy
            </button>
            <button type="button" class="btn plain small" onClick={() => setSecret(null)}>
              I have kept it
            </button>
          </div>
        </div>
      )}
      {reason === null && (
        <>
          {tokens && tokens.length > 0 ? (
            <ul class="items">
              {tokens.map((t) => (
                <li key={t.id} class="row between">
                  <span>
                    <strong>{t.name}</strong> <span class="muted">created {when(t.created_at)}</span>
                    {t.expires_at && <span class="muted">, expires {when(t.expires_at)}</span>}
                  </span>
                  <Btn kind="danger" onClick={() => setConfirm(t)} label={`Revoke ${t.name}`}>
                    Revoke
                  </Btn>
                </li>
              ))}
            </ul>
          ) : (
            tokens && <p class="muted">No tokens.</p>
          )}
          <form class="row wrap" onSubmit={create}>
            <label>
              New token name <input name="token-name" value={name} required maxLength={100} placeholder="laptop" onInput={(e) => setName(e.currentTarget.value)} />
            </label>
            <Btn type="submit" kind="primary" busy={act.busy}>
              Create token
            </Btn>
          </form>
        </>
      )}
      <ProblemBox error={act.error} names={c.names} />
      {confirm && (
        <Confirm title={`Revoke ${confirm.name}?`} confirm="Revoke token" onConfirm={() => void revoke(confirm)} onCancel={() => setConfirm(null)}>
          <p>Anything using this token (and any event ticket minted with it) stops working at once.</p>
        </Confirm>
      )}
    </section>
  );
}
