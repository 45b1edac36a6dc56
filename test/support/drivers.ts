/**
 * The one list of storage drivers the Node test suites run on: the store contract, the lease
 * contract and the HTTP harness all iterate it, so a new driver is added here once. Each entry
 * opens a fresh, empty database and its `close` removes whatever it made (a temp folder, a
 * PostgreSQL database).
 *
 * `postgres` needs the server that test/support/global-setup.ts starts, so only projects with
 * that global setup (storage, device) may open it; `IN_PROCESS_DRIVERS` are the ones that
 * need nothing outside the test process. The Durable Object driver lives in
 * test/worker/support.ts (it can only be opened inside workerd) and has the same shape.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { SqlDriver } from "../../storage/driver.ts";
import { openPgDriver } from "../../storage/postgres/pg-driver.ts";
import { openPgliteDriver } from "../../storage/postgres/pglite-driver.ts";
import { openSqlStore, type SqlStore } from "../../storage/sql-store.ts";
import { openSqlJsMemoryDriver } from "../../storage/sqljs/memory-driver.ts";
import { openSqlJsFileDriver } from "../../storage/sqljs/node/file-driver.ts";
import { loadSqlJs } from "../../storage/sqljs/node/load.ts";
import { migrationsFor } from "./dialect-migrations.ts";
import { createTestDatabase } from "./postgres.ts";

export type DriverName = "sqljs-memory" | "sqljs-file" | "pglite" | "postgres" | "do-sqlite";

export interface DriverFactory {
  readonly name: DriverName;
  /** A fresh, empty database; its `close` also removes what `open` made. */
  open(): Promise<SqlDriver>;
}

/** The driver with a `close` that first closes it, then runs `cleanup`. */
function closingAlso(driver: SqlDriver, cleanup: () => Promise<void> | void): SqlDriver {
  const close = driver.close.bind(driver);
  return Object.assign(driver, {
    close: async () => {
      await close();
      await cleanup();
    },
  });
}

const SQLJS_MEMORY: DriverFactory = {
  name: "sqljs-memory",
  open: async () => openSqlJsMemoryDriver(await loadSqlJs()),
};

const SQLJS_FILE: DriverFactory = {
  name: "sqljs-file",
  open: async () => {
    const dir = mkdtempSync(join(tmpdir(), "qlr-driver-"));
    const driver = await openSqlJsFileDriver(await loadSqlJs(), { path: join(dir, "db") });
    return closingAlso(driver, () => rmSync(dir, { recursive: true, force: true }));
  },
};

const PGLITE: DriverFactory = { name: "pglite", open: () => openPgliteDriver() };

const POSTGRES: DriverFactory = {
  name: "postgres",
  open: async () => {
    const database = await createTestDatabase();
    // A pool of several connections: concurrent transactions really run concurrently.
    const driver = await openPgDriver({ connectionString: database.url, poolSize: 6 });
    return closingAlso(driver, () => database.drop());
  },
};

/** Every driver a Node process can open, in the order the suites report them. */
export const DRIVERS: readonly DriverFactory[] = [SQLJS_MEMORY, SQLJS_FILE, PGLITE, POSTGRES];

/**
 * The drivers that need no server: the HTTP harness runs on these. sqljs-file is left out
 * there because the file driver has suites of its own (test/storage/sqljs-file-*) and the
 * HTTP layer above the store does not see the difference.
 */
export const IN_PROCESS_DRIVERS: readonly DriverFactory[] = [SQLJS_MEMORY, PGLITE];

/** The entry of the driver list with that name. */
export function driverNamed(name: DriverName): DriverFactory {
  const found = DRIVERS.find((factory) => factory.name === name);
  if (found === undefined) throw new Error(`no driver ${name} in the driver list`);
  return found;
}

/** A store, migrated, on a fresh database of `factory`, its clock observed at `nowMs`. */
export async function openTestStore(factory: DriverFactory, nowMs: number): Promise<SqlStore> {
  const driver = await factory.open();
  return openSqlStore(driver, migrationsFor(driver.dialect), nowMs);
}
