import type { AdmissionReceipt, ChangeSet, ExecutorType, ProcessHandleFacts, Run, RunAttempt, RunEvent, RunStatus, StepRun, StopReason } from "./model.ts";
import type { Generation, ReconciliationReceipt, TaskDefinition, WorkflowPlan } from "./packages.ts";
import type { ReceiptEvidence, LiveInspection } from "./recovery.ts";
import type { PurgeCandidate, PurgeKey } from "./retention.ts";
import type { ScheduleState } from "./schedules.ts";
import type { TaskContext } from "./task-context.ts";

/**
 * The ports the core drives. They are shaped by what the cadence and the API need and
 * nothing more; storage/ implements `Store` once per SQL dialect, runtimes/ implement the
 * clock, ids and executors.
 */

export interface Clock {
  nowMs(): number;
}

export interface IdSource {
  /** A new portable run id (UUIDv7 on real runtimes, seeded in simulation). */
  runId(): string;
}

/**
 * Unguessable secrets for the core (lease secrets). Real runtimes draw them from the host's
 * cryptographic random source; the core itself has no randomness.
 */
export interface SecretSource {
  /** 16–128 characters of `A-Za-z0-9_-`, at least 128 bits of entropy on a real runtime. */
  leaseSecret(): string;
}

export interface PackageHead {
  readonly package: string;
  readonly generation: number;
  readonly manifestDigest: Generation["manifestDigest"];
  readonly reconciliationDigest: ReconciliationReceipt["digest"];
  readonly updatedAtMs: number;
}

export interface RunListFilter {
  readonly status: RunStatus | null;
  /** Keyset cursor: the id of the last run of the previous page (runs are listed newest first). */
  readonly cursor: string | null;
  readonly limit: number;
}

export interface AdmissionCandidate {
  readonly runId: string;
  readonly stepRunId: string;
  readonly stepRunVersion: number;
}

export interface StoreTx {
  /**
   * Store time: the host clock reading checked against the last persisted observation. A
   * reading earlier than it fails closed with `clock_regression`; nothing is written.
   */
  observe(hostNowMs: number): Promise<number>;
  apply(change: ChangeSet): Promise<void>;

  getRun(runId: string): Promise<Run | null>;
  getRunByIdempotencyKey(key: string): Promise<Run | null>;
  getSteps(runId: string): Promise<StepRun[]>;
  getStep(stepRunId: string): Promise<StepRun | null>;
  getAttempts(runId: string): Promise<RunAttempt[]>;
  getAttempt(attemptId: string): Promise<RunAttempt | null>;
  getAdmission(runId: string, stepRunId: string, stepRunVersion: number): Promise<AdmissionReceipt | null>;
  getPlan(digest: string): Promise<WorkflowPlan | null>;
  getReconciliation(digest: string): Promise<ReconciliationReceipt | null>;
  getTaskDefinition(revision: string): Promise<TaskDefinition | null>;
  getTaskDefinitionFor(reconciliationDigest: string, task: string): Promise<TaskDefinition | null>;

  getPackageHead(name: string): Promise<PackageHead | null>;
  listPackageHeads(limit: number): Promise<PackageHead[]>;
  listGenerations(name: string, limit: number): Promise<Omit<Generation, "manifest">[]>;
  getGeneration(name: string, generation: number): Promise<Generation | null>;
  findPlan(packageName: string, generation: number, workflow: string): Promise<WorkflowPlan | null>;
  /** Writes a new generation with its reconciliation, definitions and plans, and moves the head. */
  putGeneration(generation: Generation, reconciliation: ReconciliationReceipt, definitions: readonly TaskDefinition[], plans: readonly WorkflowPlan[], previousGeneration: number | null): Promise<void>;

  getSchedules(packageName: string): Promise<ScheduleState[]>;
  listDueSchedules(nowMs: number, limit: number): Promise<ScheduleState[]>;
  /** Inserts (expectedVersion null) or CAS-updates a schedule. */
  putSchedule(state: ScheduleState, expectedVersion: number | null): Promise<void>;
  deleteSchedule(packageName: string, name: string): Promise<void>;

