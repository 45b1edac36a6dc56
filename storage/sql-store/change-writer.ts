import { QlrError } from "../../src/errors.ts";
import type { ChangeSet } from "../../src/model.ts";
import type { SqlParam, SqlRow } from "../driver.ts";
import * as rows from "../rows.ts";
import type { ColumnType } from "../rows.ts";
import { admissionKey } from "./transaction-rows.ts";
import { columnArrays, MAX_ARRAY_ROWS, unnestSql } from "./column-arrays.ts";
import {
  assignmentsSql,
  MAX_BOUND_PARAMETERS,
  updateOne,
  type QueryContext,
} from "./query-context.ts";

/**
 * The tables whose rows `apply` updates by version (compare-and-set): each update waits in
 * `ChangeWriter.pendingUpdates` until a statement names the table or the body ends, so a page's
 * updates of one table go in one statement on PostgreSQL. `frontierMark`: the runs' update also
 * sets `frontier_due` when the change names the run (COALESCE keeps it otherwise).
 */
interface VersionedTable {
  readonly rows: rows.RowTable<unknown>;
  readonly mutable: readonly string[];
  /** The mutable columns SQLite's update assigns only when changed (see rows.ts). */
  readonly writtenWhenChanged: ReadonlySet<string>;
  /** What a conflict message calls a row. */
  readonly noun: string;
  readonly frontierMark: boolean;
}

