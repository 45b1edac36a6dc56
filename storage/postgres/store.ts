import type { SqlDriver } from "../driver.ts";
import { openSqlStore, type SqlStore } from "../sql-store.ts";
import { MIGRATIONS } from "./migrations.generated.ts";

/** The PostgreSQL dialect store over PGlite or `pg`. */
export function openPostgresStore(driver: SqlDriver, nowMs: number): Promise<SqlStore> {
  if (driver.dialect !== "postgres") throw new TypeError(`openPostgresStore needs a postgres driver, got ${driver.dialect}`);
  return openSqlStore(driver, MIGRATIONS, nowMs);
}
