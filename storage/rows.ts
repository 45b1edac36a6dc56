import { admissionEventId, workflowAttemptId } from "../src/admission.ts";
import { eventId } from "../src/aggregate.ts";
import { canonicalJson, type JsonValue } from "../src/canonical-json.ts";
import type { Digest } from "../src/digest.ts";
import type {
  AdmissionReceipt,
  ChangeSet,
  EventType,
  Run,
  RunAttempt,
  RunEvent,
  StepMutation,
  StepRun,
} from "../src/model.ts";
import type { CoordinatorRecord, PackageHead } from "../src/ports.ts";
import type { NotificationEntry } from "../src/notifications.ts";
import type { ScheduleState } from "../src/schedules.ts";
import type { SqlParam, SqlRow } from "./driver.ts";

/**
 * Row types are separate from domain types, with one mapper per table. Status columns are
 * checked by the schema (CHECK constraints), so the casts below read values the database
 * has already constrained. Integers may arrive as bigint-ish strings from some drivers, so
 * every numeric column goes through `num()`.
 */

function num(value: unknown): number {
  return typeof value === "number" ? value : Number(value);
}

function numOrNull(value: unknown): number | null {
  return value === null || value === undefined ? null : num(value);
}

function textOrNull(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  return typeof value === "string"
    ? value
    : typeof value === "number" || typeof value === "bigint"
      ? String(value)
      : JSON.stringify(value);
}

/**
 * How each column of a table is written from its domain value. The key order is the column
 * order of every SELECT and INSERT, so the column list, the full parameter list and the
 * parameters of an update all come from this one table.
 */
type ColumnWriters<T> = Readonly<Record<string, (value: T) => SqlParam>>;

function columnsOf<W extends ColumnWriters<never>>(writers: W): readonly (keyof W & string)[] {
  return Object.keys(writers);
}

function paramsOf<T, C extends string>(
  writers: Readonly<Record<C, (value: T) => SqlParam>>,
  columns: readonly C[],
  value: T,
): SqlParam[] {
  return columns.map((column) => writers[column](value));
}

const RUN_WRITERS = {
  id: (run: Run) => run.id,
  kind: (run: Run) => run.kind,
  package: (run: Run) => run.package,
  generation: (run: Run) => run.generation,
  target: (run: Run) => run.target,
  plan_digest: (run: Run) => run.planDigest,
  reconciliation_digest: (run: Run) => run.reconciliationDigest,
  status: (run: Run) => run.status,
  version: (run: Run) => run.version,
  event_seq: (run: Run) => run.eventSeq,
  attempt_seq: (run: Run) => run.attemptSeq,
  idempotency_key: (run: Run) => run.idempotencyKey,
  schedule_name: (run: Run) => run.scheduleName,
  cancel_requested_at_ms: (run: Run) => run.cancelRequestedAtMs,
  not_before_ms: (run: Run) => run.notBeforeMs,
  created_at_ms: (run: Run) => run.createdAtMs,
  updated_at_ms: (run: Run) => run.updatedAtMs,
  finished_at_ms: (run: Run) => run.finishedAtMs,
  input: (run: Run) => canonicalJson(run.input),
  rerun_of: (run: Run) => run.rerunOf,
  cancel_reason: (run: Run) => run.cancelReason,
} satisfies ColumnWriters<Run>;

export const RUN_COLUMNS = columnsOf(RUN_WRITERS);
export type RunRow = Record<(typeof RUN_COLUMNS)[number], unknown>;

/**
 * The columns a run update may change. Identity and creation columns are never rewritten:
 * setting the primary key, even to its own value, makes SQLite search every child table for
 * references, and repeating unchanged columns only makes journal records larger.
 */
export const RUN_MUTABLE_COLUMNS = [
  "status",
  "version",
  "event_seq",
  "attempt_seq",
  "cancel_requested_at_ms",
  "cancel_reason",
  "not_before_ms",
  "updated_at_ms",
  "finished_at_ms",
] as const satisfies readonly (typeof RUN_COLUMNS)[number][];

export function runMutableParams(run: Run): SqlParam[] {
  return paramsOf(RUN_WRITERS, RUN_MUTABLE_COLUMNS, run);
}

export function runParams(run: Run): SqlParam[] {
  return paramsOf(RUN_WRITERS, RUN_COLUMNS, run);
}

