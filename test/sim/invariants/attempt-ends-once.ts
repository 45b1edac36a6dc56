import { TERMINAL_ATTEMPT_STATUSES } from "../../../src/model.ts";
import type { World } from "../world.ts";

/**
 * Every started attempt ends in exactly one terminal result, and nothing is spawned twice:
 * each attempt has at most one spawn, and once drained every spawned attempt is terminal with
 * exactly one terminal status event.
 */
export function checkAttemptEndsOnce(world: World, final: boolean): string[] {
  const problems: string[] = [];
  for (const [attemptId, count] of world.spawnCounts) {
    if (count > 1) problems.push(`attempt ${attemptId} was spawned ${count} times`);
  }
  for (const attempt of world.attempts) {
    const terminalEvents = world.events.filter(
      (event) =>
        event.attemptId === attempt.id &&
        event.type === "attempt.status_changed" &&
        TERMINAL_ATTEMPT_STATUSES.has(event.data.to as never),
    );
    if (terminalEvents.length > 1)
      problems.push(`attempt ${attempt.id} has ${terminalEvents.length} terminal events`);
    if (TERMINAL_ATTEMPT_STATUSES.has(attempt.status) && terminalEvents.length !== 1)
      problems.push(
        `attempt ${attempt.id} is ${attempt.status} with ${terminalEvents.length} terminal events`,
      );
    if (
      final &&
      world.spawnCounts.has(attempt.id) &&
      !TERMINAL_ATTEMPT_STATUSES.has(attempt.status)
    )
      problems.push(`spawned attempt ${attempt.id} never ended (${attempt.status})`);
  }
  return problems;
}
