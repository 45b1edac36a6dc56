import { inject } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadSqlJs } from "../../storage/sqljs/node/load.ts";
import { openSqlJsMemoryDriver } from "../../storage/sqljs/memory-driver.ts";
import { openSqlJsFileDriver } from "../../storage/sqljs/node/file-driver.ts";
import { openPgliteDriver } from "../../storage/postgres/pglite-driver.ts";
import { openPgDriver } from "../../storage/postgres/pg-driver.ts";
import { createTestDatabase } from "../support/postgres.ts";
import { describeStoreContract } from "./store-contract.ts";

describeStoreContract({
  name: "sqljs-memory",
  open: async () => openSqlJsMemoryDriver(await loadSqlJs()),
});

describeStoreContract({
  name: "sqljs-file",
  open: async () => {
    const dir = mkdtempSync(join(tmpdir(), "qlr-contract-"));
    const driver = await openSqlJsFileDriver(await loadSqlJs(), { path: join(dir, "db") });
    const close = driver.close.bind(driver);
    return Object.assign(driver, {
      close: async () => {
        await close();
        rmSync(dir, { recursive: true, force: true });
      },
    });
  },
});

describeStoreContract({ name: "pglite", open: () => openPgliteDriver() });

describeStoreContract({
  name: "pg",
  open: async () => {
    void inject("databaseUrl");
    const database = await createTestDatabase();
    const driver = await openPgDriver({ connectionString: database.url, poolSize: 6 });
    const close = driver.close.bind(driver);
    return Object.assign(driver, {
      close: async () => {
        await close();
        await database.drop();
      },
    });
  },
});