/** A JSON column: text on SQLite, text or an already-parsed value on some PostgreSQL drivers. */
function jsonOrNull(value: unknown): JsonValue | null {
  if (value === null || value === undefined) return null;
  return typeof value === "string" ? (JSON.parse(value) as JsonValue) : (value as JsonValue);
}

/** An output as stored: canonical JSON text, or NULL for none (a JSON `null` output is no output). */
function outputParam(output: JsonValue | null): string | null {
  return output === null ? null : canonicalJson(output);
}

export function toRun(row: RunRow): Run {
  return {
    id: String(row.id),
    kind: row.kind as Run["kind"],
    package: String(row.package),
    generation: num(row.generation),
    target: String(row.target),
    planDigest: textOrNull(row.plan_digest) as Digest | null,
    reconciliationDigest: String(row.reconciliation_digest) as Digest,
    status: row.status as Run["status"],
    version: num(row.version),
    eventSeq: num(row.event_seq),
    attemptSeq: num(row.attempt_seq),
    idempotencyKey: textOrNull(row.idempotency_key),
    scheduleName: textOrNull(row.schedule_name),
    cancelRequestedAtMs: numOrNull(row.cancel_requested_at_ms),
    notBeforeMs: numOrNull(row.not_before_ms),
    createdAtMs: num(row.created_at_ms),
    updatedAtMs: num(row.updated_at_ms),
    finishedAtMs: numOrNull(row.finished_at_ms),
    input: (jsonOrNull(row.input) ?? {}) as Run["input"],
    rerunOf: textOrNull(row.rerun_of),
    cancelReason: textOrNull(row.cancel_reason) as Run["cancelReason"],
  };
}

export const STEP_COLUMNS = [
  "id",
  "run_id",
  "position",
  "name",
  "task",
  "needs",
  "status",
  "version",
  "digest",
  "attempt_count",
  "ready_at_ms",
  "not_before_ms",
  "started_at_ms",
  "finished_at_ms",
  "created_at_ms",
  "output",
] as const;
export type StepRow = Record<(typeof STEP_COLUMNS)[number], unknown>;

/** New steps are stored at their position in the change set, which is the plan's topological order. */
export function stepParams(step: StepRun, change: ChangeSet): SqlParam[] {
  const position = change.steps.findIndex((candidate) => candidate.after.id === step.id);
  return [
    step.id,
    step.runId,
    position,
    step.name,
    step.task,
    JSON.stringify(step.needs),
    step.status,
    step.version,
    step.digest,
    step.attemptCount,
    step.readyAtMs,
    step.notBeforeMs,
    step.startedAtMs,
    step.finishedAtMs,
    step.createdAtMs,
    outputParam(step.output),
  ];
}

export function toStep(row: StepRow): StepRun {
  return {
    id: String(row.id),
    runId: String(row.run_id),
    name: String(row.name),
    task: String(row.task),
    needs: JSON.parse(String(row.needs)) as string[],
    status: row.status as StepRun["status"],
    version: num(row.version),
    digest: String(row.digest) as Digest,
    attemptCount: num(row.attempt_count),
    readyAtMs: numOrNull(row.ready_at_ms),
    notBeforeMs: numOrNull(row.not_before_ms),
    startedAtMs: numOrNull(row.started_at_ms),
    finishedAtMs: numOrNull(row.finished_at_ms),
    createdAtMs: num(row.created_at_ms),
    output: jsonOrNull(row.output),
  };
}

export function stepOutputParam(step: StepRun): string | null {
  return outputParam(step.output);
}

