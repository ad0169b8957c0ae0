// Webhooks: list, create (the secret shown once), enable and disable, rotate
// the secret (the new one shown once), delete, and each webhook's recent
// deliveries with a way to send one again.
import type { JSX } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { need, type Access } from "../access";
import { ApiError, done, ifMatch, mergePatch, ok, type Schemas } from "../api";
import { byOthers, useConsole, type Console } from "../state";
import { Btn, Confirm, isStale, ProblemBox, ReadOnly, revealDetail, useAction, when } from "../ui";

type Webhook = Schemas["Webhook"];
type Delivery = Schemas["WebhookDelivery"];

/** Why the caller may not see or manage webhooks (both permissions are needed for every operation), or null. */
export function webhookReason(a: Access): string | null {
  return need(a, "MANAGE_WEBHOOKS") ?? need(a, "VIEW_AUDIT_LOG");
}

/** Event patterns from what was typed: separated by commas or spaces, without duplicates. */
export function patternsOf(s: string): string[] {
  return [...new Set(s.split(/[\s,]+/).filter((x) => x !== ""))];
}

/** Why a webhook is disabled, in words (a reason this console does not know reads as "disabled"). */
function disabledWords(w: Webhook): string {
  switch (w.disabled_reason) {
    case "gone":
      return "disabled: its receiver answered 410 Gone";
    case "creator":
      return "disabled: its creator was deleted or lost MANAGE_WEBHOOKS or VIEW_AUDIT_LOG";
    default:
      return "disabled";
  }
}

/** A new secret, shown once. */
interface Secret {
  webhook: string;
  secret: string;
  rotated: boolean;
}

/** Names of users by ID, asked for once each (creators). */
function useUserNames(c: Console, ids: readonly string[]): (id: string) => string {
  const [names, setNames] = useState<ReadonlyMap<string, string>>(new Map());
  const asked = useRef(new Set<string>());
  useEffect(() => {
    for (const id of ids) {
      if (asked.current.has(id) || id === c.access.me.id) continue;
      asked.current.add(id);
      void ok(c.api.GET("/users/{userID}", { params: { path: { userID: id } } }))
        .then((r) => setNames((m) => new Map(m).set(id, r.data.display_name || r.data.username)))
        .catch(() => setNames((m) => new Map(m).set(id, "a deleted user")));
    }
  }, [ids.join(",")]);
  return (id) => (id === c.access.me.id ? "you" : (names.get(id) ?? "…"));
}

export function WebhooksPage(): JSX.Element {
  const c = useConsole();
  const reason = webhookReason(c.access);
  const [hooks, setHooks] = useState<Webhook[] | null>(null);
  const [selected, setSelected] = useState<string | null>(null);
  const [secret, setSecret] = useState<Secret | null>(null);
  const act = useAction();
  const load = () =>
    act.run(async () => {
      // At most 25 exist: one page holds them all.
      const r = await ok(c.api.GET("/webhooks", { params: { query: { limit: 100 } } }));
      setHooks(r.data.items);
    });
  useEffect(() => {
    if (reason === null) void load();
  }, [reason]);
  useEffect(
    () =>
      c.onEvent((e) => {
        if (reason === null && e.type.startsWith("webhook.") && byOthers(c, e)) void load();
      }),
    [reason],
  );
  const creator = useUserNames(c, (hooks ?? []).map((w) => w.creator_id));
  if (reason !== null) {
    return (
      <section class="card" aria-labelledby="webhooks-h">
        <h2 id="webhooks-h">Webhooks</h2>
        <ReadOnly reason={reason} what="see or manage webhooks" />
      </section>
    );
  }
  const pick = (id: string) => {
    setSelected(id);
    revealDetail(".detail h2");
  };
  return (
    <div class="split">
      <section class="list" aria-labelledby="webhooks-h">
        <h2 id="webhooks-h">Webhooks</h2>
        <p class="hint">Each event of the audit log that matches a webhook's patterns is sent to its URL, signed with its secret.</p>
        <ProblemBox error={act.error} names={c.names} />
        {hooks === null ? (
          <p class="loading">Loading…</p>
        ) : hooks.length === 0 ? (
          <p class="muted">No webhooks yet.</p>
        ) : (
          <ul class="items" data-testid="webhook-list">
            {hooks.map((w) => (
              <li key={w.id} data-webhook={w.id}>
                <a
                  href="#/webhooks"
                  aria-current={selected === w.id ? "true" : undefined}
                  onClick={(e) => {
                    e.preventDefault();
                    pick(w.id);
                  }}
                >
                  <strong class="url">{w.url}</strong>
                  {w.enabled ? <span class="badge">enabled</span> : <span class="badge warn">{disabledWords(w)}</span>}
                  <span class="sub">{w.events.join(", ")}</span>
                  {w.description && <span class="sub">{w.description}</span>}
                  <span class="sub">creator: {creator(w.creator_id)}</span>
                </a>
              </li>
            ))}
          </ul>
        )}
        <CreateWebhook
          onCreated={(w) => {
            setSecret({ webhook: w.url, secret: w.secret, rotated: false });
            setSelected(w.id);
            revealSecret();
            void load();
          }}
        />
      </section>
      <section class="detail">
        {secret && <SecretNote secret={secret} onClose={() => setSecret(null)} />}
        {selected ? (
          <WebhookDetail
            key={selected}
            id={selected}
            creator={creator}
            onChanged={load}
            onRotated={(w, s) => {
              setSecret({ webhook: w.url, secret: s, rotated: true });
              revealSecret();
            }}
            onDeleted={() => {
              setSelected(null);
              setSecret(null);
              void load();
            }}
          />
        ) : (
          <p class="muted">Pick a webhook to enable or disable it, rotate its secret, delete it or see its deliveries.</p>
        )}
      </section>
    </div>
  );
}

