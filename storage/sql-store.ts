import { QlrError } from "../src/errors.ts";
import { MAX_ADMISSION_PAGE } from "../src/admission.ts";
import type {
  AdmissionReceipt,
  ChangeSet,
  ExecutorType,
  Run,
  RunAttempt,
  RunEvent,
  RunStatus,
  StepRun,
  StepMutation,
} from "../src/model.ts";
import { LIVE_ATTEMPT_STATUSES, RUN_STATUSES } from "../src/model.ts";
import type {
  Generation,
  ReconciliationReceipt,
  TaskDefinition,
  WorkflowPlan,
} from "../src/packages.ts";
import {
  alertingRuns,
  alertingSteps,
  entriesForRun,
  entriesForStep,
  notifiersForRun,
  notifiersForStep,
  type NotificationEntry,
} from "../src/notifications.ts";
import {
  MAX_STORE_PAGE,
  type AdmissionCandidate,
  type ListedAdmissionCandidate,
  type CoordinatorRecord,
  type NotificationListFilter,
  type PackageHead,
  type PurgedRun,
  type RunListFilter,
  type Store,
  type StoreTransactionOptions,
  type StoreTx,
} from "../src/ports.ts";
import type { NotifierSpec } from "../src/manifest/types.ts";
import type { PurgeCandidate, PurgeKey } from "../src/retention.ts";
import {
  HOUR_MS,
  OVERVIEW_LIST_LIMIT,
  OVERVIEW_SERIES_LIMIT,
  overviewSinceMs,
  type Overview,
  type OverviewRun,
} from "../src/overview.ts";
import type { ScheduleState } from "../src/schedules.ts";
import type {
  SqlDialect,
  SqlDriver,
  SqlParam,
  SqlRow,
  SqlTx,
  TransactionOptions,
} from "./driver.ts";
import { migrate, type Migration } from "./migrate.ts";
import * as rows from "./rows.ts";
import type { ColumnType } from "./rows.ts";
import {
  admissionKey,
  REMEMBERED_ROWS_MAX,
  TransactionRows,
  type RowOfRun,
  type RowsOfRuns,
} from "./transaction-rows.ts";

/**
 * The domain operations, written once over the driver primitive for both SQL dialects. The
 * statements are portable SQL (SQLite ≥ 3.35 and PostgreSQL both speak `RETURNING` and
 * partial indexes); the dialect differences at this level are the placeholder syntax,
 * rewritten from `?` to `$n` once per statement text, and the multi-row version updates that
 * only PostgreSQL gets (`SqlStoreTx.updateRows`). Isolation differs below: SQLite runs
 * `BEGIN IMMEDIATE` under one operation authority, PostgreSQL `SERIALIZABLE` with retries.
 */

/** Upper bound on any list the store returns in one call: the contract's. */
export const MAX_PAGE = MAX_STORE_PAGE;

function placeholders(sql: string): string {
  let index = 0;
  return sql.replace(/\?/g, () => `$${(index += 1)}`);
}

function cap(limit: number): number {
  if (!Number.isInteger(limit) || limit < 1) return 1;
  return Math.min(limit, MAX_PAGE);
}

/**
 * The JSON bodies a transaction reads by key: the table and the columns that name one row.
 * `cached`: the parsed body is kept across transactions (`ImmutableCache`), for keys whose row
 * is written once and never changes (a digest, or a reconciliation digest and a task name).
 */
const BODY_READS = {
  plan: { table: "workflow_plans", keys: ["digest"], cached: true },
  planOfWorkflow: {
    table: "workflow_plans",
    keys: ["package", "generation", "workflow"],
    cached: false,
  },
  reconciliation: { table: "reconciliation_receipts", keys: ["digest"], cached: true },
  // A revision names its definition's digest (`qltd:v1:<generation>:<digest>`): one body only.
  definition: { table: "task_definitions", keys: ["revision"], cached: true },
  definitionOfTask: {
    table: "task_definitions",
    keys: ["reconciliation_digest", "task"],
    cached: true,
  },
} as const satisfies Record<
  string,
  { readonly table: string; readonly keys: readonly string[]; readonly cached: boolean }
>;
type BodyKind = keyof typeof BODY_READS;

/** How many immutable bodies (plans, receipts, task definitions) a store keeps parsed. */
export const IMMUTABLE_CACHE_ENTRIES = 256;

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const member of Object.values(value as Record<string, unknown>)) deepFreeze(member);
  }
  return value;
}

/**
 * Parsed immutable bodies keyed by their digest (or by a key that is itself immutable, like a
 * reconciliation digest and a task name). Rows behind these keys are never updated, so the
 * cache can only ever hold the one body a key names; entries are frozen, so the core can
 * remember which objects it already verified. Bounded: least recently used entries go first.
 */
class ImmutableCache {
  private readonly entries = new Map<string, unknown>();
  get<T>(key: string): T | undefined {
    const value = this.entries.get(key);
    if (value !== undefined) {
      this.entries.delete(key);
      this.entries.set(key, value);
    }
    return value as T | undefined;
  }
  set<T>(key: string, value: T): T {
    this.entries.set(key, deepFreeze(value));
    if (this.entries.size > IMMUTABLE_CACHE_ENTRIES) {
      const oldest = this.entries.keys().next();
      if (oldest.done !== true) this.entries.delete(oldest.value);
    }
    return value;
  }
}

/**
 * Runs with a finish time (only terminal runs have one): the exact predicate of the
 * `runs_terminal_by_finish` partial index (migration 0002), so both planners walk that index.
 * The status is not filtered here on purpose (see the migration); the purge decision checks it.
 */
const TERMINAL_WITH_FINISH = "finished_at_ms IS NOT NULL";

/** The facts of the purge decision, read in one statement per run (the core decides). */
const PURGE_CANDIDATE_COLUMNS = `r.id, r.status, r.finished_at_ms, r.idempotency_key, r.frontier_due,
  (SELECT COUNT(*) FROM run_attempts a WHERE a.run_id = r.id AND a.status IN ('claimed', 'starting', 'running')) AS live_attempts,
  (SELECT COUNT(*) FROM schedules s WHERE s.last_run_id = r.id) AS schedule_refs`;

type PurgeCandidateRow = Record<
  | "id"
  | "status"
  | "finished_at_ms"
  | "idempotency_key"
  | "frontier_due"
  | "live_attempts"
  | "schedule_refs",
  unknown
>;

function toPurgeCandidate(row: PurgeCandidateRow): PurgeCandidate {
  return {
    runId: String(row.id),
    status: row.status as RunStatus,
    finishedAtMs:
      row.finished_at_ms === null || row.finished_at_ms === undefined
        ? null
        : Number(row.finished_at_ms),
    idempotencyKey: typeof row.idempotency_key === "string" ? row.idempotency_key : null,
    liveAttempts: Number(row.live_attempts),
    scheduleLastRun: Number(row.schedule_refs) > 0,
    frontierDue: Number(row.frontier_due) === 1,
  };
}

/**
 * Where store time comes from. `host`: the caller's clock reading (one host owns the store: a
 * device, PGlite, a Durable Object, tests with an injected clock). `database`: the PostgreSQL
 * server's `clock_timestamp()`, so coordinators on several hosts share one clock whatever
 * their own skew.
 */
export type StoreClockSource = "host" | "database";

/**
 * With the database clock, the persisted observation (the fail-closed guard against time going
 * back) is the sequence `qlr_store_clock_watermark` (migration 0004), and it moves in steps of
 * this much rather than on every write. Every write transaction reads it; as a row that each
 * also wrote, any two concurrent writers conflicted on it and the serializable retries of busy
 * coordinators ran out (a sequence takes no serializable read lock either). A server clock
 * stepping back by less than one step goes unnoticed; a larger step back fails closed.
 */
export const DATABASE_CLOCK_WATERMARK_STEP_MS = 1_000;

/** The most values one statement binds: Durable Object SQLite refuses more than 100. */
const MAX_BOUND_PARAMETERS = 96;
/**
 * The same on PostgreSQL, whose protocol allows 65,535: a page's rows of one table go in one
 * statement, since each statement there is a round trip to the server.
 */
const MAX_BOUND_PARAMETERS_POSTGRES = 4_096;

/**
 * The tables whose rows `apply` updates by version (compare-and-set): each update waits in
 * `SqlStoreTx.pendingUpdates` until a statement names the table or the body ends, so a page's
 * updates of one table go in one statement on PostgreSQL. `frontierMark`: the runs' update also
 * sets `frontier_due` when the change names the run (COALESCE keeps it otherwise).
 */
interface VersionedTable {
  readonly rows: rows.RowTable<unknown>;
  readonly mutable: readonly string[];
  /** What a conflict message calls a row. */
  readonly noun: string;
  readonly frontierMark: boolean;
}

const VERSIONED_TABLES = {
  runs: {
    rows: rows.RUNS,
    mutable: rows.RUN_MUTABLE_COLUMNS,
    noun: "run",
    frontierMark: true,
  },
  step_runs: {
    rows: rows.STEPS,
    mutable: rows.STEP_MUTABLE_COLUMNS,
    noun: "step run",
    frontierMark: false,
  },
  run_attempts: {
    rows: rows.ATTEMPTS,
    mutable: rows.ATTEMPT_MUTABLE_COLUMNS,
    noun: "attempt",
    frontierMark: false,
  },
} as const satisfies Record<string, VersionedTable>;

