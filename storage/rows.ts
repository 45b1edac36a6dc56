import { admissionEventId, workflowAttemptId } from "../src/admission.ts";
import { eventId } from "../src/aggregate.ts";
import { canonicalJson, type JsonValue } from "../src/canonical-json.ts";
import type { Digest } from "../src/digest.ts";
import type {
  AdmissionReceipt,
  ChangeSet,
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
 * Row types are separate from domain types: each table is stated once as its columns, each
 * column with the field it stores and how that field is written and read back, and one writer
 * and one reader serve every table. Status columns are checked by the schema (CHECK
 * constraints), so the casts below read values the database has already constrained. Integers
 * may arrive as bigint-ish strings from some drivers, so every numeric column goes through
 * `asNumber()`.
 */

function asNumber(value: unknown): number {
  return typeof value === "number" ? value : Number(value);
}

function asNumberOrNull(value: unknown): number | null {
  return value === null || value === undefined ? null : asNumber(value);
}

function asTextOrNull(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  return typeof value === "string"
    ? value
    : typeof value === "number" || typeof value === "bigint"
      ? String(value)
      : JSON.stringify(value);
}

/** A JSON column: text on SQLite, text or an already-parsed value on some PostgreSQL drivers. */
function asJsonOrNull(value: unknown): JsonValue | null {
  if (value === null || value === undefined) return null;
  return typeof value === "string" ? (JSON.parse(value) as JsonValue) : (value as JsonValue);
}

/**
 * One column: its name, how the field it stores is written and how it is read back. The whole
 * value and the whole row are there for a column that derives from others (an event's id).
 */
interface Column<V, N extends string, T = unknown> {
  readonly name: N;
  /**
   * What the column holds: a statement whose parameters have no column to take a type from (a
   * multi-row `VALUES` list on PostgreSQL, which would read them as text) casts them to it.
   */
  readonly type: ColumnType;
  write(field: V, value: T): SqlParam;
  read(stored: unknown, row: SqlRow): V;
}

/** A table's columns by the field each stores: every field of `T` has its column. */
type ColumnsOf<T> = { readonly [F in keyof T]-?: Column<T[F], string, T> };

type ColumnNameOf<S> = {
  [F in keyof S]: S[F] extends { readonly name: infer N } ? N : never;
}[keyof S];

/** The two kinds of column the schema has: TEXT (JSON included) and INTEGER or BIGINT. */
export type ColumnType = "text" | "integer";

/** A table read whole into its domain type and written whole from it. */
export interface RowTable<T, C extends string = string> {
  readonly name: string;
  /** In the order of the fields of its spec: the order of every SELECT, INSERT and parameter list. */
  readonly columns: readonly C[];
  readonly read: (row: SqlRow) => T;
  /** The parameters that write `columns` (every column unless named) of `value`, in their order. */
  params(value: T, columns?: readonly C[]): SqlParam[];
  /** Every column but `excluded`, in their order (what an update of a row by its key rewrites). */
  columnsBut(excluded: C): C[];
  /**
   * `row` with the fields of `columns` read back from `params` (their values, in their order):
   * the row a SELECT returns after an UPDATE of those columns, the others kept as `row` has them.
   */
  withColumns(row: T, columns: readonly C[], params: readonly SqlParam[]): T;
  typeOf(column: C): ColumnType;
}

/**
 * The table `name` with `columns`. Called with the domain type first (`rowTable<Run>()(…)`) so
 * that the column names stay literal types, which the lists of mutable columns are checked by.
 */
function rowTable<T>() {
  return <const S extends ColumnsOf<T>>(
    name: string,
    columns: S,
  ): RowTable<T, ColumnNameOf<S> & string> => {
    const fields = Object.keys(columns) as (keyof T & string)[];
    const writers = new Map<string, (value: T) => SqlParam>();
    const types = new Map<string, ColumnType>();
    for (const field of fields) {
      const column = columns[field];
      writers.set(column.name, (value) => column.write(value[field], value));
      types.set(column.name, column.type);
    }
    const writerOf = (column: string): ((value: T) => SqlParam) => {
      const writer = writers.get(column);
      if (writer === undefined) throw new Error(`${name} has no column ${column}`);
      return writer;
    };
    const all = fields.map((field) => columns[field].name as ColumnNameOf<S> & string);
    const fieldsByColumn = new Map(fields.map((field) => [columns[field].name, field]));
    const fieldOf = (column: string): keyof T & string => {
      const field = fieldsByColumn.get(column);
      if (field === undefined) throw new Error(`${name} has no column ${column}`);
      return field;
    };
    const allWriters = all.map(writerOf);
    return {
      name,
      columns: all,
      read: (row) => {
        const value: Partial<Record<keyof T, unknown>> = {};
        for (const field of fields) {
          const column = columns[field];
          value[field] = column.read(row[column.name], row);
        }
        return value as T;
      },
      columnsBut: (excluded) => all.filter((column) => column !== excluded),
      withColumns: (row, named, params) => {
        const stored: SqlRow = {};
        named.forEach((column, index) => {
          stored[column] = params[index] ?? null;
        });
        const value: Partial<Record<keyof T, unknown>> = { ...row };
        for (const column of named) {
          const field = fieldOf(column);
          value[field] = columns[field].read(stored[column], stored);
        }
        return value as T;
      },
      typeOf: (column) => {
        const type = types.get(column);
        if (type === undefined) throw new Error(`${name} has no column ${column}`);
        return type;
      },
      params: (value, named) =>
        named === undefined
          ? allWriters.map((write) => write(value))
          : named.map((column) => writerOf(column)(value)),
    };
  };
}

/** Text as it is; a literal union or a digest is read as the type the schema constrains it to. */
function text<V extends string, N extends string>(name: N): Column<V, N> {
  return { name, type: "text", write: (field) => field, read: (stored) => String(stored) as V };
}

function textOrNull<V extends string | null, N extends string>(name: N): Column<V, N> {
  return {
    name,
    type: "text",
    write: (field) => field,
    read: (stored) => asTextOrNull(stored) as V,
  };
}

function integer<N extends string>(name: N): Column<number, N> {
  return { name, type: "integer", write: (field) => field, read: asNumber };
}

function integerOrNull<N extends string>(name: N): Column<number | null, N> {
  return { name, type: "integer", write: (field) => field, read: asNumberOrNull };
}

/** A structured field as JSON text. */
function json<V, N extends string>(name: N): Column<V, N> {
  return {
    name,
    type: "text",
    write: (field) => JSON.stringify(field),
    read: (stored) => JSON.parse(String(stored)) as V,
  };
}

/** An output as stored: canonical JSON text, or NULL for none (a JSON `null` output is no output). */
function output<N extends string>(name: N): Column<JsonValue | null, N> {
  return {
    name,
    type: "text",
    write: (field) => (field === null ? null : canonicalJson(field)),
    read: asJsonOrNull,
  };
}

export const RUNS = rowTable<Run>()("runs", {
  id: text("id"),
  kind: text("kind"),
  package: text("package"),
  generation: integer("generation"),
  target: text("target"),
  planDigest: textOrNull("plan_digest"),
  reconciliationDigest: text("reconciliation_digest"),
  status: text("status"),
  version: integer("version"),
  eventSeq: integer("event_seq"),
  attemptSeq: integer("attempt_seq"),
  idempotencyKey: textOrNull("idempotency_key"),
  scheduleName: textOrNull("schedule_name"),
  cancelRequestedAtMs: integerOrNull("cancel_requested_at_ms"),
  notBeforeMs: integerOrNull("not_before_ms"),
  createdAtMs: integer("created_at_ms"),
  updatedAtMs: integer("updated_at_ms"),
  finishedAtMs: integerOrNull("finished_at_ms"),
  input: {
    name: "input",
    type: "text",
    write: (input) => canonicalJson(input),
    read: (stored) => (asJsonOrNull(stored) ?? {}) as Run["input"],
  },
  rerunOf: textOrNull("rerun_of"),
  cancelReason: textOrNull("cancel_reason"),
});

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
] as const satisfies readonly (typeof RUNS.columns)[number][];

