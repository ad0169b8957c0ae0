// View as roles: what a member holding @everyone and exactly the roles picked
// could see and do, channel by channel in tree order, with "Why?" for every
// cell. POST /permissions/preview without explain names the channels; their
// explanations come a page of channels at a time, as the server asks.
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import { need, roleReason } from "../access";
import { ApiError, ok, type Api, type Channel, type Explanation, type Permission, type Schemas } from "../api";
import { channelLabel, channelScoped, listChannels, useConsole } from "../state";
import { Btn, ProblemBox, ReadOnly, useAction, Why } from "../ui";
import { stepWords } from "./permissions";

type Preview = Schemas["PermissionPreview"];

/** The most channels the server explains in one request. */
const pageSize = 50;

interface Result {
  roles: string[];
  /** Every channel the preview covers, without explanations: the pages' rows. */
  all: Preview;
  page: number;
  /** The page's channels, with their explanations. */
  preview: Preview;
  channels: Channel[];
}

function pageIDs(all: Preview, page: number): string[] {
  return all.channels.slice(page * pageSize, (page + 1) * pageSize).map((x) => x.channel_id);
}

/**
 * The preview of ids with explanations, asked for in pages of at most
 * pageSize channels. The server also refuses explanations longer than it
 * answers at once (a 400 at body.channel_ids, with many roles and
 * overwrites): the page is then halved, and the rest asked for in pages of
 * the size that fits, as one channel always does.
 */
async function explained(api: Api, roles: string[], ids: string[]): Promise<Preview> {
  const pages: Preview[] = [];
  let size = pageSize;
  for (let at = 0; at < ids.length || pages.length === 0; ) {
    const chunk = ids.slice(at, at + size);
    try {
      pages.push((await ok(api.POST("/permissions/preview", { body: { roles, channel_ids: chunk, explain: true } }))).data);
    } catch (e) {
      const tooLong = e instanceof ApiError && e.status === 400 && (e.problem.errors ?? []).some((x) => x.location === "body.channel_ids");
      if (!tooLong || chunk.length < 2) throw e;
      size = Math.ceil(chunk.length / 2);
      continue;
    }
    at += chunk.length;
  }
  const [first] = pages as [Preview, ...Preview[]];
  return { ...first, channels: pages.flatMap((p) => p.channels) };
}

/** A cell: the channel (or null for the base permissions) and the permission. */
interface Cell {
  channel: string | null;
  permission: Permission;
}

export function PreviewPage(): JSX.Element {
  const c = useConsole();
  const reason = need(c.access, "MANAGE_ROLES");
  const [picked, setPicked] = useState<ReadonlySet<string>>(new Set());
  const [result, setResult] = useState<Result | null>(null);
  const [cell, setCell] = useState<Cell | null>(null);
  const act = useAction();
  const roles = c.roles.filter((r) => picked.has(r.id)).map((r) => r.id);
  const show = async (e: Event) => {
    e.preventDefault();
    await act.run(async () => {
      const [all, channels] = await Promise.all([ok(c.api.POST("/permissions/preview", { body: { roles } })), listChannels(c)]);
      const preview = await explained(c.api, roles, pageIDs(all.data, 0));
      setResult({ roles, all: all.data, page: 0, preview, channels });
      setCell(null);
    });
  };
  const turn = async (page: number) => {
    if (!result) return;
    await act.run(async () => {
      const preview = await explained(c.api, result.roles, pageIDs(result.all, page));
      setResult({ ...result, page, preview });
      setCell(null);
    });
  };
  // Roles deleted meanwhile leave the selection.
  useEffect(() => {
    setPicked((cur) => new Set([...cur].filter((id) => c.roles.some((r) => r.id === id))));
  }, [c.roles]);
  return (
    <div class="stack">
      <section class="card" aria-labelledby="preview-h">
        <h2 id="preview-h">View as roles</h2>
        <p class="hint">
          Pick roles to see what a member with @everyone and exactly those roles could see and do in each channel (before any overwrite of their own).
          Select a cell to see why.
        </p>
        <ReadOnly reason={reason} what="preview roles" />
        <form onSubmit={show}>
          <fieldset disabled={reason !== null}>
            <legend class="visually-hidden">Roles</legend>
            <ul class="checks" data-testid="preview-roles">
              {c.roles.map((r) => {
                const why = reason ? null : roleReason(c.access, r);
                return (
                  <li key={r.id}>
                    <label class={why ? "off" : ""} title={why ? `Disabled: ${why}` : undefined}>
                      <input
                        type="checkbox"
                        name={`as-${r.id}`}
                        checked={picked.has(r.id)}
                        disabled={why !== null}
                        onChange={(e) => {
                          const next = new Set(picked);
                          if (e.currentTarget.checked) next.add(r.id);
                          else next.delete(r.id);
                          setPicked(next);
                        }}
                      />
                      <span class="swatch" style={{ background: r.color ?? "transparent" }} aria-hidden="true" /> {r.name}
                      {why && <span class="why">{why}</span>}
                    </label>
                  </li>
                );
              })}
            </ul>
            <div class="row">
              <Btn type="submit" kind="primary" reason={reason} busy={act.busy}>
                {roles.length ? "Preview" : "Preview @everyone alone"}
              </Btn>
              <Why reason={reason} />
            </div>
          </fieldset>
        </form>
        <ProblemBox error={act.error} names={c.names} />
      </section>
      {result && <PreviewTable result={result} cell={cell} onCell={setCell} onPage={(n) => void turn(n)} busy={act.busy} />}
    </div>
  );
}

