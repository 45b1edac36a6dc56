import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimedAttempt } from "../../src/attempts.ts";
import { EMPTY_CHANGE_SET, type ChangeSet } from "../../src/model.ts";
import { applyPackage, cancelRun, startRun } from "../../src/operations.ts";
import type { LocalProcessRevision } from "../../src/packages.ts";
import type { SqlDriver, SqlParam, SqlRow } from "../../storage/driver.ts";
import * as rows from "../../storage/rows.ts";
import { openSqlStore, type SqlStore } from "../../storage/sql-store.ts";
import { migrationsFor } from "../support/dialect-migrations.ts";
import { driverNamed } from "../support/drivers.ts";
import { diamondManifest, SequentialIds, TestClock, workflowStart } from "../support/fixtures.ts";

/**
 * On SQLite a compare-and-set update of a run, step or attempt assigns an indexed or constrained
 * column only when its value differs from the row the database holds, and every other mutable
 * column always (storage/sql-store/change-writer.ts, storage/rows.ts): SQLite rewrites every
 * index entry of an assigned column, changed or not, while a few statement texts stay prepared.
 * The driver below reads each such row just before its UPDATE runs, so every assignment is
 * checked against what the database held; the rows read past the store afterwards show that
 * every change was written; and the schema is read to show that no column assigned always is
 * named by an index or a constraint.
 */
/** An UPDATE of a versioned table as the change writer sends it, and the row it met. */
interface RecordedUpdate {
  readonly table: string;
  readonly assigned: readonly string[];
  readonly params: readonly SqlParam[];
  readonly before: SqlRow;
}

const VERSIONED_UPDATE =
  /^UPDATE (runs|step_runs|run_attempts) SET (.+) WHERE id = \? AND version = \?/;

const EXECUTION: LocalProcessRevision = {
  executor: "local_process",
  argv: ["true"],
  env: {},
  cwd: null,
  timeoutMs: 1_000,
  stdin: "none",
  shell: false,
};

const MUTABLE: Record<string, readonly string[]> = {
  runs: rows.RUN_MUTABLE_COLUMNS,
  step_runs: rows.STEP_MUTABLE_COLUMNS,
  run_attempts: rows.ATTEMPT_MUTABLE_COLUMNS,
};

const WRITTEN_WHEN_CHANGED: Record<string, readonly string[]> = {
  runs: rows.RUN_COLUMNS_WRITTEN_WHEN_CHANGED,
  step_runs: rows.STEP_COLUMNS_WRITTEN_WHEN_CHANGED,
  run_attempts: rows.ATTEMPT_COLUMNS_WRITTEN_WHEN_CHANGED,
};

/**
 * What an update of `table` assigns when `changed` are the columns written only when changed
 * that changed (`frontier_due` for a mark): every other mutable column, always, in their order.
 */
function assigning(table: string, changed: readonly string[]): string[] {
  const conditional = WRITTEN_WHEN_CHANGED[table] ?? [];
  return [
    ...(MUTABLE[table] ?? []).filter(
      (column) => !conditional.includes(column) || changed.includes(column),
    ),
    ...(changed.includes("frontier_due") ? ["frontier_due"] : []),
  ];
}

/** The column definitions and table constraints of a CREATE TABLE text: its top-level commas' parts. */
function definitionsOf(createTable: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let part = "";
  for (const character of createTable) {
    if (character === "(") depth += 1;
    if (character === ")") depth -= 1;
    if (character === "," && depth === 1) {
      parts.push(part);
      part = "";
    } else part += character;
  }
  return [...parts, part];
}

