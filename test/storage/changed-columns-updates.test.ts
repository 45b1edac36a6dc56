import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimedAttempt } from "../../src/attempts.ts";
import { EMPTY_CHANGE_SET, type ChangeSet } from "../../src/model.ts";
import { applyPackage, cancelRun, startRun } from "../../src/operations.ts";
import type { LocalProcessRevision } from "../../src/packages.ts";
import type { SqlDriver, SqlParam, SqlRow } from "../../storage/driver.ts";
import { openSqlStore, type SqlStore } from "../../storage/sql-store.ts";
import { migrationsFor } from "../support/dialect-migrations.ts";
import { driverNamed } from "../support/drivers.ts";
import { diamondManifest, SequentialIds, TestClock, workflowStart } from "../support/fixtures.ts";

/**
 * On SQLite a compare-and-set update of a run, step or attempt assigns only the columns whose
 * value differs from the row the database holds (storage/sql-store/change-writer.ts), since
 * SQLite rewrites every index entry of an assigned column, changed or not. The driver below
 * reads each such row just before its UPDATE runs, so every assignment is checked against what
 * the database held; and the rows read past the store afterwards show that every change was
 * written.
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

for (const driverName of ["sqljs-memory", "sqljs-file"] as const) {
  describe(`versioned updates on ${driverName} assign only changed columns`, () => {
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

    function apply(change: Partial<ChangeSet>): Promise<void> {
      return store.transaction(async (tx) => {
        await tx.observe(clock.nowMs());
        await tx.apply({ ...EMPTY_CHANGE_SET, ...change });
      });
    }

    /** A row read past the store. */
    async function stored(table: string, id: string): Promise<SqlRow | undefined> {
      const [row] = await driver.transaction((tx) =>
        tx.query(`SELECT * FROM ${table} WHERE id = ?`, [id]),
      );
      return row;
    }

    it("a run update that moves its version, event sequence and time assigns those three", async () => {
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
      expect(update?.assigned).toEqual(["version", "event_seq", "updated_at_ms"]);
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
      expect(mark?.assigned).toEqual(["version", "frontier_due"]);
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
      expect(clear?.assigned).toEqual(["status", "version", "frontier_due"]);
      expect(await stored("runs", runId)).toMatchObject({
        status: "cancelled",
        version: cleared.version,
        frontier_due: 0,
      });
    });

    it("two updates of a step in one transaction assign what differs from the stored row, a value changed back included", async () => {
      const runId = await newRun();
      const [step] = await store.transaction((tx) => tx.getSteps(runId));
      if (step === undefined) throw new Error("a diamond run has steps");
      // The first changes the status, which the second changes back, and a finish time, which the
      // second keeps: one statement, checked against the stored row, writes the time, not the status.
      const first = {
        ...step,
        version: step.version + 1,
        status: "skipped" as const,
        readyAtMs: 1,
        finishedAtMs: 5,
      };
      const second = { ...first, version: first.version + 1, status: step.status, readyAtMs: 2 };
      const [update, ...more] = await updatesOf(() =>
        apply({
          steps: [
            { before: step, after: first },
            { before: first, after: second },
          ],
        }),
      );
      expect(more).toEqual([]);
      expect(update?.assigned).toEqual(["version", "ready_at_ms", "finished_at_ms"]);
      expect(await stored("step_runs", step.id)).toMatchObject({
        status: step.status,
        version: second.version,
        ready_at_ms: 2,
        finished_at_ms: 5,
      });
    });

    it("an attempt update assigns its moved columns, and the stored row holds every change", async () => {
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
      };
      const [update] = await updatesOf(() =>
        apply({ attempts: [{ before: claimed, after: running }] }),
      );
      expect(update?.assigned).toEqual(["status", "version", "started_at_ms", "pid", "output"]);
      expect(await stored("run_attempts", claimed.id)).toMatchObject({
        status: "running",
        version: running.version,
        started_at_ms: running.startedAtMs,
        pid: 4_321,
        output: '{"answer":42}',
        owner_node_id: claimed.ownerNodeId,
      });
    });

    it("every update sent so far, a cancel's included, assigned no column that kept its value", async () => {
      const runId = await newRun();
      await store.transaction(async (tx) => cancelRun(tx, runId, await tx.observe(clock.nowMs())));
      expect(updates.some((update) => update.before.id === runId)).toBe(true);
      for (const update of updates) {
        update.assigned.forEach((column, index) => {
          // The version is always assigned (an update is never empty); a frontier mark is the
          // change's to set, whatever the row held.
          if (column === "version" || column === "frontier_due") return;
          expect({ table: update.table, column, value: update.params[index] ?? null }).not.toEqual({
            table: update.table,
            column,
            value: update.before[column] ?? null,
          });
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
