/**
 * Runs a cached sql.js statement again without making SQLite compile it again.
 *
 * sql.js's `Statement.bind()` and `Statement.reset()` both call `sqlite3_clear_bindings`, and
 * SQLite marks a statement expired on that call whenever its plan looked at a parameter's value
 * (its `expmask`: a bound LIMIT, a term compared with a partial index's WHERE, …); the next
 * step then prepares the whole statement again. Most of the cadence's listing queries are such
 * statements: run through `bind()`, each cost 10–70× what the same statement costs kept
 * (docs/PERFORMANCE.md, "Statements compiled again on every run").
 *
 * Here a statement is reset with `sqlite3_reset` alone and every parameter is bound again in
 * place through sql.js's exported C functions. A parameter whose own value the plan used still
 * expires the statement when bound; callers give such values as literals where they are closed
 * enums (storage/sql-store/stage-listings.ts). Since bindings now outlive a run, each run binds
 * exactly as many values as the statement has parameters (checked), and a text of more than
 * `RELEASE_AFTER_RUN_CHARS` characters is unbound after its run, so a cached statement never
 * pins a large body.
 *
 * When the exports are missing (another sql.js build), `runnerFor` answers null and the
 * connection keeps sql.js's own `bind()` and `reset()`.
 */
import type { Database, SqlJsStatic, SqlValue, Statement } from "sql.js";
import type { SqlParam, SqlRow } from "../driver.ts";

/** sql.js's exports of the C API and Emscripten helpers this file uses (all on the module object). */
interface SqlJsExports {
  _sqlite3_reset(statement: number): number;
  _sqlite3_sql(statement: number): number;
  _sqlite3_bind_text(
    statement: number,
    index: number,
    text: number,
    bytes: number,
    destructor: number,
  ): number;
  _sqlite3_bind_blob(
    statement: number,
    index: number,
    blob: number,
    bytes: number,
    destructor: number,
  ): number;
  _sqlite3_bind_int(statement: number, index: number, value: number): number;
  _sqlite3_bind_double(statement: number, index: number, value: number): number;
  _free(pointer: number): void;
  stringToNewUTF8(text: string): number;
  lengthBytesUTF8(text: string): number;
  UTF8ToString(pointer: number): string;
}

const EXPORTED_FUNCTIONS = [
  "_sqlite3_reset",
  "_sqlite3_sql",
  "_sqlite3_bind_text",
  "_sqlite3_bind_blob",
  "_sqlite3_bind_int",
  "_sqlite3_bind_double",
  "_free",
  "stringToNewUTF8",
  "lengthBytesUTF8",
  "UTF8ToString",
] as const;

const SQLITE_OK = 0;
const SQLITE_RANGE = 25;
/** `SQLITE_TRANSIENT`: SQLite copies the value, so the buffer is freed right after binding. */
const SQLITE_TRANSIENT = -1;
/** SQLite's own ceiling on parameters (SQLITE_MAX_VARIABLE_NUMBER's default since 3.32). */
const MAX_PARAMETERS = 32_766;
/** Texts longer than this are unbound after their run (see the top of the file). */
export const RELEASE_AFTER_RUN_CHARS = 4096;

/** A statement this runner can drive: its SQLite handle and how many parameters it takes. */
export interface RunnableStatement {
  readonly statement: Statement;
  readonly handle: number;
  readonly parameterCount: number;
}

export class StatementRunner {
  private constructor(
    private readonly exports: SqlJsExports,
    private readonly db: Database,
    /** The name under which this sql.js build keeps a statement's SQLite handle. */
    private readonly handleKey: string,
  ) {}

  /**
   * A runner for `db`, or null when this sql.js build lacks an export or keeps its statement
   * handles where a probe cannot find them. The handle's property name is minified in sql.js,
   * so it is found by what it does: the one numeric property whose `sqlite3_sql` is the
   * statement's text.
   */
  static forDatabase(SQL: SqlJsStatic, db: Database): StatementRunner | null {
    const candidate = SQL as unknown as Record<string, unknown>;
    if (EXPORTED_FUNCTIONS.some((name) => typeof candidate[name] !== "function")) return null;
    const exports = candidate as unknown as SqlJsExports;
    const probeSql = "SELECT ? AS qlr_statement_runner_probe";
    const probe = db.prepare(probeSql);
    try {
      for (const [key, value] of Object.entries(probe)) {
        if (typeof value !== "number" || !Number.isSafeInteger(value) || value <= 0) continue;
        if (textAt(exports, value) === probeSql) return new StatementRunner(exports, db, key);
      }
      return null;
    } finally {
      probe.free();
    }
  }

