// The audit log: a filterable table with the before/after of each change,
// updated live from /api/events (Server-Sent Events through a ticket).
import type { JSX } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { need } from "../access";
import { ok, type AuditEvent } from "../api";
import { eventTypes, useConsole } from "../state";
import { Btn, ProblemBox, ReadOnly, useAction, when } from "../ui";

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
  const [actors, setActors] = useState<Map<string, string>>(new Map());
  const act = useAction();
  const live = useRef({ filters, actorID });
  live.current = { filters, actorID };

  const page = async (cursor: string | null, f: Filters, actor: string | null) => {
    const query = {
      limit: 50,
      ...(f.type ? { type: f.type } : {}),
      ...(actor ? { actorID: actor } : {}),
      ...(f.subject ? { subject: f.subject } : {}),
      ...(cursor ? { cursor } : {}),
    };
    return (await ok(c.api.GET("/audit-log", { params: { query } }))).data;
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
  // Names of the actors shown.
  useEffect(() => {
    const missing = [...new Set((items ?? []).map((e) => e.actor_id).filter((x): x is string => !!x && !actors.has(x)))];
    if (missing.length === 0) return;
    void Promise.all(
      missing.map(async (id) => {
        try {
          const u = await ok(c.api.GET("/users/{userID}", { params: { path: { userID: id } } }));
          return [id, u.data.display_name || u.data.username] as const;
        } catch {
          return [id, id.slice(0, 8)] as const;
        }
      }),
    ).then((pairs) => setActors((m) => new Map([...m, ...pairs])));
  }, [items]);

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
        Audit log <span class={`live ${c.live}`}>{c.live === "live" ? "● live" : c.live}</span>
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
        <p class="muted">No events match.</p>
      ) : (
        <div class="scroll">
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
                    <span class="sub">{e.subject}</span>
                  </td>
                  <td>{e.actor_id ? actors.get(e.actor_id) ?? "…" : "system"}</td>
                  <td>
                    <Change data={e.data} />
                    {e.reason && <span class="sub">Reason: {e.reason}</span>}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
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

/** The before/after of a change (sets show what was added and removed), else its details. */
function Change(props: { data: Record<string, unknown> }): JSX.Element {
  const { before, after, ...rest } = props.data;
  const b = list(before);
  const a = list(after);
  const restEntries = Object.entries(rest);
  return (
    <div class="change">
      {b && a ? (
        <div>
          {a.filter((x) => !b.includes(x)).map((x) => (
            <span key={`+${x}`} class="added">
              +{x}{" "}
            </span>
          ))}
          {b.filter((x) => !a.includes(x)).map((x) => (
            <span key={`-${x}`} class="removed">
              −{x}{" "}
            </span>
          ))}
          <span class="sub">
            before: {b.join(", ") || "none"} → after: {a.join(", ") || "none"}
          </span>
        </div>
      ) : before !== undefined || after !== undefined ? (
        <span class="sub">
          before: {show(before)} → after: {show(after)}
        </span>
      ) : null}
      {restEntries.length > 0 && (
        <dl>
          {restEntries.map(([k, v]) => (
            <div key={k}>
              <dt>{k}</dt>
              <dd>{show(v)}</dd>
            </div>
          ))}
        </dl>
      )}
    </div>
  );
}
