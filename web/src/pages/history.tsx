// History in the console: an "as of" date and time, and the overwrite
// matrix of a channel as it was then, read-only (GET
// /channels/{id}/permissions?at=). Needs VIEW_AUDIT_LOG, like every
// history answer; an instant the server cannot answer (in the future,
// before the oldest event kept) comes back as its 400, shown as such.
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import { need } from "../access";
import { ok, type Channel, type Overwrite } from "../api";
import { channelLabel, channelScoped, useConsole } from "../state";
import { Btn, ProblemBox, useAction, Why } from "../ui";

/** The instant a datetime-local value names, in RFC 3339 (UTC); "" for none. */
export function instantOf(local: string): string {
  if (!local) return "";
  const t = new Date(local);
  return Number.isNaN(t.getTime()) ? "" : t.toISOString();
}

/** A datetime-local value for an instant, in the browser's time zone. */
function localOf(d: Date): string {
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/**
 * An "as of" date and time: empty means now ("Now", shown once an instant
 * is picked, empties it). `value` is a datetime-local value; the caller
 * turns it into an instant with instantOf. Disabled, with the reason,
 * without VIEW_AUDIT_LOG.
 */
export function AsOf(props: { name: string; value: string; onChange: (v: string) => void }): JSX.Element {
  const c = useConsole();
  const reason = need(c.access, "VIEW_AUDIT_LOG");
  return (
    <span class="asof">
      <label>
        As of{" "}
        <input
          type="datetime-local"
          step="1"
          name={props.name}
          value={props.value}
          max={localOf(new Date())}
          disabled={reason !== null}
          onInput={(e) => props.onChange(e.currentTarget.value)}
        />
      </label>{" "}
      {props.value && (
        <Btn kind="plain" onClick={() => props.onChange("")} testid={`${props.name}-now`}>
          Now
        </Btn>
      )}
      <Why reason={reason} />
    </span>
  );
}

/**
 * A channel's overwrite matrix with an "as of" picker: now, the live
 * matrix (`live`); at an instant, the overwrites as they were, read-only.
 */
export function MatrixAsOf(props: { channel: Channel; live: () => JSX.Element }): JSX.Element {
  const [at, setAt] = useState("");
  return (
    <div data-testid="matrix-asof">
      <div class="row wrap asof-bar">
        <AsOf name="matrix-at" value={at} onChange={setAt} />
      </div>
      {at ? <PastMatrix key={at} channel={props.channel} at={instantOf(at)} /> : props.live()}
    </div>
  );
}

function PastMatrix(props: { channel: Channel; at: string }): JSX.Element {
  const c = useConsole();
  const [items, setItems] = useState<Overwrite[] | null>(null);
  const act = useAction();
  const cols = channelScoped(c.catalog);
  useEffect(() => {
    if (!props.at) return;
    void act.run(async () => {
      const r = await ok(c.api.GET("/channels/{channelID}/permissions", { params: { path: { channelID: props.channel.id }, query: { at: props.at } } }));
      setItems(r.data.items);
    });
  }, [props.at]);
  const label = (o: Overwrite): string =>
    o.target_type === "everyone" ? "@everyone" : o.target_type === "role" ? `role ${c.names.role(o.target_id ?? "")}` : `user ${o.target_id ?? ""}`;
  return (
    <section class="card" aria-labelledby="matrix-past-h">
      <h2 id="matrix-past-h">
        Permissions in {channelLabel(props.channel)} as of {props.at ? new Date(props.at).toLocaleString() : "…"}
      </h2>
      <p class="hint">As they were then, from the audit log: read-only. Choose “Now” to edit them.</p>
      <ProblemBox error={act.error} names={c.names} />
      {items !== null && (
        <div class="scroll" role="region" aria-label="Overwrite matrix as of then" tabIndex={0}>
          <table class="matrix" data-testid="matrix-history" data-at={props.at}>
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
              {items.length === 0 && (
                <tr>
                  <td colSpan={cols.length + 1} class="muted">
                    No overwrites then.
                  </td>
                </tr>
              )}
              {items.map((o) => {
                const key = o.target_type === "everyone" ? "everyone" : `${o.target_type}:${o.target_id ?? ""}`;
                return (
                  <tr key={key} data-row={key}>
                    <th scope="row">{label(o)}</th>
                    {cols.map((p) => {
                      const v = o.allow.includes(p.name) ? "allow" : o.deny.includes(p.name) ? "deny" : "inherit";
                      return (
                        <td key={p.name}>
                          <span class={`tri ${v}`} data-value={v} aria-label={`${p.name} for ${label(o)}: ${v}`}>
                            {v === "allow" ? "✓" : v === "deny" ? "✗" : "/"}
                          </span>
                        </td>
                      );
                    })}
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
