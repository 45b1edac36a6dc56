/*
 * Drivers are imported lazily (the orchestrator bundles with code splitting), so a child
 * process loads only the store it measures: the memory bench must not carry PGlite or pg.
 */

/**
 * Opens each store the benches compare, exactly as the runtime would (the dialect store over
 * a driver, migrations applied), behind a thin counting wrapper that can tally the statements
 * a transaction issues. The wrapper only counts while `counting` is on, so timed sections pay
 * one extra function call per statement and nothing more.
 */
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import type {
  SqlDriver,
  SqlParam,
  SqlRow,
  SqlTx,
  TransactionOptions,
} from "../../storage/driver.ts";
import type { SqlStore } from "../../storage/sql-store.ts";
import type { SqlJsFileDriver } from "../../storage/sqljs/node/file-driver.ts";
import type { ScratchDatabase } from "../../test/support/scratch-database.ts";
import { useNodeSha256 } from "../../runtimes/node/native-sha256.ts";
import { BENCH_START_MS, now, type StoreKind } from "./common.ts";

export interface StatementTally {
  transactions: number;
  /** Calls of transaction bodies: above `transactions` by the serializable retries and failed transactions. */
  bodyRuns: number;
  /** Transactions that threw (after their retries, if any). */
  failedTransactions: number;
  statements: number;
  reads: number;
  writes: number;
  rowsReturned: number;
  /** Characters of text returned (JSON bodies dominate it). */
  textCharsReturned: number;
  /** Rows that carried a `body` column, i.e. a stored JSON document the store parses. */
  bodiesReturned: number;
  bodyCharsReturned: number;
  /** Wall time from calling `transaction()` to the body starting (queueing, BEGIN), ms. */
  beginMs: number;
  /** Wall time inside the statements (`tx.query`), ms. */
  statementMs: number;
  /** Wall time in the body outside the statements: the domain core and the store's row mapping, ms. */
  bodyOutsideStatementsMs: number;
  /** Wall time from the body's end to the transaction's answer: COMMIT and, for the file store, the journal append and fdatasync, ms. */
  commitMs: number;
  /** Per statement text (first 60 characters): count and time. */
  byStatement: Record<string, { count: number; ms: number }>;
}

function emptyTally(): StatementTally {
  return {
    transactions: 0,
    bodyRuns: 0,
    failedTransactions: 0,
    statements: 0,
    reads: 0,
    writes: 0,
    rowsReturned: 0,
    textCharsReturned: 0,
    bodiesReturned: 0,
    bodyCharsReturned: 0,
    beginMs: 0,
    statementMs: 0,
    bodyOutsideStatementsMs: 0,
    commitMs: 0,
    byStatement: {},
  };
}

export class CountingDriver implements SqlDriver {
  readonly dialect;
  readonly name;
  counting = false;
  tally: StatementTally = emptyTally();
  private readonly statementKeys = new Map<
    string,
    { readonly key: string; readonly read: boolean }
  >();

  constructor(
    readonly inner: SqlDriver,
    private readonly countTextChars = false,
  ) {
    this.dialect = inner.dialect;
    this.name = inner.name;
  }

  reset(): void {
    this.tally = emptyTally();
  }

  /** Every transaction goes through the inner driver, so its count is this one's. */
  get soleWriterTransactions(): number | undefined {
    return this.inner.soleWriterTransactions;
  }

  transaction<T>(fn: (tx: SqlTx) => Promise<T>, options?: TransactionOptions): Promise<T> {
    if (!this.counting) return this.inner.transaction(fn, options);
    return this.countedTransaction(fn, options);
  }

  private async countedTransaction<T>(
    fn: (tx: SqlTx) => Promise<T>,
    options: TransactionOptions | undefined,
  ): Promise<T> {
    const tally = this.tally;
    const calledAt = now();
    let bodyStartedAt = calledAt;
    let bodyEndedAt = calledAt;
    let statementMsBefore = 0;
    let result: T;
    try {
      result = await this.inner.transaction(async (tx) => {
        tally.bodyRuns += 1;
        bodyStartedAt = now();
        statementMsBefore = tally.statementMs;
        try {
          return await fn({ query: (sql, params) => this.countedQuery(tx, sql, params) });
        } finally {
          bodyEndedAt = now();
        }
      }, options);
    } catch (error) {
      tally.failedTransactions += 1;
      throw error;
    }
    const answeredAt = now();
    tally.transactions += 1;
    tally.beginMs += bodyStartedAt - calledAt;
    tally.bodyOutsideStatementsMs +=
      bodyEndedAt - bodyStartedAt - (tally.statementMs - statementMsBefore);
    tally.commitMs += answeredAt - bodyEndedAt;
    return result;
  }

