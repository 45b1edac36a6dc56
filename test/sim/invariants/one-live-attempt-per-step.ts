import { LIVE_ATTEMPT_STATUSES } from "../../../src/model.ts";
import type { World } from "../world.ts";

/** At most one live attempt (claimed, starting, running) per step run. */
export function checkOneLiveAttemptPerStep(world: World): string[] {
  const live = new Map<string, string[]>();
  for (const attempt of world.attempts) {
    if (attempt.stepRunId === null || !LIVE_ATTEMPT_STATUSES.has(attempt.status)) continue;
    live.set(attempt.stepRunId, [...(live.get(attempt.stepRunId) ?? []), attempt.id]);
  }
  return [...live.entries()]
    .filter(([, ids]) => ids.length > 1)
    .map(([step, ids]) => `step ${step} has ${ids.length} live attempts: ${ids.join(", ")}`);
}
