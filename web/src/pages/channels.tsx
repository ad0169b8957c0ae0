// Channels: the tree (categories with their channels), reordered and moved
// between categories by drag and drop or by keyboard; create a channel or a
// category, rename, topic, category, delete; per channel the overwrite
// matrix (If-Match on save; a change made meanwhile is shown, not
// overwritten; a category's edit reaches its synced channels) and its
// attachments.
import type { JSX } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { grantReason, need, needIn, type ChannelAccess } from "../access";
import {
  ApiError,
  done,
  ifMatch,
  mergePatch,
  ok,
  type Channel,
  type Overwrite,
  type Permission,
  type User,
} from "../api";
import { channelLabel, channelScoped, listChannels, useConsole } from "../state";
import { Btn, Confirm, isStale, ProblemBox, ReadOnly, revealDetail, TriCell, useAction, Why, type Tri } from "../ui";
import { Attachments } from "./attachments";
import { MatrixAsOf } from "./history";
import { WhoHasAccess } from "./whoaccess";

const idPattern = /^[a-z0-9][a-z0-9_-]{0,63}$/;

/** A channel's siblings (the same category, or none), in the server's order. */
function siblingsOf(channels: readonly Channel[], parent: string | null): Channel[] {
  return channels.filter((x) => (x.parent_id ?? null) === parent);
}

interface Node {
  ch: Channel;
  children: Channel[];
  /** In a category the caller cannot see. */
  orphan: boolean;
}

/** The tree: the top level in order, each category with its children (a child of a hidden category stays at the top). */
function treeOf(channels: readonly Channel[]): Node[] {
  const ids = new Set(channels.map((x) => x.id));
  const top: Node[] = [];
  const byID = new Map<string, Node>();
  for (const ch of channels) {
    if (ch.parent_id && ids.has(ch.parent_id)) {
      byID.get(ch.parent_id)?.children.push(ch);
      continue;
    }
    const n: Node = { ch, children: [], orphan: ch.parent_id !== null };
    byID.set(ch.id, n);
    top.push(n);
  }
  return top;
}

/** Where a dragged channel would go: before another one, into a category (last), or at the end of the top level. */
type Target = { how: "before"; id: string } | { how: "into"; id: string } | { how: "end" };

export function ChannelsPage(props: { selected: string }): JSX.Element {
  const c = useConsole();
  const [channels, setChannels] = useState<Channel[] | null>(null);
  const list = useAction();
  const mover = useAction();
  // Said aloud when a keyboard move cannot go further (the first or last of its category).
  const [edge, setEdge] = useState<string | null>(null);
  const reload = () => list.run(async () => setChannels(await listChannels(c)));
  useEffect(() => {
    void reload();
    // Moves, renames and overwrites (which decide `synced`) show at once, whoever made them.
    return c.onEvent((e) => {
      if (e.type.startsWith("channel.") && !e.type.startsWith("channel.attachment.")) void reload();
    });
  }, []);
  // The channel the page opened on (from its address) stays where it is; one picked later is brought into view.
  const opened = useRef(props.selected);
  const createReason = need(c.access, "MANAGE_CHANNELS");
  const moveReason = need(c.access, "MANAGE_CHANNELS");

  /**
   * Puts `ch` at `index` among the channels of `parent`: positions 0..n-1 in
   * the new order. Only `ch` moving is a single PATCH; anything more, one
   * reorder (every move or none).
   */
  const place = async (ch: Channel, parent: string | null, index: number) => {
    if (!channels) return;
    if (ch.kind === "category" && parent !== null) return;
    const order = siblingsOf(channels, parent).filter((x) => x.id !== ch.id);
    order.splice(Math.max(0, Math.min(index, order.length)), 0, ch);
    const reparent = (ch.parent_id ?? null) !== parent;
    const moves = order.map((x, i) => ({ x, i })).filter(({ x, i }) => x.position !== i || (x.id === ch.id && reparent));
    if (moves.length === 0) return;
    const err = await mover.run(async () => {
      const only = moves.length === 1 ? moves[0] : undefined;
      if (only && only.x.id === ch.id) {
        await ok(
          c.api.PATCH("/channels/{channelID}", {
            params: { path: { channelID: ch.id } },
            body: { position: only.i, ...(reparent ? { parent_id: parent } : {}) },
            headers: mergePatch,
          }),
        );
      } else {
        const positions = moves.map(({ x, i }) => ({ id: x.id, position: i, ...(x.id === ch.id && reparent ? { parent_id: parent } : {}) }));
        await ok(c.api.POST("/channels/reorder", { body: { positions } }));
      }
    });
    await reload();
    if (err === null) window.setTimeout(() => document.querySelector<HTMLElement>(`[data-channel="${ch.id}"] > a`)?.focus(), 0);
  };
  const dropOn = (ch: Channel, t: Target) => {
    if (!channels) return;
    if (t.how === "end") return void place(ch, null, siblingsOf(channels, null).length);
    const target = channels.find((x) => x.id === t.id);
    if (!target || target.id === ch.id) return;
    if (t.how === "into") return void place(ch, target.id, siblingsOf(channels, target.id).filter((x) => x.id !== ch.id).length);
    const parent = target.parent_id ?? null;
    const sibs = siblingsOf(channels, parent).filter((x) => x.id !== ch.id);
    return void place(ch, parent, sibs.findIndex((x) => x.id === target.id));
  };
  const step = (ch: Channel, by: -1 | 1) => {
    if (!channels) return;
    const parent = ch.parent_id ?? null;
    const sibs = siblingsOf(channels, parent);
    const i = sibs.findIndex((x) => x.id === ch.id);
    if (i < 0) return;
    if (i + by < 0 || i + by >= sibs.length) {
      const where = parent === null ? "the top level" : categoryName(channels, parent);
      setEdge(`${channelLabel(ch)} is already ${by < 0 ? "first" : "last"} in ${where}${parent === null ? "" : "; drag it, or change its category in its settings, to take it out"}.`);
      return;
    }
    setEdge(null);
    void place(ch, parent, i + by);
  };

  const selected = channels?.find((x) => x.id === props.selected);
  return (
    <div class="split">
      <section class="list" aria-labelledby="channels-h">
        <h2 id="channels-h">Channels</h2>
        <p class="hint">
          Drag a channel to reorder it, or onto a category to move it there; or focus it and press Alt+↑ / Alt+↓. Its settings change its category too.
        </p>
        <ProblemBox error={list.error} names={c.names} />
        <ProblemBox error={mover.error} names={c.names} onClose={() => mover.setError(null)} />
        <p class="hint edge" role="status" data-testid="move-edge">
          {edge}
        </p>
        {channels === null ? (
          <p class="loading">Loading…</p>
        ) : channels.length === 0 ? (
          <p class="muted">No channels you can see.</p>
        ) : (
          <ChannelTree channels={channels} selected={props.selected} reason={moveReason} busy={mover.busy} onDrop={dropOn} onStep={step} />
        )}
        <CreateChannel
          reason={createReason}
          categories={(channels ?? []).filter((x) => x.kind === "category")}
          onCreated={(id) => {
            void reload();
            location.hash = `#/channels/${encodeURIComponent(id)}`;
          }}
        />
      </section>
      <section class="detail">
        {props.selected ? (
          <ChannelDetail
            key={props.selected}
            id={props.selected}
            listed={selected}
            channels={channels ?? []}
            onChanged={reload}
            reveal={props.selected !== opened.current}
          />
        ) : (
          <p class="muted">Pick a channel to see its settings, permissions and attachments.</p>
        )}
      </section>
    </div>
  );
}

