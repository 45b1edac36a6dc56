/**
 * The statements a stage page runs on every tick, on SQLite, must walk only what the page can
 * return: the ready steps from the cursor for admission candidates, the live attempts for a
 * dispatch or running page, the runs asked to cancel for the cancel stage. Left to its
 * planner, SQLite walked every running run and sorted (candidates), every attempt ever made
 * from the cursor (attempts) or every run in flight (cancelling runs), so a page cost more as
 * the work in flight and the history grew. The plans are read with EXPLAIN QUERY PLAN on the
 * very text the store sends, so a change to that text that loses the index fails here.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SqlDriver, SqlParam } from "../../storage/driver.ts";
import { openSqlStore, type SqlStore } from "../../storage/sql-store.ts";
import { loadSqlJs } from "../../storage/sqljs/node/load.ts";
import { openSqlJsMemoryDriver } from "../../storage/sqljs/memory-driver.ts";
import { migrationsFor } from "../support/dialect-migrations.ts";
import { TestClock } from "../support/fixtures.ts";

describe("stage queries on SQLite use their partial indexes", () => {
  let driver: SqlDriver;
  let store: SqlStore;
  const sent: { sql: string; params: readonly SqlParam[] }[] = [];
  const clock = new TestClock();

  beforeAll(async () => {
    driver = openSqlJsMemoryDriver(await loadSqlJs());
    const recording: SqlDriver = {
      dialect: driver.dialect,
      name: driver.name,
      close: () => driver.close(),
      transaction: (fn) =>
        driver.transaction((tx) =>
          fn({
            query: (sql, params = []) => {
              sent.push({ sql, params });
              return tx.query(sql, params);
            },
          }),
        ),
    };
    store = await openSqlStore(recording, migrationsFor("sqlite"), clock.nowMs());
  });
  afterAll(async () => {
    await store?.close();
  });

  /** The plan of the last statement the store sent whose text contains `marker`. */
  async function planOfLast(marker: string): Promise<string[]> {
    const statement = sent.findLast((entry) => entry.sql.includes(marker));
    if (statement === undefined) throw new Error(`no statement containing ${marker} was sent`);
    const rows = await driver.transaction((tx) =>
      tx.query<{ detail: string }>(`EXPLAIN QUERY PLAN ${statement.sql}`, statement.params),
    );
    return rows.map((row) => row.detail);
  }

  it("admission candidates: the ready steps from the cursor, in order, no sort", async () => {
    for (const after of [null, { runId: "run-b", stepRunId: "stp:x", stepRunVersion: 1 }]) {
      await store.transaction((tx) => tx.listAdmissionCandidates(after, 64, clock.nowMs()));
      const plan = await planOfLast("FROM step_runs s");
      expect(plan[0]).toContain("step_runs_ready");
      expect(plan[0]).toContain("(run_id,id)>(?,?)");
      expect(plan.join("\n")).not.toContain("TEMP B-TREE");
    }
  });

  it("cancelling runs: only the runs asked to cancel, not every run in flight", async () => {
    for (const after of [null, "run-b"]) {
      await store.transaction((tx) => tx.listCancellingRuns(after, 64));
      const plan = (await planOfLast("cancel_requested_at_ms IS NOT NULL")).join("\n");
      expect(plan).toContain("runs_cancelling");
      expect(plan).not.toContain("runs_by_status");
      expect(plan).not.toContain("TEMP B-TREE");
    }
  });

  it("dispatch, running and recovery pages: the live attempts only", async () => {
    const pages: { statuses: ("claimed" | "starting" | "running")[]; owner?: string }[] = [
      { statuses: ["claimed"] },
      { statuses: ["starting", "running"], owner: "node-a" },
      { statuses: ["claimed", "starting", "running"] },
      { statuses: ["running"], owner: "node-a" },
    ];
    for (const page of pages) {
      await store.transaction((tx) =>
        tx.listAttempts("local_process", page.statuses, null, 64, page.owner),
      );
      const plan = (await planOfLast("FROM run_attempts WHERE executor")).join("\n");
      expect(plan, page.statuses.join(",")).toMatch(/run_attempts_live/);
      expect(plan).not.toContain("sqlite_autoindex_run_attempts");
    }
  });
});
