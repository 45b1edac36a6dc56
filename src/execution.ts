import { RunChange } from "./aggregate.ts";
import type { JsonValue } from "./canonical-json.ts";
import { QlrError } from "./errors.ts";
import type {
  AttemptStatus,
  ChangeSet,
  ProcessHandleFacts,
  Run,
  RunAttempt,
  StepRun,
  StepStatus,
  StopReason,
} from "./model.ts";
import type { RetryPolicy } from "./packages.ts";

/**
 * Execution transitions of one attempt (ADR-0227 §4, ADR-0229 §2). A workflow task attempt
 * advances only its attempt and step; the parent run stays `running` (only its version and
 * event sequence move) and is finalized by the frontier. An ordinary attempt moves its run
 * through `dispatching → running → terminal`, with retries back to `queued`.
 */

export interface AttemptScope {
  readonly run: Run;
  /** The step of a workflow attempt; null for an ordinary attempt. */
  readonly step: StepRun | null;
  readonly attempt: RunAttempt;
}

/**
 * Whether the attempt still holds what it was dispatched for, so that settling it may move its
 * step or run. A workflow attempt holds its step while the step is ready at the attempt's ready
 * epoch, or running from it (entering running bumps the step's version exactly once, and a
 * running step changes version only by settling). An ordinary attempt holds its run while it is
 * the run's latest claim. An attempt whose step or run already moved on (a new ready epoch, a
 * retry, a settled outcome) settles itself only: moving the step or run again would move the
 * current epoch's state on a stale attempt's evidence and strand the current epoch's own claim.
 */
export function holdsEpoch(scope: AttemptScope): boolean {
  const { run, step, attempt } = scope;
  if (step === null) return attempt.number === run.attemptSeq;
  const epoch = attempt.stepRunVersion;
  if (epoch === null) return false;
  return (
    (step.status === "ready" && step.version === epoch) ||
    (step.status === "running" && step.version === epoch + 1)
  );
}

function requireStep(scope: AttemptScope): StepRun | null {
  if (scope.run.kind === "workflow") {
    if (scope.step === null || scope.attempt.stepRunId !== scope.step.id)
      throw new QlrError("integrity", `attempt ${scope.attempt.id} is not bound to its step`);
    return scope.step;
  }
  return null;
}

/** Dispatch intent crosses into `starting`: the next thing is the launcher's journal and spawn. */
export function markStarting(
  scope: AttemptScope,
  nowMs: number,
  facts: { ownerNodeId?: string } = {},
): ChangeSet {
  const step = requireStep(scope);
  // ADR-0229 §2: a workflow task attempt is dispatched only while its exact ready epoch holds
  // and its parent is running; after a cancel intent no claim crosses the start barrier.
  if (scope.run.cancelRequestedAtMs !== null)
    throw new QlrError(
      "conflict",
      `run ${scope.run.id} has a cancel intent; attempt ${scope.attempt.id} is not dispatched`,
    );
  if (step !== null) {
    if (scope.run.status !== "running")
      throw new QlrError(
        "conflict",
        `run ${scope.run.id} is ${scope.run.status}; attempt ${scope.attempt.id} is not dispatched`,
      );
    if (step.status !== "ready" || step.version !== scope.attempt.stepRunVersion) {
      throw new QlrError(
        "conflict",
        `step ${step.id} is ${step.status} at version ${step.version}, not the ready epoch ${String(scope.attempt.stepRunVersion)} of attempt ${scope.attempt.id}`,
      );
    }
  }
  const change = new RunChange(scope.run, nowMs);
  change.setAttempt(scope.attempt, "starting", {
    // The dispatching node owns the attempt from here: only it can read the journal and receipt.
    ...(facts.ownerNodeId === undefined ? {} : { ownerNodeId: facts.ownerNodeId }),
  });
  return change.build();
}

/**
 * A workflow claim that may no longer start, settled (ADR-0227 §6, ADR-0229 §2): it never crossed
 * the start barrier, so it has no side effects, and it becomes `lost`. Its step is left alone:
 * the step has already moved past this claim's ready epoch (a new epoch, a settled outcome) and
 * the current epoch has, or will get, its own claim. Left `claimed`, such an attempt would never
 * be dispatched nor settled: it would hold a concurrency slot, head every dispatch page and keep
 * the frontier from finalizing the run. Null when the claim may still start, and when the run
 * has a cancel intent (whole-run cancellation convergence cancels every claim itself).
 */
