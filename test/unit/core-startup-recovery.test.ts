import { beforeAll, describe, expect, it } from "vitest";
import type { SqlJsStatic } from "sql.js";
import { Coordinator, type FaultPoint } from "../../src/coordinator.ts";
import { applyPackage, startRun } from "../../src/operations.ts";
import type { Store } from "../../src/ports.ts";
import { PROFILES } from "../../src/profiles.ts";
import { Prng } from "../../src/sim/prng.ts";
import { SimulatedExecutor } from "../../src/sim/simulated-executor.ts";
import { openSqlStore } from "../../storage/sql-store.ts";
import { MIGRATIONS } from "../../storage/sqlite/migrations.generated.ts";
import { openSqlJsFileDriver } from "../../storage/sqljs/node/file-driver.ts";
import { loadSqlJs } from "../../storage/sqljs/node/load.ts";
import { PowerCutFs } from "../storage/fixtures/power-cut-fs.ts";
import { diamondManifest, SequentialIds, TestClock } from "../support/fixtures.ts";
import { T0 } from "./core-fixtures.ts";

/**
 * Start-up recovery whose decision the store refuses (ADR-0229 §3): the sql.js file store on a
 * simulated machine whose disk fills up while a restarted runtime recovers. The attempt keeps
 * its state, and the running runtime's execution control makes the decision again once the
 * store takes writes: the attempt settles without another restart, and exactly once.
 */

let SQL: SqlJsStatic;
beforeAll(async () => {
  SQL = await loadSqlJs();
});

/** Cycles a run gets to finish in: far more than a diamond of 100 ms steps needs. */
const MAX_CYCLES = 60;

interface Machine {
  readonly disk: PowerCutFs;
  readonly store: Store;
  readonly clock: TestClock;
  /** The processes and their journal outlive every runtime, as the launcher's do. */
  readonly executor: SimulatedExecutor;
  readonly runtime: (fault?: (point: FaultPoint) => void) => Coordinator;
}

async function machine(): Promise<Machine> {
  const disk = new PowerCutFs();
  const clock = new TestClock(T0);
  const store = await openSqlStore(
    await openSqlJsFileDriver(SQL, { path: "/machine/db", fs: disk }),
    MIGRATIONS,
    T0 - 1,
  );
  const executor = new SimulatedExecutor({
    clock,
    prng: new Prng(3),
    failureRate: 0,
    spawnFailureRate: 0,
    minDurationMs: 100,
    maxDurationMs: 100,
  });
  const ids = new SequentialIds("run");
  return {
    disk,
    store,
    clock,
    executor,
    runtime: (fault) =>
      new Coordinator({
        store,
        clock,
        ids,
        profile: PROFILES.standalone,
        executors: { local_process: executor },
        ...(fault === undefined ? {} : { fault }),
      }),
  };
}

/**
 * A diamond run whose first step's attempt was left `starting` and never launched: the runtime
 * that committed `starting` died before it asked the launcher to spawn (no journal record).
 */
async function strandedStarting(m: Machine): Promise<{ runId: string; attemptId: string }> {
  const runId = await m.store.transaction(async (tx) => {
    const nowMs = await tx.observe(m.clock.nowMs());
    await applyPackage(tx, diamondManifest("demo"), nowMs);
    const { run } = await startRun(
      tx,
      {
        package: "demo",
        target: { kind: "workflow", name: "diamond" },
        idempotencyKey: null,
        scheduleName: null,
        runId: "run-stranded",
      },
      nowMs,
    );
    return run.id;
  });
  const crashed = m.runtime((point) => {
    if (point === "dispatch.after_starting") throw new Error("the runtime died before the spawn");
  });
  await crashed.tick();
  const [attempt] = await m.store.transaction((tx) => tx.getAttempts(runId));
  expect(attempt).toMatchObject({ status: "starting", error: null });
  expect(await m.executor.hasJournal(attempt!)).toBe("absent");
  return { runId, attemptId: attempt!.id };
}

async function tickUntilSettled(m: Machine, runtime: Coordinator, runId: string): Promise<string> {
  let status = "running";
  for (let cycle = 0; cycle < MAX_CYCLES && status === "running"; cycle += 1) {
    await runtime.tick();
    m.clock.advance(150);
    status = (await m.store.transaction((tx) => tx.getRun(runId)))!.status;
  }
  return status;
}

describe("start-up recovery the store refused to record", () => {
  it("a starting attempt whose recovery write failed is recovered by the running runtime, without a restart, exactly once", async () => {
    const m = await machine();
    const { runId, attemptId } = await strandedStarting(m);
    const restarted = m.runtime();

    // The disk is full while the restarted runtime recovers: every try of the write is refused.
    m.disk.options.capacityBytes = m.disk.usedBytes();
    const recovered = await restarted.recover();
    expect(recovered.map((result) => [result.attemptId, result.decision])).toEqual([
      [attemptId, "fail_closed"],
    ]);
    expect(recovered[0]?.reason).toMatch(/^recovery could not record its decision: /);
    // Still full at the next cycle: refused again, and kept for the cycle after.
    await restarted.tick();
    const refused = await m.store.transaction((tx) => tx.getAttempt(attemptId));
    expect(refused).toMatchObject({ status: "starting", error: null });

    m.disk.options.capacityBytes = undefined;
    expect(await tickUntilSettled(m, restarted, runId)).toBe("succeeded");

    // The decision start-up recovery meant: never spawned, so lost with a new ready epoch.
    const attempts = await m.store.transaction((tx) => tx.getAttempts(runId));
    expect(attempts.find((attempt) => attempt.id === attemptId)).toMatchObject({
      status: "lost",
      error: "no journal record: the process was never spawned",
    });
    expect(m.executor.spawnCounts.get(attemptId)).toBeUndefined();
    expect(attempts.filter((attempt) => attempt.status === "succeeded")).toHaveLength(4);
    expect([...m.executor.spawnCounts.values()]).toEqual([1, 1, 1, 1]);
    // Recorded once: one loss and one new epoch, however many cycles looked at it.
    const events = await m.store.transaction((tx) => tx.listEvents(runId, 0, 500));
    expect(
      events
        .filter((event) => event.attemptId === attemptId && event.type === "attempt.status_changed")
        .map((event) => [event.data.from, event.data.to]),
    ).toEqual([
      ["claimed", "starting"],
      ["starting", "lost"],
    ]);
    expect(
      events.filter((event) => event.data.reason === "new ready epoch after orphaned claim"),
    ).toHaveLength(1);
  });
});
