import { QlrError } from "../../src/errors.ts";
import type {
  AdmissionReceipt,
  ChangeSet,
  ExecutorType,
  Run,
  RunAttempt,
  RunEvent,
  RunStatus,
  StepMutation,
  StepRun,
} from "../../src/model.ts";
import type { NotificationEntry } from "../../src/notifications.ts";
import type { Overview } from "../../src/overview.ts";
import type {
  Generation,
  ReconciliationReceipt,
  TaskDefinition,
  WorkflowPlan,
} from "../../src/packages.ts";
import type {
  AdmissionCandidate,
  CoordinatorRecord,
  ListedAdmissionCandidate,
  NotificationListFilter,
  PackageHead,
  PurgedRun,
  RunListFilter,
  StoreTx,
} from "../../src/ports.ts";
import type { PurgeCandidate, PurgeKey } from "../../src/retention.ts";
import type { ScheduleState } from "../../src/schedules.ts";
import type { SqlDialect, SqlParam, SqlRow, SqlTx } from "../driver.ts";
import type { TransactionRows } from "./transaction-rows.ts";
import { ChangeWriter } from "./change-writer.ts";
import * as coordinators from "./coordinators.ts";
import type { ImmutableCache } from "./immutable-cache.ts";
import * as notifications from "./notifications.ts";
import * as observation from "./observation.ts";
import * as packages from "./packages.ts";
import type { QueryContext } from "./query-context.ts";
import * as retention from "./retention.ts";
import * as runs from "./runs.ts";
import * as stageListings from "./stage-listings.ts";
import { StoreClock, type StoreClockSource } from "./store-clock.ts";

