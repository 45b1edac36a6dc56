import { describe, expect, it } from "vitest";
import { Coordinator } from "../../src/coordinator.ts";
import { applyPackage, startRun } from "../../src/operations.ts";
import type { LaunchRequest } from "../../src/ports.ts";
import { PROFILES } from "../../src/profiles.ts";
import {
  diamondManifest,
  SequentialIds,
  task,
  TestClock,
  workflowStart,
} from "../support/fixtures.ts";
import { recordingExecutor, steadyExecutor } from "../support/simulated-executors.ts";
import { driverNamed, openTestStore } from "../support/drivers.ts";
import { T0 } from "./core-fixtures.ts";

/**
 * Dispatch takes a page of claims per cycle (edge: one). A claim that cannot start stays
 * `claimed`; were every cycle to start from the head of the list, it would hold the page for
 * good and nothing behind it would ever run. Over a real sql.js store.
 */
describe("dispatch resumes behind its last full page", () => {
  it("a claim whose start keeps failing at the head of the list does not hold back the claim behind it", async () => {
    const clock = new TestClock(T0);
    const store = await openTestStore(driverNamed("sqljs-memory"), T0 - 1);
    const ids = new SequentialIds("rr");
    const launches: LaunchRequest[] = [];
    const coordinator = new Coordinator({
      store,
      clock,
      ids,
      profile: PROFILES.edge,
      executors: { local_process: recordingExecutor(steadyExecutor(clock, 3), launches) },
    });
    await store.transaction(async (tx) => {
      const nowMs = await tx.observe(clock.nowMs());
      await applyPackage(tx, diamondManifest("rr", { tasks: [task("work", ["true"])] }), nowMs);
      await startRun(tx, workflowStart("rr", "diamond", ids.runId()), nowMs);
      await startRun(tx, workflowStart("rr", "diamond", ids.runId()), nowMs);
    });
    // Both roots claimed, nothing dispatched yet (edge admits one step per cycle).
    const admitOnly = new Coordinator({
      store,
      clock,
      ids: new SequentialIds("x"),
      profile: { ...PROFILES.edge, dispatch: 0 },
      executors: {},
    });
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