for (const driverName of ["sqljs-memory", "sqljs-file"] as const) {
  describe(`versioned updates on ${driverName} assign an indexed column only when it changed`, () => {
    let driver: SqlDriver;
    let store: SqlStore;
    const updates: RecordedUpdate[] = [];
    const clock = new TestClock();
    const ids = new SequentialIds("changed");

    beforeAll(async () => {
      driver = await driverNamed(driverName).open();
      const recording: SqlDriver = {
        dialect: driver.dialect,
        name: driver.name,
        close: () => driver.close(),
        get soleWriterTransactions() {
          return driver.soleWriterTransactions;
        },
        transaction: (fn) =>
          driver.transaction((tx) =>
            fn({
              query: async (sql, params) => {
                const update = VERSIONED_UPDATE.exec(sql);
                if (update !== null && params !== undefined) {
                  const [, table = "", assignments = ""] = update;
                  const [before] = await tx.query(`SELECT * FROM ${table} WHERE id = ?`, [
                    params[params.length - 2] ?? null,
                  ]);
                  updates.push({
                    table,
                    assigned: assignments
                      .split(", ")
                      .map((assignment) => assignment.split(" = ")[0] ?? ""),
                    params,
                    before: before ?? {},
                  });
                }
                return tx.query(sql, params);
              },
            }),
          ),
      };
      store = await openSqlStore(recording, migrationsFor(driver.dialect), clock.nowMs());
    });
    afterAll(async () => {
      await store?.close();
    });

    /** The updates `write` sent, after it committed. */
    async function updatesOf(write: () => Promise<unknown>): Promise<RecordedUpdate[]> {
      const first = updates.length;
      await write();
      return updates.slice(first);
    }

    async function newRun(): Promise<string> {
      const packageName = `changed-${ids.runId()}`;
      return store.transaction(async (tx) => {
        const nowMs = await tx.observe(clock.nowMs());
        await applyPackage(tx, diamondManifest(packageName), nowMs);
        const { run } = await startRun(
          tx,
          workflowStart(packageName, "diamond", ids.runId()),
          nowMs,
        );
        return run.id;
      });
    }

    /**
     * Applies `change`; one that writes steps or attempts and names no run moves each of their runs by one
     * version, as every change the core makes does (the store refuses any other).
     */
    function apply(change: Partial<ChangeSet>): Promise<void> {
      return store.transaction(async (tx) => {
        await tx.observe(clock.nowMs());
        const runs = [...(change.runs ?? [])];
        if (runs.length === 0)
          for (const runId of new Set(
            [...(change.steps ?? []), ...(change.attempts ?? [])].map(({ after }) => after.runId),
          )) {
            const run = await tx.getRun(runId);
            if (run === null) throw new Error(`no run ${runId}`);
            runs.push({ before: run, after: { ...run, version: run.version + 1 } });
          }
        await tx.apply({ ...EMPTY_CHANGE_SET, ...change, runs });
      });
    }

    /** The updates of `table` among those `write` made. */
    async function updatesOfTable(
      table: string,
      write: () => Promise<unknown>,
    ): Promise<RecordedUpdate[]> {
      return (await updatesOf(write)).filter((update) => update.table === table);
    }

    /** A row read past the store. */
    async function stored(table: string, id: string): Promise<SqlRow | undefined> {
      const [row] = await driver.transaction((tx) =>
        tx.query(`SELECT * FROM ${table} WHERE id = ?`, [id]),
      );
      return row;
    }

    it("a run update that moves its version, event sequence and time assigns none of its indexed columns", async () => {
      const runId = await newRun();
      const run = await store.transaction((tx) => tx.getRun(runId));
      if (run === null) throw new Error("the run was started");
      const after = {
        ...run,
        version: run.version + 1,
        eventSeq: run.eventSeq + 1,
        updatedAtMs: clock.advance(5),
      };
      const [update, ...more] = await updatesOf(() => apply({ runs: [{ before: run, after }] }));
      expect(more).toEqual([]);
      expect(update?.assigned).toEqual(assigning("runs", []));
      expect(await stored("runs", runId)).toMatchObject({
        status: run.status,
        version: after.version,
        event_seq: after.eventSeq,
        updated_at_ms: after.updatedAtMs,
        // A started run is marked for the frontier; an update that does not name it keeps the mark.
        frontier_due: 1,
      });
    });

    it("frontier_due is assigned only when the change marks the run, and a queued update clears it", async () => {
      const runId = await newRun();
      const run = await store.transaction((tx) => tx.getRun(runId));
      if (run === null) throw new Error("the run was started");
      const marked = { ...run, version: run.version + 1 };
      const [mark] = await updatesOf(() =>
        apply({ runs: [{ before: run, after: marked }], frontierDue: [runId] }),
      );
      expect(mark?.assigned).toEqual(assigning("runs", ["frontier_due"]));
      expect(await stored("runs", runId)).toMatchObject({
        version: marked.version,
        frontier_due: 1,
      });

      const cleared = { ...marked, version: marked.version + 1, status: "cancelled" as const };
      const [clear, ...more] = await updatesOf(() =>
        store.transaction(async (tx) => {
          await tx.observe(clock.nowMs());
          await tx.apply({ ...EMPTY_CHANGE_SET, runs: [{ before: marked, after: cleared }] });
          await tx.clearFrontierMark(runId);
        }),
      );
      expect(more).toEqual([]);
      expect(clear?.assigned).toEqual(assigning("runs", ["status", "frontier_due"]));
      expect(await stored("runs", runId)).toMatchObject({
        status: "cancelled",
        version: cleared.version,
        frontier_due: 0,
      });
    });

    it("two updates of a run in one transaction assign the indexed columns that differ from the stored row, a value changed back included", async () => {
      const runId = await newRun();
      const run = await store.transaction((tx) => tx.getRun(runId));
      if (run === null) throw new Error("the run was started");
      // The first changes the status, which the second changes back, and the finish time, which
      // the second keeps: one statement, checked against the stored row, assigns the time alone.
      const first = {
        ...run,
        version: run.version + 1,
        status: "cancelled" as const,
        finishedAtMs: clock.advance(1),
      };
      const second = { ...first, version: first.version + 1, status: run.status };
      const [update, ...more] = await updatesOf(() =>
        apply({
          runs: [
            { before: run, after: first },
            { before: first, after: second },
          ],
        }),
      );
      expect(more).toEqual([]);
      expect(update?.assigned).toEqual(assigning("runs", ["finished_at_ms"]));
      expect(await stored("runs", runId)).toMatchObject({
        status: run.status,
        version: second.version,
        finished_at_ms: first.finishedAtMs,
      });
    });

    it("a step update assigns its status only when it changed", async () => {
      const runId = await newRun();
      const [step] = await store.transaction((tx) => tx.getSteps(runId));
      if (step === undefined) throw new Error("a diamond run has steps");
      const kept = { ...step, version: step.version + 1, readyAtMs: 1 };
      const [keeping] = await updatesOfTable("step_runs", () =>
        apply({ steps: [{ before: step, after: kept }] }),
      );
      expect(keeping?.assigned).toEqual(assigning("step_runs", []));
      const skipped = { ...kept, version: kept.version + 1, status: "skipped" as const };
      const [changing] = await updatesOfTable("step_runs", () =>
        apply({ steps: [{ before: kept, after: skipped }] }),
      );
      expect(changing?.assigned).toEqual(assigning("step_runs", ["status"]));
      expect(await stored("step_runs", step.id)).toMatchObject({
        status: "skipped",
        version: skipped.version,
        ready_at_ms: 1,
      });
    });

    it("an attempt update assigns its changed indexed columns, and the stored row holds every change", async () => {
      const runId = await newRun();
      const [step] = await store.transaction((tx) => tx.getSteps(runId));
      if (step === undefined) throw new Error("a diamond run has steps");
      const claimed = claimedAttempt(
        { id: `${runId}-a1`, runId, stepRunId: step.id, stepRunVersion: step.version, number: 1 },
        EXECUTION,
        clock.nowMs(),
      );
      await apply({ attempts: [{ before: null, after: claimed }] });
      const running = {
        ...claimed,
        version: claimed.version + 1,
        status: "running" as const,
        startedAtMs: clock.advance(3),
        pid: 4_321,
        output: { answer: 42 },
        ownerNodeId: "node-a",
      };
      const [update] = await updatesOfTable("run_attempts", () =>
        apply({ attempts: [{ before: claimed, after: running }] }),
      );
      expect(update?.assigned).toEqual(assigning("run_attempts", ["status", "owner_node_id"]));
      expect(await stored("run_attempts", claimed.id)).toMatchObject({
        status: "running",
        version: running.version,
        started_at_ms: running.startedAtMs,
        pid: 4_321,
        output: '{"answer":42}',
        owner_node_id: "node-a",
        lease_expires_at_ms: null,
      });
    });

    it("every update sent so far, a cancel's included, assigned no indexed column that kept its value", async () => {
      const runId = await newRun();
      await store.transaction(async (tx) => cancelRun(tx, runId, await tx.observe(clock.nowMs())));
      expect(updates.some((update) => update.before.id === runId)).toBe(true);
      for (const update of updates) {
        update.assigned.forEach((column, index) => {
          // A frontier mark is the change's to set, whatever the row held.
          if (!WRITTEN_WHEN_CHANGED[update.table]?.includes(column)) return;
          expect({ table: update.table, column, value: update.params[index] ?? null }).not.toEqual({
            table: update.table,
            column,
            value: update.before[column] ?? null,
          });
        });
      }
    });

    it("every mutable column assigned always is named by no index, constraint or foreign key", async () => {
      const schema = await driver.transaction((tx) =>
        tx.query<{ tbl_name: string; type: string; sql: string }>(
          "SELECT tbl_name, type, sql FROM sqlite_master WHERE sql IS NOT NULL",
        ),
      );
      for (const [table, mutable] of Object.entries(MUTABLE)) {
        const always = mutable.filter((column) => !WRITTEN_WHEN_CHANGED[table]?.includes(column));
        expect(always).toContain("version");
        // Each index's whole text, and each column or table constraint of the table that constrains.
        const constraining = schema
          .filter((entry) => entry.tbl_name === table)
          .flatMap((entry) =>
            entry.type === "index"
              ? [entry.sql]
              : definitionsOf(entry.sql).filter((part) => /CHECK|REFERENCES|UNIQUE/.test(part)),
          );
        expect(constraining.length).toBeGreaterThan(0);
        for (const column of always)
          for (const text of constraining)
            expect({
              table,
              column,
              named: new RegExp(`\\b${column}\\b`).test(text),
              text,
            }).toEqual({
              table,
              column,
              named: false,
              text,
            });
      }
    });

    it("what the store remembers after its updates is what the database holds", async () => {
      // No read past the store here: that would make the store forget what it remembers.
      const runId = await newRun();
      const [run, [step]] = await store.transaction(
        async (tx) => [await tx.getRun(runId), await tx.getSteps(runId)] as const,
      );
      if (run === null || step === undefined) throw new Error("a diamond run has steps");
      const claimed = claimedAttempt(
        { id: `${runId}-a1`, runId, stepRunId: step.id, stepRunVersion: step.version, number: 1 },
        EXECUTION,
        clock.nowMs(),
      );
      const ready = { ...step, version: step.version + 1, status: "ready" as const, readyAtMs: 7 };
      await apply({
        runs: [
          {
            before: run,
            after: { ...run, version: run.version + 1, updatedAtMs: clock.advance(1) },
          },
        ],
        steps: [{ before: step, after: ready }],
        attempts: [{ before: null, after: claimed }],
      });
      await apply({
        steps: [
          { before: ready, after: { ...ready, version: ready.version + 1, status: "running" } },
        ],
        attempts: [
          {
            before: claimed,
            after: { ...claimed, version: 2, status: "succeeded", exitCode: 0, output: { n: 1 } },
          },
        ],
      });
      await store.transaction(async (tx) => cancelRun(tx, runId, await tx.observe(clock.nowMs())));
      const read = (from: SqlStore) =>
        from.transaction(async (tx) => {
          await tx.observe(clock.nowMs());
          return {
            run: await tx.getRun(runId),
            steps: await tx.getSteps(runId),
            attempt: await tx.getAttempt(claimed.id),
          };
        });
      const remembered = await read(store);
      expect(remembered.attempt?.output).toEqual({ n: 1 });
      // A second store on the same driver remembers nothing: it reads every row from the database.
      const fresh = await openSqlStore(driver, migrationsFor(driver.dialect), clock.nowMs());
      expect(await read(fresh)).toEqual(remembered);
    });
  });
}
