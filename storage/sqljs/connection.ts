/**
 * The single sql.js connection both sql.js drivers share: pragmas, a bounded cache of
 * prepared statements, rows as plain objects, the mapping of SQLite errors to `QlrError`,
 * one transaction's BEGIN … COMMIT, and (for the file driver) the record of which statements
 * wrote; the queue that keeps transactions from interleaving is storage/serial-queue.ts. This module is isomorphic: it imports no `node:*` module, so
 * browser and worker runtimes can use the memory driver with their own `SqlJsStatic`.
 */
import type { Database, SqlJsStatic, SqlValue, Statement } from "sql.js";
import { QlrError, errorCode } from "../../src/errors.ts";
import type { SqlParam, SqlRow, SqlTx } from "../driver.ts";
import { mapSqliteError, sqlExcerpt } from "../sqlite/errors.ts";
import { transactionHandle } from "../sqlite/transaction-handle.ts";
import { type RunnableStatement, StatementRunner } from "./statement-runner.ts";

export const DEFAULT_STATEMENT_CACHE_SIZE = 64;
export const DEFAULT_PAGE_CACHE_KIB = 1024;

export interface SqlJsConnectionOptions {
  /** Prepared statements kept per connection (least recently used are freed first). */
  readonly statementCacheSize?: number;
  /** SQLite page cache size; the database file itself already lives in memory, so a small cache only saves copies. */
  readonly pageCacheKib?: number;
  /**
   * false: run statements through sql.js's own `bind()` and `reset()`, which make SQLite
   * compile many of them again on every run (statement-runner.ts); for comparisons. Default true.
   */
  readonly keepStatementsCompiled?: boolean;
}

/** What the connection is built from beside its options. */
export interface SqlJsConnectionSetup extends SqlJsConnectionOptions {
  readonly trackWrites: boolean;
  /**
   * The sql.js module the database came from: its exported C functions let cached statements
   * run again without being compiled again (statement-runner.ts). Without it, sql.js's own
   * `bind()` and `reset()` are used.
   */
  readonly sqlJs?: SqlJsStatic;
}

/**
 * How a statement is judged to have written, decided once per SQL text from its leading
 * keyword (comments and white space skipped):
 * - `read`: SELECT, VALUES, EXPLAIN, and PRAGMA without `=`, never change the database.
 * - `counted`: INSERT, UPDATE, DELETE, REPLACE and WITH (a common table expression may front
 *   any of them) wrote exactly when SQLite's `total_changes()` counter moved while they ran;
 *   the counter includes rows changed by triggers and foreign key actions.
 * - `schema`: CREATE, DROP and ALTER wrote exactly when `PRAGMA schema_version` moved while
 *   they ran, so a `CREATE TABLE IF NOT EXISTS` that found its table costs no journal bytes.
 * - `always`: everything else (PRAGMA with `=`, SAVEPOINT, RELEASE, ROLLBACK TO, ANALYZE,
 *   REINDEX, …) may change the database or the shape of the transaction without moving either
 *   counter, so it is treated as a write whenever it succeeds.
 * - `forbidden`: BEGIN, COMMIT, END and a plain ROLLBACK belong to the driver.
 */
export type StatementKind = "read" | "counted" | "schema" | "always" | "forbidden";

export interface RecordedWrite {
  readonly sql: string;
  readonly params: readonly SqlParam[];
}

interface CachedStatement {
  readonly statement: Statement;
  readonly kind: StatementKind;
  /** Set when the statement runner drives it (null: sql.js's `bind()` and `reset()`). */
  readonly runnable: RunnableStatement | null;
}

export class SqlJsConnection {
  readonly db: Database;
  private readonly statementCacheSize: number;
  private readonly pageCacheKib: number;
  private readonly trackWrites: boolean;
  /** Insertion order is recency order: a hit is moved to the end, eviction takes the first. */
  private readonly statements = new Map<string, CachedStatement>();
  private totalChangesStatement: Statement | undefined;
  private schemaVersionStatement: Statement | undefined;
  private knownTotalChanges = 0;
  private writes: RecordedWrite[] = [];
  private unjournaledChange: string | undefined;
  private closed = false;
  private readonly runner: StatementRunner | null;

