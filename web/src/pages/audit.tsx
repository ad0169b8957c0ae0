// The audit log: a filterable table with the before/after of each change,
// updated live from /api/events (Server-Sent Events through a ticket).
// Users, roles, channels and tokens are named, never shown by ID (the ID is
// on hover), deleted ones too: by what the log itself says of them. An
// entry a revert can set back offers "Revert…" (revert.tsx).
import type { ComponentChildren, JSX } from "preact";
import { createContext, Fragment } from "preact";
import { useContext, useEffect, useMemo, useRef, useState } from "preact/hooks";
import { need } from "../access";
import { ok, type AuditEvent, type Channel } from "../api";
import { eventTypes, listChannels, useConsole, type Console } from "../state";
import { Btn, ProblemBox, ReadOnly, useAction, when } from "../ui";
import { RevertEntry } from "./revert";

interface Filters {
  type: string;
  actor: string; // a username, resolved to an ID
  subject: string;
}

const typeChoices = [...new Set(eventTypes.flatMap((t) => [`${t.split(".")[0]}.*`, t]))];

function matches(e: AuditEvent, f: Filters, actorID: string | null): boolean {
  if (f.type) {
    if (f.type.endsWith(".*")) {
      if (!e.type.startsWith(f.type.slice(0, -1))) return false;
    } else if (e.type !== f.type) return false;
  }
  if (actorID && e.actor_id !== actorID) return false;
  if (f.subject && e.subject !== f.subject) return false;
  return true;
}