function PreviewTable(props: {
  result: Result;
  cell: Cell | null;
  onCell: (c: Cell | null) => void;
  onPage: (page: number) => void;
  busy: boolean;
}): JSX.Element {
  const c = useConsole();
  const { preview, channels, all, page } = props.result;
  const pages = Math.ceil(all.channels.length / pageSize);
  const cols = channelScoped(c.catalog);
  const byID = new Map(channels.map((x) => [x.id, x]));
  const as = props.result.roles.length ? props.result.roles.map(c.names.role).join(", ") : "no role";
  const globalOnly = c.catalog.filter((p) => !p.scopes.includes("channel") && preview.base.includes(p.name)).map((p) => p.name);
  const explainOf = (channel: string | null, p: Permission): Explanation | undefined =>
    (channel === null ? preview.base_explain : preview.channels.find((x) => x.channel_id === channel)?.explain)?.find((x) => x.permission === p);
  const labelOf = (id: string | null) => {
    if (id === null) return "base permissions";
    const ch = byID.get(id);
    return ch ? channelLabel(ch) : `#${id}`;
  };
  const row = (id: string | null, granted: readonly Permission[], name: JSX.Element) => (
    <tr key={id ?? ""} data-channel={id ?? "base"}>
      <th scope="row">{name}</th>
      {cols.map((p) => {
        const has = granted.includes(p.name);
        const on = props.cell !== null && props.cell.channel === id && props.cell.permission === p.name;
        return (
          <td key={p.name}>
            <button
              type="button"
              class={`tri ${has ? "allow" : "deny"}${on ? " picked" : ""}`}
              aria-label={`${p.name} in ${labelOf(id)}: ${has ? "granted" : "not granted"}. Why?`}
              aria-pressed={on ? "true" : "false"}
              data-cell={`${id ?? "base"}/${p.name}`}
              data-value={has ? "allow" : "deny"}
              onClick={() => props.onCell(on ? null : { channel: id, permission: p.name })}
            >
              {has ? "✓" : "✗"}
            </button>
          </td>
        );
      })}
    </tr>
  );
  const cell = props.cell;
  const why = cell ? explainOf(cell.channel, cell.permission) : undefined;
  const cellChannel = cell?.channel ? (byID.get(cell.channel) ?? { id: cell.channel }) : null;
  return (
    <section class="card" aria-labelledby="preview-result-h">
      <h2 id="preview-result-h">As @everyone + {as}</h2>
      <p class="hint" data-testid="preview-global">
        {globalOnly.length ? `Beyond channels: ${globalOnly.join(", ")}.` : "No permission beyond channels (such as MANAGE_USERS)."}
      </p>
      <div class="scroll" role="region" aria-label="Permissions channel by channel" tabIndex={0}>
        <table class="matrix preview" data-testid="preview">
          <thead>
            <tr>
              <th scope="col">Channel</th>
              {cols.map((p) => (
                <th key={p.name} scope="col" title={p.description}>
                  <span class="vert">{p.name}</span>
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {row(null, preview.base, <em>Base</em>)}
            {preview.channels.map((x) => {
              const ch = byID.get(x.channel_id);
              return row(
                x.channel_id,
                x.permissions,
                <span class={ch?.parent_id ? "child" : ""}>{ch ? channelLabel(ch) : `#${x.channel_id}`}</span>,
              );
            })}
          </tbody>
        </table>
      </div>
      {preview.channels.length === 0 && <p class="muted">No channels you can see.</p>}
      {pages > 1 && (
        <div class="row" data-testid="preview-pages">
          <Btn reason={page > 0 ? null : "this is the first page"} busy={props.busy} onClick={() => props.onPage(page - 1)} testid="preview-prev">
            ← Previous
          </Btn>
          <span>
            Channels {page * pageSize + 1}–{Math.min((page + 1) * pageSize, all.channels.length)} of {all.channels.length}
          </span>
          <Btn reason={page + 1 < pages ? null : "this is the last page"} busy={props.busy} onClick={() => props.onPage(page + 1)} testid="preview-next">
            Next →
          </Btn>
        </div>
      )}
      {cell && (
        <div class="why-cell" data-testid="preview-why" role="region" aria-live="polite" aria-label="Why?">
          <h3>
            Why <code>{cell.permission}</code> is {why?.granted ? "granted" : "not granted"} in {labelOf(cell.channel)}
          </h3>
          {!why || why.steps.length === 0 ? (
            <p class="muted">Not granted by anything.</p>
          ) : (
            <ol class="steps">
              {why.steps.map((s, i) => (
                <li key={i} class={s.effect}>
                  {stepWords(c, s, cellChannel, channels)}
                </li>
              ))}
            </ol>
          )}
        </div>
      )}
    </section>
  );
}
