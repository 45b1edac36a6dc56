/**
 * Round trips of the pg driver and the PostgreSQL store, counted at the `pg` client: every
 * statement is one on a real server, so a page pays per statement, not per row. BEGIN goes out
 * with a transaction's first statement, a transaction that only read asks nothing before COMMIT,
 * a page's new attempts go in one multi-row INSERT written after the page's run updates, and a
 * page of ordinary runs reads no steps or admission receipts (they have none).
 */
import pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Coordinator } from "../../src/coordinator.ts";
import type { Clock } from "../../src/ports.ts";
import { PROFILES } from "../../src/profiles.ts";
import { Prng } from "../../src/sim/prng.ts";
import { SimulatedExecutor } from "../../src/sim/simulated-executor.ts";
import { uuidv7Ids } from "../../runtimes/shared/uuidv7.ts";
import type { SqlDriver, SqlParam, SqlTx } from "../../storage/driver.ts";
import { beginThen } from "../../storage/postgres/begin-then.ts";
import { openPgDriver } from "../../storage/postgres/pg-driver.ts";
import { openPostgresStore } from "../../storage/postgres/store.ts";
import type { SqlStore } from "../../storage/sql-store.ts";
import { applyAndStart, diamondManifest } from "../support/fixtures.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

const clock: Clock = { nowMs: () => Date.now() };

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(async () => {
  await database?.drop();
});

/** Counts `query` calls on every `pg` client while `counting` is on: one each round trip. */
const wire = { counting: false, queries: 0 };
const originalQuery = Reflect.get(pg.Client.prototype, "query") as (
  ...values: unknown[]
) => unknown;
beforeAll(() => {
  (pg.Client.prototype as { query: unknown }).query = function (
    this: pg.Client,
    ...args: unknown[]
  ): unknown {
    if (wire.counting) wire.queries += 1;
    return originalQuery.apply(this, args);
  };
});
afterAll(() => {
  Reflect.set(pg.Client.prototype, "query", originalQuery);
});
afterEach(() => {
  wire.counting = false;
  wire.queries = 0;
});

/** The round trips `fn` made on the wire. */
async function roundTrips(fn: () => Promise<unknown>): Promise<number> {
  wire.queries = 0;
  wire.counting = true;
  try {
    await fn();
  } finally {
    wire.counting = false;
  }
  return wire.queries;
}

describe("the pg driver's round trips", { timeout: 60_000 }, () => {
  let driver: SqlDriver;
  beforeAll(async () => {
    // One connection, so every transaction below runs on a connection that knows its server.
    driver = await openPgDriver({ connectionString: database.url, poolSize: 1 });
    await driver.transaction((tx) =>
      tx.query("CREATE TABLE IF NOT EXISTS round_trip_rows (id INT PRIMARY KEY)"),
    );
  });
  afterAll(async () => {
    await driver?.close();
  });

  it("a transaction of one read costs two round trips: BEGIN with the read, then COMMIT; nothing is asked before COMMIT", async () => {
    expect(await roundTrips(() => driver.transaction((tx) => tx.query("SELECT 1 AS one")))).toBe(2);
  });

  it("a transaction of one write costs two round trips once its connection knows its server", async () => {
    await driver.transaction((tx) => tx.query("INSERT INTO round_trip_rows (id) VALUES ($1)", [1]));
    expect(
      await roundTrips(() =>
        driver.transaction((tx) => tx.query("INSERT INTO round_trip_rows (id) VALUES ($1)", [2])),
      ),
    ).toBe(2);
  });

  it("a first text of several statements still runs inside the transaction, after its own BEGIN", async () => {
    await driver
      .transaction(async (tx) => {
        await tx.query(
          "INSERT INTO round_trip_rows (id) VALUES (30); INSERT INTO round_trip_rows (id) VALUES (31)",
        );
        throw new Error("roll back");
      })
      .catch(() => undefined);
    await driver.transaction((tx) =>
      tx.query(
        "INSERT INTO round_trip_rows (id) VALUES (32); INSERT INTO round_trip_rows (id) VALUES (33)",
      ),
    );
    const rows = await driver.transaction((tx) =>
      tx.query("SELECT id FROM round_trip_rows WHERE id >= 30 ORDER BY id"),
    );
    expect(rows).toEqual([{ id: 32 }, { id: 33 }]);
  });

  it("a transaction that sends no statement makes no round trip", async () => {
    expect(await roundTrips(() => driver.transaction(() => Promise.resolve(7)))).toBe(0);
  });
});

