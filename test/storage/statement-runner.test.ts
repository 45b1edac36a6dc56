import type { Database, SqlJsStatic } from "sql.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TERMINAL_RUN_STATUSES, type RunStatus } from "../../src/model.ts";
import { applyPackage, startRun } from "../../src/operations.ts";
import { PROFILES } from "../../src/profiles.ts";
import { openSqliteStore } from "../../storage/sqlite/store.ts";
import { SqlJsConnection } from "../../storage/sqljs/connection.ts";
import type { SqlDriver } from "../../storage/driver.ts";
import { openSqlJsMemoryDriver } from "../../storage/sqljs/memory-driver.ts";
import { loadSqlJs } from "../../storage/sqljs/node/load.ts";
import { StatementRunner } from "../../storage/sqljs/statement-runner.ts";
import { diamondManifest, SequentialIds, workflowStart } from "../support/fixtures.ts";
import { simulatedCoordinator } from "../support/simulated-coordinator.ts";

/**
 * Cached statements run again in place (storage/sqljs/statement-runner.ts): reset without
 * clearing their bindings, every value bound again through sql.js's exported C functions. What
 * that saves (SQLite compiling a statement again on every run) is a matter of time, measured in
 * the bench; these tests hold what it must not change: the values bound, the rows answered,
 * the database a whole workload leaves, and the memory a run leaves bound.
 */
let SQL: SqlJsStatic;
let db: Database;
let runner: StatementRunner;

beforeAll(async () => {
  SQL = await loadSqlJs();
  db = new SQL.Database();
  db.run("CREATE TABLE items (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, body TEXT)");
  // A partial index and a bound LIMIT: what made the cadence's listings compile again.
  db.run("CREATE INDEX items_open ON items (id) WHERE kind = 'open'");
  for (let id = 1; id <= 20; id += 1)
    db.run("INSERT INTO items VALUES (?, ?, ?)", [id, id % 2 === 0 ? "open" : "closed", null]);
  const found = StatementRunner.forDatabase(SQL, db);
  if (found === null) throw new Error("this sql.js build offers no statement runner");
  runner = found;
});

afterAll(() => db.close());

const LISTING = "SELECT id FROM items WHERE kind = 'open' AND id > ? ORDER BY id LIMIT ?";

describe("the statement runner", () => {
  it("pages through a listing with new values on every run", () => {
    const statement = db.prepare(LISTING);
    const runnable = runner.adopt(statement, LISTING);
    expect(runnable).not.toBeNull();
    if (runnable === null) return;
    expect(runnable.parameterCount).toBe(2);
    const pages: unknown[] = [];
    for (const [after, limit] of [
      [0, 3],
      [6, 2],
      [10, 5],
      [18, 4],
      [20, 9],
    ] as const)
      pages.push(runner.run(runnable, [after, limit]).map((row) => row.id));
    expect(pages).toEqual([[2, 4, 6], [8, 10], [12, 14, 16, 18, 20], [20], []]);
    statement.free();
  });

  it("binds every value as sql.js binds it, and nothing of a run reaches the next", () => {
    const sql = "SELECT ? AS a, typeof(?) AS b, ? AS c, ? AS d";
    const statement = db.prepare(sql);
    const runnable = runner.adopt(statement, sql);
    if (runnable === null) throw new Error("not adopted");
    const long = "x".repeat(10_000);
    const cases: [(string | number | null)[], unknown[]][] = [
      [
        [1, 2, -7, 2 ** 31],
        [1, "integer", -7, 2 ** 31],
      ],
      [
        [1.5, 1_800_000_000_123, null, ""],
        [1.5, "real", null, ""],
      ],
      [
        ["héllo ✓ 𝄞", "a", "tab\tquote ' and a NUL\u0000kept whole, as sql.js keeps it", long],
        ["héllo ✓ 𝄞", "text", "tab\tquote ' and a NUL\u0000kept whole, as sql.js keeps it", long],
      ],
      [
        [null, null, null, null],
        [null, "null", null, null],
      ],
    ];
    for (const [params, expected] of cases) {
      const [row] = runner.run(runnable, params);
      expect([row?.a, row?.b, row?.c, row?.d]).toEqual(expected);
      // The same values through sql.js's own binding: the same answer.
      expect(db.exec(sql, params)[0]?.values[0]).toEqual(expected);
    }
    statement.free();
  });

  it("refuses a run with more or fewer values than the statement has parameters", () => {
    const statement = db.prepare(LISTING);
    const runnable = runner.adopt(statement, LISTING);
    if (runnable === null) throw new Error("not adopted");
    expect(() => runner.run(runnable, [1])).toThrow(/takes 2 parameter\(s\), 1 given/);
    expect(() => runner.run(runnable, [1, 2, 3])).toThrow(/takes 2 parameter\(s\), 3 given/);
    expect(runner.run(runnable, [0, 1])).toEqual([{ id: 2 }]);
    statement.free();
  });

  it("leaves no large text bound to a cached statement after its run", () => {
    const sql = "SELECT length(?) AS n";
    const statement = db.prepare(sql);
    const runnable = runner.adopt(statement, sql);
    if (runnable === null) throw new Error("not adopted");
    const memoryUsed = (): number =>
      (SQL as unknown as { _sqlite3_memory_used(): number })._sqlite3_memory_used();
    runner.run(runnable, ["warm"]);
    const before = memoryUsed();
    expect(runner.run(runnable, ["y".repeat(1_000_000)])).toEqual([{ n: 1_000_000 }]);
    // SQLite's own count of the memory it holds: the megabyte copy was let go with the run.
    expect(memoryUsed() - before).toBeLessThan(64 * 1024);
    statement.free();
  });

  it("leaves the connection to sql.js's own binding when the module lacks the exports", () => {
    expect(StatementRunner.forDatabase({} as SqlJsStatic, db)).toBeNull();
    const plain = new SqlJsConnection(new SQL.Database(), { trackWrites: false });
    expect(plain.keepsStatementsCompiled).toBe(false);
    expect(plain.query("SELECT ? + ? AS sum", [2, 3])).toEqual([{ sum: 5 }]);
    plain.close();
    const kept = new SqlJsConnection(new SQL.Database(), { trackWrites: false, sqlJs: SQL });
    expect(kept.keepsStatementsCompiled).toBe(true);
    expect(kept.query("SELECT ? + ? AS sum", [2, 3])).toEqual([{ sum: 5 }]);
    expect(() => kept.query("SELECT ? + ? AS sum", [2])).toThrow(/takes 2 parameter/);
    kept.close();
  });
});

