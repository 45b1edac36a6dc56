import type {
  AdmissionReceipt,
  ChangeSet,
  ExecutorType,
  ProcessHandleFacts,
  Run,
  RunAttempt,
  RunEvent,
  RunStatus,
  StepRun,
  StopReason,
} from "./model.ts";
import type {
  Generation,
  ReconciliationReceipt,
  TaskDefinition,
  WorkflowPlan,
} from "./packages.ts";
import type { ReceiptEvidence, LiveInspection } from "./recovery.ts";
import type { NotificationEntry, NotificationState } from "./notifications.ts";
import type { Overview } from "./overview.ts";
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

export interface NotificationListFilter {
  readonly runId: string | null;
  readonly state: NotificationState | null;
  /** Keyset cursor: the id of the last entry of the previous page. */
  readonly cursor: string | null;
  readonly limit: number;
}

export interface AdmissionCandidate {
  readonly runId: string;
  readonly stepRunId: string;
  readonly stepRunVersion: number;
}

/** A listed candidate names its task, so an admission pass skips a task it found at its limit without reading it again. */
export interface ListedAdmissionCandidate extends AdmissionCandidate {
  readonly package: string;
  readonly task: string;
}

/**
 * One page of a keyset listing: the items after `after` (null: from the start), at most
 * `limit`. The coordinator walks such listings with `walkKeyset` (src/paging.ts).
 */
export type KeysetPage<Cursor, Item> = (after: Cursor | null, limit: number) => Promise<Item[]>;

/** A keyset page of what is due at `nowMs` (store time). */
export type DueKeysetPage<Cursor, Item> = (
  after: Cursor | null,
  limit: number,
  nowMs: number,
) => Promise<Item[]>;

/**
 * A coordinator node registered in the store. The node id is stable across restarts of one
 * runtime (kept in its state dir); each start takes a new incarnation. The lease is in store
 * time: a node whose lease expired is gone until it registers again.
 */
export interface CoordinatorRecord {
  readonly nodeId: string;
  readonly incarnation: number;
  readonly host: string;
  readonly bootId: string | null;
  readonly startedAtMs: number;
  readonly heartbeatAtMs: number;
  readonly leaseExpiresAtMs: number;
}

export interface StoreTx {
  /**
   * Store time, checked against the last persisted observation: a reading earlier than it fails
   * closed with `clock_regression` and nothing is written. A store on one host reads the host
   * clock (`hostNowMs`); a store shared by several coordinators reads the database server's
   * clock, so coordinators on skewed hosts agree, and ignores `hostNowMs`.
   */
  observe(hostNowMs: number): Promise<number>;
  apply(change: ChangeSet): Promise<void>;

  /**
   * Reads the named runs whole (the run, its steps, its attempts, its admission receipts) in a
   * few multi-row statements, so this transaction's later reads of them cost nothing: a stage
   * page that commits as one transaction calls it once for its items instead of reading each
   * item's rows one statement at a time. What the later reads return is unchanged.
   */
  preloadRuns(runIds: readonly string[]): Promise<void>;
  getRun(runId: string): Promise<Run | null>;
  getRunByIdempotencyKey(key: string): Promise<Run | null>;
  getSteps(runId: string): Promise<StepRun[]>;
  getStep(stepRunId: string): Promise<StepRun | null>;
  getAttempts(runId: string): Promise<RunAttempt[]>;
  getAttempt(attemptId: string): Promise<RunAttempt | null>;
  getAdmission(
    runId: string,
    stepRunId: string,
    stepRunVersion: number,
  ): Promise<AdmissionReceipt | null>;
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
  putGeneration(
    generation: Generation,
    reconciliation: ReconciliationReceipt,
    definitions: readonly TaskDefinition[],
    plans: readonly WorkflowPlan[],
    previousGeneration: number | null,
  ): Promise<void>;

  getSchedules(packageName: string): Promise<ScheduleState[]>;
  listDueSchedules(nowMs: number, limit: number): Promise<ScheduleState[]>;
  /** Inserts (expectedVersion null) or CAS-updates a schedule. */
  putSchedule(state: ScheduleState, expectedVersion: number | null): Promise<void>;
  deleteSchedule(packageName: string, name: string): Promise<void>;

  /** Non-terminal runs with a cancel intent, keyset by run id. */
  listCancellingRuns: KeysetPage<string, string>;
  /** Workflow runs whose frontier may move (marked when a step settles or a run is created), keyset by run id. */
  listFrontierRuns: KeysetPage<string, string>;
  clearFrontierMark(runId: string): Promise<void>;
  /** Ready steps of running, uncancelled runs with no admission winner in their epoch. At most MAX_ADMISSION_PAGE (admission.ts). */
  listAdmissionCandidates: DueKeysetPage<AdmissionCandidate, ListedAdmissionCandidate>;
  /**
   * Live attempts (claimed, starting or running) of one task of a package, across every run
   * and generation: ordinary runs of the task and workflow steps that run it. What a task's
   * `concurrency:` limits (src/backpressure.ts); read in the admitting transaction.
   */
  countLiveTaskAttempts(packageName: string, task: string): Promise<number>;
  /** Live attempts (claimed, starting or running) of one executor type in the store: what `--max-running` limits. */
  countLiveAttempts(executor: ExecutorType): Promise<number>;
  /** Due queued ordinary runs without a cancel intent, keyset by run id. */
  listQueuedOrdinaryRuns: DueKeysetPage<string, string>;
  /**
   * Attempts in the given statuses for one executor type, oldest first, keyset by attempt id.
   * With `ownerNodeId`, only the attempts that node dispatched and those no node owns yet.
   */
  listAttempts(
    executor: ExecutorType,
    statuses: readonly RunAttempt["status"][],
    afterAttemptId: string | null,
    limit: number,
    ownerNodeId?: string,
  ): Promise<RunAttempt[]>;
  /**
   * Starting or running attempts of one executor type whose owner node's lease expired before
   * `nowMs` (or whose owner is not registered), not yet reported (no error recorded), keyset by id.
   */
  listOrphanedAttempts(
    executor: ExecutorType,
    nowMs: number,
    afterAttemptId: string | null,
    limit: number,
  ): Promise<RunAttempt[]>;

