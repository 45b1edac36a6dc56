import { describe, expect, it } from "vitest";
import { Coordinator } from "../../src/coordinator.ts";
import { applyPackage, startRun } from "../../src/operations.ts";
import { ordinaryAttemptId } from "../../src/ordinary.ts";
import { PROFILES } from "../../src/profiles.ts";
import { Prng } from "../../src/sim/prng.ts";
import { SimulatedExecutor } from "../../src/sim/simulated-executor.ts";
import { VirtualClock } from "../../src/sim/virtual-clock.ts";
import { driverNamed, openTestStore } from "../support/drivers.ts";
import { task, taskStart } from "../support/fixtures.ts";

describe("bounded stages resume where they stopped", () => {
  it("execution control on the edge budget (8 per cycle) still completes a short task behind 8 long-running ones", async () => {
    const clock = new VirtualClock(1_900_000_000_000);
    let next = 0;
    const ids = { runId: () => `rr-${(next += 1)}` };
    const store = await openTestStore(driverNamed("sqljs-memory"), clock.nowMs());
    const executor = new SimulatedExecutor({
      clock,
      prng: new Prng(1),
      // Every long task runs for an hour; the short one ends after one second.
      outcome: (request) => ({
        exitCode: 0,
        durationMs: request.definition.task === "short" ? 1_000 : 3_600_000,
      }),
    });
    let shortRunId = "";
    const coordinator = new Coordinator({
      store,
      clock,
      ids,
      profile: PROFILES.edge,
      // Execution control's budget is the subject, with more running than the edge's default --max-running.
      maxRunning: null,
      executors: { local_process: executor },
    });
    await store.transaction(async (tx) => {
      const nowMs = await tx.observe(clock.nowMs());
      await applyPackage(
        tx,
        {
          package: "rr",
          description: null,
          tasks: [task("long", ["sim"], { timeoutMs: 7_200_000 }), task("short", ["sim"])],
          workflows: [],
          schedules: [],
        },
        nowMs,
      );
      const longAttemptIds: string[] = [];
      for (let index = 0; index < 8; index += 1) {
        const runId = ids.runId();
        longAttemptIds.push(ordinaryAttemptId(runId, 1));
        await startRun(tx, taskStart("rr", "long", runId), nowMs);
      }
      // Pick the short run's id so its attempt id sorts after every long attempt's: a scan that
      // always started from the lowest id would see only the eight long ones.
      const highest = longAttemptIds.sort().at(-1) ?? "";
      let candidate = 0;
      while (ordinaryAttemptId(`rr-short-${candidate}`, 1) < highest) candidate += 1;
      shortRunId = `rr-short-${candidate}`;
      await startRun(tx, taskStart("rr", "short", shortRunId), nowMs);
    });
    // Edge admits and dispatches one ordinary run per cycle: nine cycles start all nine.
    for (let index = 0; index < 12; index += 1) {
      await coordinator.tick();
      clock.advance(100);
    }
    clock.advance(2_000);
    const statuses: string[] = [];
    for (let index = 0; index < 4; index += 1) {
      await coordinator.tick();
      const short = await store.transaction(async (tx) => tx.getRun(shortRunId));
      statuses.push(short?.status ?? "missing");
    }
    expect(statuses).toContain("succeeded");
    const running = await store.transaction(async (tx) =>
      tx.listAttempts("local_process", ["running"], null, 100),
    );
    expect(running).toHaveLength(8);
    await store.close();
  });
});