/** On a narrow screen a new secret shows far from where it was asked for: bring it into view. */
function revealSecret(): void {
  revealDetail('[data-testid="webhook-secret"]');
}

function SecretNote(props: { secret: Secret; onClose: () => void }): JSX.Element {
  const { secret } = props;
  return (
    <div class="secret" role="status" data-testid="webhook-secret">
      <p>
        {secret.rotated ? "The new secret" : "The secret"} of <strong class="url">{secret.webhook}</strong>: copy it now, it is shown only once.
        {secret.rotated ? " The previous secret goes on signing beside it for 24 hours." : ""}
      </p>
      <code>{secret.secret}</code>
      <div class="row">
        <button type="button" class="btn plain small" onClick={() => void navigator.clipboard?.writeText(secret.secret)}>
          Copy
        </button>
        <button type="button" class="btn plain small" onClick={props.onClose}>
          I have kept it
        </button>
      </div>
    </div>
  );
}

function CreateWebhook(props: { onCreated: (w: Schemas["WebhookWithSecret"]) => void }): JSX.Element {
  const c = useConsole();
  const [url, setUrl] = useState("");
  const [events, setEvents] = useState("");
  const [description, setDescription] = useState("");
  const act = useAction();
  const submit = async (e: Event) => {
    e.preventDefault();
    await act.run(async () => {
      const body = { url: url.trim(), events: patternsOf(events), ...(description.trim() ? { description: description.trim() } : {}) };
      const r = await ok(c.api.POST("/webhooks", { body }));
      setUrl("");
      setEvents("");
      setDescription("");
      props.onCreated(r.data);
    });
  };
  return (
    <form class="card create" onSubmit={submit} aria-labelledby="new-webhook-h">
      <h3 id="new-webhook-h">New webhook</h3>
      <label>
        URL <input name="webhook-url" type="url" required value={url} placeholder="https://hooks.example.com/guildhall" onInput={(e) => setUrl(e.currentTarget.value)} />
      </label>
      <label>
        Events{" "}
        <input name="webhook-events" required value={events} placeholder="role.*, user.timeout" aria-describedby="webhook-events-hint" onInput={(e) => setEvents(e.currentTarget.value)} />
      </label>
      <p class="hint" id="webhook-events-hint">
        Event types (user.timeout) or prefixes ending in .* (role.*), separated by commas.
      </p>
      <label>
        Description <input name="webhook-description" value={description} maxLength={100} placeholder="Moderation bot" onInput={(e) => setDescription(e.currentTarget.value)} />
      </label>
      <Btn type="submit" kind="primary" busy={act.busy}>
        Create webhook
      </Btn>
      <ProblemBox error={act.error} names={c.names} />
    </form>
  );
}