  getCoordinator(nodeId: string): Promise<CoordinatorRecord | null>;
  /**
   * Inserts a node (`expectedIncarnation` null) or replaces its row only while it still holds
   * `expectedIncarnation`; a node superseded by a newer incarnation gets `conflict`.
   */
  putCoordinator(record: CoordinatorRecord, expectedIncarnation: number | null): Promise<void>;
  listCoordinators(limit: number): Promise<CoordinatorRecord[]>;

  /** Claimed remote attempts of a pool that no live lease holds, oldest first. */
  listClaimableRemote(pool: string, nowMs: number, limit: number): Promise<RunAttempt[]>;
  /** Remote attempts whose lease expired while claimed, starting or running, keyset by id. */
  listExpiredLeases(
    nowMs: number,
    afterAttemptId: string | null,
    limit: number,
  ): Promise<RunAttempt[]>;

  /** The `rank`-th newest terminal run in purge order (finish time, then id), or null when there are fewer. */
  terminalRunAtRank(rank: number): Promise<PurgeKey | null>;
  /** Terminal runs strictly between `after` and `end` in purge order, oldest first, with the facts the purge decision needs. */
  listPurgeCandidates(
    after: PurgeKey | null,
    end: PurgeKey,
    limit: number,
  ): Promise<PurgeCandidate[]>;
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

  /**
   * The notification outbox. `apply` itself writes the entries of a run that enters failed,
   * timed_out or lost (src/notifications.ts decides which), in the same transaction.
   */
  /** Pending entries due at `nowMs` (claims expired included), oldest due first. */
  listDueNotifications(nowMs: number, limit: number): Promise<NotificationEntry[]>;
  getNotification(id: string): Promise<NotificationEntry | null>;
  /** CAS-updates an entry's delivery state; `conflict` when its version moved. */
  updateNotification(entry: NotificationEntry, expectedVersion: number): Promise<void>;
  /** Newest first, keyset by (created time, id) through `before`. */
  listNotifications(filter: NotificationListFilter): Promise<NotificationEntry[]>;

  listRuns(filter: RunListFilter): Promise<Run[]>;
  listEvents(runId: string, afterSeq: number, limit: number): Promise<RunEvent[]>;
  countRunsByStatus(): Promise<Record<RunStatus, number>>;
  /** The dashboard's aggregates over `hours` whole hours ending at `nowMs` (src/overview.ts). */
  overview(nowMs: number, hours: number): Promise<Overview>;
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

export interface StoreTransactionOptions {
  /**
   * A coordinator's stage page: it waits its turn behind the other coordinators' pages on the
   * same database, so that pages never overlap (on PostgreSQL they would abort each other;
   * storage/driver.ts `TransactionOptions.inTurn`). Ignored where one connection serializes
   * everything.
   */
  readonly inTurn?: boolean;
}

export interface Store {
  readonly dialect: "sqlite" | "postgres";
  readonly driverName: string;
  transaction<T>(fn: (tx: StoreTx) => Promise<T>, options?: StoreTransactionOptions): Promise<T>;
  /**
   * A transaction that only reads: one consistent snapshot, refused if it tries to write. On
   * PostgreSQL it takes no predicate locks, so it never fails for a concurrent writer and never
   * makes one fail; what it returns may already be stale, so it serves to choose what a
   * `transaction` reads again and decides (a stage's listing), never to decide itself.
   */
  read<T>(fn: (tx: StoreTx) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/**
 * One short transaction at store time: the host clock is observed inside the transaction
 * first (a reading behind the store's last observation fails closed before anything is read
 * or written), and `fn` gets that time. Every write of the core and the runtimes goes through
 * here, so no write can carry a time the store has not checked.
 */
export function transactAtStoreTime<T>(
  store: Store,
  clock: Clock,
  fn: (tx: StoreTx, nowMs: number) => Promise<T>,
): Promise<T> {
  return store.transaction(async (tx) => fn(tx, await tx.observe(clock.nowMs())));
}

export type JournalEvidence = "present" | "absent" | "invalid" | "never_spawned";

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
  /**
   * The pre-spawn barrier records: `absent` (no journal: never spawned), `never_spawned` (a
   * journal, but the executor proves the process was never spawned and never will be),
   * `present` (maybe spawned) or `invalid`.
   */
  hasJournal(attempt: RunAttempt): Promise<JournalEvidence>;
  inspect(attempt: RunAttempt): Promise<LiveInspection>;
  /**
   * Whether the process of a running attempt has lost what would report its end (its
   * supervisor died): no receipt will come, so execution control settles the attempt by the
   * recovery rules (two live inspections) instead of waiting. Absent: never.
   */
  orphaned?(attempt: RunAttempt): Promise<boolean>;
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
