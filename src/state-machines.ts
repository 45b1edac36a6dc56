import { QlrError } from "./errors.ts";
import type { AttemptStatus, RunKind, RunStatus, StepStatus } from "./model.ts";

/**
 * Every state change goes through one checked `transition()` per machine, read from an
 * explicit table. The tables are the specification; docs/ARCHITECTURE.md shows the same
 * tables, and a test compares them.
 */
export type TransitionTable<S extends string> = Readonly<Record<S, readonly S[]>>;

/**
 * The rows of the outcomes every machine shares (model.ts): final, no transition leaves them.
 * Each table adds its own final status (`lost`, `skipped`) after them.
 */
const OUTCOME_ROWS = { succeeded: [], failed: [], timed_out: [], cancelled: [] } as const;

/** Ordinary run: latest-attempt semantics, retries return the run to `queued`. */
export const ORDINARY_RUN_TRANSITIONS: TransitionTable<RunStatus> = {
  queued: ["dispatching", "cancelled"],
  dispatching: ["running", "queued", "failed", "timed_out", "cancelled", "lost"],
  running: ["succeeded", "failed", "timed_out", "cancelled", "lost", "queued"],
  ...OUTCOME_ROWS,
  lost: [],
};

/**
 * Workflow run: created `running`; only the frontier (succeeded, failed) and whole-run
 * cancellation convergence (cancelled) finalize it. Step timeouts make the run `failed`.
 */
export const WORKFLOW_RUN_TRANSITIONS: TransitionTable<RunStatus> = {
  queued: [],
  dispatching: [],
  running: ["succeeded", "failed", "cancelled"],
  ...OUTCOME_ROWS,
  lost: [],
};

/**
 * StepRun. `ready → ready` is a new ready epoch (recovery of an orphaned claim, or the
 * admission of a step whose attempt never crossed the start barrier). `ready → failed` is a
 * start failure (`ready → timed_out` one reported after the attempt's deadline). `running → ready` is the step-level retry, allowed only for tasks declared
 * idempotent (checked by the caller, which knows the task).
 */
export const STEP_TRANSITIONS: TransitionTable<StepStatus> = {
  pending: ["ready", "skipped", "cancelled"],
  ready: ["ready", "running", "failed", "timed_out", "cancelled"],
  running: ["succeeded", "failed", "timed_out", "cancelled", "ready"],
  ...OUTCOME_ROWS,
  skipped: [],
};

/** RunAttempt. `lost` only on trusted evidence (or for a claim that never crossed the start barrier). */
export const ATTEMPT_TRANSITIONS: TransitionTable<AttemptStatus> = {
  claimed: ["starting", "cancelled", "lost"],
  starting: ["running", "failed", "timed_out", "lost"],
  running: ["succeeded", "failed", "timed_out", "cancelled", "lost"],
  ...OUTCOME_ROWS,
  lost: [],
};

function check<S extends string>(
  machine: string,
  table: TransitionTable<S>,
  from: S,
  to: S,
  subject: string,
): S {
  const allowed = table[from];
  if (!allowed.includes(to)) {
    throw new QlrError(
      "illegal_transition",
      `${machine} ${subject}: ${from} → ${to} is not a legal transition`,
      {
        details: [{ path: machine, message: `${from} → ${to}` }],
      },
    );
  }
  return to;
}

export function transitionRun(
  kind: RunKind,
  from: RunStatus,
  to: RunStatus,
  subject: string,
): RunStatus {
  return kind === "workflow"
    ? check("workflow run", WORKFLOW_RUN_TRANSITIONS, from, to, subject)
    : check("ordinary run", ORDINARY_RUN_TRANSITIONS, from, to, subject);
}

export function transitionStep(from: StepStatus, to: StepStatus, subject: string): StepStatus {
  return check("step run", STEP_TRANSITIONS, from, to, subject);
}

export function transitionAttempt(
  from: AttemptStatus,
  to: AttemptStatus,
  subject: string,
): AttemptStatus {
  return check("run attempt", ATTEMPT_TRANSITIONS, from, to, subject);
}

export function isLegalTransition<S extends string>(
  table: TransitionTable<S>,
  from: S,
  to: S,
): boolean {
  return table[from].includes(to);
}