/** A statement that neither writes nor locks: a SELECT without a sequence call or a row lock. */
function isPlainRead(sql: string): boolean {
  return (
    /^\s*SELECT\b/i.test(sql) &&
    !/\b(?:setval|nextval)\s*\(|\bFOR\s+(?:UPDATE|NO\s+KEY\s+UPDATE|SHARE|KEY\s+SHARE)\b/i.test(sql)
  );
}

/**
 * One store transaction: the `StoreTx` port over one driver transaction. It sends every
 * statement (`q`), and hands each operation to the file of its subject with the context those
 * statements need; the change buffer (`ChangeWriter`) and the store clock (`StoreClock`) are
 * its own for the transaction's length.
 */
export class SqlStoreTx implements StoreTx {
  private readonly tx: SqlTx;
  private readonly rewrite: (sql: string) => string;
  private readonly cache: Map<string, string>;
  private readonly bodies: ImmutableCache;
  /** What the subject files are given: this transaction's `q`, its dialect and its known rows. */
  private readonly statements: QueryContext;
  private readonly writer: ChangeWriter;
  private readonly clock: StoreClock;
  /** A `Store.read` transaction: any statement but a plain read is refused before it is sent. */
  private readonly readOnly: boolean;

  constructor(
    tx: SqlTx,
    rewrite: (sql: string) => string,
    cache: Map<string, string>,
    bodies: ImmutableCache,
    clock: StoreClockSource,
    dialect: SqlDialect,
    known: TransactionRows,
    readOnly: boolean,
  ) {
    this.readOnly = readOnly;
    this.tx = tx;
    this.rewrite = rewrite;
    this.cache = cache;
    this.bodies = bodies;
    this.statements = {
      dialect,
      known,
      q: <R extends SqlRow>(sql: string, params?: readonly SqlParam[]) => this.q<R>(sql, params),
    };
    this.writer = new ChangeWriter(this.statements);
    this.clock = new StoreClock(this.statements, clock);
  }

  private async q<R extends SqlRow>(sql: string, params: readonly SqlParam[] = []): Promise<R[]> {
    if (this.writer.mustFlush()) await this.writer.flushWhere((table) => sql.includes(table));
    // Checked here rather than left to the server: PostgreSQL answers a write in a READ ONLY
    // transaction with the standby's SQLSTATE (25006), which the driver reads as "reconnect".
    if (this.readOnly && !isPlainRead(sql))
      throw new QlrError(
        "internal",
        `a read-only store transaction tried to write: ${sql.slice(0, 60)}`,
      );
    let text = this.cache.get(sql);
    if (text === undefined) {
      text = this.rewrite(sql);
      this.cache.set(sql, text);
    }
    return this.tx.query<R>(text, params);
  }

  observe(hostNowMs: number): Promise<number> {
    return this.clock.observe(hostNowMs);
  }

  /**
   * A change's rows are queued (written before the next statement that names their table, or
   * by `flush`), its alerts written into the outbox, and the store clock's observation moved
   * to its latest time.
   */
  async apply(change: ChangeSet): Promise<void> {
    const times = [
      ...change.events.map((event) => event.atMs),
      ...change.runs.map((run) => run.after.updatedAtMs),
    ];
    if (
      times.length === 0 &&
      change.steps.length === 0 &&
      change.attempts.length === 0 &&
      change.admissions.length === 0 &&
      change.mutations.length === 0
    )
      return;
    await this.writer.queue(change);
    await notifications.enqueueAlerts(this.statements, this, change);
    if (times.length > 0) await this.clock.advanceWatermark(Math.max(...times));
  }

  /** Writes everything `apply` queued (see `ChangeWriter.flush`); the store calls it as the body ends. */
  flush(): Promise<void> {
    return this.writer.flush();
  }

  listDueNotifications(nowMs: number, limit: number): Promise<NotificationEntry[]> {
    return notifications.listDueNotifications(this.statements, nowMs, limit);
  }

  getNotification(id: string): Promise<NotificationEntry | null> {
    return notifications.getNotification(this.statements, id);
  }

  updateNotification(entry: NotificationEntry, expectedVersion: number): Promise<void> {
    return notifications.updateNotification(this.statements, entry, expectedVersion);
  }

  listNotifications(filter: NotificationListFilter): Promise<NotificationEntry[]> {
    return notifications.listNotifications(this.statements, filter);
  }

  preloadRuns(runIds: readonly string[]): Promise<void> {
    return runs.preloadRuns(this.statements, runIds);
  }

  getRun(runId: string): Promise<Run | null> {
    return runs.getRun(this.statements, runId);
  }

  getRunByIdempotencyKey(key: string): Promise<Run | null> {
    return runs.getRunByIdempotencyKey(this.statements, key);
  }

  getSteps(runId: string): Promise<StepRun[]> {
    return runs.getSteps(this.statements, runId);
  }

  getStep(stepRunId: string): Promise<StepRun | null> {
    return runs.getStep(this.statements, stepRunId);
  }

  getAttempts(runId: string): Promise<RunAttempt[]> {
    return runs.getAttempts(this.statements, runId);
  }

  getAttempt(attemptId: string): Promise<RunAttempt | null> {
    return runs.getAttempt(this.statements, attemptId);
  }

  getAdmission(
    runId: string,
    stepRunId: string,
    stepRunVersion: number,
  ): Promise<AdmissionReceipt | null> {
    return runs.getAdmission(this.statements, runId, stepRunId, stepRunVersion);
  }

  existingAttemptIds(attemptIds: readonly string[]): Promise<string[]> {
    return runs.existingAttemptIds(this.statements, attemptIds);
  }

  listMutations(runId: string): Promise<StepMutation[]> {
    return runs.listMutations(this.statements, runId);
  }

  getPlan(digest: string): Promise<WorkflowPlan | null> {
    return packages.readBody(this.statements, this.bodies, "plan", [digest]);
  }

  findPlan(inPackage: string, generation: number, workflow: string) {
    return packages.readBody<WorkflowPlan>(this.statements, this.bodies, "planOfWorkflow", [
      inPackage,
      generation,
      workflow,
    ]);
  }

  getReconciliation(digest: string): Promise<ReconciliationReceipt | null> {
    return packages.readBody(this.statements, this.bodies, "reconciliation", [digest]);
  }

  getTaskDefinition(revision: string): Promise<TaskDefinition | null> {
    return packages.readBody(this.statements, this.bodies, "definition", [revision]);
  }

  getTaskDefinitionFor(reconciliationDigest: string, task: string): Promise<TaskDefinition | null> {
    return packages.readBody(this.statements, this.bodies, "definitionOfTask", [
      reconciliationDigest,
      task,
    ]);
  }

  getPackageHead(name: string): Promise<PackageHead | null> {
    return packages.getPackageHead(this.statements, name);
  }

  listPackageHeads(limit: number): Promise<PackageHead[]> {
    return packages.listPackageHeads(this.statements, limit);
  }

  listGenerations(name: string, limit: number): Promise<Omit<Generation, "manifest">[]> {
    return packages.listGenerations(this.statements, name, limit);
  }

  getGeneration(name: string, generation: number): Promise<Generation | null> {
    return packages.getGeneration(this.statements, name, generation);
  }

  putGeneration(
    generation: Generation,
    reconciliation: ReconciliationReceipt,
    definitions: readonly TaskDefinition[],
    plans: readonly WorkflowPlan[],
    previousGeneration: number | null,
  ): Promise<void> {
    return packages.putGeneration(
      this.statements,
      this.clock,
      generation,
      reconciliation,
      definitions,
      plans,
      previousGeneration,
    );
  }

  getSchedules(packageName: string): Promise<ScheduleState[]> {
    return packages.getSchedules(this.statements, packageName);
  }

  listDueSchedules(nowMs: number, limit: number): Promise<ScheduleState[]> {
    return packages.listDueSchedules(this.statements, nowMs, limit);
  }

  putSchedule(state: ScheduleState, expectedVersion: number | null): Promise<void> {
    return packages.putSchedule(this.statements, state, expectedVersion);
  }

  deleteSchedule(packageName: string, name: string): Promise<void> {
    return packages.deleteSchedule(this.statements, packageName, name);
  }

  listCancellingRuns(afterRunId: string | null, limit: number): Promise<string[]> {
    return stageListings.listCancellingRuns(this.statements, afterRunId, limit);
  }

  listFrontierRuns(afterRunId: string | null, limit: number): Promise<string[]> {
    return stageListings.listFrontierRuns(this.statements, afterRunId, limit);
  }

  clearFrontierMark(runId: string): Promise<void> {
    return this.writer.clearFrontierMark(runId);
  }

  listAdmissionCandidates(
    after: AdmissionCandidate | null,
    limit: number,
    nowMs: number,
  ): Promise<ListedAdmissionCandidate[]> {
    return stageListings.listAdmissionCandidates(this.statements, after, limit, nowMs);
  }

  countLiveTaskAttempts(packageName: string, task: string): Promise<number> {
    return stageListings.countLiveTaskAttempts(this.statements, packageName, task);
  }

  countLiveAttempts(executor: ExecutorType): Promise<number> {
    return stageListings.countLiveAttempts(this.statements, executor);
  }

  listQueuedOrdinaryRuns(
    afterRunId: string | null,
    limit: number,
    nowMs: number,
  ): Promise<string[]> {
    return stageListings.listQueuedOrdinaryRuns(this.statements, afterRunId, limit, nowMs);
  }

  listAttempts(
    executor: ExecutorType,
    statuses: readonly RunAttempt["status"][],
    afterAttemptId: string | null,
    limit: number,
    ownerNodeId?: string,
  ): Promise<RunAttempt[]> {
    return stageListings.listAttempts(
      this.statements,
      executor,
      statuses,
      afterAttemptId,
      limit,
      ownerNodeId,
    );
  }

  listOrphanedAttempts(
    executor: ExecutorType,
    nowMs: number,
    afterAttemptId: string | null,
    limit: number,
  ): Promise<RunAttempt[]> {
    return coordinators.listOrphanedAttempts(
      this.statements,
      executor,
      nowMs,
      afterAttemptId,
      limit,
    );
  }

  getCoordinator(nodeId: string): Promise<CoordinatorRecord | null> {
    return coordinators.getCoordinator(this.statements, nodeId);
  }

  putCoordinator(record: CoordinatorRecord, expectedIncarnation: number | null): Promise<void> {
    return coordinators.putCoordinator(this.statements, record, expectedIncarnation);
  }

  listCoordinators(limit: number): Promise<CoordinatorRecord[]> {
    return coordinators.listCoordinators(this.statements, limit);
  }

  listClaimableRemote(pool: string, nowMs: number, limit: number): Promise<RunAttempt[]> {
    return coordinators.listClaimableRemote(this.statements, pool, nowMs, limit);
  }

  listExpiredLeases(
    nowMs: number,
    afterAttemptId: string | null,
    limit: number,
  ): Promise<RunAttempt[]> {
    return coordinators.listExpiredLeases(this.statements, nowMs, afterAttemptId, limit);
  }

  terminalRunAtRank(rank: number): Promise<PurgeKey | null> {
    return retention.terminalRunAtRank(this.statements, rank);
  }

  listPurgeCandidates(
    after: PurgeKey | null,
    end: PurgeKey,
    limit: number,
  ): Promise<PurgeCandidate[]> {
    return retention.listPurgeCandidates(this.statements, after, end, limit);
  }

  getPurgeCandidate(runId: string): Promise<PurgeCandidate | null> {
    return retention.getPurgeCandidate(this.statements, runId);
  }

  purgeRun(runId: string): Promise<PurgedRun> {
    return retention.purgeRun(this.statements, runId);
  }

  listRuns(filter: RunListFilter): Promise<Run[]> {
    return observation.listRuns(this.statements, filter);
  }

  listEvents(runId: string, afterSeq: number, limit: number): Promise<RunEvent[]> {
    return observation.listEvents(this.statements, runId, afterSeq, limit);
  }

  countRunsByStatus(): Promise<Record<RunStatus, number>> {
    return observation.countRunsByStatus(this.statements);
  }

  overview(nowMs: number, hours: number): Promise<Overview> {
    return observation.overview(this.statements, nowMs, hours);
  }
}
