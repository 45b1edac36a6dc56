/**
 * Named statements of the pg driver: a text sent again on a connection is parsed by the server
 * once (Parse once, then Bind/Execute), the names of a connection are bounded, and a statement
 * whose Parse failed loses its name, so the connection never binds a statement that does not
 * exist on the server.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SqlDriver } from "../../storage/driver.ts";
import { openPgDriver } from "../../storage/postgres/pg-driver.ts";
import {
  MAX_NAMED_STATEMENT_CHARS,
  MAX_NAMED_STATEMENTS,
  StatementNames,
} from "../../storage/postgres/statement-names.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(async () => {
  await database?.drop();
});

describe("the pg driver's named statements", { timeout: 60_000 }, () => {
  let driver: SqlDriver;
  beforeAll(async () => {
    // One connection, so every transaction below runs on the same server session.
    driver = await openPgDriver({ connectionString: database.url, poolSize: 1 });
  });
  afterAll(async () => {
    await driver?.close();
  });

  it("parses a text sent again once per connection, under one name", async () => {
    const text = "SELECT $1::int + 1 AS next_value";
    for (let round = 1; round <= 4; round += 1) {
      const rows = await driver.transaction((tx) => tx.query(text, [round]));
      expect(rows).toEqual([{ next_value: round + 1 }]);
    }
    const prepared = await driver.transaction((tx) =>
      tx.query<{ name: string }>(
        "SELECT name FROM pg_prepared_statements WHERE statement = $1 AND from_sql = false",
        [text],
      ),
    );
    expect(prepared).toHaveLength(1);
    expect(prepared[0]?.name).toMatch(/^qlr_\d+$/);
  });

  it("a statement whose named Parse failed is parsed again under a new name once it can be", async () => {
    const text = "SELECT v FROM named_later WHERE v = $1";
    // The first use goes unnamed, the second under a name: both fail at Parse.
    for (let round = 0; round < 2; round += 1)
      await expect(driver.transaction((tx) => tx.query(text, [1]))).rejects.toThrow();
    await driver.transaction((tx) => tx.query("CREATE TABLE named_later (v INT)"));
    await driver.transaction((tx) => tx.query("INSERT INTO named_later (v) VALUES ($1)", [1]));
    expect(await driver.transaction((tx) => tx.query(text, [1]))).toEqual([{ v: 1 }]);
    expect(await driver.transaction((tx) => tx.query(text, [1]))).toEqual([{ v: 1 }]);
  });
});

describe("the bound on a connection's names", () => {
  it("names a text from its second use, up to MAX_NAMED_STATEMENTS names; later texts go unnamed", () => {
    const names = new StatementNames({});
    expect(names.nameFor("SELECT $1 AS a")).toBeUndefined();
    expect(names.nameFor("SELECT $1 AS a")).toBe("qlr_0");
    expect(names.nameFor("SELECT $1 AS a")).toBe("qlr_0");
    for (let index = 1; index < MAX_NAMED_STATEMENTS; index += 1) {
      const text = `SELECT $1 AS t${index}`;
      names.nameFor(text);
      expect(names.nameFor(text)).toBe(`qlr_${index}`);
    }
    expect(names.issuedNames).toBe(MAX_NAMED_STATEMENTS);
    names.nameFor("SELECT $1 AS over");
    expect(names.nameFor("SELECT $1 AS over")).toBeUndefined();
    expect(names.nameFor("SELECT $1 AS a")).toBe("qlr_0");
  });

  it("names no more text than MAX_NAMED_STATEMENT_CHARS, and never a text of several statements", () => {
    const names = new StatementNames({});
    const long = `SELECT $1 AS x${" ".repeat(MAX_NAMED_STATEMENT_CHARS)}`;
    names.nameFor(long);
    expect(names.nameFor(long)).toBeUndefined();
    names.nameFor("SELECT 1; SELECT 2");
    expect(names.nameFor("SELECT 1; SELECT 2")).toBeUndefined();
    expect(names.issuedNames).toBe(0);
  });

  it("never names a lookup by a list of keys, so each use is planned for its own keys", () => {
    const names = new StatementNames({});
    for (const lookup of [
      "SELECT id FROM run_attempts WHERE run_id IN ($1, $2, $3)",
      "SELECT id FROM run_attempts WHERE run_id = ANY(CAST($1 AS TEXT[])) ORDER BY run_id, number",
    ])
      for (let use = 0; use < 5; use += 1) expect(names.nameFor(lookup)).toBeUndefined();
    // A parameter elsewhere in a text with IN over constants is still named.
    const constants = "SELECT id FROM runs WHERE status IN ('queued', 'running') AND id > $1";
    names.nameFor(constants);
    expect(names.nameFor(constants)).toBe("qlr_0");
    expect(names.issuedNames).toBe(1);
  });

  it("never names a multi-row update by a list of rows, so each use joins them by key", () => {
    const names = new StatementNames({});
    const updates = [
      "UPDATE run_attempts AS t SET status = v.column3 FROM (VALUES (CAST($1 AS TEXT), CAST($2 AS BIGINT), CAST($3 AS TEXT))) AS v WHERE t.id = v.column1 AND t.version = v.column2 RETURNING t.id",
      "UPDATE run_attempts AS t SET status = v.c3 FROM unnest(CAST($1 AS TEXT[]), CAST($2 AS BIGINT[]), CAST($3 AS TEXT[])) AS v(c1, c2, c3) WHERE t.id = v.c1 AND t.version = v.c2 RETURNING t.id",
    ];
    for (const update of updates)
      for (let use = 0; use < 5; use += 1) expect(names.nameFor(update)).toBeUndefined();
    // A multi-row INSERT has no join to plan: named from its second use as any other text.
    const insert =
      "INSERT INTO run_events (run_id, seq) SELECT * FROM unnest(CAST($1 AS TEXT[]), CAST($2 AS BIGINT[]))";
    names.nameFor(insert);
    expect(names.nameFor(insert)).toBe("qlr_0");
  });
});