type VersionedTableName = keyof typeof VERSIONED_TABLES;

/** Queued inserts of new rows go in this order: steps and attempts reference their run. */
const VERSIONED_INSERT_ORDER: readonly VersionedTableName[] = ["runs", "step_runs", "run_attempts"];

/** One row's update waiting in `pendingUpdates`: several updates of a row in one transaction merge. */
interface PendingUpdate {
  readonly id: string;
  /** The version the database holds; the update writes nothing unless it still does. */
  readonly expectedVersion: number;
  readonly writtenVersion: number;
  /** The mutable columns' values, in their order; then `frontier_due` for runs (null: keep). */
  readonly params: readonly SqlParam[];
}

/** `INSERT INTO table (columns) VALUES (?, …)`: one placeholder a column. */
function insertSql(table: string, columns: readonly string[]): string {
  return `INSERT INTO ${table} (${columns.join(", ")}) VALUES (${columns.map(() => "?").join(", ")})`;
}

/** A row as a SELECT of `table` would return it, from the parameters that wrote its columns in order. */
function readBack<T>(table: rows.RowTable<T>, params: readonly SqlParam[]): T {
  const row: SqlRow = {};
  table.columns.forEach((column, index) => {
    row[column] = params[index] ?? null;
  });
  return table.read(row);
}

/** `column = ?, …` of an UPDATE: one placeholder a column, in the columns' order. */
function assignmentsSql(columns: readonly string[]): string {
  return columns.map((column) => `${column} = ?`).join(", ");
}

/**
 * The live attempt statuses as a SQL list: the statuses `TransactionRows.attemptWritten` follows
 * a remembered count through, so the count read and the count kept agree.
 */
const LIVE_STATUSES_SQL = [...LIVE_ATTEMPT_STATUSES].map((status) => `'${status}'`).join(", ");

/** Rows of several runs read in one statement, remembered as each run's whole list in the order read. */
function rememberByRun<T extends RowOfRun>(
  known: RowsOfRuns<T>,
  runIds: readonly string[],
  found: readonly T[],
): void {
  const byRun = new Map<string, T[]>(runIds.map((runId) => [runId, []]));
  for (const row of found) byRun.get(row.runId)?.push(row);
  for (const [runId, ofRun] of byRun) known.rememberOfRun(runId, ofRun);
}

/** A row of `listAdmissionCandidates`. */
interface CandidateRow extends SqlRow {
  run_id: string;
  id: string;
  version: number;
  package: string;
  task: string;
}