/**
 * The mutable columns an update assigns on SQLite only when their value changed: those an
 * index (its key or its WHERE), a CHECK constraint or a foreign key of the table names. SQLite
 * rewrites the entries of every index naming an assigned column and checks every constraint
 * naming one, even when the value stays; the other columns cost nothing more to assign (the
 * row is written whole either way), and assigning them always keeps the statement texts few.
 * test/storage/changed-columns-updates.test.ts reads the schema to keep these lists whole.
 */
export const RUN_COLUMNS_WRITTEN_WHEN_CHANGED = [
  "status",
  "cancel_requested_at_ms",
  "cancel_reason",
  "finished_at_ms",
] as const satisfies readonly (typeof RUN_MUTABLE_COLUMNS)[number][];

/**
 * A step's columns but `position`, which only orders a run's steps: it is written once, when the
 * step is inserted (`stepParams`), and read by no step.
 */
export const STEPS = rowTable<StepRun>()("step_runs", {
  id: text("id"),
  runId: text("run_id"),
  name: text("name"),
  task: text("task"),
  needs: json("needs"),
  status: text("status"),
  version: integer("version"),
  digest: text("digest"),
  attemptCount: integer("attempt_count"),
  readyAtMs: integerOrNull("ready_at_ms"),
  notBeforeMs: integerOrNull("not_before_ms"),
  startedAtMs: integerOrNull("started_at_ms"),
  finishedAtMs: integerOrNull("finished_at_ms"),
  createdAtMs: integer("created_at_ms"),
  output: output("output"),
});

