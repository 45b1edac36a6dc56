/**
 * The PostgreSQL dialect on PGlite (PostgreSQL compiled to WASM, in process).
 *
 * PGlite is for the browser, tests and development, never the device store: on disk it is
 * NOT power-loss durable. It runs PostgreSQL with fsync off and issues no fsync of its own
 * (DESIGN.md §8), so a power cut can lose or tear committed transactions. Durable storage
 * on the PostgreSQL dialect comes from a real server through pg-driver.ts.
 *
 * Costs measured on Node 20: a fresh in-memory open takes 2–3 s and about 700 MiB RSS;
 * reopening an existing data directory about 0.3 s and 290 MiB. Open one per process.
 *
 * PGlite has exactly one connection, so transactions run one after another through the
 * shared serial queue (storage/serial-queue.ts): an `await` inside one transaction's `fn` cannot let another one in. For
 * the same reason serialization failures cannot occur here; the shared retry logic stays
 * in place so both drivers behave identically.
 */
import { PGlite } from "@electric-sql/pglite";
import { QlrError } from "../../src/errors.ts";
import type { SqlDriver, SqlRow, SqlTx } from "../driver.ts";
import { serialDriver } from "../serial-queue.ts";
import { NUMBER_PARSERS, runSerializableTransaction, type PostgresSession } from "./transaction.ts";

export interface PgliteDriverOptions {
  /**
   * A directory for the database files (created when missing), or `undefined` for a
   * database that lives in memory and disappears on close.
   */
  readonly dataDir?: string;
}

export async function openPgliteDriver(options: PgliteDriverOptions = {}): Promise<SqlDriver> {
  let pglite: PGlite;
  try {
    pglite = await PGlite.create(options.dataDir, {
      parsers: NUMBER_PARSERS,
    });
  } catch (error) {
    throw new QlrError("storage_unavailable", "PGlite could not open its database", {
      cause: error,
    });
  }

  // Each statement goes through PGlite's public `query`; BEGIN and COMMIT are ours, so the
  // isolation level is stated explicitly. `query` also asks the file system layer to sync
  // after each statement, which is a no-op for the memory and Node file systems.
  const session: PostgresSession = {
    run: async (sql, params) => {
      const result = await pglite.query<SqlRow>(sql, [...params]);
      return { rows: result.rows, command: result.command };
    },
  };

  // A failed ROLLBACK may leave the one connection inside a transaction; every later
  // transaction would silently join it, so the driver refuses work from then on.
  let brokenBy: unknown;

  async function runQueued<T>(fn: (tx: SqlTx) => Promise<T>): Promise<T> {
    if (brokenBy !== undefined) {
      throw new QlrError(
        "storage_unavailable",
        "the PGlite connection is in an unknown state after a failed ROLLBACK",
        { cause: brokenBy },
      );
    }
    return runSerializableTransaction(session, fn, undefined, {
      onSessionBroken: (error) => {
        brokenBy = error;
      },
    });
  }

  return serialDriver({
    dialect: "postgres",
    name: "pglite",
    runTransaction: runQueued,
    release: () => pglite.close(),
    // The PGlite instance is this driver's own, never handed out: nothing else can write it.
    soleWriter: true,
  });
}
