import { QlrError } from "./errors.ts";
import type { ExecutorType, Run, RunAttempt, StepRun } from "./model.ts";
import type { StoreTx } from "./ports.ts";
import type { TaskDefinition } from "./packages.ts";
import { MANIFEST_LIMITS } from "./manifest/limits.ts";

/**
 * Backpressure: how many attempts may be live at once. Two limits, both decided here at
 * admission (the moment a ready step or a queued task run gets its `claimed` attempt, the
 * durable dispatch intent), from counts the admitting transaction reads itself:
 *
 * - a task's `concurrency: N`: at most N live attempts of that task across all runs of its
 *   package (workflow steps and task runs alike, whatever generation they belong to);
 * - the runtime's `--max-running N`: at most N live `local_process` attempts in the store.
 *
 * Live means claimed, starting or running: a claim counts from the moment it is admitted, so
 * the limit holds before any process exists. What is beyond a limit is simply not admitted:
 * the step stays `ready` (a task run stays `queued`) and is admitted when a slot frees, oldest
 * first, because every admission pass walks the candidates from the start in run order and
 * passes over the later candidates of a task it found at its limit. On PostgreSQL two
 * coordinators that both count the last free slot conflict in their serializable transactions;
 * the retry counts again and waits.
 */

/** The most `--max-running` accepts; far above what one host runs as processes at once. */
export const MAX_MAX_RUNNING = 10_000;

export type WaitReason =
  | {
      readonly kind: "task_limit";
      readonly task: string;
      readonly limit: number;
      readonly live: number;
    }
  | { readonly kind: "runtime_limit"; readonly limit: number; readonly live: number };

export interface SlotInput {
  readonly task: string;
  readonly executor: ExecutorType;
  /** The task's `concurrency:`; null: no limit of its own. */
  readonly taskLimit: number | null;
  /** Live attempts of the task (across all runs of its package). */
  readonly taskLive: number;
  /** The runtime's `--max-running`; null: no runtime-wide limit (a runtime without local processes). */
  readonly maxRunning: number | null;
  /** Live local attempts in the store. */
  readonly localLive: number;
}

function checkLimit(value: number, what: string, max: number): void {
  if (!Number.isInteger(value) || value < 1 || value > max)
    throw new QlrError(
      "integrity",
      `${what} must be a whole number from 1 to ${max}, got ${value}`,
    );
}

/**
 * Whether one more attempt of the task may be admitted now: null when a slot is free,
 * otherwise why it waits. The task's own limit is named first: it is the more specific one.
 */
export function decideSlot(input: SlotInput): WaitReason | null {
  if (input.taskLimit !== null) {
    checkLimit(
      input.taskLimit,
      `task ${input.task}: concurrency`,
      MANIFEST_LIMITS.maxTaskConcurrency,
    );
    if (input.taskLive >= input.taskLimit)
      return {
        kind: "task_limit",
        task: input.task,
        limit: input.taskLimit,
        live: input.taskLive,
      };
  }
  if (input.maxRunning !== null && input.executor === "local_process") {
    checkLimit(input.maxRunning, "--max-running", MAX_MAX_RUNNING);
    if (input.localLive >= input.maxRunning)
      return { kind: "runtime_limit", limit: input.maxRunning, live: input.localLive };
  }
  return null;
}

/** The sentence the run view, `qlr status` and the dashboard show for a waiting step or task run. */
export function describeWait(reason: WaitReason): string {
  return reason.kind === "task_limit"
    ? `waiting: task "${reason.task}" at its concurrency limit (${reason.live} of ${reason.limit} running)`
    : `waiting: runtime at --max-running ${reason.limit}`;
}

/**
 * Reads the counts a definition's limits need and decides, inside the caller's transaction
 * (so a concurrent admission of the last slot conflicts with this one). Counts nothing a
 * limit does not need.
 */
export async function slotFor(
  tx: StoreTx,
  definition: TaskDefinition,
  maxRunning: number | null,
): Promise<WaitReason | null> {
  const taskLimit = definition.concurrency ?? null;
  const taskLive =
    taskLimit === null ? 0 : await tx.countLiveTaskAttempts(definition.package, definition.task);
  const countsLocal = maxRunning !== null && definition.executor === "local_process";
  const localLive = countsLocal ? await tx.countLiveAttempts("local_process") : 0;
  return decideSlot({
    task: definition.task,
    executor: definition.executor,
    taskLimit,
    taskLive,
    maxRunning,
    localLive,
  });
}

/** Why each waiting part of one run waits: by step id for a workflow run, `run` for a queued task run. */
export interface WaitingExplanation {
  readonly run: string | null;
  readonly steps: ReadonlyMap<string, string>;
}

/**
 * For the run view: the ready steps without an attempt in their epoch (and a queued task run)
 * that a limit holds back right now, with the sentence that says which. A step that waits for
 * anything else (its retry backoff, the next cycle) gets none.
 */
export async function explainWaiting(
  tx: StoreTx,
  run: Run,
  steps: readonly StepRun[],
  attempts: readonly RunAttempt[],
  maxRunning: number | null,
): Promise<WaitingExplanation> {
  const explained = new Map<string, string>();
  if (run.cancelRequestedAtMs !== null) return { run: null, steps: explained };
  const byTask = new Map<string, WaitReason | null>();
  const reasonFor = async (task: string): Promise<WaitReason | null> => {
    if (byTask.has(task)) return byTask.get(task) ?? null;
    const definition = await tx.getTaskDefinitionFor(run.reconciliationDigest, task);
    const reason = definition === null ? null : await slotFor(tx, definition, maxRunning);
    byTask.set(task, reason);
    return reason;
  };
  if (run.kind === "ordinary") {
    if (run.status !== "queued") return { run: null, steps: explained };
    const reason = await reasonFor(run.target);
    return { run: reason === null ? null : describeWait(reason), steps: explained };
  }
  if (run.status !== "running") return { run: null, steps: explained };
  for (const step of steps) {
    if (step.status !== "ready") continue;
    const admitted = attempts.some(
      (attempt) => attempt.stepRunId === step.id && attempt.stepRunVersion === step.version,
    );
    if (admitted) continue;
    const reason = await reasonFor(step.task);
    if (reason !== null) explained.set(step.id, describeWait(reason));
  }
  return { run: null, steps: explained };
}