const ATTEMPT_WRITERS = {
  id: (attempt: RunAttempt) => attempt.id,
  run_id: (attempt: RunAttempt) => attempt.runId,
  step_run_id: (attempt: RunAttempt) => attempt.stepRunId,
  step_run_version: (attempt: RunAttempt) => attempt.stepRunVersion,
  number: (attempt: RunAttempt) => attempt.number,
  status: (attempt: RunAttempt) => attempt.status,
  executor: (attempt: RunAttempt) => attempt.executor,
  pool: (attempt: RunAttempt) => attempt.pool,
  version: (attempt: RunAttempt) => attempt.version,
  created_at_ms: (attempt: RunAttempt) => attempt.createdAtMs,
  started_at_ms: (attempt: RunAttempt) => attempt.startedAtMs,
  finished_at_ms: (attempt: RunAttempt) => attempt.finishedAtMs,
  deadline_at_ms: (attempt: RunAttempt) => attempt.deadlineAtMs,
  timeout_ms: (attempt: RunAttempt) => attempt.timeoutMs,
  exit_code: (attempt: RunAttempt) => attempt.exitCode,
  signal: (attempt: RunAttempt) => attempt.signal,
  pid: (attempt: RunAttempt) => attempt.pid,
  process_start_ticks: (attempt: RunAttempt) => attempt.processStartTicks,
  boot_id: (attempt: RunAttempt) => attempt.bootId,
  stop_reason: (attempt: RunAttempt) => attempt.stopReason,
  stop_requested_at_ms: (attempt: RunAttempt) => attempt.stopRequestedAtMs,
  error: (attempt: RunAttempt) => attempt.error,
  lease_worker_id: (attempt: RunAttempt) => attempt.leaseWorkerId,
  lease_version: (attempt: RunAttempt) => attempt.leaseVersion,
  lease_expires_at_ms: (attempt: RunAttempt) => attempt.leaseExpiresAtMs,
  lease_secret_digest: (attempt: RunAttempt) => attempt.leaseSecretDigest,
  owner_node_id: (attempt: RunAttempt) => attempt.ownerNodeId,
  output: (attempt: RunAttempt) => outputParam(attempt.output),
} satisfies ColumnWriters<RunAttempt>;

export const ATTEMPT_COLUMNS = columnsOf(ATTEMPT_WRITERS);
export type AttemptRow = Record<(typeof ATTEMPT_COLUMNS)[number], unknown>;

/** The columns an attempt update may change (see RUN_MUTABLE_COLUMNS for why the rest are never rewritten). */
export const ATTEMPT_MUTABLE_COLUMNS = [
  "status",
  "version",
  "started_at_ms",
  "finished_at_ms",
  "deadline_at_ms",
  "exit_code",
  "signal",
  "pid",
  "process_start_ticks",
  "boot_id",
  "stop_reason",
  "stop_requested_at_ms",
  "error",
  "lease_worker_id",
  "lease_version",
  "lease_expires_at_ms",
  "lease_secret_digest",
  "owner_node_id",
  "output",
] as const satisfies readonly (typeof ATTEMPT_COLUMNS)[number][];

export function attemptMutableParams(attempt: RunAttempt): SqlParam[] {
  return paramsOf(ATTEMPT_WRITERS, ATTEMPT_MUTABLE_COLUMNS, attempt);
}

export function attemptParams(attempt: RunAttempt): SqlParam[] {
  return paramsOf(ATTEMPT_WRITERS, ATTEMPT_COLUMNS, attempt);
}

export function toAttempt(row: AttemptRow): RunAttempt {
  return {
    id: String(row.id),
    runId: String(row.run_id),
    stepRunId: textOrNull(row.step_run_id),
    stepRunVersion: numOrNull(row.step_run_version),
    number: num(row.number),
    status: row.status as RunAttempt["status"],
    executor: row.executor as RunAttempt["executor"],
    pool: textOrNull(row.pool),
    version: num(row.version),
    createdAtMs: num(row.created_at_ms),
    startedAtMs: numOrNull(row.started_at_ms),
    finishedAtMs: numOrNull(row.finished_at_ms),
    deadlineAtMs: numOrNull(row.deadline_at_ms),
    timeoutMs: num(row.timeout_ms),
    exitCode: numOrNull(row.exit_code),
    signal: textOrNull(row.signal),
    pid: numOrNull(row.pid),
    processStartTicks: textOrNull(row.process_start_ticks),
    bootId: textOrNull(row.boot_id),
    stopReason: textOrNull(row.stop_reason) as RunAttempt["stopReason"],
    stopRequestedAtMs: numOrNull(row.stop_requested_at_ms),
    error: textOrNull(row.error),
    leaseWorkerId: textOrNull(row.lease_worker_id),
    leaseVersion: num(row.lease_version),
    leaseExpiresAtMs: numOrNull(row.lease_expires_at_ms),
    leaseSecretDigest: textOrNull(row.lease_secret_digest),
    ownerNodeId: textOrNull(row.owner_node_id),
    output: jsonOrNull(row.output),
  };
}