export function AuditPage(): JSX.Element {
  const c = useConsole();
  const reason = need(c.access, "VIEW_AUDIT_LOG");
  const [filters, setFilters] = useState<Filters>({ type: "", actor: "", subject: "" });
  const [draft, setDraft] = useState<Filters>(filters);
  const [actorID, setActorID] = useState<string | null>(null);
  const [items, setItems] = useState<AuditEvent[] | null>(null);
  const [next, setNext] = useState<string | null>(null);
  const [fresh, setFresh] = useState<Set<number>>(new Set());
  const names = useNames(c, items);
  const act = useAction();
  const live = useRef({ filters, actorID });
  live.current = { filters, actorID };

  // A page checks a bounded number of events against the filters, so one
  // with no events and a cursor is not the end: read on, a few pages at
  // most, before showing what was found.
  const page = async (cursor: string | null, f: Filters, actor: string | null) => {
    for (let read = 1; ; read++) {
      const query = {
        limit: 50,
        ...(f.type ? { type: f.type } : {}),
        ...(actor ? { actorID: actor } : {}),
        ...(f.subject ? { subject: f.subject } : {}),
        ...(cursor ? { cursor } : {}),
      };
      const d = (await ok(c.api.GET("/audit-log", { params: { query } }))).data;
      if (d.items.length > 0 || !d.next_cursor || read === 10) return d;
      cursor = d.next_cursor;
    }
  };
  const apply = async (f: Filters) => {
    await act.run(async () => {
      let actor: string | null = null;
      if (f.actor) {
        const r = await ok(c.api.GET("/users", { params: { query: { q: f.actor, limit: 10 } } }));
        const u = r.data.items.find((x) => x.username.toLowerCase() === f.actor.toLowerCase()) ?? r.data.items[0];
        if (!u) throw new Error(`No user named ${f.actor}.`);
        actor = u.id;
      }
      const d = await page(null, f, actor);
      setActorID(actor);
      setFilters(f);
      setItems(d.items);
      setNext(d.next_cursor ?? null);
      setFresh(new Set());
    });
  };
  useEffect(() => {
    if (reason) return undefined;
    void apply(filters);
    return c.onEvent((e) => {
      const { filters: f, actorID: a } = live.current;
      if (!matches(e, f, a)) return;
      setItems((cur) => (cur === null || cur.some((x) => x.seq === e.seq) ? cur : [e, ...cur]));
      setFresh((s) => new Set(s).add(e.seq));
    });
  }, []);
  if (reason) {
    return (
      <section class="card">
        <h2>Audit log</h2>
        <ReadOnly reason={reason} what="read the audit log" />
      </section>
    );
  }
  return (
    <section class="card" aria-labelledby="audit-h">
      <h2 id="audit-h">
        Audit log <span class={`live is-${c.live}`}>{c.live === "live" ? "● live" : c.live}</span>
      </h2>
      <form
        class="filters"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          void apply({ ...draft, actor: draft.actor.trim(), subject: draft.subject.trim() });
        }}
      >
        <label>
          Type{" "}
          <select name="type" value={draft.type} onChange={(e) => setDraft({ ...draft, type: e.currentTarget.value })}>
            <option value="">any</option>
            {typeChoices.map((t) => (
              <option key={t} value={t}>
                {t}
              </option>
            ))}
          </select>
        </label>
        <label>
          Actor <input name="actor" value={draft.actor} placeholder="username" onInput={(e) => setDraft({ ...draft, actor: e.currentTarget.value })} />
        </label>
        <label>
          Subject <input name="subject" value={draft.subject} placeholder="role:mods" onInput={(e) => setDraft({ ...draft, subject: e.currentTarget.value })} />
        </label>
        <button type="submit" class="btn plain">
          Filter
        </button>
      </form>
      <ProblemBox error={act.error} names={c.names} />
      {items === null ? (
        <p class="loading">Loading…</p>
      ) : items.length === 0 ? (
        // A page reads a bounded part of the log: empty with a next cursor
        // is not the end.
        <p class="muted">{next ? "No matching events among those read so far; Older events reads further back." : "No events match."}</p>
      ) : (
        <div class="scroll">
          <NamesContext.Provider value={names}>
            <table class="table audit" data-testid="audit">
              <thead>
                <tr>
                  <th scope="col">When</th>
                  <th scope="col">Event</th>
                  <th scope="col">By</th>
                  <th scope="col">Change</th>
                </tr>
              </thead>
              <tbody>
                {items.map((e) => (
                  <tr key={e.seq} data-type={e.type} data-subject={e.subject} class={fresh.has(e.seq) ? "fresh" : ""}>
                    <td>
                      <span title={`seq ${e.seq}`}>{when(e.created_at)}</span>
                    </td>
                    <td>
                      <code>{e.type}</code>
                      <span class="sub">
                        <Subject subject={e.subject} />
                      </span>
                    </td>
                    <td>{e.actor_id ? <Ref kind="user" id={e.actor_id} /> : "system"}</td>
                    <td>
                      <Change event={e} />
                      {e.reason && <span class="sub">Reason: {e.reason}</span>}
                      <RevertEntry event={e} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </NamesContext.Provider>
        </div>
      )}
      <Btn
        reason={next ? null : "no older events"}
        busy={act.busy}
        onClick={() =>
          void act.run(async () => {
            if (!next) return;
            const d = await page(next, filters, actorID);
            setItems((cur) => [...(cur ?? []), ...d.items]);
            setNext(d.next_cursor ?? null);
          })
        }
      >
        Older events
      </Btn>
    </section>
  );
}

function list(v: unknown): string[] | null {
  return Array.isArray(v) && v.every((x) => typeof x === "string") ? (v as string[]) : null;
}

function show(v: unknown): string {
  if (v === null || v === undefined) return "—";
  if (typeof v === "string") return v;
  if (Array.isArray(v)) return v.map(show).join(", ") || "none";
  if (typeof v === "object") {
    return Object.entries(v as Record<string, unknown>)
      .map(([k, x]) => `${k}: ${show(x)}`)
      .join("; ");
  }
  return String(v);
}

/** A value as show() writes it, but a category (parent_id) by name. */
function Shown(props: { v: unknown }): JSX.Element {
  const { v } = props;
  if (typeof v !== "object" || v === null || Array.isArray(v)) return <>{show(v)}</>;
  return joinedWith(
    Object.entries(v as Record<string, unknown>).map(([k, x]) =>
      k === "parent_id" ? (
        <>category: {typeof x === "string" && x ? <Ref kind="channel" id={x} /> : "none"}</>
      ) : (
        <>
          {k}: {show(x)}
        </>
      ),
    ),
    "; ",
  );
}

function joinedWith(items: JSX.Element[], sep: string): JSX.Element {
  return (
    <>
      {items.map((x, i) => (
        <Fragment key={i}>
          {i > 0 && sep}
          {x}
        </Fragment>
      ))}
    </>
  );
}

/** Where a moved channel was or went: its category by name and its position. */
function Place(props: { at: unknown }): JSX.Element {
  const at = typeof props.at === "object" && props.at !== null ? (props.at as Record<string, unknown>) : {};
  const pos = typeof at.position === "number" ? ` (position ${at.position})` : "";
  return typeof at.parent_id === "string" && at.parent_id ? (
    <>
      category <Ref kind="channel" id={at.parent_id} />
      {pos}
    </>
  ) : (
    <>no category{pos}</>
  );
}

/** A timeout's end in words. */
function until(v: unknown): string {
  if (typeof v !== "string" || v === "") return "not timed out";
  return Date.parse(v) > Date.now() ? `timed out until ${when(v)}` : `timed out until ${when(v)} (over)`;
}

/** The before/after of a change (sets show what was added and removed), else its details. */
function Change(props: { event: AuditEvent }): JSX.Element {
  const e = props.event;
  if (e.type === "channel.moved") {
    const stayed = JSON.stringify(e.data.before) === JSON.stringify(e.data.after);
    return (
      <div class="change">
        <span class="sub">
          {stayed ? (
            <>
              stayed in <Place at={e.data.after} />
            </>
          ) : (
            <>
              from <Place at={e.data.before} /> → to <Place at={e.data.after} />
            </>
          )}
          {e.data.lock_permissions === true && "; its overwrites replaced by the category's (synced)"}
        </span>
      </div>
    );
  }
  if (e.type === "user.timeout") {
    return (
      <div class="change">
        <span class="sub">
          before: {until(e.data.before)} → after: {until(e.data.after)}
        </span>
      </div>
    );
  }
  const { before, after, target_type, target_id, ...rest } = e.data;
  const b = list(before);
  const a = list(after);
  // A user's roles travel as role IDs.
  const item = e.type.startsWith("user.role.") ? (x: string) => <Ref kind="role" id={x} /> : (x: string) => <>{x}</>;
  const rows: [string, ComponentChildren][] = [];
  if (typeof target_type === "string") {
    const id = typeof target_id === "string" ? target_id : "";
    rows.push([
      "target",
      target_type === "role" ? (
        <>
          role <Ref kind="role" id={id} />
        </>
      ) : target_type === "user" ? (
        <>
          user <Ref kind="user" id={id} />
        </>
      ) : (
        "@everyone"
      ),
    ]);
  }
  for (const [k, v] of Object.entries(rest)) {
    const ids = list(v);
    if (k === "role_id" && typeof v === "string") rows.push(["role", <Ref kind="role" id={v} />]);
    else if (k === "channel_id" && typeof v === "string") rows.push(["channel", <Ref kind="channel" id={v} />]);
    else if (k === "token_id" && typeof v === "string") rows.push(["token", <Ref kind="token" id={v} />]);
    else if (k === "parent_id") rows.push(["category", typeof v === "string" && v ? <Ref kind="channel" id={v} /> : "none"]);
    else if (k === "synced_from") {
      // null when the category is hidden from the reader
      if (typeof v === "string") rows.push(["copied from", <Ref kind="channel" id={v} />]);
      else rows.push(["copied from", "its category"]);
    }
    else if (k === "name" && e.type.startsWith("user.token.")) continue; // the token's name, shown as the token
    else if (k === "users" && ids) rows.push([k, joined(ids.map((x) => <Ref kind="user" id={x} />))]);
    else if (k === "roles" && ids) rows.push([k, joined(ids.map((x) => <Ref kind="role" id={x} />))]);
    else rows.push([k, show(v)]);
  }
  return (
    <div class="change">
      {b && a ? (
        <div>
          {a.filter((x) => !b.includes(x)).map((x) => (
            <span key={`+${x}`} class="added">
              +{item(x)}{" "}
            </span>
          ))}
          {b.filter((x) => !a.includes(x)).map((x) => (
            <span key={`-${x}`} class="removed">
              −{item(x)}{" "}
            </span>
          ))}
          <span class="sub">
            before: {joined(b.map(item))} → after: {joined(a.map(item))}
          </span>
        </div>
      ) : before !== undefined || after !== undefined ? (
        <span class="sub">
          before: <Shown v={before} /> → after: <Shown v={after} />
        </span>
      ) : null}
      {rows.length > 0 && (
        <dl>
          {rows.map(([k, v]) => (
            <div key={k}>
              <dt>{k}</dt>
              <dd>{v}</dd>
            </div>
          ))}
        </dl>
      )}
    </div>
  );
}

/** Items separated by commas, or "none". */
function joined(items: JSX.Element[]): ComponentChildren {
  if (items.length === 0) return "none";
  return items.map((x, i) => (
    <Fragment key={i}>
      {i > 0 && ", "}
      {x}
    </Fragment>
  ));
}

/** What an event is about, in words: "role Moderators", "#Operations", "walk.txt in #Operations". */
function Subject(props: { subject: string }): JSX.Element {
  const { subject } = props;
  const colon = subject.indexOf(":");
  const kind = colon < 0 ? subject : subject.slice(0, colon);
  const id = colon < 0 ? "" : subject.slice(colon + 1);
  switch (kind) {
    case "user":
      return (
        <>
          user <Ref kind="user" id={id} />
        </>
      );
    case "role":
      return (
        <>
          role <Ref kind="role" id={id} />
        </>
      );
    case "channel":
      return <Ref kind="channel" id={id} />;
    case "attachment": {
      const slash = id.indexOf("/");
      return (
        <span title={subject}>
          {id.slice(slash + 1)} in <Ref kind="channel" id={id.slice(0, slash)} />
        </span>
      );
    }
    case "global":
      return <span title={subject}>global permissions</span>;
  }
  return <span title={subject}>{kind}</span>;
}

type Kind = "user" | "role" | "channel" | "token";

/** A user, role, channel or token by name, with its ID on hover. */
function Ref(props: { kind: Kind; id: string }): JSX.Element {
  const names = useContext(NamesContext);
  const key = `${props.kind}:${props.id}`;
  const name = names?.name(key);
  let text: string;
  if (name !== undefined) text = props.kind === "channel" ? `#${name}` : name;
  else text = names?.tried(key) ? `unknown ${props.kind}` : "…";
  return (
    <span class="ref" title={key} data-ref={key}>
      {text}
    </span>
  );
}

interface Names {
  /** The name of `kind:id`, if known. */
  name: (key: string) => string | undefined;
  /** Whether looking it up is over (so an unknown name stays unknown). */
  tried: (key: string) => boolean;
}

const NamesContext = createContext<Names | null>(null);

/**
 * The names the entries say (newest first, so the latest wins): a created,
 * renamed, updated or deleted user, role or channel names itself in its
 * data, a created token too. Deleted ones are known this way alone.
 */
function namesIn(events: readonly AuditEvent[], into = new Map<string, string>()): Map<string, string> {
  const put = (k: string, v: unknown) => {
    if (typeof v === "string" && v !== "" && !into.has(k)) into.set(k, v);
  };
  const field = (o: unknown, f: string): unknown => (typeof o === "object" && o !== null ? (o as Record<string, unknown>)[f] : undefined);
  for (const e of events) {
    const d = e.data;
    switch (e.type) {
      case "role.created":
      case "role.deleted":
      case "channel.created":
      case "channel.deleted":
        put(e.subject, d.name);
        break;
      case "role.renamed":
      case "channel.renamed":
        put(e.subject, d.after);
        break;
      case "role.updated":
      case "channel.updated":
        put(e.subject, field(d.after, "name"));
        break;
      case "user.created":
        put(e.subject, d.display_name || d.username);
        break;
      case "user.updated":
        put(e.subject, field(d.after, "display_name") || field(d.after, "username"));
        break;
      case "user.deleted":
        put(e.subject, d.username);
        break;
      case "user.token.created":
        if (typeof d.token_id === "string") put(`token:${d.token_id}`, d.name);
        break;
      case "user.token.renamed":
        if (typeof d.token_id === "string") put(`token:${d.token_id}`, d.after);
        break;
    }
  }
  return into;
}

/** Every user, role, channel and token an entry refers to, as `kind:id` (a token with its user). */
function refsOf(e: AuditEvent): [string, string][] {
  const out: [string, string][] = [];
  const d = e.data;
  if (e.actor_id) out.push([`user:${e.actor_id}`, ""]);
  const [kind = "", id = ""] = e.subject.split(/:(.*)/s);
  if (kind === "user" || kind === "role" || kind === "channel") out.push([e.subject, ""]);
  if (kind === "attachment") out.push([`channel:${id.split("/")[0] ?? ""}`, ""]);
  if (typeof d.role_id === "string") out.push([`role:${d.role_id}`, ""]);
  if (typeof d.channel_id === "string") out.push([`channel:${d.channel_id}`, ""]);
  if (typeof d.token_id === "string" && kind === "user") out.push([`token:${d.token_id}`, id]);
  if ((d.target_type === "role" || d.target_type === "user") && typeof d.target_id === "string") out.push([`${d.target_type}:${d.target_id}`, ""]);
  if (typeof d.synced_from === "string") out.push([`channel:${d.synced_from}`, ""]);
  if (typeof d.parent_id === "string") out.push([`channel:${d.parent_id}`, ""]);
  if (e.type === "channel.moved" || e.type === "channel.updated") {
    for (const at of [d.before, d.after]) {
      const parent = typeof at === "object" && at !== null ? (at as Record<string, unknown>).parent_id : undefined;
      if (typeof parent === "string" && parent) out.push([`channel:${parent}`, ""]);
    }
  }
  for (const x of list(d.users) ?? []) out.push([`user:${x}`, ""]);
  for (const x of list(d.roles) ?? []) out.push([`role:${x}`, ""]);
  if (e.type.startsWith("user.role.")) for (const x of [...(list(d.before) ?? []), ...(list(d.after) ?? [])]) out.push([`role:${x}`, ""]);
  return out;
}

/**
 * Names for the entries shown: what the entries themselves say first (the
 * latest), then the roles known to the console, then what is asked of the
 * API once per ID: the user, role or channel as it is now, the tokens of a
 * user (only they and the owner may list them), and, for one that is gone,
 * its own earlier entries (`?subject=`).
 */
function useNames(c: Console, items: AuditEvent[] | null): Names {
  const learned = useMemo(() => namesIn(items ?? []), [items]);
  const [fetched, setFetched] = useState<ReadonlyMap<string, string>>(new Map());
  const [tried, setTried] = useState<ReadonlySet<string>>(new Set());
  const asked = useRef(new Set<string>());
  const tokenLists = useRef(new Map<string, Promise<[string, string][]>>());
  const channels = useRef<Promise<Channel[]> | null>(null);
  const roleNow = (key: string) => (key.startsWith("role:") ? c.roles.find((r) => `role:${r.id}` === key)?.name : undefined);
  const name = (key: string) => learned.get(key) ?? roleNow(key) ?? fetched.get(key);

  useEffect(() => {
    const channelList = () => (channels.current ??= listChannels(c).catch(() => []));
    const history = async (subject: string, type?: string): Promise<[string, string][]> => {
      const r = await ok(c.api.GET("/audit-log", { params: { query: { subject, limit: 200, ...(type ? { type } : {}) } } }));
      return [...namesIn(r.data.items)];
    };
    const current = async (key: string): Promise<[string, string][]> => {
      const [kind = "", id = ""] = key.split(/:(.*)/s);
      if (kind === "user") {
        const u = await ok(c.api.GET("/users/{userID}", { params: { path: { userID: id } } }));
        return [[key, u.data.display_name || u.data.username]];
      }
      if (kind === "role") return [[key, (await ok(c.api.GET("/roles/{roleID}", { params: { path: { roleID: id } } }))).data.name]];
      // Channels by the list, which holds every channel the caller may know
      // of: asking for one by ID is refused (404) for one they cannot view.
      const ch = (await channelList()).find((x) => x.id === id);
      if (!ch) throw new Error(`channel ${id} is not listed`);
      return [[key, ch.name]];
    };
    const tokens = (userID: string): Promise<[string, string][]> => {
      let p = tokenLists.current.get(userID);
      if (!p) {
        p = ok(c.api.GET("/users/{userID}/tokens", { params: { path: { userID } } })).then(
          (r) => r.data.items.map((t): [string, string] => [`token:${t.id}`, t.name]),
          () => [],
        );
        tokenLists.current.set(userID, p);
      }
      return p;
    };
    const lookup = async (key: string, user: string): Promise<[string, string][]> => {
      if (key.startsWith("token:")) {
        const mine = c.access.owner || user === c.access.me.id ? await tokens(user) : [];
        if (mine.some(([k]) => k === key)) return mine;
        return history(`user:${user}`, "user.token.created"); // revoked: its creation names it
      }
      try {
        return await current(key);
      } catch {
        return history(key); // gone (or hidden): what its own entries said
      }
    };
    for (const e of items ?? []) {
      for (const [key, user] of refsOf(e)) {
        if (asked.current.has(key) || learned.has(key) || roleNow(key) !== undefined) continue;
        asked.current.add(key);
        void lookup(key, user)
          .catch((): [string, string][] => [])
          .then((pairs) => {
            if (pairs.length) setFetched((m) => new Map([...m, ...pairs.filter(([k]) => !m.has(k) || k === key)]));
            setTried((t) => new Set(t).add(key));
          });
      }
    }
  }, [items]);

  return { name, tried: (key) => tried.has(key) };
}
