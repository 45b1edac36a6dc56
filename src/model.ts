import type { JsonValue } from "./canonical-json.ts";
import type { Digest } from "./digest.ts";
import type { RunInput } from "./run-inputs.ts";

/**
 * The outcomes a run, a step and an attempt share: each ends in one of these (or in a status
 * of its own: a run or an attempt `lost`, a step `skipped`), and never moves again.
 */
const OUTCOMES = ["succeeded", "failed", "timed_out", "cancelled"] as const;

/** Status words are exactly those of the public contract; storage keeps them as literal unions. */
export const RUN_STATUSES = ["queued", "dispatching", "running", ...OUTCOMES, "lost"] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];
export const STEP_STATUSES = ["pending", "ready", "running", ...OUTCOMES, "skipped"] as const;
export type StepStatus = (typeof STEP_STATUSES)[number];
export const ATTEMPT_STATUSES = ["claimed", "starting", "running", ...OUTCOMES, "lost"] as const;
export type AttemptStatus = (typeof ATTEMPT_STATUSES)[number];

export type RunKind = "ordinary" | "workflow";
export type ExecutorType = "local_process" | "remote_worker";
export type StopReason = "cancel" | "timeout" | "shutdown";
/**
 * Why a whole-run cancel intent was recorded (ADR-0227 §5): an explicit cancel, or the runtime
 * shutting down. Convergence projects it onto every live attempt's stop intent.
 */
export type RunCancelReason = "user" | "shutdown";
export const RUN_CANCEL_REASONS: readonly RunCancelReason[] = ["user", "shutdown"];

export const TERMINAL_RUN_STATUSES: ReadonlySet<RunStatus> = new Set([...OUTCOMES, "lost"]);
export const SETTLED_STEP_STATUSES: ReadonlySet<StepStatus> = new Set([...OUTCOMES, "skipped"]);
export const TERMINAL_ATTEMPT_STATUSES: ReadonlySet<AttemptStatus> = new Set([...OUTCOMES, "lost"]);
export const LIVE_ATTEMPT_STATUSES: ReadonlySet<AttemptStatus> = new Set([
  "claimed",
  "starting",
  "running",
]);

export interface Run {
  readonly id: string;
  readonly kind: RunKind;
  readonly package: string;
  readonly generation: number;
  /** The workflow name for workflow runs, the task name for ordinary runs. */
  readonly target: string;
  /** Workflow runs: the plan they execute. Ordinary runs: null. */
  readonly planDigest: Digest | null;
  /** The reconciliation receipt of the run's generation: binds the runtime task definitions. */
  readonly reconciliationDigest: Digest;
  readonly status: RunStatus;
  /** CAS fence: every change of the aggregate (its steps and attempts included) bumps it once. */
  readonly version: number;
  /** The seq of the last event appended; events are contiguous from 1. */
  readonly eventSeq: number;
  /** Run-global attempt counter: attempt numbers are allocated under the run's version fence. */
  readonly attemptSeq: number;
  readonly idempotencyKey: string | null;
  readonly scheduleName: string | null;
  /** The resolved run input (declared defaults filled in, keys sorted); `{}` when none. Never changes. */
  readonly input: RunInput;
  /** The run this one reruns (`qlr rerun`), or null. */
  readonly rerunOf: string | null;
  readonly cancelRequestedAtMs: number | null;
  /** Set with `cancelRequestedAtMs`, null without it; never changes once set. */
  readonly cancelReason: RunCancelReason | null;
  /** Ordinary runs waiting for a retry backoff are not admitted before this time. */
  readonly notBeforeMs: number | null;
  readonly createdAtMs: number;
  readonly updatedAtMs: number;
  readonly finishedAtMs: number | null;
}

export interface StepRun {
  readonly id: string;
  readonly runId: string;
  readonly name: string;
  readonly task: string;
  readonly needs: readonly string[];
  readonly status: StepStatus;
  readonly version: number;
  /** Digest of the step's canonical state; bumped with version (a new ready epoch changes it). */
  readonly digest: Digest;
  readonly attemptCount: number;
  readonly readyAtMs: number | null;
  /** An idempotent retry waits for its backoff: admission skips the step before this time. */
  readonly notBeforeMs: number | null;
  readonly startedAtMs: number | null;
  readonly finishedAtMs: number | null;
  readonly createdAtMs: number;
  /**
   * The step's result for the steps that need it: the output of its succeeded attempt, or the
   * output a rerun reused from the run it reruns. Null when the step has none (yet).
   */
  readonly output: JsonValue | null;
}

export interface ProcessHandleFacts {
  readonly pid: number;
  readonly processStartTicks: string;
  readonly bootId: string;
  /** The launcher's pre-spawn handle fact: never replaced by a later clock reading. */
  readonly startedAtMs: number;
}

