/**
 * Migration 0009 stores the `evt:` event ids, which derive from the run and sequence, as NULL
 * (and on SQLite rebuilds run_events and step_mutations WITHOUT ROWID). A store written by the
 * version before it holds every id: it must migrate and read exactly as it did, and what is
 * written after must read the same ids while storing none of the derived ones.
 *
 * The "previous version" database is made by applying migrations up to 0008 and copying in the
 * rows a run leaves (as the previous writer stored them: every event id present), taken from a
 * store that ran the same workload.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventId } from "../../src/aggregate.ts";
import { Coordinator } from "../../src/coordinator.ts";
import { applyPackage, startRun } from "../../src/operations.ts";
import type { Store } from "../../src/ports.ts";
import { PROFILES } from "../../src/profiles.ts";
import type { SqlDriver, SqlParam, SqlRow } from "../../storage/driver.ts";
import { migrate } from "../../storage/migrate.ts";
import { openSqlStore, type SqlStore } from "../../storage/sql-store.ts";
import { DRIVERS } from "../support/drivers.ts";
import { migrationsFor } from "../support/dialect-migrations.ts";
import { diamondManifest, SequentialIds, TestClock, workflowStart } from "../support/fixtures.ts";
import { steadyExecutor } from "../support/simulated-executors.ts";
import { RUN_CHILD_TABLES } from "../support/store-dump.ts";

const T0 = 1_800_000_000_000;
const BEFORE_DERIVED_IDS = 8;

/** Every table a finished workflow run touches, parents first (foreign keys). */
const COPIED_TABLES = [
  "packages",
  "generations",
  "reconciliation_receipts",
  "task_definitions",
  "workflow_plans",
  "runs",
  ...RUN_CHILD_TABLES,
] as const;

interface Workload {
  readonly runIds: string[];
  readonly tables: Map<string, SqlRow[]>;
}

/** Starts diamond runs and ticks a coordinator with a steady executor until they all ended. */
async function runDiamonds(
  store: Store,
  clock: TestClock,
  ids: SequentialIds,
  packageName: string,
  count: number,
): Promise<string[]> {
  const executor = steadyExecutor(clock, 11);
  const coordinator = new Coordinator({
    store,
    clock,
    ids,
    profile: PROFILES.standalone,
    executors: { local_process: executor },
  });
  const runIds = await store.transaction(async (tx) => {
    const nowMs = await tx.observe(clock.nowMs());
    await applyPackage(tx, diamondManifest(packageName), nowMs);
    const started: string[] = [];
    for (let index = 0; index < count; index += 1)
      started.push(
        (await startRun(tx, workflowStart(packageName, "diamond", ids.runId()), nowMs)).run.id,
      );
    return started;
  });
  for (let tick = 0; tick < 400; tick += 1) {
    const succeeded = await store.transaction(async (tx) => {
      for (const runId of runIds)
        if ((await tx.getRun(runId))?.status !== "succeeded") return false;
      return true;
    });
    if (succeeded) return runIds;
    await coordinator.tick();
    clock.advance(1_000);
  }
  throw new Error("the diamond runs did not all succeed within 400 ticks");
}

/** What the store answers about a run: everything the API and the history checker read. */
async function readRun(store: SqlStore, runId: string): Promise<unknown> {
  return store.transaction(async (tx) => {
    const steps = await tx.getSteps(runId);
    const admissions: unknown[] = [];
    // One statement at a time: a PostgreSQL transaction is one connection.
    for (const step of steps) admissions.push(await tx.getAdmission(runId, step.id, 2));
    return {
      run: await tx.getRun(runId),
      steps,
      attempts: await tx.getAttempts(runId),
      events: await tx.listEvents(runId, 0, 1_000),
      mutations: await tx.listMutations(runId),
      admissions,
    };
  });
}

function placeholder(driver: SqlDriver, index: number): string {
  return driver.dialect === "postgres" ? `$${index}` : "?";
}

async function storedEventIds(driver: SqlDriver, runId: string): Promise<(string | null)[]> {
  return driver.transaction(async (tx) =>
    (
      await tx.query<{ id: string | null }>(
        `SELECT id FROM run_events WHERE run_id = ${placeholder(driver, 1)} ORDER BY seq`,
        [runId],
      )
    ).map((row) => row.id),
  );
}

