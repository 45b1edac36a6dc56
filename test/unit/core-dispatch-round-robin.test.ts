import { describe, expect, it } from "vitest";
import { applyPackage, startRun } from "../../src/operations.ts";
import type { LaunchRequest } from "../../src/ports.ts";
import { PROFILES } from "../../src/profiles.ts";
import { diamondManifest, task, workflowStart } from "../support/fixtures.ts";
import { recordingExecutor } from "../support/simulated-executors.ts";
import { storeRig } from "./store-rig.ts";

/**
 * Dispatch takes a page of claims per cycle (edge: one). A claim that cannot start stays
 * `claimed`; were every cycle to start from the head of the list, it would hold the page for
 * good and nothing behind it would ever run. Over a real sql.js store.
 */
describe("dispatch resumes behind its last full page", () => {
  it("a claim whose start keeps failing at the head of the list does not hold back the claim behind it", async () => {
    const rig = await storeRig(3);
    const { store, ids, clock } = rig;
    const launches: LaunchRequest[] = [];
    const coordinator = rig.coordinator("edge", {
      executors: { local_process: recordingExecutor(rig.executor, launches) },
    });
    await store.transaction(async (tx) => {
      const nowMs = await tx.observe(clock.nowMs());
      await applyPackage(tx, diamondManifest("rr", { tasks: [task("work", ["true"])] }), nowMs);
      await startRun(tx, workflowStart("rr", "diamond", ids.runId()), nowMs);
      await startRun(tx, workflowStart("rr", "diamond", ids.runId()), nowMs);
    });
    // Both roots claimed, nothing dispatched yet (edge admits one step per cycle).
    const admitOnly = rig.coordinator({ ...PROFILES.edge, dispatch: 0 }, { executors: {} });
    for (let cycle = 0; cycle < 4; cycle += 1) await admitOnly.tick();
    const claims = (
      await store.transaction(async (tx) => tx.listAttempts("local_process", ["claimed"], null, 10))
    ).map((attempt) => attempt.id);
    expect(claims).toHaveLength(2);
    const [head, behind] = claims as [string, string];
    // The head claim loses its admission receipt: its start fails with `integrity` every cycle.
    await store.driver.transaction(async (tx) => {
      await tx.query(
        "DELETE FROM admission_receipts WHERE (run_id, step_run_id, step_run_version) IN (SELECT run_id, step_run_id, step_run_version FROM run_attempts WHERE id = ?)",
        [head],
      );
    });

    const dispatchErrors: string[] = [];
    for (let cycle = 0; cycle < 3; cycle += 1) {
      const report = await coordinator.tick();
      for (const error of report.stages.find((stage) => stage.name === "dispatch")?.errors ?? [])
        dispatchErrors.push(`${error.subject ?? ""}: ${error.code}`);
    }
    expect(launches.map((request) => request.attempt.id)).toEqual([behind]);
    expect(dispatchErrors).toContain(`${head}: integrity`);
    const status = await store.transaction(async (tx) => (await tx.getAttempt(head))?.status);
    expect(status).toBe("claimed");
  });
});