function ChannelTree(props: {
  channels: Channel[];
  selected: string;
  reason: string | null;
  busy: boolean;
  onDrop: (ch: Channel, t: Target) => void;
  onStep: (ch: Channel, by: -1 | 1) => void;
}): JSX.Element {
  const { channels, reason } = props;
  const [dragging, setDragging] = useState<Channel | null>(null);
  const [over, setOver] = useState<string | null>(null); // "before:<id>", "into:<id>" or "end"
  const draggingRef = useRef<Channel | null>(null);
  const tree = treeOf(channels);
  const keyOf = (t: Target) => (t.how === "end" ? "end" : `${t.how}:${t.id}`);
  // What dropping the dragged channel on `ch`'s row means, or null where it cannot go.
  const targetOn = (ch: Channel, d: Channel): Target | null => {
    if (d.id === ch.id) return null;
    if (ch.kind === "category") return d.kind === "category" ? { how: "before", id: ch.id } : { how: "into", id: ch.id };
    if (d.kind === "category" && ch.parent_id !== null) return null; // a category stays at the top level
    return { how: "before", id: ch.id };
  };
  const end = () => {
    draggingRef.current = null;
    setDragging(null);
    setOver(null);
  };
  const row = (ch: Channel, orphan: boolean) => {
    const cat = ch.kind === "category";
    return (
      <a
        href={`#/channels/${encodeURIComponent(ch.id)}`}
        aria-current={props.selected === ch.id ? "true" : undefined}
        aria-describedby={reason ? "move-why" : undefined}
        draggable={reason === null && !props.busy}
        data-viewable={ch.viewable === false ? "false" : undefined}
        class={`${cat ? "cat" : ""}${ch.viewable === false ? " unviewable" : ""}${over && (over === `before:${ch.id}` || over === `into:${ch.id}`) ? ` drop-${over.split(":")[0]}` : ""}${dragging?.id === ch.id ? " dragging" : ""}`}
        onKeyDown={(e) => {
          if (e.altKey && (e.key === "ArrowUp" || e.key === "ArrowDown")) {
            e.preventDefault();
            if (reason === null && !props.busy) props.onStep(ch, e.key === "ArrowUp" ? -1 : 1);
          }
        }}
        onDragStart={(e) => {
          e.stopPropagation();
          draggingRef.current = ch;
          setDragging(ch);
          e.dataTransfer?.setData("text/plain", ch.id);
          if (e.dataTransfer) e.dataTransfer.effectAllowed = "move";
        }}
        onDragEnd={end}
        onDragOver={(e) => {
          const d = draggingRef.current;
          const t = d && targetOn(ch, d);
          if (!t) return;
          e.preventDefault();
          e.stopPropagation();
          setOver(keyOf(t));
        }}
        onDragLeave={() => setOver((o) => (o && o.endsWith(`:${ch.id}`) ? null : o))}
        onDrop={(e) => {
          e.preventDefault();
          e.stopPropagation();
          const d = draggingRef.current ?? channels.find((x) => x.id === e.dataTransfer?.getData("text/plain"));
          const t = d && targetOn(ch, d);
          end();
          if (d && t) props.onDrop(d, t);
        }}
      >
        {cat ? (
          <>
            <span class="catmark" aria-hidden="true">
              ▾
            </span>
            <strong>{ch.name}</strong> <span class="muted">{ch.id}</span> <span class="kind">category</span>
          </>
        ) : (
          <>
            <strong>#{ch.name}</strong> <span class="muted">{ch.id}</span>
          </>
        )}
        {orphan && <span class="sub">in a category you cannot see</span>}
        {ch.viewable === false && (
          <span class="sub unviewable" data-testid="unviewable">
            you cannot view it (you know of it as a manager)
          </span>
        )}
        {!cat && ch.topic && <span class="sub">{ch.topic}</span>}
      </a>
    );
  };
  return (
    <>
      <ul class="items tree" data-testid="channel-list" aria-label="Channels, in order">
        {tree.map((n) => (
          <li key={n.ch.id} data-channel={n.ch.id} data-kind={n.ch.kind}>
            {row(n.ch, n.orphan)}
            {n.ch.kind === "category" && (
              <ul class="items children" aria-label={`Channels in ${n.ch.name}`}>
                {n.children.map((ch) => (
                  <li key={ch.id} data-channel={ch.id} data-kind={ch.kind} data-parent={n.ch.id}>
                    {row(ch, false)}
                  </li>
                ))}
                {n.children.length === 0 && <li class="empty muted">No channels you can see</li>}
              </ul>
            )}
          </li>
        ))}
      </ul>
      {dragging && dragging.parent_id !== null && (
        <p
          class={`dropend${over === "end" ? " over" : ""}`}
          data-testid="drop-end"
          onDragOver={(e) => {
            e.preventDefault();
            setOver("end");
          }}
          onDragLeave={() => setOver((o) => (o === "end" ? null : o))}
          onDrop={(e) => {
            e.preventDefault();
            const d = draggingRef.current;
            end();
            if (d) props.onDrop(d, { how: "end" });
          }}
        >
          Drop here to take it out of its category
        </p>
      )}
      {reason && (
        <p class="why" id="move-why">
          Moving channels is disabled: {reason}
        </p>
      )}
    </>
  );
}

