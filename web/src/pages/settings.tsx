// Settings: the community's template. Export downloads it as a .json file
// (GET /export, byte for byte); import reviews every change first (POST
// /import?dry_run=true: created, updated, deleted, before and after), then
// applies the same document in one click. Deleting what the template leaves
// out (prune) is a choice of its own. The owner alone may do either.
import type { ComponentChildren, JSX } from "preact";
import { useState } from "preact/hooks";
import { templateReason } from "../access";
import { ApiError, ifMatch, ok, type Schemas } from "../api";
import { useConsole } from "../state";
import { Btn, isStale, ProblemBox, ReadOnly, useAction, Why } from "../ui";

type Template = Schemas["Template"];
type Change = Schemas["TemplateChange"];

export function SettingsPage(): JSX.Element {
  return (
    <div class="stack">
      <Export />
      <Import />
    </div>
  );
}

function Export(): JSX.Element {
  const c = useConsole();
  const reason = templateReason(c.access);
  const act = useAction();
  const [saved, setSaved] = useState<string | null>(null);
  const download = () =>
    act.run(async () => {
      const r = await ok(c.api.GET("/export", { parseAs: "blob" }));
      const name = `guildhall-template-${new Date().toISOString().slice(0, 10)}.json`;
      const link = document.createElement("a");
      link.href = URL.createObjectURL(new Blob([r.data], { type: "application/json" }));
      link.download = name;
      document.body.append(link);
      link.click();
      link.remove();
      window.setTimeout(() => URL.revokeObjectURL(link.href), 10000);
      setSaved(name);
    });
  return (
    <section class="card" aria-labelledby="export-h">
      <h2 id="export-h">Export the template</h2>
      <p class="hint">
        The community's structure as a file: the global permissions, the roles (order, colour, permissions) and the channels and categories (order, topic,
        the @everyone and role overwrites). No users, tokens, attachments or user overwrites.
      </p>
      <ReadOnly reason={reason} />
      <div class="row wrap">
        <Btn kind="primary" reason={reason} busy={act.busy} onClick={() => void download()} testid="export">
          Download template (.json)
        </Btn>
        {saved && (
          <span class="done" role="status" data-testid="exported">
            Saved as {saved}.
          </span>
        )}
      </div>
      <ProblemBox error={act.error} names={c.names} />
    </section>
  );
}

interface Review {
  /** The document reviewed, sent again as is to apply it. */
  template: Template;
  prune: boolean;
  changes: Change[];
  /** The export's ETag when reviewed: the apply is refused (412) if the community changed since. */
  etag: string;
}

