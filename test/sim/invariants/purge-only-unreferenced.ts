import { TERMINAL_RUN_STATUSES } from "../../../src/model.ts";
import type { RetentionPolicy } from "../../../src/retention.ts";
import type { SimulatedExecutor } from "../../../src/sim/simulated-executor.ts";
import type { PurgeRecord } from "../../../src/sim/simulation.ts";
import type { World } from "../world.ts";

/**
 * Retention purges only what nothing still references, and leaves nothing behind:
 * - a purged run was terminal with a finish time, and no process of its attempts was still
 *   running at the purge (the simulated processes are the ground truth, not the rows);
 * - a run holding an idempotency key was purged only after its horizon (the idempotency window);
 * - a run purged before its horizon had at least `maxRuns` terminal runs after it in purge order;
 * - no row anywhere still names a purged run, no journal of a purged attempt is left once the
 *   simulation drained, and every attempt the store still has that spawned keeps its journal;
 * - once drained and past the horizon, no terminal run is left (retention does make progress).
 */
export function checkPurgeOnlyUnreferenced(
  world: World,
  purges: readonly PurgeRecord[],
  executor: SimulatedExecutor,
  policy: RetentionPolicy,
  final: boolean,
): string[] {
  const problems: string[] = [];
  if (world.orphanRows > 0)
    problems.push(`${world.orphanRows} rows name a run or step run that no longer exists`);
  const order = (
    a: { finishedAtMs: number; id: string },
    b: { finishedAtMs: number; id: string },
  ): number => a.finishedAtMs - b.finishedAtMs || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
  const everTerminal = [
    ...world.runs
      .filter((run) => TERMINAL_RUN_STATUSES.has(run.status) && run.finishedAtMs !== null)
      .map((run) => ({ id: run.id, finishedAtMs: run.finishedAtMs! })),
    ...purges
      .filter((purge) => purge.run.finishedAtMs !== null)
      .map((purge) => ({ id: purge.run.runId, finishedAtMs: purge.run.finishedAtMs! })),
  ];
  const present = new Set(world.runs.map((run) => run.id));
  for (const { run, atMs } of purges) {
    if (present.has(run.runId)) problems.push(`purged run ${run.runId} is still stored`);
    if (!TERMINAL_RUN_STATUSES.has(run.status))
      problems.push(`run ${run.runId} was purged while ${run.status}`);
    if (run.finishedAtMs === null || run.finishedAtMs > atMs) {
      problems.push(
        `run ${run.runId} was purged at ${atMs} without having finished (${String(run.finishedAtMs)})`,
      );
      continue;
    }
    for (const attempt of run.attempts) {
      const process = executor.processes.get(attempt.id);
      if (process !== undefined && process.finishAtMs > atMs)
        problems.push(
          `attempt ${attempt.id} of run ${run.runId} was purged at ${atMs} while its process ran until ${process.finishAtMs}`,
        );
      if (final && executor.journal.has(attempt.id))
        problems.push(`attempt ${attempt.id} of purged run ${run.runId} still has its journal`);
    }
    const expired = run.finishedAtMs < atMs - policy.horizonMs;
    if (run.idempotencyKey !== null && !expired)
      problems.push(
        `run ${run.runId} with idempotency key ${run.idempotencyKey} was purged ${atMs - run.finishedAtMs} ms after it finished, inside the ${policy.horizonMs} ms window`,
      );
    if (!expired) {
      const self = { id: run.runId, finishedAtMs: run.finishedAtMs };
      const newer = everTerminal.filter(
        (other) => other.finishedAtMs <= atMs && order(other, self) > 0,
      ).length;
      if (newer < policy.maxRuns)
        problems.push(
          `run ${run.runId} was purged before its horizon with only ${newer} newer terminal runs (keeps ${policy.maxRuns})`,
        );
    }
  }
  for (const attempt of world.attempts) {
    if ((world.spawnCounts.get(attempt.id) ?? 0) > 0 && !executor.journal.has(attempt.id))
      problems.push(`stored attempt ${attempt.id} lost its journal`);
  }
  if (final) {
    const left = world.runs.filter((run) => TERMINAL_RUN_STATUSES.has(run.status));
    if (left.length > 0)
      problems.push(
        `past the horizon ${left.length} terminal runs are still stored: ${left
          .slice(0, 5)
          .map((run) => run.id)
          .join(", ")}`,
      );
  }
  return problems;
}