export interface RunAttempt {
  readonly id: string;
  readonly runId: string;
  /** Null for ordinary runs. */
  readonly stepRunId: string | null;
  readonly stepRunVersion: number | null;
  /** Run-global attempt number, 1-based. */
  readonly number: number;
  readonly status: AttemptStatus;
  readonly executor: ExecutorType;
  /** The remote worker pool of a `remote_worker` attempt; null for local attempts. */
  readonly pool: string | null;
  readonly version: number;
  readonly createdAtMs: number;
  readonly startedAtMs: number | null;
  readonly finishedAtMs: number | null;
  readonly deadlineAtMs: number | null;
  readonly timeoutMs: number;
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly pid: number | null;
  readonly processStartTicks: string | null;
  readonly bootId: string | null;
  readonly stopReason: StopReason | null;
  readonly stopRequestedAtMs: number | null;
  readonly error: string | null;
  /** The JSON result the task left at `QLR_OUTPUT`, recorded once with its completion; null when it left none. */
  readonly output: JsonValue | null;
  readonly leaseWorkerId: string | null;
  /** Fencing version of the remote lease; 0 while no worker ever held it. */
  readonly leaseVersion: number;
  readonly leaseExpiresAtMs: number | null;
  /**
   * sha256 (hex) of the lease secret handed to the worker at claim; null while no worker holds
   * a lease. Only the digest is stored, so a reader of the database cannot act as the worker.
   */
  readonly leaseSecretDigest: string | null;
  /**
   * The coordinator node that dispatched a local attempt (set when it enters `starting`); null
   * while claimed, for remote attempts, and for attempts dispatched before nodes were recorded.
   * Only that node reads the attempt's journal and receipt and inspects its process.
   */
  readonly ownerNodeId: string | null;
}

export type EventType =
  | "run.created"
  | "run.cancel_requested"
  | "run.status_changed"
  | "step.status_changed"
  | "workflow.task_attempt_admitted"
  | "workflow.task_timeout_requested"
  | "attempt.status_changed"
  | "attempt.stop_requested"
  | "attempt.recovery_failed_closed"
  | "attempt.leased";

export interface RunEvent {
  readonly id: string;
  readonly runId: string;
  readonly seq: number;
  readonly type: EventType;
  readonly atMs: number;
  readonly stepRunId: string | null;
  readonly attemptId: string | null;
  readonly data: Readonly<Record<string, unknown>>;
}

/** The canonical mutation row every StepRun change leaves beside its event. */
export interface StepMutation {
  readonly runId: string;
  readonly stepRunId: string;
  readonly version: number;
  readonly fromStatus: StepStatus | null;
  readonly toStatus: StepStatus;
  readonly fromDigest: Digest | null;
  readonly toDigest: Digest;
  readonly eventSeq: number;
  readonly atMs: number;
}

/** Immutable admission ledger row: one winner per (runId, stepRunId, stepRunVersion). */
export interface AdmissionReceipt {
  readonly runId: string;
  readonly stepRunId: string;
  readonly stepRunVersion: number;
  readonly stepRunDigest: Digest;
  readonly planDigest: Digest;
  readonly reconciliationDigest: Digest;
  readonly runtimeTaskId: string;
  readonly runtimeTaskRevision: string;
  readonly taskDefinitionDigest: Digest;
  readonly executionDigest: Digest;
  readonly attemptId: string;
  readonly eventId: string;
  /** The run version this admission wrote: the fence a replay compares against. */
  readonly runVersion: number;
  readonly admittedAtMs: number;
  readonly digest: Digest;
}

/**
 * Everything one transaction writes. `before: null` inserts; otherwise the row is updated
 * only where its stored version still equals `before.version` (CAS), else the whole
 * transaction fails with `conflict` and nothing is written.
 */
export interface ChangeSet {
  readonly runs: readonly RowChange<Run>[];
  readonly steps: readonly RowChange<StepRun>[];
  readonly attempts: readonly RowChange<RunAttempt>[];
  readonly events: readonly RunEvent[];
  readonly mutations: readonly StepMutation[];
  readonly admissions: readonly AdmissionReceipt[];
  /**
   * Workflow runs whose frontier may move after this change (created, or a step settled): the
   * store marks them for the frontier stage and leaves every other run's mark as it is. The
   * core decides (`frontierMarks` in aggregate.ts); the store only writes it.
   */
  readonly frontierDue: readonly string[];
}

export interface RowChange<T> {
  readonly before: T | null;
  readonly after: T;
}

export const EMPTY_CHANGE_SET: ChangeSet = {
  runs: [],
  steps: [],
  attempts: [],
  events: [],
  mutations: [],
  admissions: [],
  frontierDue: [],
};

/** Whether two records (a run, a plan, a receipt, a task definition) name one package generation. */
export function sameGeneration(
  a: { readonly package: string; readonly generation: number },
  b: { readonly package: string; readonly generation: number },
): boolean {
  return a.package === b.package && a.generation === b.generation;
}