  /**
   * `trackWrites` makes the connection keep the list of statements that wrote in the current
   * transaction (the file driver journals them); the memory driver leaves it off and pays
   * nothing for it.
   */
  constructor(db: Database, options: SqlJsConnectionSetup) {
    this.db = db;
    this.statementCacheSize = Math.max(
      1,
      Math.floor(options.statementCacheSize ?? DEFAULT_STATEMENT_CACHE_SIZE),
    );
    this.pageCacheKib = Math.max(64, Math.floor(options.pageCacheKib ?? DEFAULT_PAGE_CACHE_KIB));
    this.trackWrites = options.trackWrites;
    this.applyPragmas();
    this.runner =
      options.sqlJs === undefined || options.keepStatementsCompiled === false
        ? null
        : StatementRunner.forDatabase(options.sqlJs, db);
  }

  /**
   * foreign_keys is off by default in SQLite and the domain relies on it. The database file
   * is an in-process MEMFS file that no crash can preserve, so its rollback journal stays in
   * memory and syncing it is pointless; durability, where wanted, is the file driver's journal.
   * No other connection ever opens that file, so the connection keeps its lock between
   * transactions (`locking_mode = EXCLUSIVE`): SQLite then skips what it does at every
   * transaction to notice other connections (a lock and an unlock, a check for a hot journal
   * file, which fails inside sql.js with a thrown error, a re-read of the change counter, and a
   * write of page 1 to bump it), ≈ 16 µs of CPU per transaction (docs/PERFORMANCE.md).
   */
  applyPragmas(): void {
    this.db.run("PRAGMA foreign_keys = ON");
    this.db.run("PRAGMA locking_mode = EXCLUSIVE");
    this.db.run("PRAGMA journal_mode = MEMORY");
    this.db.run("PRAGMA synchronous = OFF");
    this.db.run("PRAGMA temp_store = MEMORY");
    this.db.run(`PRAGMA cache_size = -${this.pageCacheKib}`);
    this.knownTotalChanges = this.trackWrites ? this.readTotalChanges() : 0;
  }

  begin(): void {
    this.writes = [];
    this.unjournaledChange = undefined;
    this.runControl("BEGIN IMMEDIATE");
  }

  commit(): void {
    this.runControl("COMMIT");
  }

  /** Rolls back if a transaction is open; SQLite may already have rolled back on some errors. */
  rollbackQuietly(): void {
    try {
      this.db.run("ROLLBACK");
    } catch {
      // "cannot rollback - no transaction is active" is the expected answer after SQLite's own rollback.
    }
  }

  /** The statements that wrote in the current transaction, in order (only with `trackWrites`). */
  recordedWrites(): readonly RecordedWrite[] {
    return this.writes;
  }

  /**
   * Set when a statement failed after changing rows (an `OR FAIL` conflict clause keeps the
   * rows changed before the failing one). Such a change cannot be journaled as a replayable
   * statement, so the file driver refuses to commit the transaction.
   */
  unjournaledChangeBy(): string | undefined {
    return this.unjournaledChange;
  }

  /** Runs one statement with positional parameters and returns its rows; errors are mapped. */
  query(sql: string, params: readonly SqlParam[]): SqlRow[] {
    if (this.closed) throw new QlrError("storage_unavailable", "The sql.js connection is closed.");
    for (const param of params) {
      if (typeof param === "number" && !Number.isFinite(param)) {
        throw new QlrError(
          "internal",
          `A non-finite number cannot be stored faithfully (in: ${sqlExcerpt(sql)}).`,
        );
      }
    }
    const entry = this.prepared(sql);
    if (entry.kind === "forbidden") {
      throw new QlrError(
        "internal",
        `Transaction control belongs to the driver, not to the caller (in: ${sqlExcerpt(sql)}).`,
      );
    }
    // The schema version is not monotonic (a rollback restores it), so it is read on both sides.
    const schemaVersionBefore =
      this.trackWrites && entry.kind === "schema" ? this.readSchemaVersion() : 0;
    let rows: SqlRow[];
    try {
      rows =
        entry.runnable === null || this.runner === null
          ? runStatement(entry.statement, params)
          : this.runner.run(entry.runnable, params);
    } catch (error) {
      if (this.trackWrites && entry.kind === "counted" && this.totalChangesMoved())
        this.unjournaledChange = sqlExcerpt(sql);
      throw mapSqlJsError(error, sql);
    }
    if (this.trackWrites && this.wrote(entry.kind, schemaVersionBefore))
      this.writes.push({ sql, params: [...params] });
    return rows;
  }

