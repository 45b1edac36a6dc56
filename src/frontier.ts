import { RunChange } from "./aggregate.ts";
import type { ChangeSet, Run, RunAttempt, StepRun } from "./model.ts";
import { LIVE_ATTEMPT_STATUSES, SETTLED_STEP_STATUSES } from "./model.ts";

/**
 * The workflow frontier: pending steps whose needs all succeeded become ready, pending steps
 * with an upstream that did not succeed are skipped, and the run is finalized exactly when
 * every step is settled (succeeded when all succeeded, failed otherwise). A run with a cancel
 * intent is frozen here: whole-run cancellation convergence owns it.
 */
export function advanceFrontier(
  run: Run,
  steps: readonly StepRun[],
  attempts: readonly RunAttempt[],
  nowMs: number,
): ChangeSet | null {
  if (run.kind !== "workflow" || run.status !== "running" || run.cancelRequestedAtMs !== null)
    return null;
  const change = new RunChange(run, nowMs);
  const byName = new Map(steps.map((step) => [step.name, step]));

  // Steps are stored in plan order (topological), so one pass settles chains of skips.
  for (const original of steps) {
    const step = change.step(original);
    if (step.status !== "pending") continue;
    const upstream = step.needs.map((name) => {
      const need = byName.get(name);
      return need === undefined ? undefined : change.step(need);
    });
    if (upstream.some((need) => need === undefined)) continue;
    const settledUpstream = upstream as StepRun[];
    if (settledUpstream.every((need) => need.status === "succeeded")) {
      change.setStep(original, "ready", { readyAtMs: nowMs });
    } else if (
      settledUpstream.some(
        (need) => SETTLED_STEP_STATUSES.has(need.status) && need.status !== "succeeded",
      )
    ) {
      const blockedBy = settledUpstream
        .filter((need) => need.status !== "succeeded" && SETTLED_STEP_STATUSES.has(need.status))
        .map((need) => need.name);
      change.setStep(original, "skipped", { finishedAtMs: nowMs }, { blockedBy });
    }
  }

  const current = steps.map((step) => change.step(step));
  const live = attempts.some((attempt) =>
    LIVE_ATTEMPT_STATUSES.has(change.attempt(attempt).status),
  );
  if (!live && current.every((step) => SETTLED_STEP_STATUSES.has(step.status))) {
    const allSucceeded = current.every((step) => step.status === "succeeded");
    change.setRunStatus(allSucceeded ? "succeeded" : "failed", {
      failedSteps: current
        .filter((step) => step.status !== "succeeded" && step.status !== "skipped")
        .map((step) => step.name),
    });
  }
  return change.changed ? change.build() : null;
}