function WebhookDetail(props: {
  id: string;
  creator: (id: string) => string;
  onChanged: () => Promise<unknown>;
  onRotated: (w: Webhook, secret: string) => void;
  onDeleted: () => void;
}): JSX.Element {
  const c = useConsole();
  const [got, setGot] = useState<{ hook: Webhook; etag: string } | null>(null);
  const [confirm, setConfirm] = useState(false);
  const loader = useAction();
  const act = useAction();
  const quiet = useRef<Quiet>({ stopped: false, looks: new Set() });
  const load = () =>
    loader.run(async () => {
      const r = await ok(c.api.GET("/webhooks/{webhookID}", { params: { path: { webhookID: props.id } } }));
      setGot({ hook: r.data, etag: r.etag });
    });
  useEffect(() => {
    void load();
  }, [props.id]);
  useEffect(
    () =>
      c.onEvent((e) => {
        if (e.type.startsWith("webhook.") && e.subject === `webhook:${props.id}` && byOthers(c, e) && e.type !== "webhook.deleted") void load();
      }),
    [props.id],
  );
  if (!got) return loader.error ? <ProblemBox error={loader.error} names={c.names} /> : <p class="loading">Loading…</p>;
  const { hook, etag } = got;
  const after = async (err: unknown) => {
    if (err === null || isStale(err)) {
      await load();
      await props.onChanged();
    }
  };
  const setEnabled = async (enabled: boolean) => {
    const err = await act.run(async () => {
      const r = await ok(
        c.api.PATCH("/webhooks/{webhookID}", { params: { path: { webhookID: hook.id }, header: ifMatch(etag) }, body: { enabled }, headers: mergePatch }),
      );
      setGot({ hook: r.data, etag: r.etag });
    });
    await after(err);
  };
  const rotate = async () => {
    const err = await act.run(async () => {
      const r = await ok(c.api.POST("/webhooks/{webhookID}/rotate", { params: { path: { webhookID: hook.id } } }));
      props.onRotated(r.data, r.data.secret);
    });
    await after(err);
  };
  const del = async () => {
    setConfirm(false);
    const err = await act.run(async () => {
      // Stop looking at the deliveries first, and let a look already on
      // its way end (busy meanwhile: no second delete): one answered after
      // the delete would be a 404 for nothing.
      quiet.current.stopped = true;
      await Promise.all(quiet.current.looks);
      await done(c.api.DELETE("/webhooks/{webhookID}", { params: { path: { webhookID: hook.id }, header: ifMatch(etag) } }));
    });
    // A 404: someone else deleted it first; it is gone all the same.
    if (err === null || (err instanceof ApiError && err.status === 404)) props.onDeleted();
    else {
      quiet.current.stopped = false;
      await after(err);
    }
  };
  return (
    <div>
      <section class="card" aria-labelledby="webhook-h" data-testid="webhook">
        <h2 id="webhook-h" class="url">
          {hook.url}
        </h2>
        <dl class="facts">
          <dt>State</dt>
          <dd data-testid="webhook-state">{hook.enabled ? "enabled" : disabledWords(hook)}</dd>
          <dt>Events</dt>
          <dd>{hook.events.join(", ")}</dd>
          {hook.description && (
            <>
              <dt>Description</dt>
              <dd>{hook.description}</dd>
            </>
          )}
          <dt>Creator</dt>
          <dd>{props.creator(hook.creator_id)} (it receives what they may read in the audit log)</dd>
          {hook.previous_secret_until && (
            <>
              <dt>Previous secret</dt>
              <dd>signs beside the current one until {when(hook.previous_secret_until)}</dd>
            </>
          )}
          <dt>Created</dt>
          <dd>{when(hook.created_at)}</dd>
        </dl>
        <div class="row wrap">
          {hook.enabled ? (
            <Btn busy={act.busy} onClick={() => void setEnabled(false)} testid="webhook-disable">
              Disable
            </Btn>
          ) : (
            <Btn busy={act.busy} onClick={() => void setEnabled(true)} testid="webhook-enable">
              Enable
            </Btn>
          )}
          <Btn busy={act.busy} onClick={() => void rotate()} testid="webhook-rotate">
            Rotate secret
          </Btn>
          <Btn kind="danger" busy={act.busy} onClick={() => setConfirm(true)} testid="webhook-delete">
            Delete
          </Btn>
        </div>
        {!hook.enabled && <p class="hint">Enabling it makes you its creator: it then receives what you may read in the audit log.</p>}
        <ProblemBox error={act.error} names={c.names} />
        {confirm && (
          <Confirm title="Delete this webhook?" confirm="Delete webhook" onConfirm={() => void del()} onCancel={() => setConfirm(false)}>
            <p>
              Nothing more is sent to <strong class="url">{hook.url}</strong>, and its deliveries are deleted with it.
            </p>
          </Confirm>
        )}
      </section>
      <Deliveries hook={hook} quiet={quiet.current} />
    </div>
  );
}

const stateBadge: Record<Delivery["state"], string> = { pending: "badge warn", delivered: "badge", failed: "badge bad" };

/** How a webhook's page tells its deliveries to stop looking, before it deletes the webhook. */
interface Quiet {
  stopped: boolean;
  /** The looks on their way; none rejects. */
  looks: Set<Promise<unknown>>;
}

