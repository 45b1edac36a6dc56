import type { SqlDriver } from "../driver.ts";
import { openSqlStore, type SqlStore, type StoreClockSource } from "../sql-store.ts";
import { MIGRATIONS } from "./migrations.generated.ts";

/**
 * The PostgreSQL dialect store over PGlite or `pg`. A server shared by several coordinators
 * runs with `clock: "database"` (the runtimes pass it for `--store postgres`); PGlite lives in
 * one process and keeps the host clock.
 */
export function openPostgresStore(
  driver: SqlDriver,
  nowMs: number,
  options: { readonly clock?: StoreClockSource } = {},
): Promise<SqlStore> {
  if (driver.dialect !== "postgres")
    throw new TypeError(`openPostgresStore needs a postgres driver, got ${driver.dialect}`);
  return openSqlStore(driver, MIGRATIONS, nowMs, options);
}
