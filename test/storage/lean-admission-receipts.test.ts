/**
 * Migration 0010 keeps an admission receipt's key and a body without what the key determines:
 * the attempt and event ids derive from the run, step and epoch, and the step's digest is read
 * from the step's mutation of that epoch. A store written by the version before it holds every
 * value in every row: it must migrate and read exactly as it did, and what is written after
 * must read back the same receipts, each passing its digest, while storing none of the
 * derived values.
 *
 * The "previous version" database is made by applying migrations up to 0009 and copying in the
 * rows a run leaves, the receipts as the previous writer stored them (attempt id, event id and
 * digest columns, the whole receipt as body), taken from a store that ran the same workload.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { admissionReceiptDigest } from "../../src/admission.ts";
import { Coordinator } from "../../src/coordinator.ts";
import type { AdmissionReceipt } from "../../src/model.ts";
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

const T0 = 1_800_000_000_000;
const BEFORE_LEAN_RECEIPTS = 9;
/** A diamond step is admitted in its ready epoch, its second version. */
const READY_VERSION = 2;

/** Every table a finished workflow run touches, parents first (foreign keys). */
const COPIED_TABLES = [
  "packages",
  "generations",
  "reconciliation_receipts",
  "task_definitions",
  "workflow_plans",
  "runs",
  "step_runs",
  "run_attempts",
  "run_events",
  "step_mutations",
  "admission_receipts",
] as const;