export const STEP_INSERT_COLUMNS = [...STEPS.columns, "position"] as const;

/** The columns a step update may change (see RUN_MUTABLE_COLUMNS for why the rest are never rewritten). */
export const STEP_MUTABLE_COLUMNS = [
  "status",
  "version",
  "digest",
  "attempt_count",
  "ready_at_ms",
  "not_before_ms",
  "started_at_ms",
  "finished_at_ms",
  "output",
] as const satisfies readonly (typeof STEPS.columns)[number][];

/** See RUN_COLUMNS_WRITTEN_WHEN_CHANGED. */
export const STEP_COLUMNS_WRITTEN_WHEN_CHANGED = [
  "status",
] as const satisfies readonly (typeof STEP_MUTABLE_COLUMNS)[number][];

/** New steps are stored at their position in the change set, which is the plan's topological order. */
export function stepParams(step: StepRun, change: ChangeSet): SqlParam[] {
  const position = change.steps.findIndex((candidate) => candidate.after.id === step.id);
  return [...STEPS.params(step), position];
}

export const ATTEMPTS = rowTable<RunAttempt>()("run_attempts", {
  id: text("id"),
  runId: text("run_id"),
  stepRunId: textOrNull("step_run_id"),
  stepRunVersion: integerOrNull("step_run_version"),
  number: integer("number"),
  status: text("status"),
  executor: text("executor"),
  pool: textOrNull("pool"),
  version: integer("version"),
  createdAtMs: integer("created_at_ms"),
  startedAtMs: integerOrNull("started_at_ms"),
  finishedAtMs: integerOrNull("finished_at_ms"),
  deadlineAtMs: integerOrNull("deadline_at_ms"),
  timeoutMs: integer("timeout_ms"),
  exitCode: integerOrNull("exit_code"),
  signal: textOrNull("signal"),
  pid: integerOrNull("pid"),
  processStartTicks: textOrNull("process_start_ticks"),
  bootId: textOrNull("boot_id"),
  stopReason: textOrNull("stop_reason"),
  stopRequestedAtMs: integerOrNull("stop_requested_at_ms"),
  error: textOrNull("error"),
  leaseWorkerId: textOrNull("lease_worker_id"),
  leaseVersion: integer("lease_version"),
  leaseExpiresAtMs: integerOrNull("lease_expires_at_ms"),
  leaseSecretDigest: textOrNull("lease_secret_digest"),
  ownerNodeId: textOrNull("owner_node_id"),
  output: output("output"),
});

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
] as const satisfies readonly (typeof ATTEMPTS.columns)[number][];

/** See RUN_COLUMNS_WRITTEN_WHEN_CHANGED. */
export const ATTEMPT_COLUMNS_WRITTEN_WHEN_CHANGED = [
  "status",
  "stop_reason",
  "lease_expires_at_ms",
  "lease_secret_digest",
  "owner_node_id",
] as const satisfies readonly (typeof ATTEMPT_MUTABLE_COLUMNS)[number][];

/**
 * The id column as stored: NULL for the id derived from the run and sequence (every `evt:`
 * id), which is derived again on reading; any other id as it is (migration 0009).
 */
export function storedEventId(event: Pick<RunEvent, "id" | "runId" | "seq">): string | null {
  return event.id === eventId(event.runId, event.seq) ? null : event.id;
}

export const EVENTS = rowTable<RunEvent>()("run_events", {
  id: {
    name: "id",
    type: "text",
    write: (_id, event: RunEvent) => storedEventId(event),
    read: (stored, row) => asTextOrNull(stored) ?? eventId(String(row.run_id), asNumber(row.seq)),
  },
  runId: text("run_id"),
  seq: integer("seq"),
  type: text("type"),
  atMs: integer("at_ms"),
  stepRunId: textOrNull("step_run_id"),
  attemptId: textOrNull("attempt_id"),
  data: json("data"),
});