describe("BEGIN riding with the first statement", { timeout: 60_000 }, () => {
  let client: pg.Client;
  beforeAll(async () => {
    client = new pg.Client({ connectionString: database.url });
    await client.connect();
    await client.query("CREATE TABLE IF NOT EXISTS begin_rows (id INT PRIMARY KEY)");
  });
  afterAll(async () => {
    await client?.end();
  });
  const count = async (): Promise<number> =>
    Number((await client.query<{ n: string }>("SELECT COUNT(*) AS n FROM begin_rows")).rows[0]?.n);

  it("runs the statement inside the transaction BEGIN opened: a ROLLBACK takes its write back", async () => {
    const result = await beginThen(
      client,
      "BEGIN ISOLATION LEVEL SERIALIZABLE",
      "INSERT INTO begin_rows (id) VALUES ($1) RETURNING id",
      [1],
    );
    expect(result.rows).toEqual([{ id: 1 }]);
    await client.query("ROLLBACK");
    expect(await count()).toBe(0);
  });

  it("never runs the statement when BEGIN fails, and leaves the connection usable", async () => {
    await expect(
      beginThen(
        client,
        "BEGIN ISOLATION LEVEL NO_SUCH_LEVEL",
        "INSERT INTO begin_rows (id) VALUES ($1)",
        [2],
      ),
    ).rejects.toThrow();
    expect(await count()).toBe(0);
    expect((await client.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
  });
});

/** Every statement (and its parameters) of the last run of each transaction body, in order. */
function recording(inner: SqlDriver): {
  driver: SqlDriver;
  transactions: string[][];
  parameters: Map<string[], (readonly SqlParam[])[]>;
} {
  const transactions: string[][] = [];
  const parameters = new Map<string[], (readonly SqlParam[])[]>();
  const driver: SqlDriver = {
    dialect: inner.dialect,
    name: inner.name,
    transaction: (fn) =>
      inner.transaction((tx) => {
        const statements: string[] = [];
        const bound: (readonly SqlParam[])[] = [];
        transactions.push(statements);
        parameters.set(statements, bound);
        const recorded: SqlTx = {
          query: (sql: string, params?: readonly SqlParam[]) => {
            statements.push(sql);
            bound.push(params ?? []);
            return tx.query(sql, params);
          },
        };
        return fn(recorded);
      }),
    close: () => inner.close(),
  };
  return { driver, transactions, parameters };
}

describe("a PostgreSQL page's new attempts", { timeout: 60_000 }, () => {
  let store: SqlStore;
  let recorded: ReturnType<typeof recording>;
  beforeAll(async () => {
    recorded = recording(await openPgDriver({ connectionString: database.url }));
    store = await openPostgresStore(recorded.driver, Date.now(), { clock: "database" });
  });
  afterAll(async () => {
    await store?.close();
  });

  it("go in one multi-row INSERT, after the page's run updates", async () => {
    const manifest = diamondManifest("round-trips");
    for (let index = 0; index < 3; index += 1)
      await applyAndStart(
        store,
        clock,
        manifest,
        { kind: "task", name: "work" },
        uuidv7Ids.runId(),
      );
    const coordinator = new Coordinator({
      store,
      clock,
      ids: uuidv7Ids,
      profile: PROFILES.cluster,
      executors: {
        local_process: new SimulatedExecutor({
          clock,
          prng: new Prng(5),
          outcome: () => ({ exitCode: 0, durationMs: 60_000 }),
        }),
      },
    });
    recorded.transactions.length = 0;
    const report = await coordinator.tick();
    expect(report.stages.flatMap((stage) => stage.errors)).toEqual([]);
    const admitting = recorded.transactions.filter((statements) =>
      statements.some((sql) => sql.startsWith("INSERT INTO run_attempts")),
    );
    expect(admitting).toHaveLength(1);
    const statements = admitting[0] ?? [];
    const inserts = statements.filter((sql) => sql.startsWith("INSERT INTO run_attempts"));
    expect(inserts).toHaveLength(1);
    // Three rows in the one statement: each column's values one array of three.
    const insertParams =
      recorded.parameters.get(statements)?.[statements.indexOf(inserts[0] ?? "")];
    expect(insertParams?.[0]).toMatch(/^\{"[^"]+","[^"]+","[^"]+"\}$/);
    const runUpdates = statements.flatMap((sql, index) =>
      sql.startsWith("UPDATE runs") ? [index] : [],
    );
    expect(runUpdates).toHaveLength(1);
    expect(runUpdates[0]).toBeLessThan(statements.indexOf(inserts[0] ?? ""));
    // Ordinary runs have no steps and no admission receipts: the page does not read them.
    expect(statements.filter((sql) => /FROM (step_runs|admission_receipts)\b/.test(sql))).toEqual(
      [],
    );
  });
});