export function settleStrandedClaim(scope: AttemptScope, nowMs: number): ChangeSet | null {
  const { run, attempt } = scope;
  if (attempt.status !== "claimed" || run.cancelRequestedAtMs !== null) return null;
  const current = requireStep(scope);
  // An ordinary claim has no ready epoch to outlive: its run's own status guards its dispatch.
  if (current === null) return null;
  let reason: string;
  if (run.status !== "running") reason = `its run is ${run.status}`;
  else if (current.status !== "ready") reason = `its step is ${current.status}`;
  else if (current.version !== attempt.stepRunVersion)
    reason = `its step moved to ready epoch ${current.version}`;
  else return null;
  const change = new RunChange(run, nowMs);
  change.setAttempt(
    attempt,
    "lost",
    {
      finishedAtMs: nowMs,
      error: `claim of ready epoch ${String(attempt.stepRunVersion)} may no longer start: ${reason}`,
    },
    { reason, stepRunVersion: attempt.stepRunVersion, currentStepRunVersion: current.version },
  );
  return change.build();
}

/**
 * The facts an attempt enters `running` with. The process identity is null only when a receipt
 * completes an attempt whose handle was never persisted (a crash between spawn and the running
 * transition): the identity stays unknown rather than invented.
 */
type RunningFacts = Pick<ProcessHandleFacts, "startedAtMs"> & {
  readonly pid: number | null;
  readonly processStartTicks: string | null;
  readonly bootId: string | null;
};

function enterRunning(
  change: RunChange,
  scope: AttemptScope,
  handle: RunningFacts,
  holds: boolean,
): void {
  const step = requireStep(scope);
  // startedAtMs is the launcher's pre-spawn handle fact (ADR-0229 §5), never this clock reading.
  change.setAttempt(
    scope.attempt,
    "running",
    {
      startedAtMs: handle.startedAtMs,
      deadlineAtMs: handle.startedAtMs + scope.attempt.timeoutMs,
      pid: handle.pid,
      processStartTicks: handle.processStartTicks,
      bootId: handle.bootId,
    },
    { pid: handle.pid },
  );
  if (!holds) return;
  if (step !== null) {
    const current = change.step(step);
    change.setStep(
      step,
      "running",
      { attemptCount: current.attemptCount + 1, startedAtMs: handle.startedAtMs },
      { attemptId: scope.attempt.id },
    );
  } else if (change.run.status === "dispatching") {
    change.setRunStatus("running", { attemptId: scope.attempt.id });
  }
}

export function markRunning(
  scope: AttemptScope,
  handle: ProcessHandleFacts,
  nowMs: number,
): ChangeSet {
  if (scope.attempt.status !== "starting")
    throw new QlrError(
      "illegal_transition",
      `attempt ${scope.attempt.id} is ${scope.attempt.status}, not starting`,
    );
  const change = new RunChange(scope.run, nowMs);
  enterRunning(change, scope, handle, holdsEpoch(scope));
  return change.build();
}

export interface CompletionFacts {
  readonly startedAtMs: number;
  readonly finishedAtMs: number;
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly stopReason: StopReason | null;
  readonly spawnError: string | null;
  /** Present when the attempt completed before its running transition was recorded. */
  readonly handle?: ProcessHandleFacts;
  /** The JSON result the task left at `QLR_OUTPUT`, as its completion evidence carries it; absent or null: none. */
  readonly output?: JsonValue | null;
  /** Why the task's output was refused (too large, not JSON); absent or null: no problem. */
  readonly outputError?: string | null;
}

/** An exited process always settles: its step's outcome is one a run can also end with. */
export interface OutcomeDecision {
  readonly attempt: AttemptStatus;
  readonly step: Exclude<OrdinaryOutcome, "lost">;
}

/**
 * The outcome of an exited process. The deadline is rechecked against the finish time, so a
 * process that overran is `timed_out` even if its stop request was never carried out.
 */
