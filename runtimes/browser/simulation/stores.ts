/// <reference lib="dom" />
/**
 * The page's stores: sql.js (its `browser` build, the .wasm served beside the bundle) and
 * PGlite in memory, loaded on demand as its own chunk (its .wasm and .data files are beside
 * the bundle too). Both are fresh for every case, as a seed's run ids must not meet an older
 * run of the same seed.
 */
import initSqlJs, { type SqlJsStatic } from "sql.js";
import type { SqlDriver } from "../../../storage/driver.ts";
import type { Migration } from "../../../storage/migrate.ts";
import { MIGRATIONS as POSTGRES_MIGRATIONS } from "../../../storage/postgres/migrations.generated.ts";
import { MIGRATIONS as SQLITE_MIGRATIONS } from "../../../storage/sqlite/migrations.generated.ts";
import { openSqlJsMemoryDriver } from "../../../storage/sqljs/memory-driver.ts";
import type { SimStoreKind } from "./engine.ts";

let sqlJs: Promise<SqlJsStatic> | null = null;

function loadSqlJs(): Promise<SqlJsStatic> {
  sqlJs ??= initSqlJs({ locateFile: () => new URL("sql-wasm.wasm", import.meta.url).href }).catch(
    (error: unknown) => {
      sqlJs = null;
      throw error;
    },
  );
  return sqlJs;
}

export async function openDriver(
  kind: SimStoreKind,
): Promise<{ driver: SqlDriver; migrations: readonly Migration[]; label: string }> {
  if (kind === "sqljs")
    return {
      driver: openSqlJsMemoryDriver(await loadSqlJs()),
      migrations: SQLITE_MIGRATIONS,
      label: "sql.js (SQLite 3, in memory)",
    };
  const { openPgliteDriver } = await import("../../../storage/postgres/pglite-driver.ts");
  return {
    driver: await openPgliteDriver(),
    migrations: POSTGRES_MIGRATIONS,
    label: "PGlite (PostgreSQL, memory://)",
  };
}