function Deliveries(props: { hook: Webhook; quiet: Quiet }): JSX.Element {
  const c = useConsole();
  const { hook } = props;
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]);
  const [page, setPage] = useState<{ items: Delivery[]; next: string | null } | null>(null);
  const [sent, setSent] = useState<ReadonlySet<string>>(new Set());
  const act = useAction();
  const redo = useAction();
  const cursor = cursors[cursors.length - 1];
  const load = () => {
    if (props.quiet.stopped) return Promise.resolve(null);
    const look = act.run(async () => {
      const r = await ok(
        c.api.GET("/webhooks/{webhookID}/deliveries", { params: { path: { webhookID: hook.id }, query: { limit: 10, ...(cursor ? { cursor } : {}) } } }),
      );
      setPage({ items: r.data.items, next: r.data.next_cursor ?? null });
    });
    props.quiet.looks.add(look);
    void look.then(() => props.quiet.looks.delete(look));
    return look;
  };
  useEffect(() => {
    void load();
  }, [hook.id, cursor]);
  // A new event may be on its way here: the deliverer makes its deliveries
  // a moment after the event is written, so look again a few times after
  // each one (the first page only: later pages hold older deliveries).
  useEffect(() => {
    if (cursor) return undefined;
    let timers: number[] = [];
    const stop = () => {
      for (const t of timers) window.clearTimeout(t);
      timers = [];
    };
    const off = c.onEvent(() => {
      stop();
      timers = [500, 2000, 5000, 10000].map((ms) => window.setTimeout(() => void load(), ms));
    });
    return () => {
      off();
      stop();
    };
  }, [hook.id, cursor]);
  // While some are on their way, follow them.
  const pending = page?.items.some((d) => d.state === "pending") ?? false;
  useEffect(() => {
    if (!pending) return undefined;
    const t = window.setInterval(() => void load(), 3000);
    return () => window.clearInterval(t);
  }, [pending, hook.id, cursor]);
  const redeliver = async (d: Delivery) => {
    const err = await redo.run(async () => {
      await done(c.api.POST("/webhooks/{webhookID}/deliveries/{deliveryID}/redeliver", { params: { path: { webhookID: hook.id, deliveryID: d.id } } }));
    });
    if (err === null) setSent((s) => new Set(s).add(d.id));
    await load();
  };
  return (
    <section class="card" aria-labelledby="deliveries-h">
      <div class="row between">
        <h2 id="deliveries-h">Recent deliveries</h2>
        <Btn busy={act.busy} onClick={() => void load()} >
          Refresh
        </Btn>
      </div>
      {!hook.enabled && <p class="hint">This webhook is disabled: nothing is sent, redeliveries included, until it is enabled again.</p>}
      <ProblemBox error={act.error} names={c.names} />
      <ProblemBox error={redo.error} names={c.names} />
      {page === null ? (
        <p class="loading">Loading…</p>
      ) : page.items.length === 0 ? (
        <p class="muted">No deliveries yet: one is made for each matching event written from now on.</p>
      ) : (
        <ul class="items" data-testid="deliveries" aria-live="polite">
          {page.items.map((d) => (
            <li key={d.id} class="row between wrap-narrow" data-delivery={d.id} data-state={d.state}>
              <span>
                <strong>event #{d.event_seq}</strong> <span class={stateBadge[d.state]}>{d.state}</span>
                <span class="sub">
                  {d.attempts} attempt{d.attempts === 1 ? "" : "s"}, last answer {d.last_status === null ? "none" : d.last_status}
                  {d.next_attempt_at ? `, next attempt ${when(d.next_attempt_at)}` : ""}
                </span>
                <span class="sub">
                  {when(d.created_at)} · <code>{d.id}</code>
                </span>
                {sent.has(d.id) && (
                  <span class="sub" role="status" data-testid="redelivered">
                    Sent again: it is attempted as soon as possible.
                  </span>
                )}
              </span>
              <Btn busy={redo.busy} onClick={() => void redeliver(d)} label={`Redeliver event #${d.event_seq}`} testid="redeliver">
                Redeliver
              </Btn>
            </li>
          ))}
        </ul>
      )}
      <div class="row">
        <Btn reason={cursors.length > 1 ? null : "this is the first page"} onClick={() => setCursors(cursors.slice(0, -1))}>
          ← Newer
        </Btn>
        <Btn reason={page?.next ? null : "this is the last page"} onClick={() => page?.next && setCursors([...cursors, page.next])}>
          Older →
        </Btn>
      </div>
    </section>
  );
}