/** What a receipt's stored body must no longer hold: the key, what derives from it, the step digest. */
const DERIVED_FIELDS = [
  "runId",
  "stepRunId",
  "stepRunVersion",
  "attemptId",
  "eventId",
  "stepRunDigest",
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

/** A run's receipts, one per step, read through the store. */
async function receiptsOf(store: SqlStore, runId: string): Promise<AdmissionReceipt[]> {
  return store.transaction(async (tx) => {
    const receipts: AdmissionReceipt[] = [];
    // One statement at a time: a PostgreSQL transaction is one connection.
    for (const step of await tx.getSteps(runId)) {
      const receipt = await tx.getAdmission(runId, step.id, READY_VERSION);
      if (receipt === null) throw new Error(`no receipt for step ${step.name}`);
      receipts.push(receipt);
    }
    return receipts;
  });
}

/** What the store answers about a run: everything the API and the history checker read. */
async function readRun(store: SqlStore, runId: string): Promise<unknown> {
  return store.transaction(async (tx) => ({
    run: await tx.getRun(runId),
    steps: await tx.getSteps(runId),
    attempts: await tx.getAttempts(runId),
    events: await tx.listEvents(runId, 0, 1_000),
    mutations: await tx.listMutations(runId),
  }));
}

function placeholder(driver: SqlDriver, index: number): string {
  return driver.dialect === "postgres" ? `$${index}` : "?";
}

async function storedBodies(driver: SqlDriver, runId: string): Promise<Record<string, unknown>[]> {
  return driver.transaction(async (tx) =>
    (
      await tx.query<{ body: string }>(
        `SELECT body FROM admission_receipts WHERE run_id = ${placeholder(driver, 1)} ORDER BY step_run_id`,
        [runId],
      )
    ).map((row) => JSON.parse(row.body) as Record<string, unknown>),
  );
}

async function receiptColumns(driver: SqlDriver): Promise<string[]> {
  return driver.transaction(async (tx) => {
    const rows =
      driver.dialect === "postgres"
        ? await tx.query<{ name: string }>(
            "SELECT column_name AS name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'admission_receipts' ORDER BY ordinal_position",
          )
        : await tx.query<{ name: string }>(
            "SELECT name FROM pragma_table_info('admission_receipts') ORDER BY cid",
          );
    return rows.map((row) => row.name);
  });
}

/** Each receipt passes the digest replay checks, and names its step's attempt and ready digest. */
async function expectWholeReceipts(store: SqlStore, runId: string): Promise<void> {
  const receipts = await receiptsOf(store, runId);
  const { attempts, mutations } = await store.transaction(async (tx) => ({
    attempts: await tx.getAttempts(runId),
    mutations: await tx.listMutations(runId),
  }));
  expect(receipts).toHaveLength(4);
  for (const receipt of receipts) {
    const { digest, ...body } = receipt;
    expect(admissionReceiptDigest(body)).toBe(digest);
    const attempt = attempts.find((candidate) => candidate.stepRunId === receipt.stepRunId);
    expect(receipt.attemptId).toBe(attempt?.id);
    const ready = mutations.find(
      (mutation) =>
        mutation.stepRunId === receipt.stepRunId && mutation.version === receipt.stepRunVersion,
    );
    expect(ready?.toStatus).toBe("ready");
    expect(receipt.stepRunDigest).toBe(ready?.toDigest);
  }
}

describe("admission receipts stored without what their key determines (migration 0010)", () => {
  let workload: Workload;
  let source: SqlStore;
  let sourceReceipts: Map<string, AdmissionReceipt[]>;
  const clock = new TestClock(T0);
  const ids = new SequentialIds("lean");

  beforeAll(async () => {
    const memory = DRIVERS.find((factory) => factory.name === "sqljs-memory");
    if (memory === undefined) throw new Error("no sqljs-memory driver");
    const driver = await memory.open();
    source = await openSqlStore(driver, migrationsFor(driver.dialect), T0 - 1);
    const runIds = await runDiamonds(source, clock, ids, "legacy-pkg", 3);
    const tables = new Map<string, SqlRow[]>();
    await driver.transaction(async (tx) => {
      for (const table of COPIED_TABLES)
        if (table !== "admission_receipts")
          tables.set(table, await tx.query(`SELECT * FROM ${table}`));
    });
    sourceReceipts = new Map();
    for (const runId of runIds) sourceReceipts.set(runId, await receiptsOf(source, runId));
    // The previous writer stored the ids and digest as columns and the whole receipt as body.
    tables.set(
      "admission_receipts",
      [...sourceReceipts.values()].flat().map((receipt) => ({
        run_id: receipt.runId,
        step_run_id: receipt.stepRunId,
        step_run_version: receipt.stepRunVersion,
        attempt_id: receipt.attemptId,
        event_id: receipt.eventId,
        digest: receipt.digest,
        body: JSON.stringify(receipt),
      })),
    );
    workload = { runIds, tables };
  });
  afterAll(async () => {
    await source?.close();
  });

  it("the current writer stores a receipt's key and a body without the derived values, and reads every receipt back whole", async () => {
    expect(await receiptColumns(source.driver)).toEqual([
      "run_id",
      "step_run_id",
      "step_run_version",
      "body",
    ]);
    for (const runId of workload.runIds) {
      const bodies = await storedBodies(source.driver, runId);
      expect(bodies).toHaveLength(4);
      for (const body of bodies) {
        for (const field of DERIVED_FIELDS) expect(body).not.toHaveProperty(field);
        expect(body).toHaveProperty("digest");
        expect(body).toHaveProperty("planDigest");
      }
      await expectWholeReceipts(source, runId);
    }
  });

  it("a receipt whose step mutation reads back another digest fails its digest", async () => {
    const runId = workload.runIds[0] ?? "";
    const [receipt] = await receiptsOf(source, runId);
    if (receipt === undefined) throw new Error("no receipt");
    await source.driver.transaction(async (tx) => {
      await tx.query(
        "UPDATE step_mutations SET to_digest = ? WHERE step_run_id = ? AND version = ?",
        [`sha256:${"0".repeat(64)}`, receipt.stepRunId, receipt.stepRunVersion],
      );
    });
    try {
      const altered = await source.transaction((tx) =>
        tx.getAdmission(runId, receipt.stepRunId, receipt.stepRunVersion),
      );
      const { digest, ...body } = altered ?? receipt;
      expect(altered?.stepRunDigest).toBe(`sha256:${"0".repeat(64)}`);
      expect(admissionReceiptDigest(body)).not.toBe(digest);
    } finally {
      await source.driver.transaction(async (tx) => {
        await tx.query(
          "UPDATE step_mutations SET to_digest = ? WHERE step_run_id = ? AND version = ?",
          [receipt.stepRunDigest, receipt.stepRunId, receipt.stepRunVersion],
        );
      });
    }
    await expectWholeReceipts(source, runId);
  });

  for (const factory of DRIVERS) {
    describe(factory.name, () => {
      let driver: SqlDriver;

      beforeAll(async () => {
        driver = await factory.open();
        const migrations = migrationsFor(driver.dialect);
        await migrate(
          driver,
          migrations.filter((migration) => migration.version <= BEFORE_LEAN_RECEIPTS),
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

      it("a store written before opens, keeps its receipts' bodies and reads its runs and receipts as before", async () => {
        const store = await openSqlStore(driver, migrationsFor(driver.dialect), T0 - 1);
        expect(await receiptColumns(driver)).toEqual([
          "run_id",
          "step_run_id",
          "step_run_version",
          "body",
        ]);
        for (const runId of workload.runIds) {
          expect(await readRun(store, runId)).toEqual(await readRun(source, runId));
          expect(await receiptsOf(store, runId)).toEqual(sourceReceipts.get(runId));
          // The receipts written before keep every value in their bodies.
          for (const body of await storedBodies(driver, runId))
            for (const field of DERIVED_FIELDS) expect(body).toHaveProperty(field);
          await expectWholeReceipts(store, runId);
        }

        // New runs on the migrated store: lean bodies, whole receipts.
        const [fresh] = await runDiamonds(store, clock, ids, "fresh-pkg", 1);
        const bodies = await storedBodies(driver, fresh ?? "");
        expect(bodies).toHaveLength(4);
        for (const body of bodies)
          for (const field of DERIVED_FIELDS) expect(body).not.toHaveProperty(field);
        await expectWholeReceipts(store, fresh ?? "");
      });
    });
  }
});