function CreateChannel(props: { reason: string | null; categories: Channel[]; onCreated: (id: string) => void }): JSX.Element {
  const c = useConsole();
  const [id, setID] = useState("");
  const [name, setName] = useState("");
  const [topic, setTopic] = useState("");
  const [kind, setKind] = useState<Channel["kind"]>("text");
  const [parent, setParent] = useState("");
  const act = useAction();
  const category = kind === "category";
  const submit = async (e: Event) => {
    e.preventDefault();
    const err = await act.run(async () => {
      await ok(
        c.api.POST("/channels/{channelID}/create", {
          params: { path: { channelID: id } },
          body: { name, kind, ...(topic ? { topic } : {}), ...(!category && parent ? { parent_id: parent } : {}) },
        }),
      );
    });
    if (err === null) {
      props.onCreated(id);
      setID("");
      setName("");
      setTopic("");
    }
  };
  const idBad = id !== "" && !idPattern.test(id);
  return (
    <form class="card create" onSubmit={submit} aria-labelledby="new-channel-h">
      <h3 id="new-channel-h">New channel or category</h3>
      <ReadOnly reason={props.reason} what="create channels" />
      <fieldset disabled={props.reason !== null}>
        <div class="row wrap">
          <label>
            Kind{" "}
            <select name="channel-kind" value={kind} onChange={(e) => setKind(e.currentTarget.value as Channel["kind"])}>
              <option value="text">Text channel</option>
              <option value="category">Category</option>
            </select>
          </label>
          <label title={category ? "A category cannot be inside a category" : undefined}>
            In category{" "}
            <select name="channel-parent" value={category ? "" : parent} disabled={category} onChange={(e) => setParent(e.currentTarget.value)}>
              <option value="">none</option>
              {props.categories.map((x) => (
                <option key={x.id} value={x.id}>
                  {x.name}
                </option>
              ))}
            </select>
          </label>
        </div>
        <label>
          ID <input name="channel-id" value={id} required pattern="[a-z0-9][a-z0-9_\-]{0,63}" placeholder={category ? "staff" : "ops"} onInput={(e) => setID(e.currentTarget.value)} />
        </label>
        {idBad && <span class="why">lowercase letters, digits, _ and -</span>}
        <label>
          Name{" "}
          <input name="channel-name" value={name} required maxLength={100} placeholder={category ? "Staff" : "Operations"} onInput={(e) => setName(e.currentTarget.value)} />
        </label>
        <label>
          Topic <input name="channel-topic" value={topic} maxLength={1024} onInput={(e) => setTopic(e.currentTarget.value)} />
        </label>
        {!category && parent && <p class="hint">It starts with a copy of the category's permission overwrites (synced).</p>}
        <Btn type="submit" kind="primary" reason={props.reason} busy={act.busy}>
          {category ? "Create category" : "Create channel"}
        </Btn>
      </fieldset>
      <ProblemBox error={act.error} names={c.names} />
    </form>
  );
}

interface Loaded {
  channel: Channel;
  etag: string;
  mine: ChannelAccess;
  overwrites: Overwrite[];
  owEtag: string;
  users: Map<string, User>;
}

/** What a channel's parts need besides its own state: every channel listed (names, the category's synced children). */
interface Around {
  channels: Channel[];
  /** After one's own change: the list reloads (moves, `synced`). */
  onChanged: () => Promise<unknown>;
}

function ChannelDetail(props: { id: string; listed: Channel | undefined; reveal: boolean } & Around): JSX.Element {
  const c = useConsole();
  const [state, setState] = useState<Loaded | null>(null);
  const [attachmentCount, setAttachmentCount] = useState(0);
  // A 412 outlives the reload it causes, so that "changed meanwhile" stays
  // visible above the fresh state.
  const [stale, setStale] = useState<unknown>(null);
  // No such channel, or one this user may not see (the server answers both alike).
  const [missing, setMissing] = useState(!idPattern.test(props.id));
  const loader = useAction();
  const load = () =>
    loader.run(async () => {
      const path = { channelID: props.id };
      // Sent together, but judged in this order whatever answers first: the
      // channel's own 404 says what is wrong, where the permissions of a
      // missing channel answer 400 (query.channelID).
      const [chR, mineR, owsR] = await Promise.allSettled([
        ok(c.api.GET("/channels/{channelID}", { params: { path } })),
        ok(c.api.GET("/users/{userID}/permissions", { params: { path: { userID: c.access.me.id }, query: { channelID: props.id } } })),
        ok(c.api.GET("/channels/{channelID}/permissions", { params: { path } })),
      ]);
      if (chR.status === "rejected" && chR.reason instanceof ApiError && chR.reason.status === 404) {
        setMissing(true);
        return;
      }
      const ch = settled(chR);
      const mine = settled(mineR);
      const ows = settled(owsR);
      const users = new Map<string, User>();
      await Promise.all(
        ows.data.items
          .filter((o) => o.target_type === "user" && o.target_id)
          .map(async (o) => {
            const u = await ok(c.api.GET("/users/{userID}", { params: { path: { userID: o.target_id ?? "" } } }));
            users.set(u.data.id, u.data);
          }),
      );
      setState({
        channel: ch.data,
        etag: ch.etag,
        mine: { channelID: ch.data.id, perms: new Set(mine.data.permissions) },
        overwrites: ows.data.items,
        owEtag: ows.etag,
        users,
      });
    });
  // Picked from the tree: on a narrow screen, show it (once there is something to show).
  const ready = state !== null || missing || props.listed?.viewable === false;
  const revealed = useRef(false);
  useEffect(() => {
    if (ready && props.reveal && !revealed.current) {
      revealed.current = true;
      revealDetail(".detail h2, .detail [role=alert]");
    }
  }, [ready]);
  // A channel the caller knows of but cannot view (a holder of
  // MANAGE_CHANNELS or MANAGE_ROLES sees it listed): its details would be 404.
  const unviewable = props.listed?.viewable === false;
  useEffect(() => {
    if (!missing && !unviewable) void load();
  }, [props.id, unviewable]);
  // The list changed this channel (moved it, synced or unsynced it, renamed
  // it): show it as it is now.
  const version = props.listed ? versionOf(props.listed) : null;
  useEffect(() => {
    if (version !== null && state !== null && !loader.busy && versionOf(state.channel) !== version) void load();
  }, [version]);
  if (props.listed && unviewable) {
    const ch = props.listed;
    return (
      <div class="card" role="note" data-testid="unviewable-channel">
        <h2>
          {channelLabel(ch)} <span class="muted">{ch.id}</span> <span class="badge warn">you cannot view it</span>
        </h2>
        <p>
          You may not view this {ch.kind === "category" ? "category" : "channel"} (you lack VIEW_CHANNEL in it), so its settings, permission overwrites and
          attachments are not shown. It is listed because you manage channels or roles, which needs knowing every channel.
        </p>
        <WhoHasAccess key={ch.id} channelID={ch.id} label={channelLabel(ch)} />
      </div>
    );
  }
  if (missing) {
    return (
      <div class="problem" role="alert" data-status="404" data-code="not_found" data-testid="no-channel">
        <strong>No channel “{props.id}”</strong>
        <p>It does not exist, or you are not allowed to see it (VIEW_CHANNEL). Pick a channel from the list.</p>
      </div>
    );
  }
  if (!state) return loader.error ? <ProblemBox error={loader.error} names={c.names} /> : <p class="loading">Loading…</p>;
  return (
    <div>
      <ChannelSettings
        key={state.etag}
        state={state}
        attachments={attachmentCount}
        onChanged={async () => {
          await load();
          await props.onChanged();
        }}
        onDeleted={props.onChanged}
        channels={props.channels}
        stale={stale}
        onStale={setStale}
      />
      <MatrixAsOf
        channel={state.channel}
        live={() => (
          <Matrix
            key={state.owEtag}
            state={state}
            onReload={async () => {
              await load();
              await props.onChanged();
            }}
            channels={props.channels}
            stale={stale}
            onStale={setStale}
          />
        )}
      />
      <Attachments channel={state.channel} mine={state.mine} onCount={setAttachmentCount} />
      <WhoHasAccess key={state.channel.id} channelID={state.channel.id} label={channelLabel(state.channel)} />
    </div>
  );
}

/** Whether an error is a 403 (what the caller may do changed since it was computed). */
function refused(e: unknown): boolean {
  return e instanceof ApiError && e.status === 403;
}

/** Moves the focus to an element once the page is drawn again (after a save, the form is new). */
function focusSoon(id: string): void {
  window.setTimeout(() => document.getElementById(id)?.focus(), 0);
}

/** What the list says of a channel that its page shows. */
function versionOf(ch: Channel): string {
  return [ch.updated_at, ch.parent_id, ch.position, ch.synced, ch.name, ch.topic].join("|");
}

/** The value of a settled promise, or its reason thrown. */
function settled<T>(r: PromiseSettledResult<T>): T {
  if (r.status === "rejected") throw r.reason;
  return r.value;
}

interface StaleProps {
  stale: unknown;
  onStale: (e: unknown) => void;
}

/** The category of a channel as the list names it ("Staff"), or its ID when it is hidden. */
function categoryName(channels: readonly Channel[], id: string): string {
  return channels.find((x) => x.id === id)?.name ?? id;
}

/** Says whether a channel in a category is synced with it (its overwrites are the category's). */
function SyncBadge(props: { channel: Channel; channels: readonly Channel[] }): JSX.Element | null {
  const { channel } = props;
  if (!channel.parent_id) return null;
  const cat = categoryName(props.channels, channel.parent_id);
  return channel.synced ? (
    <span class="badge" data-testid="synced" data-synced="true" title="Its permission overwrites are the category's: an edit of the category's reaches it">
      synced with {cat}
    </span>
  ) : (
    <span class="badge warn" data-testid="synced" data-synced="false" title="Its permission overwrites differ from the category's">
      not synced with {cat}
    </span>
  );
}

function ChannelSettings(
  props: { state: Loaded; attachments: number; onChanged: () => Promise<unknown>; onDeleted: () => Promise<unknown>; channels: Channel[] } & StaleProps,
): JSX.Element {
  const c = useConsole();
  const { channel, etag, mine } = props.state;
  const [name, setName] = useState(channel.name);
  const [topic, setTopic] = useState(channel.topic ?? "");
  const [parent, setParent] = useState(channel.parent_id ?? "");
  const [confirm, setConfirm] = useState(false);
  const act = useAction();
  const reason = needIn(c.access, mine, "MANAGE_CHANNELS");
  const category = channel.kind === "category";
  const categories = props.channels.filter((x) => x.kind === "category");
  const dirty = name !== channel.name || topic !== (channel.topic ?? "") || parent !== (channel.parent_id ?? "");
  const after = async (err: unknown) => {
    if (err === null || isStale(err)) {
      props.onStale(isStale(err) ? err : null);
      await props.onChanged();
      // The form is drawn anew for the saved state: keep the keyboard here, not on <body>.
      if (err === null) focusSoon("settings-h");
    } else if (refused(err)) {
      // What I may do in this channel changed: recompute it, so that the
      // controls disable themselves with the reason (the refusal stays shown).
      await props.onChanged();
    }
  };
  const save = async (e: Event) => {
    e.preventDefault();
    const body: { name?: string; topic?: string | null; parent_id?: string | null } = {};
    if (name !== channel.name) body.name = name;
    if (topic !== (channel.topic ?? "")) body.topic = topic === "" ? null : topic;
    // A move into a category puts the channel last among its channels.
    if (parent !== (channel.parent_id ?? "")) body.parent_id = parent === "" ? null : parent;
    const err = await act.run(async () => {
      await ok(
        c.api.PATCH("/channels/{channelID}", {
          params: { path: { channelID: channel.id }, header: ifMatch(etag) },
          body,
          headers: mergePatch,
        }),
      );
    });
    await after(err);
  };
  // Replaces the channel's overwrites with its category's.
  const syncReason = reason ?? need(c.access, "MANAGE_ROLES");
  const [confirmSync, setConfirmSync] = useState(false);
  const sync = async () => {
    setConfirmSync(false);
    const err = await act.run(async () => {
      await ok(
        c.api.PATCH("/channels/{channelID}", {
          params: { path: { channelID: channel.id }, header: ifMatch(etag) },
          body: { lock_permissions: true },
          headers: mergePatch,
        }),
      );
    });
    await after(err);
  };
  const del = async () => {
    setConfirm(false);
    const err = await act.run(async () => {
      await done(c.api.POST("/channels/{channelID}/delete", { params: { path: { channelID: channel.id }, header: ifMatch(etag) } }));
    });
    if (err === null) {
      location.hash = "#/channels";
      await props.onDeleted();
    } else if (isStale(err)) {
      props.onStale(err);
      await props.onChanged();
    }
  };
  const overwrites = props.state.overwrites.length;
  const children = props.channels.filter((x) => x.parent_id === channel.id).length;
  return (
    <section class="card" aria-labelledby="settings-h">
      <h2 id="settings-h" tabIndex={-1}>
        {category ? channel.name : `#${channel.name}`} <span class="muted">{channel.id}</span>
        {category && <span class="badge">category</span>}
        <SyncBadge channel={channel} channels={props.channels} />
      </h2>
      <ReadOnly reason={reason} what={`rename, edit or delete this ${category ? "category" : "channel"}`} />
      <form onSubmit={save}>
        <fieldset disabled={reason !== null}>
          <label>
            Name <input name="name" value={name} required maxLength={100} onInput={(e) => setName(e.currentTarget.value)} />
          </label>
          <label>
            Topic <textarea name="topic" rows={2} maxLength={1024} value={topic} onInput={(e) => setTopic(e.currentTarget.value)} />
          </label>
          {!category && (
            <label>
              Category{" "}
              <select name="parent" value={parent} onChange={(e) => setParent(e.currentTarget.value)}>
                <option value="">none</option>
                {channel.parent_id && !categories.some((x) => x.id === channel.parent_id) && <option value={channel.parent_id}>{channel.parent_id}</option>}
                {categories.map((x) => (
                  <option key={x.id} value={x.id}>
                    {x.name}
                  </option>
                ))}
              </select>
            </label>
          )}
          <div class="row wrap">
            <Btn type="submit" kind="primary" reason={reason ?? (dirty ? null : "nothing changed")} busy={act.busy}>
              Save
            </Btn>
            {channel.parent_id && !channel.synced && (
              <Btn reason={syncReason} busy={act.busy} onClick={() => setConfirmSync(true)} testid="sync">
                Sync with {categoryName(props.channels, channel.parent_id)}
              </Btn>
            )}
            <Btn kind="danger" reason={reason} onClick={() => setConfirm(true)}>
              {category ? "Delete category…" : "Delete channel…"}
            </Btn>
          </div>
          {channel.parent_id && !channel.synced && !reason && <Why reason={syncReason} />}
        </fieldset>
      </form>
      {isStale(props.stale) && props.stale instanceof ApiError && props.stale.problem.instance?.startsWith(`/api/channels/${channel.id}`) && !props.stale.problem.instance.endsWith("/permissions") ? (
        <ProblemBox error={props.stale} names={c.names} onClose={() => props.onStale(null)} />
      ) : null}
      {!isStale(act.error) && <ProblemBox error={act.error} names={c.names} />}
      {confirmSync && channel.parent_id && (
        <Confirm
          title={`Sync #${channel.name} with ${categoryName(props.channels, channel.parent_id)}?`}
          confirm={`Sync with ${categoryName(props.channels, channel.parent_id)}`}
          onConfirm={() => void sync()}
          onCancel={() => setConfirmSync(false)}
        >
          <p>
            This replaces the{" "}
            <strong>
              {overwrites} permission overwrite{overwrites === 1 ? "" : "s"}
            </strong>{" "}
            of #{channel.name} with a copy of the category {categoryName(props.channels, channel.parent_id)}'s. Its own are lost; an edit of the category's
            will reach it from then on.
          </p>
        </Confirm>
      )}
      {confirm && (
        <Confirm
          title={`Delete ${category ? channel.name : `#${channel.name}`}?`}
          confirm={category ? "Delete category" : "Delete channel"}
          onConfirm={() => void del()}
          onCancel={() => setConfirm(false)}
        >
          <p>
            This deletes the {category ? "category" : "channel"} <strong>{category ? channel.name : `#${channel.name}`}</strong> ({channel.id}) for everyone,
            together with its{" "}
            <strong>
              {overwrites} permission overwrite{overwrites === 1 ? "" : "s"}
            </strong>{" "}
            and its{" "}
            <strong>
              {props.attachments} attachment{props.attachments === 1 ? "" : "s"}
            </strong>{" "}
            (their files too). It cannot be undone.
            {category && children > 0 && (
              <>
                {" "}
                Its {children} channel{children === 1 ? "" : "s"} stay, with their overwrites, outside any category.
              </>
            )}
          </p>
        </Confirm>
      )}
    </section>
  );
}

type RowKey = string; // "everyone", "role:<id>", "user:<id>"

function keyOf(o: Pick<Overwrite, "target_type" | "target_id">): RowKey {
  return o.target_type === "everyone" ? "everyone" : `${o.target_type}:${o.target_id ?? ""}`;
}

function Matrix(props: { state: Loaded; onReload: () => Promise<unknown>; channels: Channel[] } & StaleProps): JSX.Element {
  const c = useConsole();
  const { channel, mine } = props.state;
  const cols = channelScoped(c.catalog);
  const saved = new Map(props.state.overwrites.map((o) => [keyOf(o), o]));
  const [rows, setRows] = useState<RowKey[]>(() => {
    const keys = props.state.overwrites.map(keyOf);
    return keys.includes("everyone") ? keys : ["everyone", ...keys];
  });
  const [edits, setEdits] = useState(new Map<RowKey, Map<Permission, Tri>>());
  const [etag, setEtag] = useState(props.state.owEtag);
  const act = useAction();
  const reason = needIn(c.access, mine, "MANAGE_ROLES");
  const stale = isStale(props.stale) && props.stale instanceof ApiError && props.stale.problem.instance?.endsWith("/permissions") ? props.stale : null;

  const valueOf = (k: RowKey, p: Permission): Tri => {
    const e = edits.get(k)?.get(p);
    if (e) return e;
    const o = saved.get(k);
    if (o?.allow.includes(p)) return "allow";
    if (o?.deny.includes(p)) return "deny";
    return "inherit";
  };
  const savedOf = (k: RowKey, p: Permission): Tri => {
    const o = saved.get(k);
    return o?.allow.includes(p) ? "allow" : o?.deny.includes(p) ? "deny" : "inherit";
  };
  const set = (k: RowKey, p: Permission, v: Tri) => {
    const next = new Map(edits);
    const row = new Map(next.get(k) ?? []);
    if (v === savedOf(k, p)) row.delete(p);
    else row.set(p, v);
    if (row.size) next.set(k, row);
    else next.delete(k);
    setEdits(next);
  };
  const label = (k: RowKey): string => {
    if (k === "everyone") return "@everyone";
    const [t, id = ""] = k.split(/:(.*)/s);
    if (t === "role") return `role ${c.names.role(id)}`;
    const u = props.state.users.get(id);
    return `user ${u ? u.display_name || u.username : id}`;
  };

  const save = async () => {
    let tag = etag;
    const err = await act.run(async () => {
      for (const [k, row] of edits) {
        const allow: Permission[] = [];
        const deny: Permission[] = [];
        for (const p of cols) {
          const v = row.get(p.name) ?? savedOf(k, p.name);
          if (v === "allow") allow.push(p.name);
          if (v === "deny") deny.push(p.name);
        }
        const [t, id] = k === "everyone" ? ["everyone", undefined] : (k.split(/:(.*)/s) as [string, string]);
        const body: Overwrite = { target_type: t as Overwrite["target_type"], allow, deny, ...(id ? { target_id: id } : {}) };
        const r = await ok(c.api.POST("/channels/{channelID}/permissions", { params: { path: { channelID: channel.id }, header: ifMatch(tag) }, body }));
        tag = r.etag;
        setEtag(tag);
      }
    });
    // Saved, or changed meanwhile (412): show the fresh state; a 412 stays visible above it.
    if (err === null || isStale(err)) {
      props.onStale(isStale(err) ? err : null);
      await props.onReload();
      if (err === null) focusSoon("matrix-h");
    } else if (refused(err)) {
      // Recompute what I may do here: Save and the cells disable themselves with the reason.
      await props.onReload();
    }
  };

  const [adding, setAdding] = useState("");
  const [userQuery, setUserQuery] = useState("");
  const [found, setFound] = useState<User[]>([]);
  useEffect(() => {
    if (userQuery.length < 1) {
      setFound([]);
      return;
    }
    const t = window.setTimeout(async () => {
      try {
        const r = await ok(c.api.GET("/users", { params: { query: { q: userQuery, limit: 5 } } }));
        setFound(r.data.items);
      } catch {
        setFound([]);
      }
    }, 200);
    return () => window.clearTimeout(t);
  }, [userQuery]);
  const addRow = (k: RowKey, u?: User) => {
    if (!rows.includes(k)) setRows([...rows, k]);
    if (u) props.state.users.set(u.id, u);
    setAdding("");
    setUserQuery("");
  };
  const freeRoles = c.roles.filter((r) => !rows.includes(`role:${r.id}`));
  // A category's overwrites reach its synced channels (those the caller can see are counted).
  const category = channel.kind === "category";
  const children = category ? props.channels.filter((x) => x.parent_id === channel.id) : [];
  const synced = children.filter((x) => x.synced);
  const syncedNames = synced.map((x) => `#${x.name}`).join(", ");
  // Why some cells are greyed, in words next to the matrix (a tooltip alone reaches neither keyboard nor touch).
  const unheld = reason === null ? cols.filter((p) => grantReason(c.access, [p.name], mine) !== null).map((p) => p.name) : [];
  const cellReasons = unheld.length > 0 ? [grantReason(c.access, unheld, mine) ?? ""] : [];

  return (
    <section class="card" aria-labelledby="matrix-h">
      <h2 id="matrix-h" tabIndex={-1}>
        Permissions in {channelLabel(channel)}
      </h2>
      <p class="hint">
        Overwrites change what each target may do in this {category ? "category" : "channel"}: <span class="tri allow">✓</span> allow, <span class="tri inherit">/</span> inherit,{" "}
        <span class="tri deny">✗</span> deny. Click a cell (or focus it and press Space) to cycle.
      </p>
      {category && (
        <p class="note" data-testid="category-synced">
          {synced.length === 0
            ? `None of its ${children.length} channel${children.length === 1 ? " is" : "s are"} synced: an edit here changes this category alone.`
            : `${synced.length} of its ${children.length} channel${children.length === 1 ? " is" : "s are"} synced with it (${syncedNames}): an edit here changes ${synced.length === 1 ? "it" : "them"} too.`}
        </p>
      )}
      {channel.parent_id && channel.synced && (
        <p class="note" data-testid="synced-note">
          These overwrites are a copy of the category {categoryName(props.channels, channel.parent_id)}'s (synced): an edit of the category's changes them too. Changing
          one here unsyncs #{channel.name}.
        </p>
      )}
      <ReadOnly reason={reason} what="change this channel's permission overwrites" />
      <ProblemBox error={stale} names={c.names} onClose={() => props.onStale(null)} />
      <div class="scroll" role="region" aria-label="Overwrite matrix" tabIndex={0}>
        <table class="matrix" data-testid="matrix">
          <thead>
            <tr>
              <th scope="col">Target</th>
              {cols.map((p) => (
                <th key={p.name} scope="col" title={p.description}>
                  <span class="vert">{p.name}</span>
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {rows.map((k) => (
              <tr key={k} data-row={k}>
                <th scope="row">{label(k)}</th>
                {cols.map((p) => {
                  const v = valueOf(k, p.name);
                  const cellReason = reason ?? grantReason(c.access, [p.name], mine);
                  return (
                    <td key={p.name}>
                      <TriCell
                        value={v}
                        changed={edits.get(k)?.has(p.name) === true}
                        label={`${p.name} for ${label(k)}`}
                        reason={cellReason}
                        onChange={(nv) => set(k, p.name, nv)}
                      />
                    </td>
                  );
                })}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <div class="row wrap">
        <label>
          Add a role{" "}
          <select
            value={adding}
            disabled={reason !== null}
            name="add-role"
            onChange={(e) => {
              const v = e.currentTarget.value;
              if (v) addRow(`role:${v}`);
            }}
          >
            <option value="">choose…</option>
            {freeRoles.map((r) => (
              <option key={r.id} value={r.id}>
                {r.name}
              </option>
            ))}
          </select>
        </label>
        <label class="usersearch">
          or a user{" "}
          <input name="add-user" value={userQuery} disabled={reason !== null} placeholder="username" onInput={(e) => setUserQuery(e.currentTarget.value)} />
          {found.length > 0 && (
            <ul class="suggest">
              {found.map((u) => (
                <li key={u.id}>
                  <button type="button" class="btn plain small" onClick={() => addRow(`user:${u.id}`, u)}>
                    {u.display_name || u.username} (@{u.username})
                  </button>
                </li>
              ))}
            </ul>
          )}
        </label>
      </div>
      <div class="row">
        <Btn kind="primary" reason={reason ?? (edits.size === 0 ? "nothing changed" : null)} busy={act.busy} onClick={() => void save()} testid="matrix-save">
          Save {edits.size > 0 ? `${edits.size} row${edits.size === 1 ? "" : "s"}` : ""}
        </Btn>
        <Btn reason={edits.size === 0 ? "nothing changed" : null} onClick={() => setEdits(new Map())}>
          Discard changes
        </Btn>
        <Why reason={reason} />
      </div>
      {reason === null && cellReasons.length > 0 && (
        <p class="why" data-testid="cells-why">
          Some cells are disabled: {cellReasons.join("; ")}.
        </p>
      )}
      {edits.size > 0 && synced.length > 0 && (
        <p class="warn" role="status" data-testid="sync-warning">
          Saving also changes {synced.length} synced channel{synced.length === 1 ? "" : "s"}: {syncedNames}.
        </p>
      )}
      {edits.size > 0 && channel.parent_id && channel.synced && (
        <p class="warn" role="status" data-testid="sync-warning">
          Saving unsyncs #{channel.name} from {categoryName(props.channels, channel.parent_id)}.
        </p>
      )}
      {!isStale(act.error) && <ProblemBox error={act.error} names={c.names} />}
    </section>
  );
}