  /** Prepares `statement` for `run`, or null when its handle cannot be confirmed. */
  adopt(statement: Statement, sql: string): RunnableStatement | null {
    const handle = (statement as unknown as Record<string, unknown>)[this.handleKey];
    if (typeof handle !== "number" || textAt(this.exports, handle) !== statement.getSQL())
      return null;
    return { statement, handle, parameterCount: this.countParameters(handle, sql) };
  }

  /** Binds `params` in place, steps to the end and resets without clearing the bindings. */
  run(runnable: RunnableStatement, params: readonly SqlParam[]): SqlRow[] {
    const { statement, handle } = runnable;
    if (params.length !== runnable.parameterCount)
      throw new Error(
        `the statement takes ${runnable.parameterCount} parameter(s), ${params.length} given`,
      );
    try {
      params.forEach((value, index) => this.bind(handle, index + 1, value));
      const rows: SqlRow[] = [];
      if (!statement.step()) return rows;
      const columns = statement.getColumnNames();
      do {
        const values: SqlValue[] = statement.get();
        const row: SqlRow = {};
        columns.forEach((column, index) => {
          row[column] = values[index];
        });
        rows.push(row);
      } while (statement.step());
      return rows;
    } finally {
      this.exports._sqlite3_reset(handle);
      params.forEach((value, index) => {
        if (typeof value === "string" && value.length > RELEASE_AFTER_RUN_CHARS)
          this.bindNull(handle, index + 1);
      });
    }
  }

  private bind(handle: number, index: number, value: SqlParam): void {
    const exports = this.exports;
    let code: number;
    if (value === null) {
      code = this.bindNull(handle, index);
    } else if (typeof value === "number") {
      // sql.js's own rule: a 32-bit integer as an integer, anything else as a double.
      code =
        value === (value | 0)
          ? exports._sqlite3_bind_int(handle, index, value)
          : exports._sqlite3_bind_double(handle, index, value);
    } else {
      const pointer = exports.stringToNewUTF8(value);
      try {
        // Its whole UTF-8 length, a NUL included, as sql.js binds a text: the same value stored.
        code = exports._sqlite3_bind_text(
          handle,
          index,
          pointer,
          exports.lengthBytesUTF8(value),
          SQLITE_TRANSIENT,
        );
      } finally {
        exports._free(pointer);
      }
    }
    if (code !== SQLITE_OK) this.raise(code);
  }

  /** A blob with no data is SQL NULL (sqlite3_bind_null is not among sql.js's exports). */
  private bindNull(handle: number, index: number): number {
    return this.exports._sqlite3_bind_blob(handle, index, 0, 0, 0);
  }

  /** Counts parameters by binding NULL from the first until SQLite answers SQLITE_RANGE. */
  private countParameters(handle: number, sql: string): number {
    for (let index = 1; index <= MAX_PARAMETERS + 1; index += 1) {
      const code = this.bindNull(handle, index);
      if (code === SQLITE_RANGE) return index - 1;
      if (code !== SQLITE_OK) this.raise(code);
    }
    throw new Error(`more than ${MAX_PARAMETERS} parameters in: ${sql.slice(0, 80)}`);
  }

  /** Throws sql.js's own error for `code` (the message and code the error mapping reads). */
  private raise(code: number): never {
    (this.db as unknown as { handleError(code: number): never }).handleError(code);
    throw new Error(`SQLite answered ${code}`);
  }
}

function textAt(exports: SqlJsExports, handle: number): string | null {
  try {
    const pointer = exports._sqlite3_sql(handle);
    return pointer === 0 ? null : exports.UTF8ToString(pointer);
  } catch {
    return null;
  }
}
