// "Revert…" on an audit entry: asks the server what setting the entry's
// subject back would change (POST /audit-log/{seq}/revert?dry_run=true),
// shows that list in a dialog, and makes those changes only when confirmed.
// A later change in the way (409) reads as what to do about it, naming the
// entry that stands in the way; a refusal (403) says what is missing.
import type { JSX } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, ok, type AuditEvent, type Schemas } from "../api";
import { useConsole } from "../state";
import { Btn, ProblemBox, useAction } from "../ui";
import { ChangeRow } from "./settings";

type Change = Schemas["TemplateChange"];

/** The event types a revert sets back (the contract's revertAuditLogEntry). */
export const revertible: ReadonlySet<string> = new Set([
  "channel.overwrite.set",
  "channel.overwrite.removed",
  "role.permissions.set",
  "global.permissions.set",
  "user.role.assigned",
  "user.role.removed",
  "role.updated",
  "role.renamed",
  "role.moved",
  "channel.updated",
  "channel.renamed",
  "channel.moved",
  "user.timeout",
]);

/** The seq of the later entry a refused revert names, if it was refused for one. */
function conflictOf(e: unknown): number | null {
  if (!(e instanceof ApiError) || e.status !== 409 || e.problem.code !== "conflict") return null;
  return e.problem.conflicting_seq ?? 0;
}

export function RevertEntry(props: { event: AuditEvent }): JSX.Element | null {
  const c = useConsole();
  const e = props.event;
  const act = useAction();
  const [review, setReview] = useState<Change[] | null>(null);
  const [done, setDone] = useState<number | null>(null);
  if (!revertible.has(e.type)) return null;
  const path = { params: { path: { seq: e.seq } } };
  const ask = () =>
    void act.run(async () => {
      setDone(null);
      const r = await ok(c.api.POST("/audit-log/{seq}/revert", { params: { path: { seq: e.seq }, query: { dry_run: true } } }));
      setReview(r.data.changes);
    });
  const apply = () =>
    void act.run(async () => {
      setReview(null);
      const r = await ok(c.api.POST("/audit-log/{seq}/revert", path));
      setDone(r.data.changes.length);
      await c.refresh();
    });
  const conflict = conflictOf(act.error);
  return (
    <div class="revert" data-testid="revert" data-seq={e.seq}>
      <Btn busy={act.busy} onClick={ask} label={`Revert entry ${e.seq}…`} testid="revert-ask">
        Revert…
      </Btn>
      {conflict !== null ? (
        <p class="problem" role="alert" data-testid="revert-conflict" data-conflicting-seq={conflict || undefined}>
          <strong>Cannot revert: this was changed again since.</strong>{" "}
          {conflict
            ? `A later entry (seq ${conflict}) changed the same thing, or removed it. Revert that entry first, or make the change by hand.`
            : "It is no longer as this entry left it; make the change by hand."}
        </p>
      ) : (
        <ProblemBox error={act.error} names={c.names} onClose={() => act.setError(null)} />
      )}
      {done !== null && (
        <p class="done" role="status" data-testid="reverted">
          {done === 0 ? "Nothing needed to change." : `Reverted: ${done} change${done === 1 ? "" : "s"} made.`}
        </p>
      )}
      {review && <RevertDialog seq={e.seq} changes={review} onConfirm={apply} onCancel={() => setReview(null)} />}
    </div>
  );
}

/** The dry run's changes, for confirmation (native <dialog>: focus trapped, Esc cancels). */
function RevertDialog(props: { seq: number; changes: Change[]; onConfirm: () => void; onCancel: () => void }): JSX.Element {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
  }, []);
  const n = props.changes.length;
  return (
    <dialog ref={ref} class="confirm wide" onCancel={props.onCancel} aria-labelledby="revert-title" data-testid="revert-review">
      <h3 id="revert-title">Revert entry {props.seq}?</h3>
      {n === 0 ? (
        <p>Nothing would change: it is already as it was before this entry.</p>
      ) : (
        <>
          <p>
            {n === 1 ? "This change would be made, recorded" : `These ${n} changes would be made, each recorded`} in the audit log as a revert of entry{" "}
            {props.seq}:
          </p>
          <div class="scroll">
            <table class="table review">
              <thead>
                <tr>
                  <th scope="col">Change</th>
                  <th scope="col">Now</th>
                  <th scope="col">After the revert</th>
                </tr>
              </thead>
              <tbody>
                {props.changes.map((x) => (
                  <ChangeRow key={`${x.op}/${x.kind}/${x.id}`} change={x} />
                ))}
              </tbody>
            </table>
          </div>
        </>
      )}
      <div class="row end">
        <button type="button" class="btn plain" onClick={props.onCancel}>
          Cancel
        </button>
        <button type="button" class="btn danger" onClick={props.onConfirm} disabled={n === 0} data-testid="revert-apply">
          {n === 0 ? "Revert" : `Revert ${n} change${n === 1 ? "" : "s"}`}
        </button>
      </div>
    </dialog>
  );
}
