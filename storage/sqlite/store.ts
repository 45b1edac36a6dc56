import type { SqlDriver } from "../driver.ts";
import { openSqlStore, type SqlStore } from "../sql-store.ts";
import { MIGRATIONS } from "./migrations.generated.ts";

/** The SQLite dialect store over any SQLite driver (sql.js memory or file, Durable Object SQLite). */
export function openSqliteStore(driver: SqlDriver, nowMs: number): Promise<SqlStore> {
  if (driver.dialect !== "sqlite")
    throw new TypeError(`openSqliteStore needs a sqlite driver, got ${driver.dialect}`);
  return openSqlStore(driver, MIGRATIONS, nowMs);
}