describe("event ids derived from run and sequence (migration 0009)", () => {
  let workload: Workload;
  let source: SqlStore;
  const clock = new TestClock(T0);
  const ids = new SequentialIds("legacy");

  beforeAll(async () => {
    const memory = DRIVERS.find((factory) => factory.name === "sqljs-memory");
    if (memory === undefined) throw new Error("no sqljs-memory driver");
    const driver = await memory.open();
    source = await openSqlStore(driver, migrationsFor(driver.dialect), T0 - 1);
    const runIds = await runDiamonds(source, clock, ids, "legacy-pkg", 3);
    const tables = new Map<string, SqlRow[]>();
    await driver.transaction(async (tx) => {
      for (const table of COPIED_TABLES)
        tables.set(table, await tx.query(`SELECT * FROM ${table}`));
    });
    // The previous writer stored every event id; this one stores the derived ones as NULL.
    tables.set(
      "run_events",
      (tables.get("run_events") ?? []).map((row) => ({
        ...row,
        id: row.id ?? eventId(String(row.run_id), Number(row.seq)),
      })),
    );
    workload = { runIds, tables };
  });
  afterAll(async () => {
    await source?.close();
  });

  it("the current writer stores no derived event id, and reads every id back", async () => {
    const runId = workload.runIds[0] ?? "";
    const stored = await storedEventIds(source.driver, runId);
    const events = await source.transaction((tx) => tx.listEvents(runId, 0, 1_000));
    expect(events.length).toBeGreaterThan(20);
    expect(stored).toHaveLength(events.length);
    for (const [index, event] of events.entries()) {
      if (event.id.startsWith("evt:")) {
        expect(event.id).toBe(eventId(runId, event.seq));
        expect(stored[index]).toBeNull();
      } else {
        // An admitted attempt's event id derives from the step epoch: stored as it is.
        expect(event.type).toBe("workflow.task_attempt_admitted");
        expect(stored[index]).toBe(event.id);
      }
    }
  });

  for (const factory of DRIVERS) {
    describe(factory.name, () => {
      let driver: SqlDriver;

      beforeAll(async () => {
        driver = await factory.open();
        const migrations = migrationsFor(driver.dialect);
        await migrate(
          driver,
          migrations.filter((migration) => migration.version <= BEFORE_DERIVED_IDS),
          T0 - 1,
        );
        await driver.transaction(async (tx) => {
          for (const table of COPIED_TABLES) {
            for (const row of workload.tables.get(table) ?? []) {
              const columns = Object.keys(row);
              const values = columns.map((_, index) => placeholder(driver, index + 1));
              await tx.query(
                `INSERT INTO ${table} (${columns.join(", ")}) VALUES (${values.join(", ")})`,
                columns.map((column) => row[column] as SqlParam),
              );
            }
          }
        });
      });
      afterAll(async () => {
        await driver?.close();
      });

      it("a store written before opens, keeps its stored ids and reads its runs as before", async () => {
        const store = await openSqlStore(driver, migrationsFor(driver.dialect), T0 - 1);
        for (const runId of workload.runIds) {
          expect(await readRun(store, runId)).toEqual(await readRun(source, runId));
          expect((await storedEventIds(driver, runId)).every((id) => id !== null)).toBe(true);
        }

        // New runs on the migrated store: derived ids stored as NULL, read back whole.
        const [fresh] = await runDiamonds(store, clock, ids, "fresh-pkg", 1);
        const events = await store.transaction((tx) => tx.listEvents(fresh ?? "", 0, 1_000));
        const stored = await storedEventIds(driver, fresh ?? "");
        expect(events.map((event) => event.seq)).toEqual(events.map((_, index) => index + 1));
        for (const [index, event] of events.entries())
          expect(stored[index]).toBe(event.id.startsWith("evt:") ? null : event.id);
        expect(stored.filter((id) => id === null).length).toBeGreaterThan(events.length / 2);
        expect(
          events.every(
            (event) => event.id === eventId(event.runId, event.seq) || event.id.startsWith("wte:"),
          ),
        ).toBe(true);
      });
    });
  }
});