export const MUTATIONS = rowTable<StepMutation>()("step_mutations", {
  runId: text("run_id"),
  stepRunId: text("step_run_id"),
  version: integer("version"),
  fromStatus: textOrNull("from_status"),
  toStatus: text("to_status"),
  fromDigest: textOrNull("from_digest"),
  toDigest: text("to_digest"),
  eventSeq: integer("event_seq"),
  atMs: integer("at_ms"),
});

/**
 * An admission receipt's row (migration 0010): its key (run, step, epoch) as columns and a JSON
 * body without what the key determines. The attempt and event ids derive from the key, and the
 * step's digest at admission is the `to_digest` of the step's mutation of that epoch, so each is
 * stored once. The receipt's own digest stays in the body: replay recomputes it over the values
 * read back, so a wrong one fails it.
 */
export const ADMISSION_DERIVED_FIELDS = [
  "runId",
  "stepRunId",
  "stepRunVersion",
  "attemptId",
  "eventId",
  "stepRunDigest",
] as const satisfies readonly (keyof AdmissionReceipt)[];

export const ADMISSION_COLUMNS = ["run_id", "step_run_id", "step_run_version", "body"] as const;

/**
 * Reads receipts with the step digest their body leaves out; `rest` follows `FROM
 * admission_receipts a`. The digest is a subquery by the mutation's primary key, not a join:
 * PostgreSQL planned the join of a page of runs' receipts as a hash join over a sequential scan
 * of every step mutation ever written (≈ 1 ms of server time per workflow step at 10,000 steps,
 * docs/PERFORMANCE.md, "PostgreSQL's server time per unit"), while a subquery is one index probe
 * per receipt read on either dialect. A receipt without its mutation reads a null digest, as
 * the left join did.
 */
export function admissionSelect(rest: string): string {
  return `SELECT a.run_id, a.step_run_id, a.step_run_version, a.body, (SELECT m.to_digest FROM step_mutations m WHERE m.step_run_id = a.step_run_id AND m.version = a.step_run_version) AS step_run_digest FROM admission_receipts a ${rest}`;
}

export type AdmissionRow = Record<(typeof ADMISSION_COLUMNS)[number] | "step_run_digest", unknown>;

export function admissionParams(receipt: AdmissionReceipt): SqlParam[] {
  const body: Partial<Record<keyof AdmissionReceipt, unknown>> = { ...receipt };
  for (const key of ADMISSION_DERIVED_FIELDS) delete body[key];
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
  const stepRunVersion = asNumber(row.step_run_version);
  const stepRunDigest = asTextOrNull(row.step_run_digest);
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

export const COORDINATORS = rowTable<CoordinatorRecord>()("coordinators", {
  nodeId: text("node_id"),
  incarnation: integer("incarnation"),
  host: text("host"),
  bootId: textOrNull("boot_id"),
  startedAtMs: integer("started_at_ms"),
  heartbeatAtMs: integer("heartbeat_at_ms"),
  leaseExpiresAtMs: integer("lease_expires_at_ms"),
});

export const PACKAGE_HEADS = rowTable<PackageHead>()("packages", {
  package: text("name"),
  generation: integer("generation"),
  manifestDigest: text("manifest_digest"),
  reconciliationDigest: text("reconciliation_digest"),
  updatedAtMs: integer("updated_at_ms"),
});

export const SCHEDULES = rowTable<ScheduleState>()("schedules", {
  package: text("package"),
  name: text("name"),
  generation: integer("generation"),
  spec: json("spec"),
  nextFireAtMs: integerOrNull("next_fire_at_ms"),
  lastFireAtMs: integerOrNull("last_fire_at_ms"),
  lastRunId: textOrNull("last_run_id"),
  missedFires: integer("missed_fires"),
  skippedOverlaps: integer("skipped_overlaps"),
  version: integer("version"),
});

export const NOTIFICATIONS = rowTable<NotificationEntry>()("notifications", {
  id: text("id"),
  runId: text("run_id"),
  package: text("package"),
  event: text("event"),
  notifier: json("notifier"),
  payload: text("payload"),
  state: text("state"),
  attempts: integer("attempts"),
  nextAttemptAtMs: integer("next_attempt_at_ms"),
  lastError: textOrNull("last_error"),
  createdAtMs: integer("created_at_ms"),
  updatedAtMs: integer("updated_at_ms"),
  deliveredAtMs: integerOrNull("delivered_at_ms"),
  version: integer("version"),
  stepName: textOrNull("step_name"),
});