const EVENT_WRITERS = {
  run_id: (event: RunEvent) => event.runId,
  seq: (event: RunEvent) => event.seq,
  // NULL for an id derived from the run and sequence (see storedEventId).
  id: (event: RunEvent) => storedEventId(event),
  type: (event: RunEvent) => event.type,
  at_ms: (event: RunEvent) => event.atMs,
  step_run_id: (event: RunEvent) => event.stepRunId,
  attempt_id: (event: RunEvent) => event.attemptId,
  data: (event: RunEvent) => JSON.stringify(event.data),
} satisfies ColumnWriters<RunEvent>;

export const EVENT_COLUMNS = columnsOf(EVENT_WRITERS);
export type EventRow = Record<(typeof EVENT_COLUMNS)[number], unknown>;

export function eventParams(event: RunEvent): SqlParam[] {
  return paramsOf(EVENT_WRITERS, EVENT_COLUMNS, event);
}

/**
 * The id column as stored: NULL for the id derived from the run and sequence (every `evt:`
 * id), which `toEvent` derives again; any other id as it is (migration 0009).
 */
export function storedEventId(event: Pick<RunEvent, "id" | "runId" | "seq">): string | null {
  return event.id === eventId(event.runId, event.seq) ? null : event.id;
}

export function toEvent(row: EventRow): RunEvent {
  const runId = String(row.run_id);
  const seq = num(row.seq);
  return {
    id: textOrNull(row.id) ?? eventId(runId, seq),
    runId,
    seq,
    type: row.type as EventType,
    atMs: num(row.at_ms),
    stepRunId: textOrNull(row.step_run_id),
    attemptId: textOrNull(row.attempt_id),
    data: JSON.parse(String(row.data)) as Record<string, unknown>,
  };
}

const MUTATION_WRITERS = {
  run_id: (mutation: StepMutation) => mutation.runId,
  step_run_id: (mutation: StepMutation) => mutation.stepRunId,
  version: (mutation: StepMutation) => mutation.version,
  from_status: (mutation: StepMutation) => mutation.fromStatus,
  to_status: (mutation: StepMutation) => mutation.toStatus,
  from_digest: (mutation: StepMutation) => mutation.fromDigest,
  to_digest: (mutation: StepMutation) => mutation.toDigest,
  event_seq: (mutation: StepMutation) => mutation.eventSeq,
  at_ms: (mutation: StepMutation) => mutation.atMs,
} satisfies ColumnWriters<StepMutation>;

export const MUTATION_COLUMNS = columnsOf(MUTATION_WRITERS);
export type MutationRow = Record<(typeof MUTATION_COLUMNS)[number], unknown>;

export function mutationParams(mutation: StepMutation): SqlParam[] {
  return paramsOf(MUTATION_WRITERS, MUTATION_COLUMNS, mutation);
}

export function toMutation(row: MutationRow): StepMutation {
  return {
    runId: String(row.run_id),
    stepRunId: String(row.step_run_id),
    version: num(row.version),
    fromStatus: textOrNull(row.from_status) as StepMutation["fromStatus"],
    toStatus: row.to_status as StepMutation["toStatus"],
    fromDigest: textOrNull(row.from_digest) as Digest | null,
    toDigest: String(row.to_digest) as Digest,
    eventSeq: num(row.event_seq),
    atMs: num(row.at_ms),
  };
}

/**
 * An admission receipt's row (migration 0010): its key (run, step, epoch) as columns and a JSON
 * body without what the key determines. The attempt and event ids derive from the key, and the
 * step's digest at admission is the `to_digest` of the step's mutation of that epoch, so each is
 * stored once. The receipt's own digest stays in the body: replay recomputes it over the values
 * read back, so a wrong one fails it.
 */
const ADMISSION_DERIVED = [
  "runId",
  "stepRunId",
  "stepRunVersion",
  "attemptId",
  "eventId",
  "stepRunDigest",
] as const satisfies readonly (keyof AdmissionReceipt)[];

export const ADMISSION_COLUMNS = ["run_id", "step_run_id", "step_run_version", "body"] as const;

/** Reads receipts with the step digest their body leaves out; `rest` follows the join. */
export function admissionSelect(rest: string): string {
  return `SELECT a.run_id, a.step_run_id, a.step_run_version, a.body, m.to_digest AS step_run_digest FROM admission_receipts a LEFT JOIN step_mutations m ON m.step_run_id = a.step_run_id AND m.version = a.step_run_version ${rest}`;
}

export type AdmissionRow = Record<(typeof ADMISSION_COLUMNS)[number] | "step_run_digest", unknown>;