export function decideOutcome(attempt: RunAttempt, facts: CompletionFacts): OutcomeDecision {
  const deadlineAtMs = attempt.deadlineAtMs ?? facts.startedAtMs + attempt.timeoutMs;
  // ADR-0227 §5: the completion rechecks the deadline and converges to `timed_out` when it
  // passed, whatever the exit code; a process that overran its timeout did not succeed in time.
  if (facts.stopReason === "timeout" || facts.finishedAtMs > deadlineAtMs)
    return { attempt: "timed_out", step: "timed_out" };
  if (facts.stopReason === "cancel") return { attempt: "cancelled", step: "cancelled" };
  if (facts.stopReason === "shutdown") return { attempt: "cancelled", step: "failed" };
  // A refused output fails an attempt that otherwise succeeded: the steps that need it would
  // run without the result they depend on.
  if (facts.exitCode === 0 && facts.signal === null && (facts.outputError ?? null) === null)
    return { attempt: "succeeded", step: "succeeded" };
  return { attempt: "failed", step: "failed" };
}

/** A workflow step may be retried only for a task declared idempotent, within its budget. */
export function stepMayRetry(step: StepRun, outcome: StepStatus, retry: RetryPolicy): boolean {
  return (
    (outcome === "failed" || outcome === "timed_out") &&
    retry.idempotent &&
    step.attemptCount <= retry.max
  );
}

export function complete(
  scope: AttemptScope,
  facts: CompletionFacts,
  retry: RetryPolicy,
  nowMs: number,
): ChangeSet {
  const step = requireStep(scope);
  const holds = holdsEpoch(scope);
  const change = new RunChange(scope.run, nowMs);
  let attempt = scope.attempt;
  if (attempt.status === "starting") {
    // The crash window between spawn and the running transition: write ready → running → terminal
    // atomically instead of skipping the start barrier (ADR-0227 §4).
    const handle: RunningFacts = facts.handle ?? {
      pid: attempt.pid,
      processStartTicks: attempt.processStartTicks,
      bootId: attempt.bootId,
      startedAtMs: facts.startedAtMs,
    };
    enterRunning(change, scope, handle, holds);
    attempt = change.attempt(attempt);
  }
  if (attempt.status !== "running")
    throw new QlrError(
      "illegal_transition",
      `attempt ${attempt.id} is ${attempt.status}; only a running attempt completes`,
    );
  const decided = decideOutcome(attempt, facts);
  // A stop that a whole-run cancel asked for (by a user or for a shutdown) cancels the step
  // too: the run is being cancelled, the step did not fail. A shutdown stop of one attempt
  // alone fails its step (step-scoped, ADR-0229 §6).
  const outcome: OutcomeDecision =
    decided.attempt === "cancelled" && scope.run.cancelRequestedAtMs !== null
      ? { attempt: "cancelled", step: "cancelled" }
      : decided;
  const stopReason =
    facts.stopReason ?? (outcome.attempt === "timed_out" ? "timeout" : attempt.stopReason);
  const output = facts.output ?? null;
  const outputError = facts.outputError ?? null;
  change.setAttempt(
    scope.attempt,
    outcome.attempt,
    {
      finishedAtMs: facts.finishedAtMs,
      exitCode: facts.exitCode,
      signal: facts.signal,
      stopReason,
      error: facts.spawnError ?? (outputError === null ? null : `output refused: ${outputError}`),
      output,
    },
    {
      exitCode: facts.exitCode,
      signal: facts.signal,
      ...(output === null ? {} : { output: true }),
      ...(outputError === null ? {} : { outputError }),
    },
  );
  // A stale attempt records its own outcome; its step or run already belongs to a later claim.
  if (!holds) return change.build();
  if (step !== null) {
    const current = change.step(step);
    if (stepMayRetry(current, outcome.step, retry) && scope.run.cancelRequestedAtMs === null) {
      change.setStep(
        step,
        "ready",
        { readyAtMs: nowMs, notBeforeMs: nowMs + retry.backoffMs, startedAtMs: null },
        { retry: current.attemptCount, outcome: outcome.step },
      );
    } else {
      change.setStep(
        step,
        outcome.step,
        { finishedAtMs: facts.finishedAtMs, ...(outcome.step === "succeeded" ? { output } : {}) },
        { exitCode: facts.exitCode },
      );
    }
  } else {
    finishOrdinary(change, outcome.step, attempt.number, retry, nowMs);
  }
  return change.build();
}

