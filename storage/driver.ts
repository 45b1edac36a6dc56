/**
 * The one small primitive every storage backend implements. The domain operations are
 * written once per SQL dialect above it (storage/sqlite, storage/postgres); the transition
 * logic itself lives in src/ and is written once.
 *
 * Rules every driver keeps:
 * - `transaction(fn)` runs `fn` as one atomic unit: SQLite `BEGIN IMMEDIATE … COMMIT`,
 *   PostgreSQL `SERIALIZABLE`. A throw inside `fn` rolls back and rethrows the same error.
 * - Transactions on one driver never interleave: an embedded (single-connection) driver
 *   queues them, so an `await` inside `fn` cannot let a second transaction in.
 * - `fn` may be called more than once (PostgreSQL retries on serialization failure), so it
 *   must do nothing but read and write through `tx` and compute.
 * - Driver errors are mapped to `QlrError` codes at this boundary (`conflict`, `storage_*`),
 *   with the original error as `cause`.
 * - Integers come back as JavaScript numbers (epoch milliseconds fit in 2^53).
 */
export type SqlDialect = "sqlite" | "postgres";
export type SqlParam = string | number | null;
export type SqlRow = Record<string, unknown>;

export interface SqlTx {
  /** Runs one statement with positional parameters (`?` for SQLite, `$1…` for PostgreSQL). */
  query<R extends SqlRow = SqlRow>(sql: string, params?: readonly SqlParam[]): Promise<R[]>;
}

export interface TransactionOptions {
  /**
   * The transaction only reads (its caller promises; the store refuses a write in one before it
   * reaches the driver). PostgreSQL runs it as `REPEATABLE READ READ ONLY`: one consistent
   * snapshot that takes no predicate locks, so it can neither fail nor make another transaction
   * fail with a serialization failure. What it read may be stale once it returns, so it may
   * only choose what a serializable transaction reads again and decides. SQLite drivers ignore
   * it: one writer at a time already serializes everything.
   */
  readonly readOnly?: boolean;
  /**
   * The transaction takes its turn: it runs only while no other transaction asking for a turn
   * on the same database does, whichever process or host it comes from. The coordinators'
   * stage pages ask for it: on one PostgreSQL, two pages that overlap in time abort each other
   * far more often than they touch the same rows, since serializable isolation locks what
   * an index scan read by whole index page (docs/ARCHITECTURE.md, "Pages take turns"). An
   * ordering, never a guarantee anything relies on: a turn not granted within the driver's
   * wait runs the transaction without one, and for a while after that the driver's
   * transactions do not ask at all (`TurnCounts.skipped`). Drivers with one connection
   * ignore it.
   */
  readonly inTurn?: boolean;
}

/** How a driver's transactions that wanted their turn (`TransactionOptions.inTurn`) fared. */
export interface TurnCounts {
  /** Turns granted. */
  readonly granted: number;
  /** Waits that ran out: the transaction then ran without its turn. */
  readonly waitsRunOut: number;
  /**
   * Transactions that did not ask, because a wait had run out shortly before (the holder may
   * have stopped; storage/postgres/turn-breaker.ts): they ran without a turn at once.
   */
  readonly skipped: number;
}

export interface SqlDriver {
  readonly dialect: SqlDialect;
  /** A short stable name for reports: `sqljs-memory`, `sqljs-file`, `pglite`, `pg`, `do-sqlite`. */
  readonly name: string;
  transaction<T>(fn: (tx: SqlTx) => Promise<T>, options?: TransactionOptions): Promise<T>;
  /**
   * How many of this driver's transactions have succeeded since it opened (any caller's: a
   * store's, migrations', retention's, a test's raw writes), counted before the caller learns
   * the outcome and before the next transaction begins. Defined only by a driver through which
   * every write to its database goes, one transaction after another: an embedded,
   * single-connection driver (sql.js memory and file, PGlite, Durable Object SQLite). A store
   * then keeps the rows it read or wrote across its transactions and drops them as soon as
   * this count moved by more than its own last transaction (storage/sql-store/transaction-rows.ts).
   * Undefined (the default, so a new driver is safe until it declares otherwise; `pg`, where
   * other coordinators write the same database): rows are remembered within one transaction
   * only. Anything that changes the database under the driver other than a transaction (a
   * reopen from files) counts as one; a transaction whose outcome is unknown is not counted.
   */
  readonly soleWriterTransactions?: number;
  /**
   * Counts of turns since the driver opened, for drivers that take turns (`pg`); undefined
   * for drivers with one connection, which ignore `inTurn`.
   */
  readonly turns?: TurnCounts;
  /** Waits for queued transactions, releases locks and files. Idempotent. */
  close(): Promise<void>;
}