const VERSIONED_TABLES = {
  runs: {
    rows: rows.RUNS,
    mutable: rows.RUN_MUTABLE_COLUMNS,
    writtenWhenChanged: new Set(rows.RUN_COLUMNS_WRITTEN_WHEN_CHANGED),
    noun: "run",
    frontierMark: true,
  },
  step_runs: {
    rows: rows.STEPS,
    mutable: rows.STEP_MUTABLE_COLUMNS,
    writtenWhenChanged: new Set(rows.STEP_COLUMNS_WRITTEN_WHEN_CHANGED),
    noun: "step run",
    frontierMark: false,
  },
  run_attempts: {
    rows: rows.ATTEMPTS,
    mutable: rows.ATTEMPT_MUTABLE_COLUMNS,
    writtenWhenChanged: new Set(rows.ATTEMPT_COLUMNS_WRITTEN_WHEN_CHANGED),
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
  /**
   * SQLite only (undefined on PostgreSQL): the mutable columns' values of the row the database
   * holds at `expectedVersion` (the first merged update's `before`), in their order, so that
   * the UPDATE sets only the columns whose value differs (see `changedColumnsUpdate`).
   */
  readonly stored: readonly SqlParam[] | undefined;
}

/**
 * Refuses a change that writes a step, an admission receipt, an event, a step mutation or an
 * attempt that no remote worker runs without moving the run it belongs to (inserting it, or
 * updating it to a higher version). The run's version then stands for those rows, which
 * `RunRowsByVersion` relies on where other writers share the database; and a run's rows are
 * never written for a run that does not exist, nor beside a concurrent delete of it (the
 * compare-and-set fails), which is what PostgreSQL's schema relies on instead of foreign keys
 * (migration 0014). The core's changes of a run's aggregate all move the run; the one that may
 * not is a lease extension, which moves a remote worker's existing attempt alone.
 */
function assertRunMovesWithItsRows(change: ChangeSet): void {
  if (
    change.steps.length === 0 &&
    change.admissions.length === 0 &&
    change.attempts.length === 0 &&
    change.events.length === 0 &&
    change.mutations.length === 0
  )
    return;
  const moved = new Set<string>();
  for (const { before, after } of change.runs)
    if (before === null || after.version > before.version) moved.add(after.id);
  const still = [
    ...change.steps.map(({ after }) => after.runId),
    ...change.admissions.map((receipt) => receipt.runId),
    ...change.events.map((event) => event.runId),
    ...change.mutations.map((mutation) => mutation.runId),
    ...change.attempts
      .filter(({ before, after }) => before === null || after.executor !== "remote_worker")
      .map(({ after }) => after.runId),
  ].find((runId) => !moved.has(runId));
  if (still !== undefined)
    throw new QlrError(
      "internal",
      `a change wrote a row of run ${still} (a step, receipt, event, mutation or attempt) without moving the run's version`,
    );
}

/** A new run's columns: its row's, and its frontier mark. */
const RUN_INSERT_COLUMNS = [...rows.RUNS.columns, "frontier_due"];

/**
 * INSERT texts by their column list (always one of this module's constant lists), then by table,
 * width and row count: each is built once. The counts of a page's rows recur, and handing the
 * same string to every statement also spares hashing a new one in each cache keyed by text
 * (the transaction's rewrites, the driver's prepared statements).
 */
const INSERT_SQL = new WeakMap<readonly string[], Map<string, string>>();

/** `INSERT INTO table (columns) VALUES (?, …), …`: `count` rows of `width` parameters each. */
function multiRowInsertSql(
  table: string,
  columns: readonly string[],
  width: number,
  count: number,
): string {
  let texts = INSERT_SQL.get(columns);
  if (texts === undefined) {
    texts = new Map();
    INSERT_SQL.set(columns, texts);
  }
  const key = `${table} ${width} ${count}`;
  let sql = texts.get(key);
  if (sql === undefined) {
    const tuple = `(${Array.from({ length: width }, () => "?").join(", ")})`;
    sql = `INSERT INTO ${table} (${columns.join(", ")}) VALUES ${Array.from({ length: count }, () => tuple).join(", ")}`;
    texts.set(key, sql);
  }
  return sql;
}

/** The type of each column the writer inserts, by table: what PostgreSQL's array statements cast to. */
const INSERTED_COLUMN_TYPES: Readonly<Record<string, (column: string) => ColumnType>> = {
  runs: (column) => (column === "frontier_due" ? "integer" : typeIn(rows.RUNS, column)),
  step_runs: (column) => (column === "position" ? "integer" : typeIn(rows.STEPS, column)),
  run_attempts: (column) => typeIn(rows.ATTEMPTS, column),
  run_events: (column) => typeIn(rows.EVENTS, column),
  step_mutations: (column) => typeIn(rows.MUTATIONS, column),
  admission_receipts: (column) => (column === "step_run_version" ? "integer" : "text"),
};

function typeIn(table: rows.RowTable<unknown>, column: string): ColumnType {
  return table.typeOf(column);
}

/** INSERT texts through arrays (PostgreSQL), by their column list: each is built once. */
const ARRAY_INSERTS = new WeakMap<
  readonly string[],
  { readonly sql: string; readonly types: readonly ColumnType[] }
>();

/** `INSERT INTO table (columns) SELECT * FROM unnest(…)`: one array parameter a column. */
function arrayInsert(
  table: string,
  columns: readonly string[],
): { readonly sql: string; readonly types: readonly ColumnType[] } {
  let insert = ARRAY_INSERTS.get(columns);
  if (insert === undefined) {
    const typeOf = INSERTED_COLUMN_TYPES[table];
    if (typeOf === undefined)
      throw new QlrError("internal", `the change writer does not insert into ${table}`);
    const types = columns.map(typeOf);
    insert = {
      sql: `INSERT INTO ${table} (${columns.join(", ")}) SELECT * FROM ${unnestSql(types)}`,
      types,
    };
    ARRAY_INSERTS.set(columns, insert);
  }
  return insert;
}

/** Multi-row UPDATE texts through arrays (PostgreSQL), by table: each is built once. */
const ARRAY_UPDATES = new WeakMap<
  VersionedTable,
  { readonly sql: string; readonly types: readonly ColumnType[] }
>();

/**
 * `UPDATE table AS t SET … FROM unnest(…) AS v(c1, …) WHERE t.id = v.c1 AND t.version = v.c2`:
 * the arrays' columns are the id, the expected version, then the mutable columns' new values
 * (and the frontier mark, null to keep, for runs), each cast to its column's type.
 */
function arrayUpdate(table: VersionedTable): {
  readonly sql: string;
  readonly types: readonly ColumnType[];
} {
  let update = ARRAY_UPDATES.get(table);
  if (update === undefined) {
    const types: ColumnType[] = [
      "text",
      "integer",
      ...table.mutable.map((column) => table.rows.typeOf(column)),
      ...(table.frontierMark ? (["integer"] as const) : []),
    ];
    const set = table.mutable.map((column, index) => `${column} = v.c${index + 3}`);
    if (table.frontierMark)
      set.push(`frontier_due = COALESCE(v.c${table.mutable.length + 3}, t.frontier_due)`);
    const names = types.map((_, index) => `c${index + 1}`).join(", ");
    update = {
      sql: `UPDATE ${table.rows.name} AS t SET ${set.join(", ")} FROM ${unnestSql(types)} AS v(${names}) WHERE t.id = v.c1 AND t.version = v.c2 RETURNING t.id`,
      types,
    };
    ARRAY_UPDATES.set(table, update);
  }
  return update;
}

/** A row as a SELECT of `table` would return it, from the parameters that wrote its columns in order. */
function readBack<T>(table: rows.RowTable<T>, params: readonly SqlParam[]): T {
  const row: SqlRow = {};
  table.columns.forEach((column, index) => {
    row[column] = params[index] ?? null;
  });
  return table.read(row);
}

/**
 * A transaction's change buffer: what `apply` writes is queued here and written in multi-row
 * statements when the transaction's body ends (`flush`) or before any statement that names a
 * table with something queued (the transaction's `q` asks `mustFlush` first), so a page of
 * decisions costs one statement per table and chunk instead of one per decision.
 */
export class ChangeWriter {
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

  constructor(private readonly tx: QueryContext) {}

  /** Whether a statement must wait for `flushWhere`: something is queued and no flush is writing it. */
  mustFlush(): boolean {
    return (
      (this.pending.size > 0 || this.pendingUpdates.size > 0 || this.pendingInserts.size > 0) &&
      !this.flushing
    );
  }

  /**
   * Queues the rows of `change` (`StoreTx.apply`): its runs, steps and attempts, inserted or
   * updated by version, then its events, mutations and admission receipts; and remembers each
   * row as written (see `TransactionRows`).
   */
  async queue(change: ChangeSet): Promise<void> {
    assertRunMovesWithItsRows(change);
    for (const { before, after } of change.runs) {
      // The core decides which runs the frontier stage must visit; a run it does not name keeps its mark.
      const frontierDue = change.frontierDue.includes(after.id) ? 1 : null;
      if (before === null) {
        // Every column's value once: the insert's columns and the row remembered both come from it.
        const params = rows.RUNS.params(after);
        await this.insertVersioned("runs", RUN_INSERT_COLUMNS, after.id, [
          ...params,
          frontierDue ?? 0,
        ]);
        this.tx.known.rememberRun(after.id, readBack(rows.RUNS, params));
      } else {
        // An update writes only the mutable columns; the row remembered is `before` with those
        // read back, so the columns it never writes (the input's JSON among them) cost nothing.
        const params = rows.RUNS.params(after, rows.RUN_MUTABLE_COLUMNS);
        await this.deferUpdate(
          "runs",
          before,
          after.version,
          [...params, frontierDue],
          this.storedParams(rows.RUNS, before, rows.RUN_MUTABLE_COLUMNS),
        );
        this.tx.known.rememberRun(
          after.id,
          rows.RUNS.withColumns(before, rows.RUN_MUTABLE_COLUMNS, params),
        );
      }
    }
    for (const { before, after } of change.steps) {
      if (before === null) {
        const params = rows.stepParams(after, change);
        await this.insertVersioned("step_runs", rows.STEP_INSERT_COLUMNS, after.id, params);
        // The position last among `params` is this change's, not the row's: a step read back has none.
        this.tx.known.steps.inserted(readBack(rows.STEPS, params));
      } else {
        const params = rows.STEPS.params(after, rows.STEP_MUTABLE_COLUMNS);
        await this.deferUpdate(
          "step_runs",
          before,
          after.version,
          params,
          this.storedParams(rows.STEPS, before, rows.STEP_MUTABLE_COLUMNS),
        );
        this.tx.known.steps.remember(
          rows.STEPS.withColumns(before, rows.STEP_MUTABLE_COLUMNS, params),
        );
      }
    }
    for (const { before, after } of change.attempts) {
      this.tx.known.attemptWritten(before, after);
      if (before === null) {
        const params = rows.ATTEMPTS.params(after);
        await this.insertVersioned("run_attempts", rows.ATTEMPTS.columns, after.id, params);
        this.tx.known.attempts.inserted(readBack(rows.ATTEMPTS, params));
      } else {
        const params = rows.ATTEMPTS.params(after, rows.ATTEMPT_MUTABLE_COLUMNS);
        await this.deferUpdate(
          "run_attempts",
          before,
          after.version,
          params,
          this.storedParams(rows.ATTEMPTS, before, rows.ATTEMPT_MUTABLE_COLUMNS),
        );
        this.tx.known.attempts.remember(
          rows.ATTEMPTS.withColumns(before, rows.ATTEMPT_MUTABLE_COLUMNS, params),
        );
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
      this.tx.known.rememberAdmission(
        receipt.runId,
        admissionKey(receipt.runId, receipt.stepRunId, receipt.stepRunVersion),
        JSON.stringify(receipt),
      );
  }

  /**
   * The mutable columns' values of `before`, the row as the database holds it at its version
   * (every write of these tables goes through `queue` and moves the version), on SQLite, where
   * an UPDATE that names an indexed column rewrites that index's entries even when the value
   * stays. PostgreSQL writes a whole new row version either way and gets undefined.
   */
  private storedParams<T, C extends string>(
    table: rows.RowTable<T, C>,
    before: T,
    mutable: readonly C[],
  ): SqlParam[] | undefined {
    return this.tx.dialect === "postgres" ? undefined : table.params(before, mutable);
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
  async flushWhere(named: (table: string) => boolean): Promise<void> {
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
    if (this.tx.dialect === "postgres") {
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
    await this.tx.q(multiRowInsertSql(table, columns, params.length, 1), params);
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
    stored: readonly SqlParam[] | undefined,
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
      // A merged update is checked against the first one's version: it changes what that row held.
      stored: queued === undefined ? stored : queued.stored,
    });
  }

  /**
   * Queued version updates of one table. One row: one UPDATE by id and version, as on every
   * dialect. Several, on PostgreSQL: one `UPDATE … FROM unnest(…)` per chunk, each column's
   * values one array cast to the column's type (column-arrays.ts), each row matched by its id
   * and expected version. Either way a row not returned lost its compare-and-set, and
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
    if (this.tx.dialect !== "postgres") {
      for (const update of updates) {
        const { sql, params } = changedColumnsUpdate(table, update);
        await updateOne(this.tx, sql, params, () => moved(update));
      }
      return;
    }
    if (updates.length === 1) {
      for (const update of updates)
        await updateOne(
          this.tx,
          `UPDATE ${name} SET ${assignments}${frontier} WHERE id = ? AND version = ? RETURNING id`,
          [...update.params, update.id, update.expectedVersion],
          () => moved(update),
        );
      return;
    }
    const { sql, types } = arrayUpdate(table);
    for (let start = 0; start < updates.length; start += MAX_ARRAY_ROWS) {
      const chunk = updates.slice(start, start + MAX_ARRAY_ROWS);
      const updated = await this.tx.q<{ id: string }>(
        sql,
        columnArrays(
          chunk.map((update) => [update.id, update.expectedVersion, ...update.params]),
          types,
        ),
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
   * chunk instead of one per row. On SQLite a chunk binds at most MAX_BOUND_PARAMETERS values,
   * which every SQLite driver accepts (Durable Object SQLite allows 100 per statement); on
   * PostgreSQL each column's values go as one array (column-arrays.ts), MAX_ARRAY_ROWS rows a
   * statement, under one text for the column list.
   */
  private async insertRows(
    table: string,
    columns: readonly string[],
    rowsToInsert: readonly SqlParam[][],
  ): Promise<void> {
    const width = rowsToInsert[0]?.length ?? 0;
    if (width === 0) return;
    if (this.tx.dialect === "postgres") {
      const { sql, types } = arrayInsert(table, columns);
      for (let start = 0; start < rowsToInsert.length; start += MAX_ARRAY_ROWS)
        await this.tx.q(
          sql,
          columnArrays(rowsToInsert.slice(start, start + MAX_ARRAY_ROWS), types),
        );
      return;
    }
    const perStatement = Math.max(1, Math.floor(MAX_BOUND_PARAMETERS / width));
    for (let start = 0; start < rowsToInsert.length; start += perStatement) {
      const chunk = rowsToInsert.slice(start, start + perStatement);
      await this.tx.q(multiRowInsertSql(table, columns, width, chunk.length), chunk.flat());
    }
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
    await this.tx.q("UPDATE runs SET frontier_due = 0 WHERE id = ? AND frontier_due = 1", [runId]);
  }
}

/**
 * SQLite's UPDATE texts of each versioned table, by the set of columns they assign (a bit a
 * mutable column, in their order, then one for `frontier_due`): at most 2^6 sets a table, a
 * few of them in use (a stage changes the same indexed columns each time), each text built once.
 */
const CHANGED_COLUMNS_SQL = new WeakMap<VersionedTable, Map<number, string>>();

/**
 * One queued update on SQLite: the compare-and-set by id and expected version as ever, but an
 * indexed or constrained column (`writtenWhenChanged`) is assigned only when its value differs
 * from the row the database holds, and `frontier_due` only when the change marks or clears it.
 * SQLite rewrites the entries of every index (and checks every constraint) that names an
 * assigned column, even when the value stays; most updates move only the version, a sequence
 * and a time, none of them indexed. Every other mutable column is assigned always: that costs
 * nothing more (the row is written whole) and keeps the texts few, where one text per set of
 * changed columns measured more statements prepared again than index entries saved. The row
 * written is the same.
 */
function changedColumnsUpdate(
  table: VersionedTable,
  update: PendingUpdate,
): { readonly sql: string; readonly params: SqlParam[] } {
  const params: SqlParam[] = [];
  let assigned = 0;
  table.mutable.forEach((column, index) => {
    const value = update.params[index] ?? null;
    if (
      !table.writtenWhenChanged.has(column) ||
      update.stored === undefined ||
      value !== (update.stored[index] ?? null)
    ) {
      assigned |= 1 << index;
      params.push(value);
    }
  });
  const frontierDue = table.frontierMark ? (update.params[table.mutable.length] ?? null) : null;
  if (frontierDue !== null) {
    assigned |= 1 << table.mutable.length;
    params.push(frontierDue);
  }
  params.push(update.id, update.expectedVersion);
  let texts = CHANGED_COLUMNS_SQL.get(table);
  if (texts === undefined) {
    texts = new Map();
    CHANGED_COLUMNS_SQL.set(table, texts);
  }
  let sql = texts.get(assigned);
  if (sql === undefined) {
    const columns = table.mutable.filter((_, index) => (assigned & (1 << index)) !== 0);
    if (frontierDue !== null) columns.push("frontier_due");
    sql = `UPDATE ${table.rows.name} SET ${assignmentsSql(columns)} WHERE id = ? AND version = ? RETURNING id`;
    texts.set(assigned, sql);
  }
  return { sql, params };
}
