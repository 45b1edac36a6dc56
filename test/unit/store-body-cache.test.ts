import { describe, expect, it } from "vitest";
import { applyPackage, startRun } from "../../src/operations.ts";
import { transactAtStoreTime } from "../../src/ports.ts";

import { diamondManifest, SequentialIds, TestClock, workflowStart } from "../support/fixtures.ts";
import { T0 } from "./core-fixtures.ts";
import { driverNamed, openTestStore } from "../support/drivers.ts";

/**
 * The store's cache of immutable bodies (docs/ARCHITECTURE.md §16, deviation 3): a body read
 * twice is the same frozen object, so nothing can change what the core verified once.
 */

describe("the immutable body cache", () => {
  it("a plan, a reconciliation receipt and a task definition (by task and by revision) read twice are the same deeply frozen object", async () => {
    const clock = new TestClock(T0);
    const store = await openTestStore(driverNamed("sqljs-memory"), T0 - 1);
    const run = await transactAtStoreTime(store, clock, async (tx, nowMs) => {
      await applyPackage(tx, diamondManifest("cached"), nowMs);
      return (
        await startRun(
          tx,
          workflowStart("cached", "diamond", new SequentialIds("run").runId()),
          nowMs,
        )
      ).run;
    });
    const revision = await store.transaction(
      async (tx) =>
        (await tx.getTaskDefinitionFor(run.reconciliationDigest, "work"))?.revision ?? "",
    );
    const read = () =>
      store.transaction(async (tx) => ({
        plan: await tx.getPlan(run.planDigest ?? ""),
        reconciliation: await tx.getReconciliation(run.reconciliationDigest),
        definition: await tx.getTaskDefinitionFor(run.reconciliationDigest, "work"),
        byRevision: await tx.getTaskDefinition(revision),
      }));
    const first = await read();
    const second = await read();
    for (const key of ["plan", "reconciliation", "definition", "byRevision"] as const) {
      expect(first[key]).not.toBeNull();
      expect(second[key]).toBe(first[key]);
      expect(Object.isFrozen(first[key])).toBe(true);
    }
    expect(first.byRevision?.revision).toBe(revision);
    expect(Object.isFrozen(first.plan?.steps[0])).toBe(true);
    expect(() => (first.plan?.steps as unknown as unknown[]).push(null)).toThrow();
    await store.close();
  });
});