/** Every row of every table, each table's rows sorted: what a workload left in the database. */
async function dumpDatabase(driver: SqlDriver): Promise<Record<string, string[]>> {
  return driver.transaction(async (tx) => {
    const dump: Record<string, string[]> = {};
    const tables = await tx.query<{ name: string }>(
      "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
    );
    for (const { name } of tables)
      dump[name] = (await tx.query(`SELECT * FROM "${name}"`))
        .map((row) => JSON.stringify(row))
        .sort();
    return dump;
  });
}

/** A seeded workload of diamond runs through the store and the cadence, to the end of every run. */
async function runWorkload(driver: SqlDriver): Promise<number> {
  const startMs = 1_800_000_000_000;
  const store = await openSqliteStore(driver, startMs);
  const profile = PROFILES.standalone;
  const ids = new SequentialIds("kept");
  const { clock, coordinator } = simulatedCoordinator({
    store,
    ids,
    profile,
    startMs,
    seed: 7,
    failureRate: 0.2,
    minDurationMs: 50,
    maxDurationMs: 400,
  });
  await store.transaction(async (tx) =>
    applyPackage(tx, diamondManifest("kept"), await tx.observe(clock.nowMs())),
  );
  const terminal = async (): Promise<number> => {
    const counts = await store.transaction((tx) => tx.countRunsByStatus());
    return Object.entries(counts).reduce(
      (total, [status, count]) =>
        total + (TERMINAL_RUN_STATUSES.has(status as RunStatus) ? count : 0),
      0,
    );
  };
  const runs = 24;
  let ticks = 0;
  // Bounded: runs start over the first ticks, so admission interleaves with completions.
  for (; ticks < 300 && (await terminal()) < runs; ticks += 1) {
    if (ticks < runs) {
      const runId = ids.runId();
      await store.transaction(async (tx) =>
        startRun(tx, workflowStart("kept", "diamond", runId), await tx.observe(clock.nowMs())),
      );
    }
    await coordinator.tick();
    clock.advance(profile.tickIntervalMs);
  }
  return terminal();
}

describe("the device store's workload", () => {
  it("leaves the same database whether statements run in place or through sql.js's bind()", async () => {
    const inPlace = openSqlJsMemoryDriver(SQL);
    const throughBind = openSqlJsMemoryDriver(SQL, { keepStatementsCompiled: false });
    try {
      expect(await runWorkload(inPlace)).toBe(24);
      expect(await runWorkload(throughBind)).toBe(24);
      const [left, right] = [await dumpDatabase(inPlace), await dumpDatabase(throughBind)];
      expect(Object.keys(left).length).toBeGreaterThan(10);
      expect((left.run_events ?? []).length).toBeGreaterThan(24 * 4);
      expect(left).toEqual(right);
    } finally {
      await inPlace.close();
      await throughBind.close();
    }
  });
});
