/**
 * The do-sqlite driver inside workerd, on real Durable Object SQLite storage: atomicity of
 * `transaction(fn)` with an async `fn`, the transaction queue, statement rules, error mapping
 * and value shapes.
 */
import { describe, expect, it } from "vitest";
import { isQlrError } from "../../src/errors.ts";
import type { SqlDriver } from "../../storage/driver.ts";
import {
  mapDurableObjectSqlError,
  singleStatement,
  sqliteCodeOf,
} from "../../storage/do-sqlite/driver.ts";
import { openSqliteStore } from "../../storage/sqlite/store.ts";
import { createChildren, raceQueuedIncrements } from "../storage/fixtures/sqlite-driver-cases.ts";
import { freshObject, freshObjectDriver, inObject } from "./support.ts";

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function openWithTable(): Promise<SqlDriver> {
  const driver = freshObjectDriver();
  await driver.transaction(async (tx) => {
    await tx.query(
      "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, amount INTEGER CHECK (amount IS NULL OR amount >= 0))",
    );
  });
  return driver;
}

async function names(driver: SqlDriver): Promise<string[]> {
  const rows = await driver.transaction((tx) =>
    tx.query<{ name: string }>("SELECT name FROM items ORDER BY id"),
  );
  return rows.map((row) => row.name);
}

