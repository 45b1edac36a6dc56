import { derivedId } from "./digest.ts";
import { QlrError } from "./errors.ts";
import { RunChange } from "./aggregate.ts";
import { claimedAttempt } from "./attempts.ts";
import { sameGeneration, type ChangeSet, type Run, type RunAttempt } from "./model.ts";
import { renormalize, type TaskDefinition } from "./packages.ts";

export function ordinaryAttemptId(runId: string, number: number): string {
  return derivedId("ora", [runId, number]);
}

/**
 * The ordinary run path: a due `queued` run gets its next (latest) attempt as a `claimed`
 * dispatch intent and moves to `dispatching`. The attempt id is derived from the run and the
 * run-global number, so a lost commit response is answered by reading that attempt.
 */
export function admitOrdinaryAttempt(
  run: Run,
  definition: TaskDefinition,
  nowMs: number,
): { attempt: RunAttempt; change: ChangeSet } | null {
  if (run.kind !== "ordinary" || run.status !== "queued" || run.cancelRequestedAtMs !== null)
    return null;
  if (run.notBeforeMs !== null && run.notBeforeMs > nowMs) return null;
  if (!sameGeneration(definition, run) || definition.task !== run.target) {
    throw new QlrError(
      "integrity",
      `task definition ${definition.revision} does not belong to run ${run.id}`,
    );
  }
  const execution = renormalize(definition.execution);
  if (execution.digest !== definition.executionDigest)
    throw new QlrError(
      "integrity",
      `task definition ${definition.revision} fails its execution digest`,
    );
  const number = run.attemptSeq + 1;
  const change = new RunChange(run, nowMs);
  change.patchRun({ attemptSeq: number, notBeforeMs: null });
  const attempt: RunAttempt = claimedAttempt(
    {
      id: ordinaryAttemptId(run.id, number),
      runId: run.id,
      stepRunId: null,
      stepRunVersion: null,
      number,
    },
    execution.revision,
    nowMs,
  );
  change.insertAttempt(attempt, {}, "attempt.status_changed", {
    taskRevision: definition.revision,
  });
  change.setRunStatus("dispatching", { attemptId: attempt.id });
  return { attempt, change: change.build() };
}