  /** Frees every cached statement; `export()` and `close()` need no statement alive. */
  clearStatements(): void {
    for (const entry of this.statements.values()) entry.statement.free();
    this.statements.clear();
    this.totalChangesStatement?.free();
    this.totalChangesStatement = undefined;
    this.schemaVersionStatement?.free();
    this.schemaVersionStatement = undefined;
  }

  cachedStatementCount(): number {
    return this.statements.size;
  }

  /** Whether cached statements run without being compiled again (statement-runner.ts). */
  get keepsStatementsCompiled(): boolean {
    return this.runner !== null;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.clearStatements();
    this.db.close();
  }

  private runControl(sql: string): void {
    try {
      this.db.run(sql);
    } catch (error) {
      throw mapSqlJsError(error, sql);
    }
  }

  private prepared(sql: string): CachedStatement {
    const cached = this.statements.get(sql);
    if (cached !== undefined) {
      this.statements.delete(sql);
      this.statements.set(sql, cached);
      return cached;
    }
    let statement: Statement;
    try {
      statement = this.db.prepare(sql);
    } catch (error) {
      throw mapSqlJsError(error, sql);
    }
    // SQLite compiles only the first statement of a text and silently ignores the rest;
    // `getSQL()` returns exactly the compiled part, so anything left over is refused.
    const remainder = sql.slice(statement.getSQL().length);
    if (stripCommentsAndSpace(remainder).replace(/;/g, "").trim() !== "") {
      statement.free();
      throw new QlrError(
        "internal",
        `One statement per query: text follows the first statement (in: ${sqlExcerpt(sql)}).`,
      );
    }
    let runnable: RunnableStatement | null;
    try {
      runnable = this.runner?.adopt(statement, sql) ?? null;
    } catch (error) {
      statement.free();
      throw mapSqlJsError(error, sql);
    }
    const entry: CachedStatement = { statement, kind: classifyStatement(sql), runnable };
    this.statements.set(sql, entry);
    if (this.statements.size > this.statementCacheSize) {
      const oldest = this.statements.entries().next().value;
      if (oldest !== undefined) {
        this.statements.delete(oldest[0]);
        oldest[1].statement.free();
      }
    }
    return entry;
  }

  private wrote(kind: StatementKind, schemaVersionBefore: number): boolean {
    switch (kind) {
      case "read":
      case "forbidden":
        return false;
      case "counted":
        return this.totalChangesMoved();
      case "schema":
        // A CREATE TABLE … AS SELECT also fills rows; either counter moving makes it a write.
        return this.totalChangesMoved() || this.readSchemaVersion() !== schemaVersionBefore;
      case "always":
        return true;
    }
  }

  private totalChangesMoved(): boolean {
    const current = this.readTotalChanges();
    // The counter only grows, so comparing with the last reading can over-report (a safe,
    // redundant journal entry) but never miss a statement that changed rows.
    const moved = current !== this.knownTotalChanges;
    this.knownTotalChanges = current;
    return moved;
  }

  private readTotalChanges(): number {
    this.totalChangesStatement ??= this.db.prepare("SELECT total_changes()");
    return readSingleNumber(this.totalChangesStatement);
  }

  private readSchemaVersion(): number {
    this.schemaVersionStatement ??= this.db.prepare("PRAGMA schema_version");
    return readSingleNumber(this.schemaVersionStatement);
  }
}

