import {
  LIVE_ATTEMPT_STATUSES,
  SETTLED_STEP_STATUSES,
  TERMINAL_RUN_STATUSES,
} from "../../../src/model.ts";
import type { World } from "../world.ts";

/**
 * A workflow run is terminal exactly when all its steps are settled (and no attempt is live).
 * `final` is true once the simulation has drained: then a settled run must also be terminal.
 */
export function checkTerminalExactlyWhenSettled(world: World, final: boolean): string[] {
  const problems: string[] = [];
  for (const run of world.runs.filter((candidate) => candidate.kind === "workflow")) {
    const steps = world.steps.filter((step) => step.runId === run.id);
    const settled = steps.every((step) => SETTLED_STEP_STATUSES.has(step.status));
    const live = world.attempts.some(
      (attempt) => attempt.runId === run.id && LIVE_ATTEMPT_STATUSES.has(attempt.status),
    );
    const terminal = TERMINAL_RUN_STATUSES.has(run.status);
    if (terminal && (!settled || live))
      problems.push(
        `run ${run.id} is ${run.status} but steps are ${steps.map((step) => `${step.name}:${step.status}`).join(",")}${live ? " with a live attempt" : ""}`,
      );
    if (final && settled && !live && !terminal)
      problems.push(`run ${run.id} has every step settled but is still ${run.status}`);
    if (run.status === "succeeded" && steps.some((step) => step.status !== "succeeded"))
      problems.push(`run ${run.id} succeeded with a step not succeeded`);
  }
  return problems;
}