export function admissionParams(receipt: AdmissionReceipt): SqlParam[] {
  const body: Partial<Record<keyof AdmissionReceipt, unknown>> = { ...receipt };
  for (const key of ADMISSION_DERIVED) delete body[key];
  return [receipt.runId, receipt.stepRunId, receipt.stepRunVersion, JSON.stringify(body)];
}

/**
 * The receipt a row stands for. A body written before migration 0010 holds every value; what
 * it holds is read as it is, so such a receipt reads exactly as it was written. A missing
 * mutation leaves the step digest out, and the receipt then fails its digest.
 */
export function toAdmission(row: AdmissionRow): AdmissionReceipt {
  const runId = String(row.run_id);
  const stepRunId = String(row.step_run_id);
  const stepRunVersion = num(row.step_run_version);
  const stepRunDigest = textOrNull(row.step_run_digest);
  return {
    runId,
    stepRunId,
    stepRunVersion,
    attemptId: workflowAttemptId(runId, stepRunId, stepRunVersion),
    eventId: admissionEventId(runId, stepRunId, stepRunVersion),
    ...(stepRunDigest === null ? {} : { stepRunDigest: stepRunDigest as Digest }),
    ...(JSON.parse(String(row.body)) as Partial<AdmissionReceipt>),
  } as AdmissionReceipt;
}

const COORDINATOR_WRITERS = {
  node_id: (record: CoordinatorRecord) => record.nodeId,
  incarnation: (record: CoordinatorRecord) => record.incarnation,
  host: (record: CoordinatorRecord) => record.host,
  boot_id: (record: CoordinatorRecord) => record.bootId,
  started_at_ms: (record: CoordinatorRecord) => record.startedAtMs,
  heartbeat_at_ms: (record: CoordinatorRecord) => record.heartbeatAtMs,
  lease_expires_at_ms: (record: CoordinatorRecord) => record.leaseExpiresAtMs,
} satisfies ColumnWriters<CoordinatorRecord>;

export const COORDINATOR_COLUMNS = columnsOf(COORDINATOR_WRITERS);
/** What a takeover rewrites: every column but the key. */
export const COORDINATOR_MUTABLE_COLUMNS = COORDINATOR_COLUMNS.filter(
  (column) => column !== "node_id",
);
export type CoordinatorRow = Record<(typeof COORDINATOR_COLUMNS)[number], unknown>;

export function coordinatorParams(record: CoordinatorRecord): SqlParam[] {
  return paramsOf(COORDINATOR_WRITERS, COORDINATOR_COLUMNS, record);
}

export function coordinatorMutableParams(record: CoordinatorRecord): SqlParam[] {
  return paramsOf(COORDINATOR_WRITERS, COORDINATOR_MUTABLE_COLUMNS, record);
}

export function toCoordinator(row: CoordinatorRow): CoordinatorRecord {
  return {
    nodeId: String(row.node_id),
    incarnation: num(row.incarnation),
    host: String(row.host),
    bootId: typeof row.boot_id === "string" ? row.boot_id : null,
    startedAtMs: num(row.started_at_ms),
    heartbeatAtMs: num(row.heartbeat_at_ms),
    leaseExpiresAtMs: num(row.lease_expires_at_ms),
  };
}

export type PackageRow = Record<
  "name" | "generation" | "manifest_digest" | "reconciliation_digest" | "updated_at_ms",
  unknown
>;

export function toPackageHead(row: PackageRow): PackageHead {
  return {
    package: String(row.name),
    generation: num(row.generation),
    manifestDigest: String(row.manifest_digest) as Digest,
    reconciliationDigest: String(row.reconciliation_digest) as Digest,
    updatedAtMs: num(row.updated_at_ms),
  };
}

const SCHEDULE_WRITERS = {
  package: (state: ScheduleState) => state.package,
  name: (state: ScheduleState) => state.name,
  generation: (state: ScheduleState) => state.generation,
  spec: (state: ScheduleState) => JSON.stringify(state.spec),
  next_fire_at_ms: (state: ScheduleState) => state.nextFireAtMs,
  last_fire_at_ms: (state: ScheduleState) => state.lastFireAtMs,
  last_run_id: (state: ScheduleState) => state.lastRunId,
  missed_fires: (state: ScheduleState) => state.missedFires,
  skipped_overlaps: (state: ScheduleState) => state.skippedOverlaps,
  version: (state: ScheduleState) => state.version,
} satisfies ColumnWriters<ScheduleState>;

