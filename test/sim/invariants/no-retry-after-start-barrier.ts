import type { World } from "../world.ts";

/**
 * No step is attempted again after an attempt crossed the start barrier (was spawned) unless
 * its task is idempotent: a second spawned attempt of one step needs an idempotent task.
 */
export function checkNoRetryAfterStartBarrier(world: World): string[] {
  const problems: string[] = [];
  const spawnedByStep = new Map<string, string[]>();
  for (const attempt of world.attempts) {
    if (attempt.stepRunId === null || !world.spawnCounts.has(attempt.id)) continue;
    spawnedByStep.set(attempt.stepRunId, [
      ...(spawnedByStep.get(attempt.stepRunId) ?? []),
      attempt.id,
    ]);
  }
  for (const [stepId, attempts] of spawnedByStep) {
    if (attempts.length < 2) continue;
    const step = world.steps.find((candidate) => candidate.id === stepId);
    const run = world.runs.find((candidate) => candidate.id === step?.runId);
    if (
      step === undefined ||
      run === undefined ||
      !world.idempotentTasks.has(`${run.package}/${step.task}`)
    ) {
      problems.push(
        `step ${stepId} (${step?.task ?? "?"}) was spawned ${attempts.length} times but its task is not idempotent`,
      );
    }
  }
  return problems;
}