  /** Non-terminal runs with a cancel intent, keyset by run id. */
  listCancellingRuns(afterRunId: string | null, limit: number): Promise<string[]>;
  /** Workflow runs whose frontier may move (marked when a step settles or a run is created). */
  listFrontierRuns(afterRunId: string | null, limit: number): Promise<string[]>;
  clearFrontierMark(runId: string): Promise<void>;
  /** Ready steps of running, uncancelled runs with no admission winner in their epoch. At most 64. */
  listAdmissionCandidates(after: AdmissionCandidate | null, limit: number, nowMs: number): Promise<AdmissionCandidate[]>;
  /** Due queued ordinary runs without a cancel intent. */
  listQueuedOrdinaryRuns(afterRunId: string | null, limit: number, nowMs: number): Promise<string[]>;
  /** Attempts in the given statuses for one executor type, oldest first, keyset by attempt id. */
  listAttempts(executor: ExecutorType, statuses: readonly RunAttempt["status"][], afterAttemptId: string | null, limit: number): Promise<RunAttempt[]>;

  /** Claimed remote attempts of a pool that no live lease holds, oldest first. */
  listClaimableRemote(pool: string, nowMs: number, limit: number): Promise<RunAttempt[]>;
  /** Remote attempts whose lease expired while claimed, starting or running, keyset by id. */
  listExpiredLeases(nowMs: number, afterAttemptId: string | null, limit: number): Promise<RunAttempt[]>;

  /** The `rank`-th newest terminal run in purge order (finish time, then id), or null when there are fewer. */
  terminalRunAtRank(rank: number): Promise<PurgeKey | null>;
  /** Terminal runs strictly between `after` and `end` in purge order, oldest first, with the facts the purge decision needs. */
  listPurgeCandidates(after: PurgeKey | null, end: PurgeKey, limit: number): Promise<PurgeCandidate[]>;
  /** The purge facts of one run, read fresh inside the deleting transaction; null when the run is gone. */
  getPurgeCandidate(runId: string): Promise<PurgeCandidate | null>;
  /**
   * Deletes a run with everything it owns (mutations, events, admission receipts, attempts with
   * their leases, steps, the run). The caller has decided it may go; the files its attempts
   * left are the caller's to discard after this commits.
   */
  purgeRun(runId: string): Promise<PurgedRun>;
  /** The ids among `attemptIds` that name a stored attempt (the orphan file sweep's question). */
  existingAttemptIds(attemptIds: readonly string[]): Promise<string[]>;

  listRuns(filter: RunListFilter): Promise<Run[]>;
  listEvents(runId: string, afterSeq: number, limit: number): Promise<RunEvent[]>;
  countRunsByStatus(): Promise<Record<RunStatus, number>>;
}

/** What one purge deleted: the run and the attempts whose files may still exist. */
export interface PurgedRun {
  readonly runId: string;
  readonly status: RunStatus;
  readonly idempotencyKey: string | null;
  readonly finishedAtMs: number | null;
  readonly attempts: readonly { readonly id: string; readonly executor: ExecutorType }[];
}

/**
 * The most rows any list of the store returns in one call: a larger `limit` is cut to this.
 * Callers that need more page with the list's keyset cursor.
 */
export const MAX_STORE_PAGE = 500;

export interface Store {
  readonly dialect: "sqlite" | "postgres";
  readonly driverName: string;
  transaction<T>(fn: (tx: StoreTx) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

export interface LaunchRequest {
  readonly attempt: RunAttempt;
  readonly definition: TaskDefinition;
  /** What the task is told about its run (ids, input, the outputs of the steps it needs). */
  readonly context: TaskContext;
}

/**
 * Executes attempts the runtime owns. `launch` must make the start barrier durable (journal)
 * before the process exists, and return the handle facts; completion is observed through
 * `readReceipt`, never by waiting.
 */
export interface Executor {
  readonly type: ExecutorType;
  launch(request: LaunchRequest): Promise<ProcessHandleFacts>;
  readReceipt(attempt: RunAttempt): Promise<ReceiptEvidence>;
  hasJournal(attempt: RunAttempt): Promise<"present" | "absent" | "invalid">;
  inspect(attempt: RunAttempt): Promise<LiveInspection>;
  /** Stops the exact process; returns at once, escalation to SIGKILL happens in the background. */
  stop(attempt: RunAttempt, reason: StopReason): Promise<void>;
  /**
   * Retention: removes every file kept for these attempts, their journal record last, so an
   * interrupted discard always leaves the journal behind for `listHeld` to find again. Only
   * called for attempts whose rows are already deleted. Absent: the executor keeps no files.
   */
  discard?(attemptIds: readonly string[]): Promise<void>;
  /** Retention: attempt ids this executor holds a journal record for, ascending, after `afterAttemptId`. */
  listHeld?(afterAttemptId: string | null, limit: number): Promise<string[]>;
}
