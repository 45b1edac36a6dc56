import type { JsonValue } from "./canonical-json.ts";
import type { AttemptScope } from "./execution.ts";
import type { StepRun } from "./model.ts";
import type { RunInput } from "./run-inputs.ts";

/**
 * What a task is told about the attempt it runs in: its run, step, attempt, package and
 * generation, the run's input, and the outputs of the steps it needs. The core decides these
 * facts from the stored run inside the dispatch transaction; each runtime turns them into the
 * task's environment its own way (see runtimes/node/task-env.ts), so a local process and a
 * remote worker's process see the same variables.
 */
export interface TaskContext {
  readonly runId: string;
  readonly package: string;
  readonly generation: number;
  /** The step name of a workflow attempt; the task name of an ordinary run's attempt. */
  readonly step: string;
  readonly task: string;
  readonly attemptId: string;
  readonly attemptNumber: number;
  readonly input: RunInput;
  /** Each needed step's output by step name (null: it left none); empty for an ordinary run. */
  readonly needs: Readonly<Record<string, JsonValue | null>>;
}

/** The context of a scope's attempt; `steps` are the run's steps (only the needed ones are read). */
export function taskContext(
  scope: AttemptScope,
  steps: readonly StepRun[],
  task: string,
): TaskContext {
  const byName = new Map(steps.map((step) => [step.name, step]));
  const needs: Record<string, JsonValue | null> = {};
  for (const name of scope.step?.needs ?? []) needs[name] = byName.get(name)?.output ?? null;
  return {
    runId: scope.run.id,
    package: scope.run.package,
    generation: scope.run.generation,
    step: scope.step?.name ?? task,
    task,
    attemptId: scope.attempt.id,
    attemptNumber: scope.attempt.number,
    input: scope.run.input,
    needs,
  };
}