describe("do-sqlite driver", () => {
  it("reports its dialect and name", () => {
    const driver = freshObjectDriver();
    expect(driver.dialect).toBe("sqlite");
    expect(driver.name).toBe("do-sqlite");
  });

  it("a throw in fn leaves nothing written, across awaits and a real timer, and rethrows the same error", async () => {
    const driver = await openWithTable();
    await driver.transaction((tx) => tx.query("INSERT INTO items (name) VALUES ('kept')"));
    const boom = new Error("boom");
    const outcome = await driver
      .transaction(async (tx) => {
        await tx.query("INSERT INTO items (name) VALUES ('before-await')");
        await sleep(15);
        await tx.query("UPDATE items SET amount = 7 WHERE name = 'kept'");
        await tx.query("INSERT INTO items (name) VALUES ('after-await')");
        expect(await tx.query("SELECT COUNT(*) AS count FROM items")).toEqual([{ count: 3 }]);
        throw boom;
      })
      .catch((caught: unknown) => caught);
    expect(outcome).toBe(boom);
    expect(await names(driver)).toEqual(["kept"]);
    const kept = await driver.transaction((tx) =>
      tx.query("SELECT amount FROM items WHERE name = 'kept'"),
    );
    expect(kept).toEqual([{ amount: null }]);
  });

  it("a failing statement that fn does not catch rolls back the whole transaction and surfaces as conflict", async () => {
    const driver = await openWithTable();
    await driver.transaction((tx) => tx.query("INSERT INTO items (name) VALUES ('one')"));
    const error = await driver
      .transaction(async (tx) => {
        await tx.query("INSERT INTO items (name) VALUES ('two')");
        await tx.query("INSERT INTO items (name) VALUES ('one')");
      })
      .catch((caught: unknown) => caught);
    expect(isQlrError(error, "conflict")).toBe(true);
    expect((error as Error).cause).toBeInstanceOf(Error);
    expect(await names(driver)).toEqual(["one"]);
  });

  it("a failed statement that fn catches is undone alone; the rest commits", async () => {
    const driver = await openWithTable();
    await driver.transaction(async (tx) => {
      await tx.query("INSERT INTO items (name) VALUES ('a')");
      await expect(tx.query("INSERT INTO items (name) VALUES ('a')")).rejects.toMatchObject({
        code: "conflict",
      });
      await tx.query("INSERT INTO items (name) VALUES ('b')");
    });
    expect(await names(driver)).toEqual(["a", "b"]);
  });

  it("schema changes roll back with their transaction", async () => {
    const driver = freshObjectDriver();
    await expect(
      driver.transaction(async (tx) => {
        await tx.query("CREATE TABLE rolled (a INTEGER)");
        await tx.query("CREATE INDEX rolled_a ON rolled (a)");
        throw new Error("undo");
      }),
    ).rejects.toThrow("undo");
    const tables = await driver.transaction((tx) =>
      tx.query("SELECT name FROM sqlite_master WHERE name LIKE 'rolled%'"),
    );
    expect(tables).toEqual([]);
  });

  it("queues transactions so that awaits inside one never let another interleave", async () => {
    // The three transactions are enqueued by one synchronous piece of code inside the object, in
    // a known order. (Issued from test code, each call would travel through its own
    // runInDurableObject round trip, and those may reach the object in any order: what is
    // tested is the queue, not the order of arrival.)
    const stub = freshObject();
    const trace = await inObject(stub, async (instance) => {
      const driver = instance.driver;
      await driver.transaction((tx) =>
        tx.query(
          "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, amount INTEGER)",
        ),
      );
      const { trace: events, amount } = await raceQueuedIncrements(driver, [20, 0, 5]);
      events.push(`amount=${amount ?? "missing"}`);
      return events;
    });
    expect(trace).toEqual(["a:start", "a:end", "b:start", "b:end", "c:start", "c:end", "amount=3"]);
  });

  it("a failed transaction does not stop the queue", async () => {
    const driver = await openWithTable();
    const results = await Promise.allSettled([
      driver.transaction(() => Promise.reject(new Error("first fails"))),
      driver.transaction((tx) => tx.query("INSERT INTO items (name) VALUES ('second')")),
    ]);
    expect(results.map((result) => result.status)).toEqual(["rejected", "fulfilled"]);
    expect(await names(driver)).toEqual(["second"]);
  });

  it("refuses multi-statement text before running any of it", async () => {
    const driver = await openWithTable();
    const error = await driver
      .transaction((tx) =>
        tx.query("INSERT INTO items (name) VALUES ('x'); INSERT INTO items (name) VALUES ('y')"),
      )
      .catch((caught: unknown) => caught);
    expect(isQlrError(error, "internal")).toBe(true);
    expect((error as Error).message).toMatch(/One statement per query/);
    expect(await names(driver)).toEqual([]);
    // A trailing semicolon with comments after it, and semicolons inside literals, are one statement.
    await driver.transaction((tx) =>
      tx.query("INSERT INTO items (name) VALUES ('a;b') ; -- done\n /* really */ ;"),
    );
    await driver.transaction((tx) => tx.query(`INSERT INTO items ("name") VALUES ('it''s; fine')`));
    expect(await names(driver)).toEqual(["a;b", "it's; fine"]);
  });

  it("splits statements exactly", () => {
    expect(singleStatement("SELECT 1")).toBe("SELECT 1");
    expect(singleStatement("SELECT 1;")).toBe("SELECT 1");
    expect(singleStatement("SELECT 1; \n-- trailing\n/* c */;;  ")).toBe("SELECT 1");
    expect(singleStatement("SELECT ';' AS a, \";\" AS b, [;] AS c, `;` AS d -- ;\n")).toBe(
      "SELECT ';' AS a, \";\" AS b, [;] AS c, `;` AS d -- ;\n",
    );
    expect(singleStatement("SELECT 'it''s;' /* ; */")).toBe("SELECT 'it''s;' /* ; */");
    expect(() => singleStatement("SELECT 1; SELECT 2")).toThrow(/One statement per query/);
    expect(() => singleStatement("SELECT 1; -- c\n SELECT 2")).toThrow(/One statement per query/);
  });

  it("transaction control belongs to the storage API: BEGIN, COMMIT and SAVEPOINT are refused", async () => {
    const driver = freshObjectDriver();
    for (const statement of [
      "BEGIN",
      "BEGIN IMMEDIATE",
      "COMMIT",
      "ROLLBACK",
      "SAVEPOINT s",
      "RELEASE s",
    ]) {
      const error = await driver
        .transaction((tx) => tx.query(statement))
        .catch((caught: unknown) => caught);
      expect(isQlrError(error, "internal"), statement).toBe(true);
    }
  });

  it("returns integers as numbers and refuses numbers it cannot store faithfully", async () => {
    const driver = await openWithTable();
    const ms = 1_800_000_000_123;
    await driver.transaction((tx) =>
      tx.query("INSERT INTO items (name, amount) VALUES (?, ?)", ["ms", ms]),
    );
    const rows = await driver.transaction((tx) =>
      tx.query<{ amount: unknown; kind: string; count: unknown }>(
        "SELECT amount, typeof(amount) AS kind, (SELECT COUNT(*) FROM items) AS count FROM items WHERE name = 'ms'",
      ),
    );
    expect(rows).toEqual([{ amount: ms, kind: "integer", count: 1 }]);
    expect(typeof rows[0]?.count).toBe("number");
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
      const error = await driver
        .transaction((tx) => tx.query("INSERT INTO items (name, amount) VALUES ('bad', ?)", [bad]))
        .catch((caught: unknown) => caught);
      expect(isQlrError(error, "internal"), String(bad)).toBe(true);
    }
    expect(await names(driver)).toEqual(["ms"]);
  });

  it("maps constraint errors: unique and primary key are conflicts, CHECK and foreign keys are internal", async () => {
    const driver = await openWithTable();
    await driver.transaction((tx) => tx.query("INSERT INTO items (id, name) VALUES (1, 'one')"));
    await createChildren(driver, "items");
    const attempt = (sql: string): Promise<unknown> =>
      driver.transaction((tx) => tx.query(sql)).catch((caught: unknown) => caught);
    expect(await attempt("INSERT INTO items (id, name) VALUES (1, 'other')")).toMatchObject({
      code: "conflict",
    });
    expect(await attempt("INSERT INTO items (name) VALUES ('one')")).toMatchObject({
      code: "conflict",
    });
    expect(await attempt("INSERT INTO items (name, amount) VALUES ('neg', -1)")).toMatchObject({
      code: "internal",
    });
    // Foreign keys are enforced in DO SQLite without any pragma.
    expect(await attempt("INSERT INTO children (parent_id) VALUES (999)")).toMatchObject({
      code: "internal",
    });
    expect(
      sqliteCodeOf(
        new Error(
          "UNIQUE constraint failed: t.name: SQLITE_CONSTRAINT (extended: SQLITE_CONSTRAINT_UNIQUE)",
        ),
      ),
    ).toBe("SQLITE_CONSTRAINT_UNIQUE");
    expect(
      mapDurableObjectSqlError(new Error("database or disk is full: SQLITE_FULL"), "INSERT").code,
    ).toBe("storage_unavailable");
    expect(
      mapDurableObjectSqlError(
        new Error("database disk image is malformed: SQLITE_CORRUPT"),
        "SELECT",
      ).code,
    ).toBe("storage_corrupt");
  });

  it("speaks the SQL the store uses: partial indexes, RETURNING, ON CONFLICT, CHECK", async () => {
    const driver = await openWithTable();
    const result = await driver.transaction(async (tx) => {
      await tx.query("CREATE INDEX items_positive ON items (id) WHERE amount > 0");
      await tx.query("INSERT INTO items (name, amount) VALUES ('a', 1), ('b', 0)");
      const updated = await tx.query(
        "UPDATE items SET amount = amount + 1 WHERE name = ? RETURNING name, amount",
        ["a"],
      );
      const upserted = await tx.query(
        "INSERT INTO items (name, amount) VALUES ('b', 5) ON CONFLICT (name) DO UPDATE SET amount = excluded.amount RETURNING amount",
      );
      const positive = await tx.query("SELECT name FROM items WHERE amount > 0 ORDER BY name");
      return { updated, upserted, positive };
    });
    expect(result).toEqual({
      updated: [{ name: "a", amount: 2 }],
      upserted: [{ amount: 5 }],
      positive: [{ name: "a" }, { name: "b" }],
    });
  });

  it("the _cf_ prefix is reserved by Durable Objects, and no table of the schema uses it", async () => {
    const driver = freshObjectDriver();
    await expect(
      driver.transaction((tx) => tx.query("CREATE TABLE _cf_mine (a INTEGER)")),
    ).rejects.toMatchObject({ code: "internal" });
    await openSqliteStore(driver, 1_800_000_000_000);
    const objects = await driver.transaction((tx) =>
      tx.query<{ name: string; type: string }>(
        "SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name",
      ),
    );
    expect(objects.map((object) => object.name)).toContain("qlr_schema");
    expect(objects.map((object) => object.name)).toContain("runs");
    expect(objects.filter((object) => object.name.toLowerCase().startsWith("_cf_"))).toEqual([]);
    // Partial indexes of the migration exist.
    expect(
      objects.filter((object) => object.type === "index").map((object) => object.name),
    ).toContain("runs_frontier_due");
  });

  it("a tx handle used after its transaction ended is refused", async () => {
    const driver = await openWithTable();
    let leaked: Parameters<Parameters<SqlDriver["transaction"]>[0]>[0] | undefined;
    await driver.transaction((tx) => {
      leaked = tx;
      return Promise.resolve();
    });
    await expect(leaked!.query("INSERT INTO items (name) VALUES ('late')")).rejects.toMatchObject({
      code: "internal",
    });
    expect(await names(driver)).toEqual([]);
  });

  it("close waits for queued transactions, is idempotent, and refuses later ones", async () => {
    const stub = freshObject();
    const outcome = await inObject(stub, async (instance, state) => {
      const driver = instance.driver;
      await driver.transaction((tx) => tx.query("CREATE TABLE t (a INTEGER)"));
      const pending = driver.transaction(async (tx) => {
        await sleep(10);
        await tx.query("INSERT INTO t (a) VALUES (1)");
      });
      const closed = driver.close();
      await Promise.all([pending, closed, driver.close()]);
      const later = await driver
        .transaction((tx) => tx.query("SELECT 1"))
        .catch((caught: unknown) => caught);
      return { later, rows: state.storage.sql.exec("SELECT a FROM t").toArray() };
    });
    expect(outcome.later).toMatchObject({ code: "storage_unavailable" });
    expect(outcome.rows).toEqual([{ a: 1 }]);
  });
});
