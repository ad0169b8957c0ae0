// Channels: list, create, rename, topic, delete; per channel the overwrite
// matrix (If-Match on save; a change made meanwhile is shown, not
// overwritten) and its attachments.
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import { grantReason, need, needIn, type ChannelAccess } from "../access";
import {
  allPages,
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
import { channelScoped, useConsole } from "../state";
import { Btn, Confirm, isStale, ProblemBox, ReadOnly, TriCell, useAction, Why, type Tri } from "../ui";
import { Attachments } from "./attachments";

const idPattern = /^[a-z0-9][a-z0-9_-]{0,63}$/;

export function ChannelsPage(props: { selected: string }): JSX.Element {
  const c = useConsole();
  const [channels, setChannels] = useState<Channel[] | null>(null);
  const list = useAction();
  const reload = () => list.run(async () => setChannels(await allPages((cursor) => c.api.GET("/channels", { params: { query: { limit: 200, ...(cursor ? { cursor } : {}) } } }))));
  useEffect(() => {
    void reload();
    return c.onEvent((e) => {
      if (e.type === "channel.created" || e.type === "channel.deleted" || e.type === "channel.renamed" || e.type === "channel.updated") void reload();
    });
  }, []);
  const createReason = need(c.access, "MANAGE_CHANNELS");
  return (
    <div class="split">
      <section class="list" aria-labelledby="channels-h">
        <h2 id="channels-h">Channels</h2>
        <ProblemBox error={list.error} names={c.names} />
        {channels === null ? (
          <p class="loading">Loading…</p>
        ) : channels.length === 0 ? (
          <p class="muted">No channels you can see.</p>
        ) : (
          <ul class="items" data-testid="channel-list">
            {channels.map((ch) => (
              <li key={ch.id}>
                <a href={`#/channels/${encodeURIComponent(ch.id)}`} aria-current={props.selected === ch.id ? "true" : undefined}>
                  <strong>#{ch.name}</strong> <span class="muted">{ch.id}</span>
                  {ch.topic && <span class="sub">{ch.topic}</span>}
                </a>
              </li>
            ))}
          </ul>
        )}
        <CreateChannel reason={createReason} onCreated={(id) => (location.hash = `#/channels/${encodeURIComponent(id)}`)} />
      </section>
      <section class="detail">
        {props.selected ? <ChannelDetail key={props.selected} id={props.selected} /> : <p class="muted">Pick a channel to see its settings, permissions and attachments.</p>}
      </section>
    </div>
  );
}

function CreateChannel(props: { reason: string | null; onCreated: (id: string) => void }): JSX.Element {
  const c = useConsole();
  const [id, setID] = useState("");
  const [name, setName] = useState("");
  const [topic, setTopic] = useState("");
  const act = useAction();
  const submit = async (e: Event) => {
    e.preventDefault();
    const err = await act.run(async () => {
      await ok(
        c.api.POST("/channels/{channelID}/create", {
          params: { path: { channelID: id } },
          body: { name, ...(topic ? { topic } : {}) },
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
      <h3 id="new-channel-h">New channel</h3>
      <ReadOnly reason={props.reason} what="create channels" />
      <fieldset disabled={props.reason !== null}>
        <label>
          ID <input name="channel-id" value={id} required pattern="[a-z0-9][a-z0-9_\-]{0,63}" placeholder="ops" onInput={(e) => setID(e.currentTarget.value)} />
        </label>
        {idBad && <span class="why">lowercase letters, digits, _ and -</span>}
        <label>
          Name <input name="channel-name" value={name} required maxLength={100} placeholder="Operations" onInput={(e) => setName(e.currentTarget.value)} />
        </label>
        <label>
          Topic <input name="channel-topic" value={topic} maxLength={1024} onInput={(e) => setTopic(e.currentTarget.value)} />
        </label>
        <Btn type="submit" kind="primary" reason={props.reason} busy={act.busy}>
          Create channel
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

function ChannelDetail(props: { id: string }): JSX.Element {
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
  useEffect(() => {
    if (!missing) void load();
  }, [props.id]);
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
      <ChannelSettings key={state.etag} state={state} attachments={attachmentCount} onChanged={load} stale={stale} onStale={setStale} />
      <Matrix key={state.owEtag} state={state} onReload={load} stale={stale} onStale={setStale} />
      <Attachments channel={state.channel} mine={state.mine} onCount={setAttachmentCount} />
    </div>
  );
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

function ChannelSettings(props: { state: Loaded; attachments: number; onChanged: () => Promise<unknown> } & StaleProps): JSX.Element {
  const c = useConsole();
  const { channel, etag, mine } = props.state;
  const [name, setName] = useState(channel.name);
  const [topic, setTopic] = useState(channel.topic ?? "");
  const [confirm, setConfirm] = useState(false);
  const act = useAction();
  const reason = needIn(c.access, mine, "MANAGE_CHANNELS");
  const dirty = name !== channel.name || topic !== (channel.topic ?? "");
  const save = async (e: Event) => {
    e.preventDefault();
    const body: { name?: string; topic?: string | null } = {};
    if (name !== channel.name) body.name = name;
    if (topic !== (channel.topic ?? "")) body.topic = topic === "" ? null : topic;
    const err = await act.run(async () => {
      await ok(
        c.api.PATCH("/channels/{channelID}", {
          params: { path: { channelID: channel.id }, header: ifMatch(etag) },
          body,
          headers: mergePatch,
        }),
      );
    });
    if (err === null || isStale(err)) {
      props.onStale(isStale(err) ? err : null);
      await props.onChanged();
    }
  };
  const del = async () => {
    setConfirm(false);
    const err = await act.run(async () => {
      await done(c.api.POST("/channels/{channelID}/delete", { params: { path: { channelID: channel.id }, header: ifMatch(etag) } }));
    });
    if (err === null) location.hash = "#/channels";
    else if (isStale(err)) {
      props.onStale(err);
      await props.onChanged();
    }
  };
  const overwrites = props.state.overwrites.length;
  return (
    <section class="card" aria-labelledby="settings-h">
      <h2 id="settings-h">
        #{channel.name} <span class="muted">{channel.id}</span>
      </h2>
      <ReadOnly reason={reason} what="rename, edit or delete this channel" />
      <form onSubmit={save}>
        <fieldset disabled={reason !== null}>
          <label>
            Name <input name="name" value={name} required maxLength={100} onInput={(e) => setName(e.currentTarget.value)} />
          </label>
          <label>
            Topic <textarea name="topic" rows={2} maxLength={1024} value={topic} onInput={(e) => setTopic(e.currentTarget.value)} />
          </label>
          <div class="row">
            <Btn type="submit" kind="primary" reason={reason ?? (dirty ? null : "nothing changed")} busy={act.busy}>
              Save
            </Btn>
            <Btn kind="danger" reason={reason} onClick={() => setConfirm(true)}>
              Delete channel…
            </Btn>
          </div>
        </fieldset>
      </form>
      {isStale(props.stale) && props.stale instanceof ApiError && props.stale.problem.instance?.startsWith(`/api/channels/${channel.id}`) && !props.stale.problem.instance.endsWith("/permissions") ? (
        <ProblemBox error={props.stale} names={c.names} onClose={() => props.onStale(null)} />
      ) : null}
      {!isStale(act.error) && <ProblemBox error={act.error} names={c.names} />}
      {confirm && (
        <Confirm title={`Delete #${channel.name}?`} confirm="Delete channel" onConfirm={() => void del()} onCancel={() => setConfirm(false)}>
          <p>
            This deletes the channel <strong>#{channel.name}</strong> ({channel.id}) for everyone, together with its{" "}
            <strong>
              {overwrites} permission overwrite{overwrites === 1 ? "" : "s"}
            </strong>{" "}
            and its{" "}
            <strong>
              {props.attachments} attachment{props.attachments === 1 ? "" : "s"}
            </strong>{" "}
            (their files too). It cannot be undone.
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

function Matrix(props: { state: Loaded; onReload: () => Promise<unknown> } & StaleProps): JSX.Element {
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

  return (
    <section class="card" aria-labelledby="matrix-h">
      <h2 id="matrix-h">Permissions in #{channel.name}</h2>
      <p class="hint">
        Overwrites change what each target may do in this channel: <span class="tri allow">✓</span> allow, <span class="tri inherit">/</span> inherit,{" "}
        <span class="tri deny">✗</span> deny. Click a cell (or focus it and press Space) to cycle.
      </p>
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
      {!isStale(act.error) && <ProblemBox error={act.error} names={c.names} />}
    </section>
  );
}