export const SCHEDULE_COLUMNS = columnsOf(SCHEDULE_WRITERS);
export type ScheduleRow = Record<(typeof SCHEDULE_COLUMNS)[number], unknown>;

export function scheduleParams(state: ScheduleState): SqlParam[] {
  return paramsOf(SCHEDULE_WRITERS, SCHEDULE_COLUMNS, state);
}

export function toSchedule(row: ScheduleRow): ScheduleState {
  return {
    package: String(row.package),
    name: String(row.name),
    generation: num(row.generation),
    spec: JSON.parse(String(row.spec)) as ScheduleState["spec"],
    nextFireAtMs: numOrNull(row.next_fire_at_ms),
    lastFireAtMs: numOrNull(row.last_fire_at_ms),
    lastRunId: textOrNull(row.last_run_id),
    missedFires: num(row.missed_fires),
    skippedOverlaps: num(row.skipped_overlaps),
    version: num(row.version),
  };
}

const NOTIFICATION_WRITERS = {
  id: (entry: NotificationEntry) => entry.id,
  run_id: (entry: NotificationEntry) => entry.runId,
  package: (entry: NotificationEntry) => entry.package,
  event: (entry: NotificationEntry) => entry.event,
  notifier: (entry: NotificationEntry) => JSON.stringify(entry.notifier),
  payload: (entry: NotificationEntry) => entry.payload,
  state: (entry: NotificationEntry) => entry.state,
  attempts: (entry: NotificationEntry) => entry.attempts,
  next_attempt_at_ms: (entry: NotificationEntry) => entry.nextAttemptAtMs,
  last_error: (entry: NotificationEntry) => entry.lastError,
  created_at_ms: (entry: NotificationEntry) => entry.createdAtMs,
  updated_at_ms: (entry: NotificationEntry) => entry.updatedAtMs,
  delivered_at_ms: (entry: NotificationEntry) => entry.deliveredAtMs,
  version: (entry: NotificationEntry) => entry.version,
  step_name: (entry: NotificationEntry) => entry.stepName,
} satisfies ColumnWriters<NotificationEntry>;

export const NOTIFICATION_COLUMNS = columnsOf(NOTIFICATION_WRITERS);
export type NotificationRow = Record<(typeof NOTIFICATION_COLUMNS)[number], unknown>;

export function notificationParams(entry: NotificationEntry): SqlParam[] {
  return paramsOf(NOTIFICATION_WRITERS, NOTIFICATION_COLUMNS, entry);
}

export function toNotification(row: NotificationRow): NotificationEntry {
  return {
    id: String(row.id),
    runId: String(row.run_id),
    package: String(row.package),
    event: row.event as NotificationEntry["event"],
    notifier: JSON.parse(String(row.notifier)) as NotificationEntry["notifier"],
    payload: String(row.payload),
    state: row.state as NotificationEntry["state"],
    attempts: num(row.attempts),
    nextAttemptAtMs: num(row.next_attempt_at_ms),
    lastError: textOrNull(row.last_error),
    createdAtMs: num(row.created_at_ms),
    updatedAtMs: num(row.updated_at_ms),
    deliveredAtMs: numOrNull(row.delivered_at_ms),
    version: num(row.version),
    stepName: textOrNull(row.step_name),
  };
}

/** A table read whole into its domain type: what `SELECT <every column> FROM <table>` needs. */
export interface RowTable<T> {
  readonly name: string;
  readonly columns: readonly string[];
  read(row: SqlRow): T;
}

function rowTable<T, C extends string>(
  name: string,
  columns: readonly C[],
  read: (row: Record<C, unknown>) => T,
): RowTable<T> {
  return { name, columns, read: (row) => read(row as Record<C, unknown>) };
}

export const RUNS = rowTable("runs", RUN_COLUMNS, toRun);
export const STEPS = rowTable("step_runs", STEP_COLUMNS, toStep);
export const ATTEMPTS = rowTable("run_attempts", ATTEMPT_COLUMNS, toAttempt);
export const SCHEDULES = rowTable("schedules", SCHEDULE_COLUMNS, toSchedule);
export const NOTIFICATIONS = rowTable("notifications", NOTIFICATION_COLUMNS, toNotification);
