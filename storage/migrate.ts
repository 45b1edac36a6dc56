import { QlrError } from "../src/errors.ts";
import type { SqlDriver } from "./driver.ts";

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

/** Splits a migration into statements: statements end with `;` at the end of a line; `--` lines are comments. */
export function splitStatements(sql: string): string[] {
  const withoutComments = sql
    .split("\n")
    .filter((line) => !line.trimStart().startsWith("--"))
    .join("\n");
  return withoutComments
    .split(/;\s*(?:\n|$)/)
    .map((statement) => statement.trim())
    .filter((statement) => statement.length > 0);
}

/**
 * Applies pending migrations, each in its own transaction with its version row written first,
 * so a crash leaves either the whole migration or none of it. Re-running is a no-op. A
 * database whose schema is newer than this build refuses to open: an old binary must never
 * write into a schema it does not know.
 */
export async function migrate(
  driver: SqlDriver,
  migrations: readonly Migration[],
  nowMs: number,
): Promise<{ applied: number[]; version: number }> {
  const bigint = driver.dialect === "postgres" ? "BIGINT" : "INTEGER";
  const p = (index: number): string => (driver.dialect === "postgres" ? `$${index}` : "?");
  await driver.transaction(async (tx) => {
    await tx.query(
      `CREATE TABLE IF NOT EXISTS qlr_schema (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at_ms ${bigint} NOT NULL)`,
    );
  });
  const latestKnown = migrations.reduce((max, migration) => Math.max(max, migration.version), 0);
  const applied: number[] = [];
  for (const migration of [...migrations].sort((a, b) => a.version - b.version)) {
    const done = await driver.transaction(async (tx) => {
      const rows = await tx.query<{ version: number }>(
        "SELECT MAX(version) AS version FROM qlr_schema",
      );
      const current = Number(rows[0]?.version ?? 0);
      if (current > latestKnown) {
        throw new QlrError(
          "schema_too_new",
          `the database schema is version ${current}, newer than this build knows (${latestKnown}); upgrade qlr before opening it`,
        );
      }
      if (current >= migration.version) return false;
      await tx.query(
        `INSERT INTO qlr_schema (version, name, applied_at_ms) VALUES (${p(1)}, ${p(2)}, ${p(3)})`,
        [migration.version, migration.name, nowMs],
      );
      for (const statement of splitStatements(migration.sql)) await tx.query(statement);
      return true;
    });
    if (done) applied.push(migration.version);
  }
  const rows = await driver.transaction(async (tx) =>
    tx.query<{ version: number }>("SELECT MAX(version) AS version FROM qlr_schema"),
  );
  const version = Number(rows[0]?.version ?? 0);
  if (version > latestKnown)
    throw new QlrError(
      "schema_too_new",
      `the database schema is version ${version}, newer than this build knows (${latestKnown}); upgrade qlr before opening it`,
    );
  return { applied, version };
}