function readSingleNumber(statement: Statement): number {
  try {
    statement.step();
    const value = statement.get()[0];
    return typeof value === "number" ? value : 0;
  } finally {
    statement.reset();
  }
}

function runStatement(statement: Statement, params: readonly SqlParam[]): SqlRow[] {
  try {
    // sql.js copies the values while binding; the cast only drops `readonly`.
    statement.bind(params as SqlValue[]);
    const rows: SqlRow[] = [];
    if (!statement.step()) return rows;
    const columns = statement.getColumnNames();
    do {
      const values = statement.get();
      const row: SqlRow = {};
      columns.forEach((column, index) => {
        row[column] = values[index];
      });
      rows.push(row);
    } while (statement.step());
    return rows;
  } finally {
    statement.reset();
  }
}

export function classifyStatement(sql: string): StatementKind {
  const text = stripCommentsAndSpace(sql);
  const keyword = /^[A-Za-z]+/.exec(text)?.[0]?.toUpperCase() ?? "";
  switch (keyword) {
    case "SELECT":
    case "VALUES":
    case "EXPLAIN":
      return "read";
    case "PRAGMA":
      return text.includes("=") ? "always" : "read";
    case "INSERT":
    case "UPDATE":
    case "DELETE":
    case "REPLACE":
    case "WITH":
      return "counted";
    case "CREATE":
    case "DROP":
    case "ALTER":
      return "schema";
    case "BEGIN":
    case "COMMIT":
    case "END":
      return "forbidden";
    case "ROLLBACK":
      return /^ROLLBACK\s+(TRANSACTION\s+)?TO\b/i.test(text) ? "always" : "forbidden";
    default:
      return "always";
  }
}

/** Drops leading white space and SQL comments (`-- …` and `/* … *\/`). */
function stripCommentsAndSpace(sql: string): string {
  let text = sql.trimStart();
  for (;;) {
    if (text.startsWith("--")) {
      const end = text.indexOf("\n");
      text = end < 0 ? "" : text.slice(end + 1).trimStart();
    } else if (text.startsWith("/*")) {
      const end = text.indexOf("*/");
      text = end < 0 ? "" : text.slice(end + 2).trimStart();
    } else {
      return text;
    }
  }
}

/**
 * Maps an error thrown by sql.js to a `QlrError` (the rule is storage/sqlite/errors.ts). sql.js
 * throws `Error`s carrying the extended result code name in `code` (`SQLITE_CONSTRAINT_UNIQUE`),
 * and plain strings for API misuse ("Statement closed").
 */
export function mapSqlJsError(error: unknown, sql: string): QlrError {
  return mapSqliteError(error, errorCode(error) ?? "", sql);
}

export interface TransactionSteps {
  /** Runs after `fn` resolved and before COMMIT; a throw rolls back and is rethrown. */
  beforeCommit?(): void;
  /** Runs when COMMIT itself failed after `beforeCommit` succeeded (the transaction is rolled back). */
  commitFailed?(): void;
}

/**
 * One transaction on the connection: BEGIN IMMEDIATE, `fn`, COMMIT. A throw from `fn` rolls
 * back and is rethrown untouched; statement errors reach `fn` already mapped. The `tx` handed
 * to `fn` refuses queries once the transaction ended, so a leaked handle cannot write into a
 * later transaction.
 */
export async function runTransaction<T>(
  connection: SqlJsConnection,
  fn: (tx: SqlTx) => Promise<T>,
  steps: TransactionSteps = {},
): Promise<T> {
  connection.begin();
  const handle = transactionHandle(
    (sql, params) => connection.query(sql, params),
    (error, sql) => mapSqlJsError(error, sql),
  );
  let result: T;
  try {
    result = await fn(handle.tx);
  } catch (error) {
    handle.end();
    connection.rollbackQuietly();
    throw error;
  }
  handle.end();
  try {
    steps.beforeCommit?.();
  } catch (error) {
    connection.rollbackQuietly();
    throw error;
  }
  try {
    connection.commit();
  } catch (error) {
    connection.rollbackQuietly();
    steps.commitFailed?.();
    throw error;
  }
  return result;
}