/** A statement that neither writes nor locks: a SELECT without a sequence call or a row lock. */
function isPlainRead(sql: string): boolean {
  return (
    /^\s*SELECT\b/i.test(sql) &&
    !/\b(?:setval|nextval)\s*\(|\bFOR\s+(?:UPDATE|NO\s+KEY\s+UPDATE|SHARE|KEY\s+SHARE)\b/i.test(sql)
  );
}

class SqlStoreTx implements StoreTx {
  private readonly tx: SqlTx;
  private readonly dialect: SqlDialect;
  private readonly rewrite: (sql: string) => string;
  private readonly cache: Map<string, string>;
  private readonly bodies: ImmutableCache;
  private readonly clock: StoreClockSource;
  /** Rows this transaction, or on a sole-writer driver an earlier one, read or wrote (see `TransactionRows`). */
  private readonly known: TransactionRows;
  /**
   * Append-only rows (events, step mutations, admission receipts) not yet inserted, by table:
   * they go in multi-row INSERTs when the transaction's body ends (`flush`) or before any
   * statement that names their table, so a page of decisions costs one INSERT per table and
   * chunk instead of one per decision, and no statement of this transaction misses them.
   */
  private readonly pending = new Map<
    string,
    { readonly columns: readonly string[]; readonly rows: SqlParam[][] }
  >();
  /**
   * Version updates not yet written, by table and row id (see VERSIONED_TABLES): like `pending`,
   * written before any statement that names their table and when the body ends, so that no
   * statement of this transaction misses them. A lost compare-and-set then fails the
   * transaction at that point rather than at `apply`: still before COMMIT, nothing written.
   */
  private readonly pendingUpdates = new Map<VersionedTableName, Map<string, PendingUpdate>>();
  /**
   * New runs, steps and attempts not yet inserted, by table (PostgreSQL only, where each
   * statement is a round trip: an admission page inserts one attempt per item). They are
   * written after every queued version update and before the append-only rows that reference
   * them, in the order runs, steps, attempts (their foreign keys), when a statement names any
   * table with something queued or when the body ends; see `insertVersioned`.
   */
  private readonly pendingInserts = new Map<
    VersionedTableName,
    { readonly columns: readonly string[]; readonly rows: SqlParam[][]; readonly ids: Set<string> }
  >();
  private flushing = false;
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
    this.dialect = dialect;
    this.tx = tx;
    this.known = known;
    this.rewrite = rewrite;
    this.cache = cache;
    this.bodies = bodies;
    this.clock = clock;
  }

  /**
   * The persisted observation as `observe` read it or this store last wrote it; null before
   * that. Kept with the rows, under the same rules (see `TransactionRows.observedMs`).
   */
  private get watermarkMs(): number | null {
    return this.known.observedMs ?? null;
  }

  private set watermarkMs(observedMs: number) {
    this.known.observedMs = observedMs;
  }

  /**
   * A compare-and-set UPDATE (its `RETURNING` names the row it wrote): anything but exactly one
   * row means the row moved on, and the transaction fails with `conflict`, nothing written.
   */
  private async updateOne(
    sql: string,
    params: readonly SqlParam[],
    moved: () => string,
  ): Promise<void> {
    const updated = await this.q(sql, params);
    if (updated.length !== 1) throw new QlrError("conflict", `${moved()}; nothing written`);
  }

  /** The parsed JSON `body` of the row `kind` names by `values`; null when there is none. */
  private async body<T>(kind: BodyKind, values: readonly SqlParam[]): Promise<T | null> {
    const read = BODY_READS[kind];
    const key = `${kind}\u0000${values.join("\u0000")}`;
    if (read.cached) {
      const cached = this.bodies.get<T>(key);
      if (cached !== undefined) return cached;
    }
    const found = await this.q<{ body: string }>(
      `SELECT body FROM ${read.table} WHERE ${read.keys.map((column) => `${column} = ?`).join(" AND ")}`,
      values,
    );
    if (found[0] === undefined) return null;
    const parsed = JSON.parse(found[0].body) as T;
    return read.cached ? this.bodies.set(key, parsed) : parsed;
  }

  /** The rows of one table, read whole: `rest` is what follows `FROM <table>`. */
  private async select<T>(
    table: rows.RowTable<T>,
    rest: string,
    params: readonly SqlParam[],
  ): Promise<T[]> {
    const found = await this.q(
      `SELECT ${table.columns.join(", ")} FROM ${table.name} ${rest}`,
      params,
    );
    return found.map((row) => table.read(row));
  }

  private async selectOne<T>(
    table: rows.RowTable<T>,
    rest: string,
    params: readonly SqlParam[],
  ): Promise<T | null> {
    return (await this.select(table, rest, params))[0] ?? null;
  }

  /**
   * One page of a table newest first. Keyset on (created_at_ms, id) descending: stable while
   * rows are inserted. Each `equals` entry filters on its column; a null value does not.
   */
  private async newestFirst<T>(
    table: rows.RowTable<T>,
    equals: Readonly<Record<string, SqlParam>>,
    cursor: string | null,
    limit: number,
  ): Promise<T[]> {
    const conditions: string[] = [];
    const params: SqlParam[] = [];
    for (const [column, value] of Object.entries(equals)) {
      if (value === null) continue;
      conditions.push(`${column} = ?`);
      params.push(value);
    }
    if (cursor !== null) {
      const createdAtOfCursor = `(SELECT created_at_ms FROM ${table.name} WHERE id = ?)`;
      conditions.push(
        `(created_at_ms < ${createdAtOfCursor} OR (created_at_ms = ${createdAtOfCursor} AND id < ?))`,
      );
      params.push(cursor, cursor, cursor);
    }
    const where = conditions.length === 0 ? "" : `WHERE ${conditions.join(" AND ")}`;
    return this.select(table, `${where} ORDER BY created_at_ms DESC, id DESC LIMIT ?`, [
      ...params,
      limit,
    ]);
  }

  private async q<R extends SqlRow>(sql: string, params: readonly SqlParam[] = []): Promise<R[]> {
    if (
      (this.pending.size > 0 || this.pendingUpdates.size > 0 || this.pendingInserts.size > 0) &&
      !this.flushing
    )
      await this.flushWhere((table) => sql.includes(table));
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

  async observe(hostNowMs: number): Promise<number> {
    if (!Number.isSafeInteger(hostNowMs) || hostNowMs < 0)
      throw new QlrError(
        "invalid_request",
        `host time ${hostNowMs} is not an epoch millisecond count`,
      );
    if (this.clock === "database") {
      const found = await this.q<{ last_observed_ms: number; database_now_ms: number }>(
        "SELECT last_value AS last_observed_ms, CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT) AS database_now_ms FROM qlr_store_clock_watermark",
      );
      const last = Number(found[0]?.last_observed_ms ?? 0);
      const databaseNowMs = Number(found[0]?.database_now_ms);
      if (!Number.isSafeInteger(databaseNowMs))
        throw new QlrError("internal", "the database server answered no clock reading");
      if (databaseNowMs < last) {
        throw new QlrError(
          "clock_regression",
          `the database server's clock reads ${databaseNowMs}, before the last persisted observation ${last}; refusing to write until it catches up`,
        );
      }
      this.watermarkMs = last;
      return databaseNowMs;
    }
    // Read once: inside a transaction only it moves the observation (`advanceWatermark` keeps
    // `watermarkMs` equal to what it wrote), and on a sole-writer driver it is kept with the rows.
    const last =
      this.watermarkMs ??
      Number(
        (
          await this.q<{ last_observed_ms: number }>(
            "SELECT last_observed_ms FROM qlr_store_clock WHERE id = 1",
          )
        )[0]?.last_observed_ms ?? 0,
      );
    if (hostNowMs < last) {
      throw new QlrError(
        "clock_regression",
        `the host clock reads ${hostNowMs}, before the last persisted observation ${last}; refusing to write until it catches up`,
      );
    }
    this.watermarkMs = last;
    return hostNowMs;
  }

  /** Moves the persisted observation forward (see DATABASE_CLOCK_WATERMARK_STEP_MS for when). */
  private async advanceWatermark(latestMs: number): Promise<void> {
    if (this.clock === "database") {
      if (
        this.watermarkMs !== null &&
        latestMs - this.watermarkMs < DATABASE_CLOCK_WATERMARK_STEP_MS
      )
        return;
      // Not atomic with a concurrent setter: the watermark may land up to one step lower, which
      // the step already tolerates; it never moves past a time some transaction observed.
      await this.q(
        "SELECT setval('qlr_store_clock_watermark', GREATEST(last_value, ?)) FROM qlr_store_clock_watermark",
        [latestMs],
      );
      this.watermarkMs = Math.max(this.watermarkMs ?? 0, latestMs);
      return;
    }
    // Already there in this transaction (the page's earlier writes moved it): the update would match no row.
    if (this.watermarkMs !== null && latestMs <= this.watermarkMs) return;
    await this.q(
      "UPDATE qlr_store_clock SET last_observed_ms = ? WHERE id = 1 AND last_observed_ms < ?",
      [latestMs, latestMs],
    );
    this.watermarkMs = Math.max(this.watermarkMs ?? 0, latestMs);
  }

  async apply(change: ChangeSet): Promise<void> {
    const times = [
      ...change.events.map((event) => event.atMs),
      ...change.runs.map((run) => run.after.updatedAtMs),
    ];
    if (
      times.length === 0 &&
      change.steps.length === 0 &&
      change.attempts.length === 0 &&
      change.admissions.length === 0
    )
      return;
    for (const { before, after } of change.runs) {
      // The core decides which runs the frontier stage must visit; a run it does not name keeps its mark.
      const frontierDue = change.frontierDue.includes(after.id) ? 1 : null;
      // Every column's value once: the update's columns and the row remembered both come from it.
      const params = rows.RUNS.params(after);
      if (before === null) {
        await this.insertVersioned("runs", [...rows.RUNS.columns, "frontier_due"], after.id, [
          ...params,
          frontierDue ?? 0,
        ]);
        this.known.rememberRun(after.id, readBack(rows.RUNS, params));
      } else {
        await this.deferUpdate("runs", before, after.version, [
          ...rows.RUNS.subset(params, rows.RUN_MUTABLE_COLUMNS),
          frontierDue,
        ]);
        this.known.rememberRun(after.id, readBack(rows.RUNS, params));
      }
    }
    for (const { before, after } of change.steps) {
      const params = rows.stepParams(after, change);
      if (before === null) {
        await this.insertVersioned("step_runs", rows.STEP_INSERT_COLUMNS, after.id, params);
        this.known.steps.inserted(readBack(rows.STEPS, params));
      } else {
        await this.deferUpdate(
          "step_runs",
          before,
          after.version,
          rows.STEPS.subset(params, rows.STEP_MUTABLE_COLUMNS),
        );
        // The position last among `params` is this change's, not the row's: a step read back has none.
        this.known.steps.remember(readBack(rows.STEPS, params));
      }
    }
    for (const { before, after } of change.attempts) {
      this.known.attemptWritten(before, after);
      const params = rows.ATTEMPTS.params(after);
      if (before === null) {
        await this.insertVersioned("run_attempts", rows.ATTEMPTS.columns, after.id, params);
        this.known.attempts.inserted(readBack(rows.ATTEMPTS, params));
      } else {
        await this.deferUpdate(
          "run_attempts",
          before,
          after.version,
          rows.ATTEMPTS.subset(params, rows.ATTEMPT_MUTABLE_COLUMNS),
        );
        this.known.attempts.remember(readBack(rows.ATTEMPTS, params));
      }
    }
    this.deferRows(rows.EVENTS, change.events);
    this.deferRows(rows.MUTATIONS, change.mutations);
    this.defer(
      "admission_receipts",
      rows.ADMISSION_COLUMNS,
      change.admissions.map(rows.admissionParams),
    );
    for (const receipt of change.admissions)
      this.known.rememberAdmission(
        admissionKey(receipt.runId, receipt.stepRunId, receipt.stepRunVersion),
        JSON.stringify(receipt),
      );
    await this.enqueueAlerts(change);
    if (times.length > 0) await this.advanceWatermark(Math.max(...times));
  }

  /** Queues `values` as rows of `table` for `flush`, every column written. */
  private deferRows<T>(table: rows.RowTable<T>, values: readonly T[]): void {
    this.defer(
      table.name,
      table.columns,
      values.map((value) => table.params(value)),
    );
  }

  /** Queues append-only rows for `flush` (see `pending`). */
  private defer(table: string, columns: readonly string[], rowsToInsert: SqlParam[][]): void {
    if (rowsToInsert.length === 0) return;
    const queued = this.pending.get(table);
    if (queued === undefined) this.pending.set(table, { columns, rows: [...rowsToInsert] });
    else queued.rows.push(...rowsToInsert);
  }

  /**
   * Writes the queued version updates (runs, then steps, then attempts, as `apply` orders them),
   * then inserts the queued append-only rows, in the order they were queued, table by table:
   * events first, then mutations, then receipts, as `apply` wrote them one by one. A failing
   * write fails the transaction as it did inside `apply`; nothing of it commits.
   */
  async flush(): Promise<void> {
    await this.flushWhere(() => true);
  }

  /** `flush` for the tables `named` picks (a statement about to read or write them). */
  private async flushWhere(named: (table: string) => boolean): Promise<void> {
    // Queued inserts go only in a whole flush: after every queued update (the order rule of
    // `insertVersioned`), and before any append-only row that references them.
    const whole =
      this.pendingInserts.size > 0 &&
      [...this.pendingUpdates.keys(), ...this.pendingInserts.keys(), ...this.pending.keys()].some(
        named,
      );
    if (whole) named = () => true;
    this.flushing = true;
    try {
      for (const [table, updates] of this.pendingUpdates) {
        if (!named(table)) continue;
        this.pendingUpdates.delete(table);
        await this.updateRows(VERSIONED_TABLES[table], [...updates.values()]);
      }
      if (whole) {
        for (const table of VERSIONED_INSERT_ORDER) {
          const queued = this.pendingInserts.get(table);
          this.pendingInserts.delete(table);
          if (queued !== undefined) await this.insertRows(table, queued.columns, queued.rows);
        }
      }
      for (const [table, queued] of this.pending) {
        if (!named(table)) continue;
        this.pending.delete(table);
        await this.insertRows(table, queued.columns, queued.rows);
      }
    } finally {
      this.flushing = false;
    }
  }

  /**
   * A new run, step or attempt, written at once, after every queued update: a change that
   * updates its run and inserts an attempt numbered from it keeps that order, so two
   * coordinators deciding the same run meet on the run's row (a serialization failure, retried)
   * before the second can reach the attempt's unique number (a duplicate, which is not).
   */
  private async insertVersioned(
    table: VersionedTableName,
    columns: readonly string[],
    id: string,
    params: SqlParam[],
  ): Promise<void> {
    // PostgreSQL: queued, and written after every queued update as above, so the order holds;
    // a page's new attempts then cost one multi-row INSERT instead of one round trip each.
    if (this.dialect === "postgres") {
      const queued = this.pendingInserts.get(table);
      if (queued === undefined)
        this.pendingInserts.set(table, { columns, rows: [params], ids: new Set([id]) });
      else {
        queued.rows.push(params);
        queued.ids.add(id);
      }
      return;
    }
    if (this.pendingUpdates.size > 0) await this.flushWhere((table) => table in VERSIONED_TABLES);
    await this.q(insertSql(table, columns), params);
  }

  /**
   * Queues a version update of `before`'s row (see `pendingUpdates`). A second update of the same
   * row in this transaction replaces the first's values and keeps its expected version: one
   * statement writes both, checked against the version the row had before either. An update
   * expecting another version than the queued one wrote is not merged: the queue is written
   * first, so its compare-and-set fails exactly as it would have one statement at a time.
   */
  private async deferUpdate(
    table: VersionedTableName,
    before: { readonly id: string; readonly version: number },
    writtenVersion: number,
    params: readonly SqlParam[],
  ): Promise<void> {
    // A row still queued for its INSERT is written first (with everything queued), so the
    // update meets the row as it would have one statement at a time.
    if (this.pendingInserts.get(table)?.ids.has(before.id) === true) await this.flush();
    let updates = this.pendingUpdates.get(table);
    const queued = updates?.get(before.id);
    if (queued !== undefined && queued.writtenVersion !== before.version) {
      await this.flush();
      updates = undefined;
    }
    if (updates === undefined) {
      updates = new Map();
      this.pendingUpdates.set(table, updates);
    }
    const merged = VERSIONED_TABLES[table].frontierMark
      ? // A later update that does not name the run keeps an earlier one's frontier mark.
        [...params.slice(0, -1), params[params.length - 1] ?? queued?.params.at(-1) ?? null]
      : params;
    updates.set(before.id, {
      id: before.id,
      expectedVersion: queued?.expectedVersion ?? before.version,
      writtenVersion,
      params: merged,
    });
  }

  /**
   * Queued version updates of one table. One row: one UPDATE by id and version, as on every
   * dialect. Several, on PostgreSQL: one `UPDATE … FROM (VALUES …)` per chunk, each row matched
   * by its id and expected version, the values cast to their columns' types (a bare parameter in
   * a VALUES list would be text). Either way a row not returned lost its compare-and-set, and
   * the transaction fails with `conflict`, nothing written. SQLite, in process, pays no round
   * trip per statement and keeps one UPDATE per row.
   */
  private async updateRows(
    table: VersionedTable,
    updates: readonly PendingUpdate[],
  ): Promise<void> {
    const name = table.rows.name;
    const assignments = assignmentsSql(table.mutable);
    const frontier = table.frontierMark ? ", frontier_due = COALESCE(?, frontier_due)" : "";
    const moved = (update: PendingUpdate): string =>
      `${table.noun} ${update.id} changed since version ${update.expectedVersion}`;
    if (updates.length === 1 || this.dialect !== "postgres") {
      for (const update of updates)
        await this.updateOne(
          `UPDATE ${name} SET ${assignments}${frontier} WHERE id = ? AND version = ? RETURNING id`,
          [...update.params, update.id, update.expectedVersion],
          () => moved(update),
        );
      return;
    }
    // VALUES columns: column1 the id, column2 the expected version, then the new values.
    const types: ColumnType[] = [
      "text",
      "integer",
      ...table.mutable.map((column) => table.rows.typeOf(column)),
      ...(table.frontierMark ? (["integer"] as const) : []),
    ];
    const tuple = `(${types.map((type) => `CAST(? AS ${type === "integer" ? "BIGINT" : "TEXT"})`).join(", ")})`;
    const set = table.mutable.map((column, index) => `${column} = v.column${index + 3}`);
    if (table.frontierMark)
      set.push(`frontier_due = COALESCE(v.column${table.mutable.length + 3}, t.frontier_due)`);
    const perStatement = Math.max(1, Math.floor(MAX_BOUND_PARAMETERS_POSTGRES / types.length));
    for (let start = 0; start < updates.length; start += perStatement) {
      const chunk = updates.slice(start, start + perStatement);
      const updated = await this.q<{ id: string }>(
        `UPDATE ${name} AS t SET ${set.join(", ")} FROM (VALUES ${chunk.map(() => tuple).join(", ")}) AS v WHERE t.id = v.column1 AND t.version = v.column2 RETURNING t.id`,
        chunk.flatMap((update) => [update.id, update.expectedVersion, ...update.params]),
      );
      if (updated.length === chunk.length) continue;
      const written = new Set(updated.map((row) => String(row.id)));
      const lost = chunk.find((update) => !written.has(update.id)) ?? chunk[0];
      throw new QlrError(
        "conflict",
        `${lost === undefined ? "an update lost" : moved(lost)}; nothing written`,
      );
    }
  }

  /**
   * Append-only rows in multi-row INSERTs: one statement (one round trip on PostgreSQL) per
   * chunk instead of one per row. A chunk binds at most MAX_BOUND_PARAMETERS values, which every
   * SQLite driver accepts (Durable Object SQLite allows 100 per statement), or
   * MAX_BOUND_PARAMETERS_POSTGRES on PostgreSQL.
   */
  private async insertRows(
    table: string,
    columns: readonly string[],
    rowsToInsert: readonly SqlParam[][],
  ): Promise<void> {
    const insertPrefix = `INSERT INTO ${table} (${columns.join(", ")}) VALUES`;
    const width = rowsToInsert[0]?.length ?? 0;
    if (width === 0) return;
    const bound =
      this.dialect === "postgres" ? MAX_BOUND_PARAMETERS_POSTGRES : MAX_BOUND_PARAMETERS;
    const perStatement = Math.max(1, Math.floor(bound / width));
    const tuple = `(${Array.from({ length: width }, () => "?").join(", ")})`;
    for (let start = 0; start < rowsToInsert.length; start += perStatement) {
      const chunk = rowsToInsert.slice(start, start + perStatement);
      await this.q(`${insertPrefix} ${chunk.map(() => tuple).join(", ")}`, chunk.flat());
    }
  }

  /**
   * The outbox entries of runs that entered failed, timed_out or lost in this change, and of
   * workflow steps that entered failed or timed_out, written in its transaction: the alert
   * commits exactly when the transition does. The notifiers come from the run's own generation
   * (what it ran with), decided by the core.
   */
  private async enqueueAlerts(change: ChangeSet): Promise<void> {
    const entries: NotificationEntry[] = [];
    for (const run of alertingRuns(change)) {
      const generation = await this.getGeneration(run.package, run.generation);
      if (generation === null) continue;
      entries.push(
        ...entriesForRun(run, notifiersForRun(generation.manifest, run), run.updatedAtMs),
      );
    }
    // A workflow step that ended failed or timed out: its task's notifiers, from the run's generation.
    for (const step of alertingSteps(change)) {
      const run =
        change.runs.find(({ after }) => after.id === step.runId)?.after ??
        (await this.getRun(step.runId));
      if (run === null) continue;
      const notifiers = await this.taskNotifiers(run.package, run.generation, step.task);
      entries.push(...entriesForStep(run, step, notifiers, step.finishedAtMs ?? run.updatedAtMs));
    }
    for (const entry of entries) {
      // A run or a step enters an alerting status once, so the derived id is new; DO NOTHING
      // keeps a replayed change (a lost commit answer) from failing on it.
      await this.q(
        `${insertSql("notifications", rows.NOTIFICATIONS.columns)} ON CONFLICT (id) DO NOTHING`,
        rows.NOTIFICATIONS.params(entry),
      );
    }
  }

  /**
   * A task's notifiers in one generation. A run whose steps fail one per transaction would
   * otherwise load and parse its whole manifest for each; the notifiers are cached by the
   * manifest's digest (content-addressed, so right for any database), bounded.
   */
  private async taskNotifiers(
    packageName: string,
    generation: number,
    task: string,
  ): Promise<NotifierSpec[]> {
    const found = await this.q<{ manifest_digest: string }>(
      "SELECT manifest_digest FROM generations WHERE package = ? AND generation = ?",
      [packageName, generation],
    );
    const digest = found[0]?.manifest_digest;
    if (digest === undefined) return [];
    let byTask = TASK_NOTIFIERS_BY_DIGEST.get(digest);
    if (byTask === undefined) {
      const loaded = await this.getGeneration(packageName, generation);
      if (loaded === null) return [];
      byTask = new Map(
        loaded.manifest.tasks.map((spec) => [
          spec.name,
          notifiersForStep(loaded.manifest, { task: spec.name }),
        ]),
      );
      if (TASK_NOTIFIERS_BY_DIGEST.size >= TASK_NOTIFIERS_CACHE_SIZE)
        TASK_NOTIFIERS_BY_DIGEST.delete(TASK_NOTIFIERS_BY_DIGEST.keys().next().value ?? "");
      TASK_NOTIFIERS_BY_DIGEST.set(digest, byTask);
    }
    return byTask.get(task) ?? [];
  }

  async listDueNotifications(nowMs: number, limit: number): Promise<NotificationEntry[]> {
    return this.select(
      rows.NOTIFICATIONS,
      "WHERE state = 'pending' AND next_attempt_at_ms <= ? ORDER BY next_attempt_at_ms, id LIMIT ?",
      [nowMs, cap(limit)],
    );
  }

  async getNotification(id: string): Promise<NotificationEntry | null> {
    return this.selectOne(rows.NOTIFICATIONS, "WHERE id = ?", [id]);
  }

  async updateNotification(entry: NotificationEntry, expectedVersion: number): Promise<void> {
    await this.updateOne(
      "UPDATE notifications SET state = ?, attempts = ?, next_attempt_at_ms = ?, last_error = ?, updated_at_ms = ?, delivered_at_ms = ?, version = ? WHERE id = ? AND version = ? RETURNING id",
      [
        entry.state,
        entry.attempts,
        entry.nextAttemptAtMs,
        entry.lastError,
        entry.updatedAtMs,
        entry.deliveredAtMs,
        entry.version,
        entry.id,
        expectedVersion,
      ],
      () => `notification ${entry.id} changed since version ${expectedVersion}`,
    );
  }

  async listNotifications(filter: NotificationListFilter): Promise<NotificationEntry[]> {
    return this.newestFirst(
      rows.NOTIFICATIONS,
      { run_id: filter.runId, state: filter.state },
      filter.cursor,
      cap(filter.limit),
    );
  }

  /**
   * Four statements per chunk of runs (runs, steps, attempts, receipts) instead of one per row
   * and item. The reads are the ones the page's items make one by one (a run read whole, or
   * an attempt with its run, step and receipt), so on PostgreSQL they take no predicate lock
   * the items would not take; a run already read in this transaction is not read again.
   */
  async preloadRuns(runIds: readonly string[]): Promise<void> {
    const unread = [...new Set(runIds)].filter((runId) => !this.known.knowsWholeRun(runId));
    // Bounded: one pass per MAX_BOUND_PARAMETERS runs of a page the caller already bounds.
    for (let start = 0; start < unread.length; start += MAX_BOUND_PARAMETERS) {
      const chunk = unread.slice(start, start + MAX_BOUND_PARAMETERS);
      const marks = chunk.map(() => "?").join(", ");
      const found = await this.select(rows.RUNS, `WHERE id IN (${marks})`, chunk);
      const runsById = new Map(found.map((run) => [run.id, run]));
      for (const runId of chunk) this.known.rememberRun(runId, runsById.get(runId) ?? null);
      // Only a workflow run has steps, and so admission receipts (each names a step): an
      // ordinary run's are known empty without asking (a page of ordinary runs saves two round
      // trips on PostgreSQL). A run's kind never changes.
      const withSteps = chunk.filter((runId) => runsById.get(runId)?.kind === "workflow");
      const stepMarks = withSteps.map(() => "?").join(", ");
      const steps =
        withSteps.length === 0
          ? []
          : await this.select(
              rows.STEPS,
              `WHERE run_id IN (${stepMarks}) ORDER BY run_id, position`,
              withSteps,
            );
      rememberByRun(this.known.steps, chunk, steps);
      const attempts = await this.select(
        rows.ATTEMPTS,
        `WHERE run_id IN (${marks}) ORDER BY run_id, number`,
        chunk,
      );
      rememberByRun(this.known.attempts, chunk, attempts);
      const receipts =
        withSteps.length === 0
          ? []
          : await this.q<rows.AdmissionRow>(
              rows.admissionSelect(`WHERE a.run_id IN (${stepMarks})`),
              withSteps,
            );
      const bodiesByRun = new Map<string, Map<string, string>>(
        chunk.map((runId) => [runId, new Map()]),
      );
      for (const row of receipts) {
        const receipt = rows.toAdmission(row);
        bodiesByRun
          .get(receipt.runId)
          ?.set(
            admissionKey(receipt.runId, receipt.stepRunId, receipt.stepRunVersion),
            JSON.stringify(receipt),
          );
      }
      for (const [runId, bodies] of bodiesByRun) this.known.rememberAdmissionsOfRun(runId, bodies);
    }
  }

  async getRun(runId: string): Promise<Run | null> {
    const known = this.known.run(runId);
    if (known !== undefined) return known;
    const run = await this.selectOne(rows.RUNS, "WHERE id = ?", [runId]);
    this.known.rememberRun(runId, run);
    return run;
  }

  async getRunByIdempotencyKey(key: string): Promise<Run | null> {
    return this.selectOne(rows.RUNS, "WHERE idempotency_key = ?", [key]);
  }

  async getSteps(runId: string): Promise<StepRun[]> {
    return this.rowsOfRun(rows.STEPS, this.known.steps, runId, "position");
  }

  async getStep(stepRunId: string): Promise<StepRun | null> {
    return this.rowById(rows.STEPS, this.known.steps, stepRunId);
  }

  async getAttempts(runId: string): Promise<RunAttempt[]> {
    return this.rowsOfRun(rows.ATTEMPTS, this.known.attempts, runId, "number");
  }

  async getAttempt(attemptId: string): Promise<RunAttempt | null> {
    return this.rowById(rows.ATTEMPTS, this.known.attempts, attemptId);
  }

  /** A run's rows of `table` ordered by `orderBy`, read once a transaction (see `TransactionRows`). */
  private async rowsOfRun<T extends RowOfRun>(
    table: rows.RowTable<T>,
    known: RowsOfRuns<T>,
    runId: string,
    orderBy: string,
  ): Promise<T[]> {
    const remembered = known.ofRun(runId);
    if (remembered !== undefined) return remembered;
    const found = await this.select(table, `WHERE run_id = ? ORDER BY ${orderBy}`, [runId]);
    known.rememberOfRun(runId, found);
    return known.ofRun(runId) ?? found;
  }

  /** The row of `table` with `id`, read once a transaction (see `TransactionRows`). */
  private async rowById<T extends RowOfRun>(
    table: rows.RowTable<T>,
    known: RowsOfRuns<T>,
    id: string,
  ): Promise<T | null> {
    const remembered = known.get(id);
    if (remembered !== undefined) return remembered;
    const found = await this.selectOne(table, "WHERE id = ?", [id]);
    if (found !== null) known.remember(found);
    return found;
  }

  async getAdmission(
    runId: string,
    stepRunId: string,
    stepRunVersion: number,
  ): Promise<AdmissionReceipt | null> {
    const key = admissionKey(runId, stepRunId, stepRunVersion);
    const known = this.known.admission(runId, key);
    if (known !== undefined) return known === null ? null : (JSON.parse(known) as AdmissionReceipt);
    const found = await this.q<rows.AdmissionRow>(
      rows.admissionSelect("WHERE a.run_id = ? AND a.step_run_id = ? AND a.step_run_version = ?"),
      [runId, stepRunId, stepRunVersion],
    );
    const receipt = found[0] === undefined ? null : rows.toAdmission(found[0]);
    this.known.rememberAdmission(key, receipt === null ? null : JSON.stringify(receipt));
    return receipt;
  }

  async getPlan(digest: string): Promise<WorkflowPlan | null> {
    return this.body("plan", [digest]);
  }

  async findPlan(inPackage: string, generation: number, workflow: string) {
    return this.body<WorkflowPlan>("planOfWorkflow", [inPackage, generation, workflow]);
  }

  async getReconciliation(digest: string): Promise<ReconciliationReceipt | null> {
    return this.body("reconciliation", [digest]);
  }

  async getTaskDefinition(revision: string): Promise<TaskDefinition | null> {
    return this.body("definition", [revision]);
  }

  async getTaskDefinitionFor(
    reconciliationDigest: string,
    task: string,
  ): Promise<TaskDefinition | null> {
    return this.body("definitionOfTask", [reconciliationDigest, task]);
  }

  async getPackageHead(name: string): Promise<PackageHead | null> {
    return this.selectOne(rows.PACKAGE_HEADS, "WHERE name = ?", [name]);
  }

  async listPackageHeads(limit: number): Promise<PackageHead[]> {
    return this.select(rows.PACKAGE_HEADS, "ORDER BY name LIMIT ?", [cap(limit)]);
  }

  async listGenerations(name: string, limit: number): Promise<Omit<Generation, "manifest">[]> {
    const found = await this.q<{
      package: string;
      generation: number;
      manifest_digest: string;
      created_at_ms: number;
    }>(
      "SELECT package, generation, manifest_digest, created_at_ms FROM generations WHERE package = ? ORDER BY generation DESC LIMIT ?",
      [name, cap(limit)],
    );
    return found.map((row) => ({
      package: row.package,
      generation: Number(row.generation),
      manifestDigest: row.manifest_digest as Generation["manifestDigest"],
      createdAtMs: Number(row.created_at_ms),
    }));
  }

  async getGeneration(name: string, generation: number): Promise<Generation | null> {
    const found = await this.q<{
      package: string;
      generation: number;
      manifest_digest: string;
      manifest: string;
      created_at_ms: number;
    }>(
      "SELECT package, generation, manifest_digest, manifest, created_at_ms FROM generations WHERE package = ? AND generation = ?",
      [name, generation],
    );
    const row = found[0];
    if (row === undefined) return null;
    return {
      package: row.package,
      generation: Number(row.generation),
      manifestDigest: row.manifest_digest as Generation["manifestDigest"],
      manifest: JSON.parse(row.manifest) as Generation["manifest"],
      createdAtMs: Number(row.created_at_ms),
    };
  }

  async putGeneration(
    generation: Generation,
    reconciliation: ReconciliationReceipt,
    definitions: readonly TaskDefinition[],
    plans: readonly WorkflowPlan[],
    previousGeneration: number | null,
  ): Promise<void> {
    await this.q(
      "INSERT INTO generations (package, generation, manifest_digest, reconciliation_digest, manifest, created_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
      [
        generation.package,
        generation.generation,
        generation.manifestDigest,
        reconciliation.digest,
        JSON.stringify(generation.manifest),
        generation.createdAtMs,
      ],
    );
    await this.q(
      "INSERT INTO reconciliation_receipts (digest, package, generation, body) VALUES (?, ?, ?, ?)",
      [
        reconciliation.digest,
        reconciliation.package,
        reconciliation.generation,
        JSON.stringify(reconciliation),
      ],
    );
    for (const definition of definitions) {
      await this.q(
        "INSERT INTO task_definitions (revision, reconciliation_digest, task, body) VALUES (?, ?, ?, ?)",
        [definition.revision, reconciliation.digest, definition.task, JSON.stringify(definition)],
      );
    }
    for (const plan of plans) {
      await this.q(
        "INSERT INTO workflow_plans (digest, package, generation, workflow, body) VALUES (?, ?, ?, ?, ?)",
        [plan.digest, plan.package, plan.generation, plan.workflow, JSON.stringify(plan)],
      );
    }
    const head: PackageHead = {
      package: generation.package,
      generation: generation.generation,
      manifestDigest: generation.manifestDigest,
      reconciliationDigest: reconciliation.digest,
      updatedAtMs: generation.createdAtMs,
    };
    if (previousGeneration === null) {
      await this.q(
        insertSql("packages", rows.PACKAGE_HEADS.columns),
        rows.PACKAGE_HEADS.params(head),
      );
    } else {
      // A new generation rewrites every column but the package's name.
      const rewritten = rows.PACKAGE_HEADS.columnsBut("name");
      await this.updateOne(
        `UPDATE packages SET ${assignmentsSql(rewritten)} WHERE name = ? AND generation = ? RETURNING name`,
        [...rows.PACKAGE_HEADS.params(head, rewritten), head.package, previousGeneration],
        () => `package ${generation.package} moved past generation ${previousGeneration}`,
      );
    }
    await this.advanceWatermark(generation.createdAtMs);
  }

  async getSchedules(packageName: string): Promise<ScheduleState[]> {
    return this.select(rows.SCHEDULES, "WHERE package = ? ORDER BY name", [packageName]);
  }

  async listDueSchedules(nowMs: number, limit: number): Promise<ScheduleState[]> {
    return this.select(
      rows.SCHEDULES,
      "WHERE next_fire_at_ms IS NOT NULL AND next_fire_at_ms <= ? ORDER BY next_fire_at_ms, package, name LIMIT ?",
      [nowMs, cap(limit)],
    );
  }

  async putSchedule(state: ScheduleState, expectedVersion: number | null): Promise<void> {
    if (expectedVersion === null) {
      await this.q(insertSql("schedules", rows.SCHEDULES.columns), rows.SCHEDULES.params(state));
      return;
    }
    await this.updateOne(
      `UPDATE schedules SET ${assignmentsSql(rows.SCHEDULES.columns)} WHERE package = ? AND name = ? AND version = ? RETURNING name`,
      [...rows.SCHEDULES.params(state), state.package, state.name, expectedVersion],
      () => `schedule ${state.package}/${state.name} changed since version ${expectedVersion}`,
    );
  }

  async deleteSchedule(packageName: string, name: string): Promise<void> {
    await this.q("DELETE FROM schedules WHERE package = ? AND name = ?", [packageName, name]);
  }

  async listCancellingRuns(afterRunId: string | null, limit: number): Promise<string[]> {
    // Every tick asks, and almost always finds none. SQLite, left to its planner, walks
    // runs_by_status over every queued, dispatching and running run and reads each row for its
    // cancel mark (a cost that grew with the work in flight); runs_cancelling, whose predicate
    // is this very condition, holds only the runs asked to cancel.
    const found = await this.q<{ id: string }>(
      `SELECT id FROM runs ${this.dialect === "sqlite" ? "INDEXED BY runs_cancelling " : ""}WHERE cancel_requested_at_ms IS NOT NULL AND status IN ('queued', 'dispatching', 'running') AND id > ? ORDER BY id LIMIT ?`,
      [afterRunId ?? "", cap(limit)],
    );
    return found.map((row) => row.id);
  }

  async listFrontierRuns(afterRunId: string | null, limit: number): Promise<string[]> {
    const found = await this.q<{ id: string }>(
      "SELECT id FROM runs WHERE frontier_due = 1 AND id > ? ORDER BY id LIMIT ?",
      [afterRunId ?? "", cap(limit)],
    );
    return found.map((row) => row.id);
  }

  async clearFrontierMark(runId: string): Promise<void> {
    // A queued update of the run (the frontier's own change) clears the mark as it writes: the
    // same final row as this statement after it, one statement fewer.
    const runs = this.pendingUpdates.get("runs");
    const queued = runs?.get(runId);
    if (runs !== undefined && queued !== undefined) {
      runs.set(runId, { ...queued, params: [...queued.params.slice(0, -1), 0] });
      return;
    }
    await this.q("UPDATE runs SET frontier_due = 0 WHERE id = ? AND frontier_due = 1", [runId]);
  }

  async listAdmissionCandidates(
    after: AdmissionCandidate | null,
    limit: number,
    nowMs: number,
  ): Promise<ListedAdmissionCandidate[]> {
    // SQLite, left to itself, starts from the runs: every running run, each probed for ready
    // steps, then a sort, on every page (≈ 1 ms a page with 200 runs in flight, measured). Its
    // CROSS JOIN keeps the written order, so it walks the ready steps' partial index
    // (step_runs_ready) from the cursor, already in the page's order, and stops at the limit;
    // the row-value cursor is what lets it seek there.
    //
    // PostgreSQL did the same from statistics a burst of new runs had left behind (every
    // running run, ≈ 12,000 buffers a page; docs/PERFORMANCE.md, "PostgreSQL's server time per
    // unit"). There the run is a LATERAL subquery that OFFSET 0 keeps from being pulled up, so
    // it can only be probed by id for each ready step, and the row-value cursor is an index
    // condition on step_runs_ready: whatever the statistics say, the page walks the ready steps
    // from the cursor in order and stops at the limit. The receipts' bound on run_id (implied by
    // the cursor) lets a merge anti-join start at the cursor too.
    const found =
      this.dialect === "sqlite"
        ? await this.q<CandidateRow>(
            `SELECT s.run_id, s.id, s.version, r.package, s.task FROM step_runs s CROSS JOIN runs r ON r.id = s.run_id
        WHERE s.status = 'ready' AND r.status = 'running' AND r.cancel_requested_at_ms IS NULL
          AND (s.not_before_ms IS NULL OR s.not_before_ms <= ?)
          AND NOT EXISTS (SELECT 1 FROM admission_receipts a WHERE a.run_id = s.run_id AND a.step_run_id = s.id AND a.step_run_version = s.version)
          AND (s.run_id, s.id) > (?, ?)
        ORDER BY s.run_id, s.id LIMIT ?`,
            [
              nowMs,
              after?.runId ?? "",
              after?.stepRunId ?? "",
              Math.min(cap(limit), MAX_ADMISSION_PAGE),
            ],
          )
        : await this.q<CandidateRow>(
            `SELECT s.run_id, s.id, s.version, r.package, s.task FROM step_runs s
        CROSS JOIN LATERAL (SELECT runs.package FROM runs WHERE runs.id = s.run_id AND runs.status = 'running' AND runs.cancel_requested_at_ms IS NULL OFFSET 0) r
        WHERE s.status = 'ready' AND (s.not_before_ms IS NULL OR s.not_before_ms <= ?)
          AND NOT EXISTS (SELECT 1 FROM admission_receipts a WHERE a.run_id = s.run_id AND a.step_run_id = s.id AND a.step_run_version = s.version AND a.run_id >= ?)
          AND (s.run_id, s.id) > (?, ?)
        ORDER BY s.run_id, s.id LIMIT ?`,
            [
              nowMs,
              after?.runId ?? "",
              after?.runId ?? "",
              after?.stepRunId ?? "",
              Math.min(cap(limit), MAX_ADMISSION_PAGE),
            ],
          );
    return found.map((row) => ({
      runId: row.run_id,
      stepRunId: row.id,
      stepRunVersion: Number(row.version),
      package: row.package,
      task: row.task,
    }));
  }

  async countLiveTaskAttempts(packageName: string, task: string): Promise<number> {
    // Walks the live attempts (the partial index run_attempts_live), few by construction.
    const found = await this.q<{ count: number }>(
      `SELECT COUNT(*) AS count FROM run_attempts a JOIN runs r ON r.id = a.run_id
        LEFT JOIN step_runs s ON s.id = a.step_run_id
        WHERE a.status IN ('claimed', 'starting', 'running') AND r.package = ?
          AND CASE WHEN a.step_run_id IS NULL THEN r.target ELSE s.task END = ?`,
      [packageName, task],
    );
    return Number(found[0]?.count ?? 0);
  }

  /** Counted once a transaction, then followed through its own attempt writes (`TransactionRows`). */
  async countLiveAttempts(executor: ExecutorType): Promise<number> {
    const known = this.known.liveAttemptsOf(executor);
    if (known !== undefined) return known;
    const found = await this.q<{ count: number }>(
      `SELECT COUNT(*) AS count FROM run_attempts WHERE executor = ? AND status IN (${LIVE_STATUSES_SQL})`,
      [executor],
    );
    const count = Number(found[0]?.count ?? 0);
    this.known.rememberLiveAttempts(executor, count);
    return count;
  }

  async listQueuedOrdinaryRuns(
    afterRunId: string | null,
    limit: number,
    nowMs: number,
  ): Promise<string[]> {
    const found = await this.q<{ id: string }>(
      "SELECT id FROM runs WHERE status = 'queued' AND kind = 'ordinary' AND cancel_requested_at_ms IS NULL AND (not_before_ms IS NULL OR not_before_ms <= ?) AND id > ? ORDER BY id LIMIT ?",
      [nowMs, afterRunId ?? "", cap(limit)],
    );
    return found.map((row) => row.id);
  }

  async listAttempts(
    executor: ExecutorType,
    statuses: readonly RunAttempt["status"][],
    afterAttemptId: string | null,
    limit: number,
    ownerNodeId?: string,
  ): Promise<RunAttempt[]> {
    if (statuses.length === 0) return [];
    const ownerSql =
      ownerNodeId === undefined ? "" : "AND (owner_node_id = ? OR owner_node_id IS NULL)";
    // Live statuses only (every caller's): on SQLite the partial index's own condition,
    // repeated word for word, is what lets it use run_attempts_live, whose predicate a bound
    // status list cannot imply. Without it SQLite walks every attempt ever made from the cursor
    // in id order (its primary key saves a sort), so a dispatch page cost more as history grew.
    const liveSql =
      this.dialect === "sqlite" && statuses.every((status) => LIVE_ATTEMPT_STATUSES.has(status))
        ? `AND status IN (${LIVE_STATUSES_SQL})`
        : "";
    const found = await this.q(
      `SELECT ${rows.ATTEMPTS.columns.join(", ")} FROM run_attempts WHERE executor = ? AND status IN (${statuses.map(() => "?").join(", ")}) ${liveSql} ${ownerSql} AND id > ? ORDER BY id LIMIT ?`,
      [
        executor,
        ...statuses,
        ...(ownerNodeId === undefined ? [] : [ownerNodeId]),
        afterAttemptId ?? "",
        cap(limit),
      ],
    );
    return found.map(rows.ATTEMPTS.read);
  }

  async listOrphanedAttempts(
    executor: ExecutorType,
    nowMs: number,
    afterAttemptId: string | null,
    limit: number,
  ): Promise<RunAttempt[]> {
    const found = await this.q(
      `SELECT ${rows.ATTEMPTS.columns.map((column) => `a.${column}`).join(", ")} FROM run_attempts a LEFT JOIN coordinators c ON c.node_id = a.owner_node_id
        WHERE a.executor = ? AND a.status IN ('starting', 'running') AND a.owner_node_id IS NOT NULL AND a.error IS NULL
          AND (c.node_id IS NULL OR c.lease_expires_at_ms <= ?) AND a.id > ? ORDER BY a.id LIMIT ?`,
      [executor, nowMs, afterAttemptId ?? "", cap(limit)],
    );
    return found.map(rows.ATTEMPTS.read);
  }

  async getCoordinator(nodeId: string): Promise<CoordinatorRecord | null> {
    return this.selectOne(rows.COORDINATORS, "WHERE node_id = ?", [nodeId]);
  }

  async putCoordinator(
    record: CoordinatorRecord,
    expectedIncarnation: number | null,
  ): Promise<void> {
    if (expectedIncarnation === null) {
      await this.q(
        insertSql("coordinators", rows.COORDINATORS.columns),
        rows.COORDINATORS.params(record),
      );
      return;
    }
    // A takeover rewrites every column but the key.
    const rewritten = rows.COORDINATORS.columnsBut("node_id");
    await this.updateOne(
      `UPDATE coordinators SET ${assignmentsSql(rewritten)} WHERE node_id = ? AND incarnation = ? RETURNING node_id`,
      [...rows.COORDINATORS.params(record, rewritten), record.nodeId, expectedIncarnation],
      () => `coordinator node ${record.nodeId} is no longer at incarnation ${expectedIncarnation}`,
    );
  }

  async listCoordinators(limit: number): Promise<CoordinatorRecord[]> {
    return this.select(rows.COORDINATORS, "ORDER BY node_id LIMIT ?", [cap(limit)]);
  }

  async listClaimableRemote(pool: string, nowMs: number, limit: number): Promise<RunAttempt[]> {
    return this.select(
      rows.ATTEMPTS,
      "WHERE executor = 'remote_worker' AND status = 'claimed' AND pool = ? AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms <= ?) ORDER BY created_at_ms, id LIMIT ?",
      [pool, nowMs, cap(limit)],
    );
  }

  async listExpiredLeases(
    nowMs: number,
    afterAttemptId: string | null,
    limit: number,
  ): Promise<RunAttempt[]> {
    return this.select(
      rows.ATTEMPTS,
      "WHERE executor = 'remote_worker' AND status IN ('claimed', 'starting', 'running') AND lease_expires_at_ms IS NOT NULL AND lease_expires_at_ms <= ? AND id > ? ORDER BY id LIMIT ?",
      [nowMs, afterAttemptId ?? "", cap(limit)],
    );
  }

  async terminalRunAtRank(rank: number): Promise<PurgeKey | null> {
    if (!Number.isSafeInteger(rank) || rank < 1)
      throw new QlrError("invalid_request", `rank must be a positive integer, got ${rank}`);
    const found = await this.q<{ finished_at_ms: number; id: string }>(
      `SELECT finished_at_ms, id FROM runs WHERE ${TERMINAL_WITH_FINISH} ORDER BY finished_at_ms DESC, id DESC LIMIT 1 OFFSET ?`,
      [rank - 1],
    );
    const row = found[0];
    return row === undefined
      ? null
      : { finishedAtMs: Number(row.finished_at_ms), runId: String(row.id) };
  }

  async listPurgeCandidates(
    after: PurgeKey | null,
    end: PurgeKey,
    limit: number,
  ): Promise<PurgeCandidate[]> {
    // Keyset on (finished_at_ms, id), written as OR of comparisons: both dialects use the index.
    const afterSql =
      after === null ? "" : "AND (r.finished_at_ms > ? OR (r.finished_at_ms = ? AND r.id > ?))";
    const afterParams: SqlParam[] =
      after === null ? [] : [after.finishedAtMs, after.finishedAtMs, after.runId];
    const found = await this.q<PurgeCandidateRow>(
      `SELECT ${PURGE_CANDIDATE_COLUMNS} FROM runs r
        WHERE r.${TERMINAL_WITH_FINISH} ${afterSql}
          AND (r.finished_at_ms < ? OR (r.finished_at_ms = ? AND r.id < ?))
        ORDER BY r.finished_at_ms, r.id LIMIT ?`,
      [...afterParams, end.finishedAtMs, end.finishedAtMs, end.runId, cap(limit)],
    );
    return found.map(toPurgeCandidate);
  }

  async getPurgeCandidate(runId: string): Promise<PurgeCandidate | null> {
    const found = await this.q<PurgeCandidateRow>(
      `SELECT ${PURGE_CANDIDATE_COLUMNS} FROM runs r WHERE r.id = ?`,
      [runId],
    );
    return found[0] === undefined ? null : toPurgeCandidate(found[0]);
  }

  async purgeRun(runId: string): Promise<PurgedRun> {
    this.known.forget();
    const run = await this.q<{
      status: RunStatus;
      idempotency_key: unknown;
      finished_at_ms: number | null;
    }>("SELECT status, idempotency_key, finished_at_ms FROM runs WHERE id = ?", [runId]);
    if (run[0] === undefined) throw new QlrError("not_found", `run ${runId} does not exist`);
    const attempts = await this.q<{ id: string; executor: ExecutorType }>(
      "SELECT id, executor FROM run_attempts WHERE run_id = ? ORDER BY number",
      [runId],
    );
    // Children first, in the order their references point: nothing is left pointing at a
    // deleted row even where the schema does not enforce its foreign keys. Leases are columns
    // of the attempt rows, so they go with them.
    await this.q("DELETE FROM notifications WHERE run_id = ?", [runId]);
    await this.q("DELETE FROM step_mutations WHERE run_id = ?", [runId]);
    await this.q("DELETE FROM run_events WHERE run_id = ?", [runId]);
    await this.q("DELETE FROM admission_receipts WHERE run_id = ?", [runId]);
    await this.q("DELETE FROM run_attempts WHERE run_id = ?", [runId]);
    await this.q("DELETE FROM step_runs WHERE run_id = ?", [runId]);
    await this.q("DELETE FROM runs WHERE id = ?", [runId]);
    const finishedAtMs = run[0].finished_at_ms;
    const idempotencyKey =
      typeof run[0].idempotency_key === "string" ? run[0].idempotency_key : null;
    return {
      runId,
      status: run[0].status,
      idempotencyKey,
      finishedAtMs: finishedAtMs === null ? null : Number(finishedAtMs),
      attempts: attempts.map((row) => ({ id: String(row.id), executor: row.executor })),
    };
  }

  async existingAttemptIds(attemptIds: readonly string[]): Promise<string[]> {
    if (attemptIds.length === 0) return [];
    if (attemptIds.length > MAX_PAGE)
      throw new QlrError(
        "invalid_request",
        `at most ${MAX_PAGE} attempt ids per call, got ${attemptIds.length}`,
      );
    const found = await this.q<{ id: string }>(
      `SELECT id FROM run_attempts WHERE id IN (${attemptIds.map(() => "?").join(", ")})`,
      [...attemptIds],
    );
    return found.map((row) => String(row.id));
  }

  async listRuns(filter: RunListFilter): Promise<Run[]> {
    return this.newestFirst(rows.RUNS, { status: filter.status }, filter.cursor, cap(filter.limit));
  }

  async listEvents(runId: string, afterSeq: number, limit: number): Promise<RunEvent[]> {
    return this.select(rows.EVENTS, "WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?", [
      runId,
      afterSeq,
      cap(limit),
    ]);
  }

  async countRunsByStatus(): Promise<Record<RunStatus, number>> {
    const found = await this.q<{ status: RunStatus; count: number }>(
      "SELECT status, COUNT(*) AS count FROM runs GROUP BY status",
    );
    const counts = Object.fromEntries(RUN_STATUSES.map((status) => [status, 0])) as Record<
      RunStatus,
      number
    >;
    for (const row of found) counts[row.status] = Number(row.count);
    return counts;
  }

  async overview(nowMs: number, hours: number): Promise<Overview> {
    const sinceMs = overviewSinceMs(nowMs, hours);
    const num = (value: unknown): number => Number(value);
    // Bucketed by the finish time: the predicate of runs_terminal_by_finish, so both planners
    // walk that index over the window only. Integer division floors on both dialects here (times are positive).
    const perHour = await this.q<{ hour: unknown; status: RunStatus; count: unknown }>(
      `SELECT finished_at_ms / ${HOUR_MS} AS hour, status, COUNT(*) AS count FROM runs WHERE ${TERMINAL_WITH_FINISH} AND finished_at_ms >= ? GROUP BY finished_at_ms / ${HOUR_MS}, status ORDER BY hour, status LIMIT ?`,
      [sinceMs, OVERVIEW_SERIES_LIMIT],
    );
    const durations = await this.q<{
      hour: unknown;
      package: string;
      target: string;
      runs: unknown;
      avg_ms: unknown;
      max_ms: unknown;
    }>(
      `SELECT finished_at_ms / ${HOUR_MS} AS hour, package, target, COUNT(*) AS runs, AVG(finished_at_ms - created_at_ms) AS avg_ms, MAX(finished_at_ms - created_at_ms) AS max_ms
       FROM runs WHERE ${TERMINAL_WITH_FINISH} AND finished_at_ms >= ? AND kind = 'workflow'
       GROUP BY finished_at_ms / ${HOUR_MS}, package, target ORDER BY hour, package, target LIMIT ?`,
      [sinceMs, OVERVIEW_SERIES_LIMIT],
    );
    const toRun = (row: SqlRow): OverviewRun => {
      const run = rows.RUNS.read(row);
      return {
        id: run.id,
        kind: run.kind,
        package: run.package,
        target: run.target,
        status: run.status,
        createdAtMs: run.createdAtMs,
        finishedAtMs: run.finishedAtMs,
      };
    };
    const failures = await this.q(
      `SELECT ${rows.RUNS.columns.join(", ")} FROM runs WHERE ${TERMINAL_WITH_FINISH} AND finished_at_ms >= ? AND status IN ('failed', 'timed_out', 'lost') ORDER BY finished_at_ms DESC, id DESC LIMIT ?`,
      [nowMs - 24 * HOUR_MS, OVERVIEW_LIST_LIMIT],
    );
    const activeWhere = "status IN ('queued', 'dispatching', 'running')";
    const active = await this.q(
      `SELECT ${rows.RUNS.columns.join(", ")} FROM runs WHERE ${activeWhere} ORDER BY created_at_ms, id LIMIT ?`,
      [OVERVIEW_LIST_LIMIT],
    );
    const activeCount = await this.q<{ count: unknown }>(
      `SELECT COUNT(*) AS count FROM runs WHERE ${activeWhere}`,
    );
    const fires = await this.q<{ package: string; name: string; next_fire_at_ms: unknown }>(
      "SELECT package, name, next_fire_at_ms FROM schedules WHERE next_fire_at_ms IS NOT NULL ORDER BY next_fire_at_ms, package, name LIMIT ?",
      [OVERVIEW_LIST_LIMIT],
    );
    return {
      nowMs,
      sinceMs,
      hours,
      runsPerHour: perHour.map((row) => ({
        hourStartMs: num(row.hour) * HOUR_MS,
        status: row.status,
        count: num(row.count),
      })),
      durations: durations.map((row) => ({
        hourStartMs: num(row.hour) * HOUR_MS,
        package: row.package,
        workflow: row.target,
        runs: num(row.runs),
        avgDurationMs: Math.round(num(row.avg_ms)),
        maxDurationMs: num(row.max_ms),
      })),
      recentFailures: failures.map(toRun),
      active: active.map(toRun),
      activeCount: num(activeCount[0]?.count ?? 0),
      nextFires: fires.map((row) => ({
        package: row.package,
        name: row.name,
        nextFireAtMs: num(row.next_fire_at_ms),
      })),
    };
  }

  async listMutations(runId: string): Promise<StepMutation[]> {
    return this.select(rows.MUTATIONS, "WHERE run_id = ? ORDER BY event_seq, step_run_id", [runId]);
  }
}

export class SqlStore implements Store {
  readonly dialect: "sqlite" | "postgres";
  readonly driverName: string;
  readonly driver: SqlDriver;
  private readonly rewrite: (sql: string) => string;
  private readonly statementCache = new Map<string, string>();
  private readonly bodies = new ImmutableCache();
  readonly clock: StoreClockSource;
  /** The rows kept across transactions on a sole-writer driver (see `TransactionRows`). */
  private readonly remembered = new TransactionRows();
  /**
   * The driver's count of succeeded transactions at which `remembered` is true: the count the
   * last transaction began at, plus one for its own commit. Undefined after a failure.
   */
  private rememberedAtTransactions: number | undefined;

  constructor(driver: SqlDriver, options: { readonly clock?: StoreClockSource } = {}) {
    this.driver = driver;
    this.clock = options.clock ?? "host";
    if (this.clock === "database" && driver.dialect !== "postgres")
      throw new TypeError(`the database clock needs a postgres driver, got ${driver.dialect}`);
    this.dialect = driver.dialect;
    this.driverName = driver.name;
    this.rewrite = driver.dialect === "postgres" ? placeholders : (sql) => sql;
  }

  transaction<T>(
    fn: (tx: SqlStoreTx) => Promise<T>,
    options: StoreTransactionOptions = {},
  ): Promise<T> {
    return this.run(fn, options.inTurn === true ? { inTurn: true } : undefined);
  }

  read<T>(fn: (tx: SqlStoreTx) => Promise<T>): Promise<T> {
    return this.run(fn, { readOnly: true });
  }

  private run<T>(
    fn: (tx: SqlStoreTx) => Promise<T>,
    options: TransactionOptions | undefined,
  ): Promise<T> {
    const readOnly = options?.readOnly === true;
    return this.driver
      .transaction(async (tx) => {
        const storeTx = new SqlStoreTx(
          tx,
          this.rewrite,
          this.statementCache,
          this.bodies,
          this.clock,
          this.dialect,
          this.rowsForTransaction(),
          readOnly,
        );
        const result = await fn(storeTx);
        await storeTx.flush();
        return result;
      }, options)
      .catch((error: unknown) => {
        // The body threw (the driver rolled back and rethrew it), the commit failed, or its
        // outcome is unknown: what was remembered may not be stored.
        this.forgetRemembered();
        throw error;
      });
  }

  /**
   * The rows a transaction starts from, called once it holds the driver: on a sole-writer
   * driver the remembered ones, forgotten first when anyone else's transaction succeeded since
   * this store's last one began, when that one failed, or when they are past the cap; on any
   * other driver an empty set of its own.
   */
  private rowsForTransaction(): TransactionRows {
    const succeeded = this.driver.soleWriterTransactions;
    if (succeeded === undefined) return new TransactionRows();
    if (succeeded !== this.rememberedAtTransactions || this.remembered.size > REMEMBERED_ROWS_MAX)
      this.remembered.forget();
    // True once this transaction commits; a failure resets it, and a commit never counted leaves it unmatched.
    this.rememberedAtTransactions = succeeded + 1;
    return this.remembered;
  }

  private forgetRemembered(): void {
    this.remembered.forget();
    this.rememberedAtTransactions = undefined;
  }

  close(): Promise<void> {
    return this.driver.close();
  }
}

export type { SqlStoreTx };

/** Opens a store over a driver: applies the dialect's migrations first. */
/** Manifests whose task notifiers are kept (oldest dropped first). */
const TASK_NOTIFIERS_CACHE_SIZE = 32;
const TASK_NOTIFIERS_BY_DIGEST = new Map<string, Map<string, NotifierSpec[]>>();

export async function openSqlStore(
  driver: SqlDriver,
  migrations: readonly Migration[],
  nowMs: number,
  options: { readonly clock?: StoreClockSource } = {},
): Promise<SqlStore> {
  await migrate(driver, migrations, nowMs);
  return new SqlStore(driver, options);
}
