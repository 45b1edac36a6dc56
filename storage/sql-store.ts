import type { Store, StoreTransactionOptions } from "../src/ports.ts";
import type { SqlDriver, TransactionOptions } from "./driver.ts";
import { migrate, type Migration } from "./migrate.ts";
import { ImmutableCache } from "./sql-store/immutable-cache.ts";
import type { StoreClockSource } from "./sql-store/store-clock.ts";
import { SqlStoreTx } from "./sql-store/store-tx.ts";
import { RunRowsByVersion } from "./sql-store/run-rows-by-version.ts";
import { REMEMBERED_ROWS_MAX, TransactionRows } from "./sql-store/transaction-rows.ts";

/**
 * The domain operations, written once over the driver primitive for both SQL dialects. The
 * statements are portable SQL (SQLite ≥ 3.35 and PostgreSQL both speak `RETURNING` and
 * partial indexes); the dialect differences at this level are the placeholder syntax,
 * rewritten from `?` to `$n` once per statement text, and the multi-row version updates that
 * only PostgreSQL gets (`ChangeWriter.updateRows`). Isolation differs below: SQLite runs
 * `BEGIN IMMEDIATE` under one operation authority, PostgreSQL `SERIALIZABLE` with retries.
 *
 * This file is the store and the one import path for it; its parts live in `sql-store/`, one
 * concern a file: the transaction (`store-tx.ts`) and what it is built from, the statement context every
 * subject file is given (`query-context.ts`), the change buffer (`change-writer.ts`), the
 * store clock (`store-clock.ts`), the cache of immutable bodies (`immutable-cache.ts`), the rows
 * a transaction knows and those kept by run version (`transaction-rows.ts`, `run-rows-by-version.ts`), and the
 * statements by subject: `runs.ts`, `packages.ts`, `stage-listings.ts`, `coordinators.ts`,
 * `retention.ts`, `notifications.ts`, `observation.ts`.
 */

export { MAX_PAGE } from "./sql-store/query-context.ts";
export { IMMUTABLE_CACHE_ENTRIES } from "./sql-store/immutable-cache.ts";
export {
  DATABASE_CLOCK_WATERMARK_STEP_MS,
  type StoreClockSource,
} from "./sql-store/store-clock.ts";
export type { SqlStoreTx };

function placeholders(sql: string): string {
  let index = 0;
  return sql.replace(/\?/g, () => `$${(index += 1)}`);
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
  /** Runs' steps, receipts and attempts kept by run version on a driver others write too (see `RunRowsByVersion`). */
  private readonly keptByVersion = new RunRowsByVersion();

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
    // The rows of the try that committed (a serializable retry starts with rows of its own).
    let committedRows: TransactionRows | undefined;
    return this.driver
      .transaction(async (tx) => {
        const known = this.rowsForTransaction();
        committedRows = known;
        const storeTx = new SqlStoreTx(
          tx,
          this.rewrite,
          this.statementCache,
          this.bodies,
          this.clock,
          this.dialect,
          known,
          readOnly,
        );
        const result = await fn(storeTx);
        await storeTx.flush();
        return result;
      }, options)
      .then((result) => {
        if (committedRows?.kept != null) committedRows.kept.keep(committedRows);
        return result;
      })
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
    if (succeeded === undefined) return new TransactionRows(this.keptByVersion);
    if (succeeded !== this.rememberedAtTransactions || this.remembered.size > REMEMBERED_ROWS_MAX)
      this.remembered.forget();
    // True once this transaction commits; a failure resets it, and a commit never counted leaves it unmatched.
    this.rememberedAtTransactions = succeeded + 1;
    return this.remembered;
  }

  private forgetRemembered(): void {
    // `keptByVersion` stays: each run it holds is a committed fact, checked at each loan.
    this.remembered.forget();
    this.rememberedAtTransactions = undefined;
  }

  close(): Promise<void> {
    return this.driver.close();
  }
}

/** Opens a store over a driver: applies the dialect's migrations first. */
export async function openSqlStore(
  driver: SqlDriver,
  migrations: readonly Migration[],
  nowMs: number,
  options: { readonly clock?: StoreClockSource } = {},
): Promise<SqlStore> {
  await migrate(driver, migrations, nowMs);
  return new SqlStore(driver, options);
}