function Import(): JSX.Element {
  const c = useConsole();
  const reason = templateReason(c.access);
  const [file, setFile] = useState<{ name: string; template: Template } | null>(null);
  const [fileError, setFileError] = useState<string | null>(null);
  const [prune, setPrune] = useState(false);
  const [review, setReview] = useState<Review | null>(null);
  const [applied, setApplied] = useState<number | null>(null);
  const [stale, setStale] = useState(false);
  const act = useAction();
  const choose = async (f: File | undefined) => {
    setReview(null);
    setApplied(null);
    setStale(false);
    setFile(null);
    setFileError(null);
    act.setError(null);
    if (!f) return;
    try {
      const doc: unknown = JSON.parse(await f.text());
      if (typeof doc !== "object" || doc === null || Array.isArray(doc)) throw new Error("it is not a JSON object");
      // The server checks the rest, and says where a template is wrong.
      setFile({ name: f.name, template: doc as Template });
    } catch (e) {
      setFileError(`${f.name} is not a template: ${e instanceof Error ? e.message : String(e)}`);
    }
  };
  // Both the review (the dry run) and the apply name the community they were
  // made against (the export's ETag), so a change made meanwhile is a 412, not
  // an apply of something nobody reviewed; the server insists when pruning.
  const send = (template: Template, dryRun: boolean, pruning: boolean, etag: string) =>
    ok(
      c.api.POST("/import", {
        params: { query: { ...(dryRun ? { dry_run: true } : {}), ...(pruning ? { prune: true } : {}) }, header: ifMatch(etag) },
        body: template,
      }),
    );
  const reviewIt = async () => {
    if (!file) return;
    setApplied(null);
    setStale(false);
    const err = await act.run(async () => {
      const current = await ok(c.api.GET("/export", { parseAs: "blob" }));
      const r = await send(file.template, true, prune, current.etag);
      setReview({ template: file.template, prune, changes: r.data.changes, etag: current.etag });
    });
    stale412(err);
  };
  /** A 412: what was reviewed is no longer what would be applied, so it must be reviewed again. */
  const stale412 = (err: unknown) => {
    if (!isStale(err)) return;
    setReview(null);
    setStale(true);
    act.setError(null);
  };
  const apply = async () => {
    if (!review) return;
    const err = await act.run(async () => {
      const r = await send(review.template, false, review.prune, review.etag);
      setApplied(r.data.changes.length);
      setReview(null);
    });
    stale412(err);
    if (err === null) await c.refresh();
  };
  const deletes = review ? review.changes.filter((x) => x.op === "delete").length : 0;
  const applyReason = reason ?? (review === null ? "review the changes first" : review.changes.length === 0 ? "nothing to change" : null);
  const counts = review ? (["create", "update", "delete"] as const).map((op) => [op, review.changes.filter((x) => x.op === op).length] as const) : [];
  return (
    <section class="card" aria-labelledby="import-h">
      <h2 id="import-h">Import a template</h2>
      <p class="hint">
        Makes the roles and channels what the template says, matched by ID: what is missing is created, what differs is updated. Every change is listed for
        review before anything is written.
      </p>
      <ReadOnly reason={reason} />
      <fieldset disabled={reason !== null}>
        <label>
          Template file{" "}
          <input type="file" name="template-file" accept="application/json,.json" onChange={(e) => void choose(e.currentTarget.files?.[0])} />
        </label>
        {fileError && (
          <p class="problem" role="alert" data-testid="template-bad">
            <strong>{fileError}</strong>
          </p>
        )}
        <label class="prune">
          <input
            type="checkbox"
            name="prune"
            checked={prune}
            onChange={(e) => {
              setPrune(e.currentTarget.checked);
              setReview(null);
            }}
          />
          <span>
            <strong>Also delete what the template leaves out</strong> (prune): roles, channels, categories and @everyone and role overwrites that are not in
            it are <strong>deleted</strong>. Unticked, they are left as they are.
          </span>
        </label>
        <div class="row wrap">
          <Btn reason={reason ?? (file ? null : "choose a template file first")} busy={act.busy} onClick={() => void reviewIt()} testid="review">
            Review changes
          </Btn>
          <Btn
            kind={deletes > 0 ? "danger" : "primary"}
            reason={applyReason}
            busy={act.busy}
            onClick={() => void apply()}
            testid="apply"
          >
            {review && review.changes.length > 0
              ? `Apply ${review.changes.length} change${review.changes.length === 1 ? "" : "s"}${deletes ? ` (${deletes} deletion${deletes === 1 ? "" : "s"})` : ""}`
              : "Apply"}
          </Btn>
        </div>
        <Why reason={reason ? null : applyReason} />
      </fieldset>
      <ProblemBox error={act.error} names={c.names} />
      {stale && (
        <p class="problem stale" role="alert" data-testid="import-stale">
          <strong>The community changed since you reviewed, so nothing was applied.</strong> Review the changes again to see what the template changes now.
        </p>
      )}
      {act.error instanceof ApiError && act.error.status === 400 && <p class="hint">Nothing was changed: the template must be fixed first.</p>}
      {applied !== null && (
        <p class="done" role="status" data-testid="applied">
          {applied === 0 ? "Nothing needed to change." : `Applied ${applied} change${applied === 1 ? "" : "s"}.`}
        </p>
      )}
      {review && (
        <div class="review-of" data-testid="import-review">
          <h3>
            {review.changes.length === 0
              ? "Nothing to change: the community already is what the template says."
              : `${review.changes.length} change${review.changes.length === 1 ? "" : "s"}: ${counts
                  .filter(([, n]) => n > 0)
                  .map(([op, n]) => `${n} to ${op}`)
                  .join(", ")}${review.prune ? "" : " (nothing is deleted without prune)"}`}
          </h3>
          {review.changes.length > 0 && (
            <div class="scroll">
              <table class="table review">
                <thead>
                  <tr>
                    <th scope="col">Change</th>
                    <th scope="col">Before</th>
                    <th scope="col">After</th>
                  </tr>
                </thead>
                <tbody>
                  {review.changes.map((x) => (
                    <ChangeRow key={`${x.op}/${x.kind}/${x.id}`} change={x} />
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </div>
      )}
    </section>
  );
}

const kindWords: Record<Change["kind"], string> = {
  role: "role",
  channel: "channel",
  overwrite: "overwrite",
  global: "global permissions",
  user_overwrite: "overwrite",
  membership: "membership",
  timeout: "timeout",
};

/** An overwrite's ID ("ops/role:mods", "ops/everyone") in words. */
function overwriteWords(id: string): string {
  const slash = id.indexOf("/");
  const target = id.slice(slash + 1);
  return `#${id.slice(0, slash)}: ${target === "everyone" ? "@everyone" : target.replace(/^role:/, "role ").replace(/^user:/, "user ")}`;
}

/** One change of an import or a revert, as a row of a table of changes. */
export function ChangeRow(props: { change: Change }): JSX.Element {
  const x = props.change;
  const before = x.before ?? {};
  const after = x.after ?? {};
  // The fields that differ (an update), or all of them (a creation or deletion); the ID is in the first column.
  const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].filter(
    (k) =>
      k !== "id" &&
      // An overwrite's target is in its ID, shown in words in the first column.
      !((x.kind === "overwrite" || x.kind === "user_overwrite") && (k === "target_type" || k === "target_id")) &&
      (x.op !== "update" || JSON.stringify(before[k]) !== JSON.stringify(after[k])),
  );
  const what = x.kind === "overwrite" || x.kind === "user_overwrite" ? overwriteWords(x.id) : x.kind === "global" ? "" : x.id;
  return (
    <tr class={`op-${x.op}`} data-op={x.op} data-kind={x.kind} data-id={x.id}>
      <th scope="row">
        <span class={`op ${x.op}`}>{x.op}</span> {kindWords[x.kind]} <code>{what}</code>
      </th>
      <td>{x.op === "create" ? <span class="muted">—</span> : <Fields keys={keys} of={before} other={x.op === "update" ? after : null} mark="removed" />}</td>
      <td>{x.op === "delete" ? <span class="muted">deleted</span> : <Fields keys={keys} of={after} other={x.op === "update" ? before : null} mark="added" />}</td>
    </tr>
  );
}

/** Some fields of an element; a list of names changed by an update shows what it gains or loses. */
function Fields(props: { keys: string[]; of: Record<string, unknown>; other: Record<string, unknown> | null; mark: "added" | "removed" }): JSX.Element {
  return (
    <dl class="fields">
      {props.keys.map((k) => (
        <div key={k} data-field={k}>
          <dt>{k}</dt>
          <dd>{value(props.of[k], props.other ? props.other[k] : undefined, props.mark)}</dd>
        </div>
      ))}
    </dl>
  );
}

function names(v: unknown): string[] | null {
  return Array.isArray(v) && v.every((x) => typeof x === "string") ? (v as string[]) : null;
}

function value(v: unknown, other: unknown, mark: "added" | "removed"): ComponentChildren {
  if (v === undefined || v === null) return <span class="muted">none</span>;
  const list = names(v);
  if (list) {
    const o = names(other);
    if (list.length === 0) return <span class="muted">none</span>;
    return list.map((n, i) => (
      <span key={n} class={o && !o.includes(n) ? mark : ""}>
        {i > 0 && ", "}
        {n}
      </span>
    ));
  }
  if (Array.isArray(v)) {
    if (v.length === 0) return <span class="muted">none</span>;
    return (
      <ul class="plain">
        {v.map((x, i) => (
          <li key={i}>{flat(x)}</li>
        ))}
      </ul>
    );
  }
  return flat(v);
}

/** A value on one line: an overwrite reads "@everyone: allow VIEW_CHANNEL; deny none". */
function flat(v: unknown): string {
  if (v === null || v === undefined) return "none";
  if (typeof v !== "object") return String(v);
  if (Array.isArray(v)) return v.map(flat).join(", ") || "none";
  const o = v as Record<string, unknown>;
  if (typeof o.target_type === "string") {
    const who = o.target_type === "everyone" ? "@everyone" : `${o.target_type} ${String(o.target_id ?? "")}`;
    return `${who}: allow ${flat(o.allow)}; deny ${flat(o.deny)}`;
  }
  return Object.entries(o)
    .map(([k, x]) => `${k}: ${flat(x)}`)
    .join("; ");
}