export type OrdinaryOutcome = "succeeded" | "failed" | "timed_out" | "cancelled" | "lost";

/**
 * An ordinary run ends with its latest attempt, or goes back to `queued` for a retry: definite
 * failures retry within the task's budget; a lost attempt (outcome unknown, past the start
 * barrier) is never retried automatically (ADR-0227 §6), idempotent or not.
 */
export function finishOrdinary(
  change: RunChange,
  outcome: OrdinaryOutcome,
  attemptNumber: number,
  retry: RetryPolicy,
  nowMs: number,
): void {
  const runStatus = outcome;
  const retryable =
    (outcome === "failed" || outcome === "timed_out") &&
    attemptNumber <= retry.max &&
    change.run.cancelRequestedAtMs === null;
  if (retryable)
    change.setRunStatus(
      "queued",
      { retry: attemptNumber, outcome },
      { notBeforeMs: nowMs + retry.backoffMs },
    );
  else change.setRunStatus(runStatus, { attemptNumber });
}

/**
 * The spawn itself failed (no process ever ran): attempt `starting → failed`, step
 * `ready → failed`. ADR-0227 §5: the report rechecks the deadline with store time (`nowMs`):
 * the attempt's time budget runs from the commit of its `starting` (`startingAtMs`; a
 * recorded deadline wins), and a failure reported after it converges to `timed_out` instead,
 * like a completion that overran.
 */
export function startFailed(
  scope: AttemptScope,
  error: string,
  retry: RetryPolicy,
  nowMs: number,
  startingAtMs: number | null = null,
): ChangeSet {
  const step = requireStep(scope);
  const deadlineAtMs =
    scope.attempt.deadlineAtMs ??
    (startingAtMs === null ? null : startingAtMs + scope.attempt.timeoutMs);
  const outcome = deadlineAtMs !== null && nowMs > deadlineAtMs ? "timed_out" : "failed";
  const change = new RunChange(scope.run, nowMs);
  if (outcome === "timed_out") {
    change.setAttempt(
      scope.attempt,
      outcome,
      { finishedAtMs: nowMs, error, stopReason: "timeout" },
      { error, deadlineAtMs },
    );
  } else {
    change.setAttempt(scope.attempt, outcome, { finishedAtMs: nowMs, error }, { error });
  }
  if (!holdsEpoch(scope)) return change.build();
  if (step !== null) change.setStep(step, outcome, { finishedAtMs: nowMs }, { error });
  else finishOrdinary(change, outcome, scope.attempt.number, retry, nowMs);
  return change.build();
}

/**
 * A deadline passed: a task-scoped stop intent with reason `timeout`. It never touches the
 * parent's cancel intent, so one step's timeout does not cancel the DAG (ADR-0227 §5).
 */
export function requestTimeoutStop(scope: AttemptScope, nowMs: number): ChangeSet | null {
  const attempt = scope.attempt;
  // Every running attempt has a deadline (it is set on entering running); without one there is
  // nothing to time out.
  const deadlineAtMs = attempt.deadlineAtMs ?? Number.POSITIVE_INFINITY;
  if (attempt.status !== "running" || nowMs < deadlineAtMs || attempt.stopReason !== null)
    return null;
  const change = new RunChange(scope.run, nowMs);
  change.setAttempt(
    attempt,
    null,
    { stopReason: "timeout", stopRequestedAtMs: nowMs },
    { reason: "timeout", deadlineAtMs: attempt.deadlineAtMs },
    scope.run.kind === "workflow" ? "workflow.task_timeout_requested" : "attempt.stop_requested",
  );
  return change.build();
}

/** Graceful shutdown persists its stop intent before stopping the exact process (ADR-0229 §6). */
export function requestShutdownStop(scope: AttemptScope, nowMs: number): ChangeSet | null {
  const attempt = scope.attempt;
  if (attempt.status !== "running" || attempt.stopReason !== null) return null;
  const change = new RunChange(scope.run, nowMs);
  change.setAttempt(
    attempt,
    null,
    { stopReason: "shutdown", stopRequestedAtMs: nowMs },
    { reason: "shutdown" },
    "attempt.stop_requested",
  );
  return change.build();
}
