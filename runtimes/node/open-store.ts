import { join } from "node:path";
import { QlrError } from "../../src/errors.ts";
import type { SqlStore } from "../../storage/sql-store.ts";

export type StoreKind = "sqlite" | "pglite" | "postgres";

export interface OpenStoreOptions {
  readonly kind: StoreKind;
  readonly stateDir: string;
  readonly databaseUrl: string | null;
  readonly nowMs: number;
  /** Memory before speed (the edge profile): sql.js is compiled by V8's baseline compiler only (see load.ts). */
  readonly lowMemory?: boolean;
}

/**
 * Opens the configured store. Drivers are imported lazily so a device running the embedded
 * SQLite default never loads PGlite or pg (memory matters on a 128 MiB router).
 */
export async function openConfiguredStore(options: OpenStoreOptions): Promise<SqlStore> {
  switch (options.kind) {
    case "sqlite": {
      const [{ loadSqlJs }, { openSqlJsFileDriver }, { openSqliteStore }] = await Promise.all([
        import("../../storage/sqljs/node/load.ts"),
        import("../../storage/sqljs/node/file-driver.ts"),
        import("../../storage/sqlite/store.ts"),
      ]);
      const driver = await openSqlJsFileDriver(
        await loadSqlJs({ baselineCompilerOnly: options.lowMemory === true }),
        { path: join(options.stateDir, "db") },
      );
      return openSqliteStore(driver, options.nowMs);
    }
    case "pglite": {
      // PGlite on disk is not power-loss durable (it runs with fsync off): development only.
      const [{ openPgliteDriver }, { openPostgresStore }] = await Promise.all([
        import("../../storage/postgres/pglite-driver.ts"),
        import("../../storage/postgres/store.ts"),
      ]);
      return openPostgresStore(
        await openPgliteDriver({ dataDir: join(options.stateDir, "pglite") }),
        options.nowMs,
      );
    }
    case "postgres": {
      if (options.databaseUrl === null)
        throw new QlrError(
          "invalid_request",
          "--store postgres needs --database-url or QLR_DATABASE_URL",
        );
      const [{ openPgDriver }, { openPostgresStore }] = await Promise.all([
        import("../../storage/postgres/pg-driver.ts"),
        import("../../storage/postgres/store.ts"),
      ]);
      // Several coordinators share this server: store time is the server's clock, not this host's.
      return openPostgresStore(
        await openPgDriver({ connectionString: options.databaseUrl }),
        options.nowMs,
        { clock: "database" },
      );
    }
  }
}
