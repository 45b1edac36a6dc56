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
import { describe, expect, it } from "vitest";
import { admissionReceiptDigest } from "../../src/admission.ts";
import type { SqlDriver } from "../../storage/driver.ts";
import type { SqlStore } from "../../storage/sql-store.ts";
import {
  earlierWorkloadOfFile,
  itUpgradesOnEveryDriver,
  placeholder,
  receiptsOf,
} from "./fixtures/earlier-store.ts";

const BEFORE_LEAN_RECEIPTS = 9;

/**
 * What a stored body keeps: every receipt field but its key (run, step, epoch), the ids derived
 * from the key (attempt, event) and the step digest read from that epoch's mutation.
 */
const KEPT_FIELDS = [
  "admittedAtMs",
  "digest",
  "executionDigest",
  "planDigest",
  "reconciliationDigest",
  "runVersion",
  "runtimeTaskId",
  "runtimeTaskRevision",
  "taskDefinitionDigest",
];

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
  const earlier = earlierWorkloadOfFile("lean");

  it("the current writer stores a receipt's key and a body without the derived values, and reads every receipt back whole", async () => {
    const { source, runIds } = earlier.workload;
    expect(await receiptColumns(source.driver)).toEqual([
      "run_id",
      "step_run_id",
      "step_run_version",
      "body",
    ]);
    for (const runId of runIds) {
      const bodies = await storedBodies(source.driver, runId);
      expect(bodies).toHaveLength(4);
      for (const body of bodies) {
        // Exactly what the key does not determine: stated here, not taken from the writer, so a
        // writer that kept a derived value (or dropped a needed one) fails.
        expect(Object.keys(body).sort()).toEqual(KEPT_FIELDS);
      }
      await expectWholeReceipts(source, runId);
    }
  });

  it("a receipt whose step mutation reads back another digest fails its digest", async () => {
    const { source, runIds } = earlier.workload;
    const runId = runIds[0] ?? "";
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

  itUpgradesOnEveryDriver(
    "a store written before opens, keeps its receipts' bodies and reads its runs and receipts as before",
    BEFORE_LEAN_RECEIPTS,
    earlier,
    async (driver, store) => {
      expect(await receiptColumns(driver)).toEqual([
        "run_id",
        "step_run_id",
        "step_run_version",
        "body",
      ]);
      for (const runId of earlier.workload.runIds) {
        // The receipts written before keep every value in their bodies: each is its receipt.
        const byStep = (await receiptsOf(store, runId)).sort((left, right) =>
          left.stepRunId < right.stepRunId ? -1 : 1,
        );
        expect(await storedBodies(driver, runId)).toEqual(byStep);
        await expectWholeReceipts(store, runId);
      }

      // New runs on the migrated store: lean bodies, whole receipts.
      const fresh = await earlier.freshRun(store);
      const bodies = await storedBodies(driver, fresh);
      expect(bodies).toHaveLength(4);
      for (const body of bodies) expect(Object.keys(body).sort()).toEqual(KEPT_FIELDS);
      await expectWholeReceipts(store, fresh);
    },
  );
});
