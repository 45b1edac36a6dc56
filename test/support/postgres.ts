/**
 * Test helpers for the real PostgreSQL server started by global-setup.ts. Each test file
 * calls `createTestDatabase()` once (in `beforeAll`) and `drop()` once (in `afterAll`), so
 * files running in parallel never see each other's tables.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { inject } from "vitest";
// The type-only import ties this file to the `ProvidedContext` declaration it relies on.
import type {} from "./global-setup.ts";

export interface TestDatabase {
  /** A URL for the fresh, empty database. */
  readonly url: string;
  /** Drops the database, ending any connection still open to it. Idempotent. */
  drop(): Promise<void>;
}

const CONNECT_TIMEOUT_MS = 10_000;

export async function createTestDatabase(): Promise<TestDatabase> {
  const serverUrl = inject("databaseUrl");
  // Lower case, 28 characters: well inside PostgreSQL's 63-byte identifier limit.
  const name = `qlr_test_${process.pid}_${randomBytes(6).toString("hex")}`;
  await runAdminStatement(serverUrl, `CREATE DATABASE ${pg.escapeIdentifier(name)}`);

  const databaseUrl = new URL(serverUrl);
  databaseUrl.pathname = `/${name}`;
  let dropping: Promise<void> | undefined;
  return {
    url: databaseUrl.toString(),
    drop: () => {
      // WITH (FORCE) (PostgreSQL 13+) ends sessions a failed test left behind.
      dropping ??= runAdminStatement(
        serverUrl,
        `DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`,
      );
      return dropping;
    },
  };
}

async function runAdminStatement(serverUrl: string, sql: string): Promise<void> {
  const client = new pg.Client({
    connectionString: serverUrl,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    application_name: "qlr-test-support",
  });
  try {
    await client.connect();
    await client.query(sql);
  } finally {
    await client.end().catch(() => undefined);
  }
}