  private async countedQuery<R extends SqlRow>(
    tx: SqlTx,
    sql: string,
    params?: readonly SqlParam[],
  ): Promise<R[]> {
    const startedAt = now();
    const rows = await tx.query<R>(sql, params);
    const elapsed = now() - startedAt;
    const tally = this.tally;
    tally.statementMs += elapsed;
    const { key, read } = this.statementKey(sql);
    const entry = (tally.byStatement[key] ??= { count: 0, ms: 0 });
    entry.count += 1;
    entry.ms += elapsed;
    tally.statements += 1;
    if (read) tally.reads += 1;
    else tally.writes += 1;
    tally.rowsReturned += rows.length;
    if (!this.countTextChars) return rows;
    for (const row of rows) {
      for (const [column, value] of Object.entries(row)) {
        if (typeof value !== "string") continue;
        tally.textCharsReturned += value.length;
        if (column === "body" || column === "manifest") {
          tally.bodiesReturned += 1;
          tally.bodyCharsReturned += value.length;
        }
      }
    }
    return rows;
  }

  /**
   * The tally's key of a statement text and whether it reads, worked out once per text: a
   * page's multi-row INSERT is several KiB of text, and collapsing its white space on every
   * call was measured at 4 % of the throughput child's CPU, which the store does not spend.
   */
  private statementKey(sql: string): { readonly key: string; readonly read: boolean } {
    let found = this.statementKeys.get(sql);
    if (found === undefined) {
      // Bounded: the texts are the store's own (a few hundred); past the cap the map starts over.
      if (this.statementKeys.size >= STATEMENT_KEYS_MAX) this.statementKeys.clear();
      found = {
        key: sql.replace(/\s+/g, " ").trim().slice(0, 60),
        read: /^\s*(SELECT|WITH|VALUES)/i.test(sql),
      };
      this.statementKeys.set(sql, found);
    }
    return found;
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}

const STATEMENT_KEYS_MAX = 4_096;

export interface OpenedStore {
  readonly kind: StoreKind;
  readonly store: SqlStore;
  readonly driver: CountingDriver;
  /** Set for the sql.js file store: its write statistics and checkpoint. */
  readonly fileDriver: SqlJsFileDriver | null;
  /** The sql.js file store's directory. */
  readonly directory: string | null;
  /** `sqlite_version()` or PostgreSQL's `server_version`. */
  readonly engineVersion: string;
  /** How long opening took (driver + migrations), ms. */
  readonly openMs: number;
  close(): Promise<void>;
}

export interface OpenOptions {
  /** Parent directory for the sql.js file store's database directory. */
  readonly dataRoot: string;
  /** A PostgreSQL URL whose user may CREATE DATABASE (pg only; `QLR_BENCH_PG_URL` when unset). */
  readonly postgresAdminUrl?: string;
  /** The sql.js file store's checkpoint threshold; the driver's default when unset. */
  readonly checkpointJournalBytes?: number;
  /**
   * Count the text characters and bodies every statement returns (`StatementTally`'s
   * `textCharsReturned`, `bodiesReturned`, `bodyCharsReturned`): a walk over every column of
   * every row, which only the admission bench reports. Off, the counter costs the measured
   * coordinator nothing per row (the walk was ≈ 2 % of the throughput child's CPU).
   */
  readonly countTextChars?: boolean;
}

/**
 * Opens (and migrates) a store of `kind` at the benches' virtual epoch. PostgreSQL comes from
 * `postgresAdminUrl`, else from `QLR_BENCH_PG_URL` (the orchestrator starts the server).
 */
export async function openBenchStore(kind: StoreKind, options: OpenOptions): Promise<OpenedStore> {
  // As `qlr` does at start: the core hashes with Node's sha256 in every bench that stands in for it.
  useNodeSha256();
  const nowMs = BENCH_START_MS;
  const postgresAdminUrl = options.postgresAdminUrl ?? process.env.QLR_BENCH_PG_URL;
  const startedAt = now();
  let driver: SqlDriver;
  let fileDriver: SqlJsFileDriver | null = null;
  let directory: string | null = null;
  let afterClose: () => Promise<void> = () => Promise.resolve();
  switch (kind) {
    case "sqljs-memory": {
      const [{ loadSqlJs }, { openSqlJsMemoryDriver }] = await Promise.all([
        import("../../storage/sqljs/node/load.ts"),
        import("../../storage/sqljs/memory-driver.ts"),
      ]);
      driver = openSqlJsMemoryDriver(await loadSqlJs());
      break;
    }
    case "sqljs-file": {
      const [{ loadSqlJs }, { openSqlJsFileDriver }] = await Promise.all([
        import("../../storage/sqljs/node/load.ts"),
        import("../../storage/sqljs/node/file-driver.ts"),
      ]);
      const parent = mkdtempSync(join(options.dataRoot, "sqljs-file-"));
      directory = join(parent, "db");
      fileDriver = await openSqlJsFileDriver(await loadSqlJs(), {
        path: directory,
        ...(options.checkpointJournalBytes === undefined
          ? {}
          : { checkpointJournalBytes: options.checkpointJournalBytes }),
      });
      driver = fileDriver;
      afterClose = () => {
        rmSync(parent, { recursive: true, force: true });
        return Promise.resolve();
      };
      break;
    }
    case "pglite": {
      const { openPgliteDriver } = await import("../../storage/postgres/pglite-driver.ts");
      driver = await openPgliteDriver();
      break;
    }
    case "pg": {
      const { openPgDriver } = await import("../../storage/postgres/pg-driver.ts");
      if (postgresAdminUrl === undefined || postgresAdminUrl === "")
        throw new Error(
          "the pg store needs a PostgreSQL URL (the orchestrator starts one, or set QLR_BENCH_DATABASE_URL)",
        );
      const database = await createDatabase(postgresAdminUrl);
      driver = await openPgDriver({ connectionString: database.url });
      afterClose = database.drop;
      break;
    }
  }
  const counting = new CountingDriver(driver, options.countTextChars === true);
  const store =
    driver.dialect === "sqlite"
      ? await (await import("../../storage/sqlite/store.ts")).openSqliteStore(counting, nowMs)
      : await (await import("../../storage/postgres/store.ts")).openPostgresStore(counting, nowMs);
  const openMs = now() - startedAt;
  const engineVersion = await driver.transaction(async (tx) => {
    if (driver.dialect === "sqlite")
      return String((await tx.query<{ v: string }>("SELECT sqlite_version() AS v"))[0]?.v);
    return String(
      (await tx.query<{ server_version: string }>("SHOW server_version"))[0]?.server_version,
    );
  });
  return {
    kind,
    store,
    driver: counting,
    fileDriver,
    directory,
    engineVersion,
    openMs,
    close: async () => {
      await store.close();
      await afterClose();
    },
  };
}

/** Size of the sql.js file store's snapshot and journal on disk right now. */
export function fileStoreSizes(directory: string): { snapshotBytes: number; journalBytes: number } {
  const size = (name: string): number => {
    try {
      return statSync(join(directory, name)).size;
    } catch {
      return 0;
    }
  };
  // A checkpoint in flight (or one that failed) leaves the journal it folds in as a sealed segment.
  return {
    snapshotBytes: size("snapshot.sqlite"),
    journalBytes: size("journal.log") + size("journal.sealed.log"),
  };
}

/** A fresh database on the server, dropped (with any leftover session) afterwards. */
export async function createDatabase(adminUrl: string): Promise<ScratchDatabase> {
  // Loaded here, not at the top, so a bench that measures no PostgreSQL store never loads pg.
  const { createScratchDatabase } = await import("../../test/support/scratch-database.ts");
  return createScratchDatabase(adminUrl, { namePrefix: "qlr_bench", applicationName: "qlr-bench" });
}
