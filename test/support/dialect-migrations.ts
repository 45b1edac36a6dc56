/**
 * The compiled migrations of each SQL dialect, chosen by a driver's `dialect`. Kept apart from
 * test/support/drivers.ts (which opens Node-only drivers) so the contract suites can use it
 * inside workerd too.
 */
import type { SqlDialect } from "../../storage/driver.ts";
import type { Migration } from "../../storage/migrate.ts";
import { MIGRATIONS as POSTGRES_MIGRATIONS } from "../../storage/postgres/migrations.generated.ts";
import { MIGRATIONS as SQLITE_MIGRATIONS } from "../../storage/sqlite/migrations.generated.ts";

export function migrationsFor(dialect: SqlDialect): readonly Migration[] {
  return dialect === "sqlite" ? SQLITE_MIGRATIONS : POSTGRES_MIGRATIONS;
}
