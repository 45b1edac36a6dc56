/**
 * Behaviour both sql.js drivers share: queued transactions, rollback, error mapping, row
 * shapes. Runs against the memory driver and the file driver on real sql.js and real files.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { SqlJsStatic } from "sql.js";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { isQlrError } from "../../src/errors.ts";
import type { SqlDriver } from "../../storage/driver.ts";
import { SqlJsConnection, classifyStatement } from "../../storage/sqljs/connection.ts";
import { openSqlJsFileDriver } from "../../storage/sqljs/node/file-driver.ts";
import { loadSqlJs } from "../../storage/sqljs/node/load.ts";
import { openSqlJsMemoryDriver } from "../../storage/sqljs/memory-driver.ts";
import { createChildren, raceQueuedIncrements } from "./fixtures/sqlite-driver-cases.ts";

let SQL: SqlJsStatic;
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  SQL = await loadSqlJs();
});

afterEach(async () => {
  // Bounded: each cleanup is removed as it runs.
  for (let cleanup = cleanups.pop(); cleanup !== undefined; cleanup = cleanups.pop())
    await cleanup();
});

const drivers: { name: string; open: () => Promise<SqlDriver> }[] = [
  {
    name: "sqljs-memory",
    open: () => {
      const driver = openSqlJsMemoryDriver(SQL);
      cleanups.push(() => driver.close());
      return Promise.resolve(driver);
    },
  },
  {
    name: "sqljs-file",
    open: async () => {
      const directory = mkdtempSync(join(tmpdir(), "qlr-sqljs-driver-"));
      cleanups.push(() => rmSync(directory, { recursive: true, force: true }));
      const driver = await openSqlJsFileDriver(SQL, { path: join(directory, "db") });
      cleanups.push(() => driver.close());
      return driver;
    },
  },
];

async function openWithTable(open: () => Promise<SqlDriver>): Promise<SqlDriver> {
  const driver = await open();
  await driver.transaction(async (tx) => {
    await tx.query(
      "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, amount INTEGER, ratio REAL)",
    );
  });
  return driver;
}

async function countItems(driver: SqlDriver): Promise<number> {
  const rows = await driver.transaction((tx) =>
    tx.query<{ count: number }>("SELECT COUNT(*) AS count FROM items"),
  );
  return rows[0]?.count ?? -1;
}

describe.each(drivers)("$name", ({ name, open }) => {
  it("reports its dialect and name", async () => {
    const driver = await open();
    expect(driver.dialect).toBe("sqlite");
    expect(driver.name).toBe(name);
  });

  it("queues transactions so that awaits inside one never let another interleave", async () => {
    const driver = await openWithTable(open);
    const { trace, amount } = await raceQueuedIncrements(driver, [30, 0, 10]);
    expect(trace).toEqual(["a:start", "a:end", "b:start", "b:end", "c:start", "c:end"]);
    expect(amount).toBe(3);
  });

  it("rolls back everything and rethrows the same error when fn throws", async () => {
    const driver = await openWithTable(open);
    const failure = new Error("the caller changed its mind");
    const outcome = driver.transaction(async (tx) => {
      await tx.query("INSERT INTO items (name) VALUES ('first')");
      await tx.query("INSERT INTO items (name) VALUES ('second')");
      throw failure;
    });
    await expect(outcome).rejects.toBe(failure);
    expect(await countItems(driver)).toBe(0);
    // The connection is usable afterwards.
    await driver.transaction((tx) => tx.query("INSERT INTO items (name) VALUES ('third')"));
    expect(await countItems(driver)).toBe(1);
  });

  it("maps a unique or primary key violation to conflict with the SQLite error as cause", async () => {
    const driver = await openWithTable(open);
    await driver.transaction((tx) => tx.query("INSERT INTO items (id, name) VALUES (1, 'only')"));
    const unique = await driver
      .transaction((tx) => tx.query("INSERT INTO items (name) VALUES ('only')"))
      .catch((error: unknown) => error);
    expect(isQlrError(unique, "conflict")).toBe(true);
    expect((unique as Error).cause).toBeInstanceOf(Error);
    expect((unique as Error).message).toContain("UNIQUE constraint failed: items.name");
    const primaryKey = await driver
      .transaction((tx) => tx.query("INSERT INTO items (id, name) VALUES (1, 'other')"))
      .catch((error: unknown) => error);
    expect(isQlrError(primaryKey, "conflict")).toBe(true);
  });

  it("lets fn catch a conflict and still commit its other statements", async () => {
    const driver = await openWithTable(open);
    await driver.transaction((tx) => tx.query("INSERT INTO items (name) VALUES ('taken')"));
    const inserted = await driver.transaction(async (tx) => {
      const duplicate = await tx
        .query("INSERT INTO items (name) VALUES ('taken')")
        .catch((error: unknown) => error);
      expect(isQlrError(duplicate, "conflict")).toBe(true);
      await tx.query("INSERT INTO items (name) VALUES ('fresh')");
      return "done";
    });
    expect(inserted).toBe("done");
    expect(await countItems(driver)).toBe(2);
  });

  it("returns rows as objects with integers as JavaScript numbers", async () => {
    const driver = await openWithTable(open);
    const rows = await driver.transaction(async (tx) => {
      await tx.query("INSERT INTO items (id, name, amount, ratio) VALUES (?, ?, ?, ?)", [
        7,
        "seven",
        1_800_000_000_000,
        0.25,
      ]);
      await tx.query("INSERT INTO items (id, name, amount, ratio) VALUES (?, ?, ?, ?)", [
        8,
        "eight",
        Number.MAX_SAFE_INTEGER,
        null,
      ]);
      return tx.query("SELECT id, name, amount, ratio FROM items ORDER BY id");
    });
    expect(rows).toEqual([
      { id: 7, name: "seven", amount: 1_800_000_000_000, ratio: 0.25 },
      { id: 8, name: "eight", amount: Number.MAX_SAFE_INTEGER, ratio: null },
    ]);
    expect(typeof rows[0]?.amount).toBe("number");
    const empty = await driver.transaction((tx) => tx.query("SELECT id FROM items WHERE id < 0"));
    expect(empty).toEqual([]);
  });

  it("returns rows from RETURNING clauses", async () => {
    const driver = await openWithTable(open);
    const rows = await driver.transaction((tx) =>
      tx.query("INSERT INTO items (name, amount) VALUES (?, ?) RETURNING id, amount", ["r", 5]),
    );
    expect(rows).toEqual([{ id: 1, amount: 5 }]);
  });

  it("keeps its lock between transactions (locking mode exclusive), also after a checkpoint reapplied the pragmas", async () => {
    const driver = await openWithTable(open);
    const lockingMode = async (): Promise<unknown> =>
      (
        await driver.transaction((tx) => tx.query<{ locking_mode: string }>("PRAGMA locking_mode"))
      )[0]?.locking_mode;
    expect(await lockingMode()).toBe("exclusive");
    await driver.transaction((tx) => tx.query("INSERT INTO items (name) VALUES ('held')"));
    if ("checkpoint" in driver && typeof driver.checkpoint === "function")
      await (driver.checkpoint as () => Promise<void>)();
    expect(await lockingMode()).toBe("exclusive");
    // Rollback still works while the lock is held.
    await driver
      .transaction(async (tx) => {
        await tx.query("INSERT INTO items (name) VALUES ('undone')");
        throw new Error("roll back");
      })
      .catch(() => undefined);
    expect(await countItems(driver)).toBe(1);
  });

  it("enforces foreign keys", async () => {
    const driver = await open();
    await driver.transaction((tx) => tx.query("CREATE TABLE parents (id INTEGER PRIMARY KEY)"));
    await createChildren(driver, "parents");
    const outcome = await driver
      .transaction((tx) => tx.query("INSERT INTO children (id, parent_id) VALUES (1, 99)"))
      .catch((error: unknown) => error);
    expect(isQlrError(outcome, "internal")).toBe(true);
    expect((outcome as Error).message).toContain("FOREIGN KEY constraint failed");
  });

  it("refuses a text with more than one statement, transaction control and non-finite numbers", async () => {
    const driver = await openWithTable(open);
    const attempts = [
      (): Promise<unknown> =>
        driver.transaction((tx) =>
          tx.query("INSERT INTO items (name) VALUES ('a'); INSERT INTO items (name) VALUES ('b')"),
        ),
      (): Promise<unknown> => driver.transaction((tx) => tx.query("COMMIT")),
      (): Promise<unknown> => driver.transaction((tx) => tx.query("BEGIN")),
      (): Promise<unknown> =>
        driver.transaction((tx) =>
          tx.query("INSERT INTO items (name, ratio) VALUES ('nan', ?)", [Number.NaN]),
        ),
      (): Promise<unknown> => driver.transaction((tx) => tx.query("SELEC 1")),
    ];
    for (const attempt of attempts) {
      const outcome = await attempt().catch((error: unknown) => error);
      expect(isQlrError(outcome, "internal")).toBe(true);
    }
    expect(await countItems(driver)).toBe(0);
    // A trailing semicolon and comment are one statement, not two.
    await driver.transaction((tx) =>
      tx.query("INSERT INTO items (name) VALUES ('ok'); -- trailing comment"),
    );
    expect(await countItems(driver)).toBe(1);
  });

  it("refuses queries through a transaction handle after the transaction ended", async () => {
    const driver = await openWithTable(open);
    let leaked: Parameters<Parameters<SqlDriver["transaction"]>[0]>[0] | undefined;
    await driver.transaction((tx) => {
      leaked = tx;
      return Promise.resolve();
    });
    const outcome = await leaked
      ?.query("INSERT INTO items (name) VALUES ('late')")
      .catch((error: unknown) => error);
    expect(isQlrError(outcome, "internal")).toBe(true);
    expect(await countItems(driver)).toBe(0);
  });

  it("supports savepoints inside a transaction", async () => {
    const driver = await openWithTable(open);
    await driver.transaction(async (tx) => {
      await tx.query("INSERT INTO items (name) VALUES ('kept')");
      await tx.query("SAVEPOINT attempt");
      await tx.query("INSERT INTO items (name) VALUES ('undone')");
      await tx.query("ROLLBACK TO attempt");
      await tx.query("RELEASE attempt");
    });
    const rows = await driver.transaction((tx) => tx.query("SELECT name FROM items"));
    expect(rows).toEqual([{ name: "kept" }]);
  });

  it("closes idempotently, finishing queued transactions and refusing new ones", async () => {
    const driver = await openWithTable(open);
    const queued = driver.transaction(async (tx) => {
      await sleep(10);
      await tx.query("INSERT INTO items (name) VALUES ('before close')");
      return "finished";
    });
    const firstClose = driver.close();
    const secondClose = driver.close();
    await expect(queued).resolves.toBe("finished");
    await Promise.all([firstClose, secondClose]);
    const after = await driver
      .transaction((tx) => tx.query("SELECT 1"))
      .catch((error: unknown) => error);
    expect(isQlrError(after, "storage_unavailable")).toBe(true);
  });
});

describe("SqlJsConnection", () => {
  it("keeps at most the configured number of prepared statements, freeing the least recently used", () => {
    const connection = new SqlJsConnection(new SQL.Database(), {
      trackWrites: false,
      statementCacheSize: 8,
    });
    try {
      for (let index = 0; index < 40; index += 1) connection.query(`SELECT ${index} AS value`, []);
      expect(connection.cachedStatementCount()).toBe(8);
      // A statement evicted earlier is prepared again on demand.
      expect(connection.query("SELECT 0 AS value", [])).toEqual([{ value: 0 }]);
      connection.clearStatements();
      expect(connection.cachedStatementCount()).toBe(0);
    } finally {
      connection.close();
    }
  });

  it("classifies statements by their leading keyword for the write rule", () => {
    const statementsByClass = {
      read: ["  -- note\n SELECT 1", "/* x */ values (1)", "PRAGMA user_version"],
      counted: ["with t as (select 1) insert into x select * from t", "UPDATE x SET a = 1"],
      schema: ["CREATE TABLE IF NOT EXISTS x (a)"],
      always: [
        "PRAGMA user_version = 3",
        "SAVEPOINT s",
        "ROLLBACK TO s",
        "ROLLBACK TRANSACTION TO SAVEPOINT s",
      ],
      forbidden: ["ROLLBACK", "end transaction"],
    };
    for (const [statementClass, statements] of Object.entries(statementsByClass))
      for (const sql of statements) expect(classifyStatement(sql), sql).toBe(statementClass);
  });
});

describe("loadSqlJs", () => {
  it("initialises sql.js once per process", async () => {
    const [first, second] = await Promise.all([loadSqlJs(), loadSqlJs()]);
    expect(first).toBe(second);
    expect(first).toBe(SQL);
  });
});
