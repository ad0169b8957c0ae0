// Small building blocks shared by the pages: gated buttons (disabled with the
// reason), problems in words, a confirmation dialog, a tri-state cell.
import type { ComponentChildren, JSX } from "preact";
import { useContext, useEffect, useRef, useState } from "preact/hooks";
import { ApiError, type Problem } from "./api";
import { problemWords, type Names } from "./access";
import { ConsoleContext } from "./state";

/** A button that is disabled, with the reason shown, when `reason` is set. */
export function Btn(props: {
  reason?: string | null;
  onClick?: () => void;
  kind?: "primary" | "danger" | "plain";
  type?: "button" | "submit";
  busy?: boolean;
  label?: string;
  testid?: string;
  children: ComponentChildren;
}): JSX.Element {
  const blocked = props.reason ?? null;
  return (
    <button
      type={props.type ?? "button"}
      class={`btn ${props.kind ?? "plain"}`}
      disabled={blocked !== null || props.busy === true}
      title={blocked ? `Disabled: ${blocked}` : undefined}
      aria-label={props.label}
      data-reason={blocked ?? undefined}
      data-testid={props.testid}
      onClick={props.onClick}
    >
      {props.children}
    </button>
  );
}

/** A visible note next to disabled controls, saying why. */
export function Why(props: { reason: string | null | undefined }): JSX.Element | null {
  if (!props.reason) return null;
  return <span class="why">Disabled: {props.reason}</span>;
}

/** A section-wide banner for read-only views ("Read-only: you need X to do Y."; a reason that says what it refuses stands alone). */
export function ReadOnly(props: { reason: string | null | undefined; what?: string }): JSX.Element | null {
  if (!props.reason) return null;
  return (
    <p class="readonly" role="note">
      Read-only: {props.reason}
      {props.what ? ` to ${props.what}` : ""}.
    </p>
  );
}

/** A problem in words, never raw JSON. */
export function ProblemBox(props: { error: unknown; names?: Names | undefined; onClose?: () => void }): JSX.Element | null {
  const { error } = props;
  if (!error) return null;
  let p: Problem;
  if (error instanceof ApiError) p = error.problem;
  else p = { type: "about:blank", title: "Something went wrong", status: 0, detail: String(error), code: "internal", request_id: "" };
  const w = problemWords(p, props.names);
  return (
    <div class={`problem ${p.status === 412 ? "stale" : ""}`} role="alert" data-status={p.status} data-code={p.code} data-reason={p.reason}>
      <strong>{w.title}</strong>
      {w.detail && <p>{w.detail}</p>}
      {w.items.length > 0 && (
        <ul>
          {w.items.map((i) => (
            <li key={i}>{i}</li>
          ))}
        </ul>
      )}
      {props.onClose && (
        <button type="button" class="btn plain small" onClick={props.onClose}>
          Dismiss
        </button>
      )}
    </div>
  );
}

/** A modal confirmation (native <dialog>: focus trapped, Esc cancels). */
export function Confirm(props: {
  title: string;
  children: ComponentChildren;
  confirm: string;
  onConfirm: () => void;
  onCancel: () => void;
}): JSX.Element {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
  }, []);
  return (
    <dialog ref={ref} class="confirm" onCancel={props.onCancel} aria-labelledby="confirm-title">
      <h3 id="confirm-title">{props.title}</h3>
      <div>{props.children}</div>
      <div class="row end">
        <button type="button" class="btn plain" onClick={props.onCancel}>
          Cancel
        </button>
        <button type="button" class="btn danger" onClick={props.onConfirm}>
          {props.confirm}
        </button>
      </div>
    </dialog>
  );
}

export type Tri = "allow" | "inherit" | "deny";
const triNext: Record<Tri, Tri> = { inherit: "allow", allow: "deny", deny: "inherit" };
const triMark: Record<Tri, string> = { allow: "✓", inherit: "/", deny: "✗" };

/** A tri-state cell (allow / inherit / deny), cycled by click, Space or Enter. */
export function TriCell(props: { value: Tri; changed: boolean; label: string; reason: string | null; onChange: (v: Tri) => void }): JSX.Element {
  return (
    <button
      type="button"
      class={`tri ${props.value}${props.changed ? " changed" : ""}`}
      aria-label={`${props.label}: ${props.value}`}
      title={props.reason ? `Disabled: ${props.reason}` : `${props.label}: ${props.value} (click to change)`}
      disabled={props.reason !== null}
      data-value={props.value}
      onClick={() => props.onChange(triNext[props.value])}
    >
      {triMark[props.value]}
    </button>
  );
}

/** Runs an async action, tracking busy and the error. */
export function useAction(): {
  busy: boolean;
  error: unknown;
  setError: (e: unknown) => void;
  /** Runs f; resolves to its error, or null when it succeeded. */
  run: (f: () => Promise<void>) => Promise<unknown>;
} {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const shell = useContext(ConsoleContext);
  const run = async (f: () => Promise<void>): Promise<unknown> => {
    setBusy(true);
    setError(null);
    try {
      await f();
      return null;
    } catch (e) {
      setError(e);
      // A refusal means what I may do changed since it was computed: recompute
      // it, so that the controls disable themselves with the reason.
      if (e instanceof ApiError && e.status === 403) void shell?.refresh();
      return e ?? new Error("failed");
    } finally {
      setBusy(false);
    }
  };
  return { busy, error, setError, run };
}

export function when(iso: string): string {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

/** Whether an error is a 412 (the resource changed meanwhile). */
export function isStale(e: unknown): boolean {
  return e instanceof ApiError && e.status === 412;
}

/**
 * On a narrow screen (one column) the details of what was just picked show
 * far below the list: scroll them into view and move the focus there (to
 * the first element matching `selector`), so that neither eyes nor keyboard
 * have to look for them. A wide screen shows them beside the list: nothing moves.
 */
export function revealDetail(selector: string): void {
  if (!window.matchMedia("(max-width: 900px)").matches) return;
  window.setTimeout(() => {
    const el = document.querySelector<HTMLElement>(selector);
    if (!el) return;
    if (!el.hasAttribute("tabindex")) el.tabIndex = -1;
    el.focus({ preventScroll: true });
    el.scrollIntoView({ block: "start" });
  }, 0);
}
