/**
 * Test helpers for the real PostgreSQL server started by global-setup.ts. Each test file
 * calls `createTestDatabase()` once (in `beforeAll`) and `drop()` once (in `afterAll`), so
 * files running in parallel never see each other's tables.
 */
import { inject } from "vitest";
// The type-only import ties this file to the `ProvidedContext` declaration it relies on.
import type {} from "./global-setup.ts";
import { createScratchDatabase, type ScratchDatabase } from "./scratch-database.ts";

export type TestDatabase = ScratchDatabase;

export function createTestDatabase(): Promise<TestDatabase> {
  return createScratchDatabase(inject("databaseUrl"), {
    namePrefix: "qlr_test",
    applicationName: "qlr-test-support",
  });
}
