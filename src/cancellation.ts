import { RunChange } from "./aggregate.ts";
import type { ChangeSet, Run, RunAttempt, StepRun, StopReason } from "./model.ts";
import { LIVE_ATTEMPT_STATUSES, SETTLED_STEP_STATUSES, TERMINAL_RUN_STATUSES } from "./model.ts";

/**
 * Whole-run cancellation convergence (ADR-0228, as used by ADR-0229 §1 step 1). It respects
 * the start barrier: a claim that never started is cancelled outright; a `starting` attempt is
 * left until its start is settled; a `running` attempt gets a stop intent that execution
 * control (or, for a remote attempt, the worker's next heartbeat) carries out on the exact
 * process. The stop reason is the run's cancel reason projected (ADR-0227 §5): `cancel` for a
 * user's cancel, `shutdown` for a shutdown's. The run becomes `cancelled` only when no attempt
 * is live and every step is settled.
 */
export function convergeCancellation(
  run: Run,
  steps: readonly StepRun[],
  attempts: readonly RunAttempt[],
  nowMs: number,
): ChangeSet | null {
  if (run.cancelRequestedAtMs === null || TERMINAL_RUN_STATUSES.has(run.status)) return null;
  const change = new RunChange(run, nowMs);
  const stopReason = stopReasonOfCancel(run);

  for (const original of attempts) {
    const attempt = change.attempt(original);
    if (attempt.status === "claimed") {
      change.setAttempt(
        original,
        "cancelled",
        { finishedAtMs: nowMs, stopReason },
        { reason: "run cancelled before start" },
      );
    } else if (attempt.status === "running" && attempt.stopReason === null) {
      change.setAttempt(
        original,
        null,
        { stopReason, stopRequestedAtMs: nowMs },
        { reason: stopReason },
        "attempt.stop_requested",
      );
    }
  }

  const liveByStep = new Set(
    attempts
      .map((attempt) => change.attempt(attempt))
      .filter((attempt) => LIVE_ATTEMPT_STATUSES.has(attempt.status))
      .map((attempt) => attempt.stepRunId),
  );
  for (const original of steps) {
    const step = change.step(original);
    if ((step.status === "pending" || step.status === "ready") && !liveByStep.has(step.id)) {
      change.setStep(original, "cancelled", { finishedAtMs: nowMs }, { reason: "run cancelled" });
    }
  }

  const anyLive = attempts.some((attempt) =>
    LIVE_ATTEMPT_STATUSES.has(change.attempt(attempt).status),
  );
  const allSettled = steps.every((step) => SETTLED_STEP_STATUSES.has(change.step(step).status));
  if (!anyLive && allSettled) change.setRunStatus("cancelled");
  return change.changed ? change.build() : null;
}

/** The stop reason a run's cancel intent gives its attempts; an intent without a reason is a user's. */
export function stopReasonOfCancel(run: Run): StopReason {
  return run.cancelReason === "shutdown" ? "shutdown" : "cancel";
}
