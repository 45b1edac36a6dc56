import { describe, expect, it } from "vitest";
import { MAX_ADMISSION_PAGE } from "../../src/admission.ts";
import { RunChange } from "../../src/aggregate.ts";
import { advanceFrontier } from "../../src/frontier.ts";
import { Coordinator, STAGE_ORDER } from "../../src/coordinator.ts";
import type { Manifest } from "../../src/manifest/types.ts";
import { cancelRun } from "../../src/operations.ts";
import { MAX_STORE_PAGE, type Executor, type Store, type StoreTx } from "../../src/ports.ts";
import { PROFILES, type ProfileName } from "../../src/profiles.ts";
import type { SimulatedExecutor } from "../../src/sim/simulated-executor.ts";

import {
  applyAndStart,
  diamondManifest,
  SequentialIds,
  TestClock,
  wideManifest,
} from "../support/fixtures.ts";
import { steadyExecutor } from "../support/simulated-executors.ts";
import { T0 } from "./core-fixtures.ts";
import { driverNamed, openTestStore } from "../support/drivers.ts";

/**
 * One cadence, one bounded cycle (ADR-0229 §1 and §6, DESIGN.md §4), driven through the
 * coordinator over a fresh in-memory sql.js store per test, with the simulated executor on the
 * test clock standing in for processes.
 */

interface Rig {
  readonly store: Store;
  readonly clock: TestClock;
  readonly executor: SimulatedExecutor;
  readonly coordinator: (profile?: ProfileName, store?: Store) => Coordinator;
  readonly start: (manifest: Manifest, workflow: string) => Promise<string>;
}

async function rig(): Promise<Rig> {
  const clock = new TestClock(T0);
  const store = await openTestStore(driverNamed("sqljs-memory"), T0 - 1);
  const ids = new SequentialIds("run");
  const executor = steadyExecutor(clock, 7);
  return {
    store,
    clock,
    executor,
    coordinator: (profile = "standalone", over = store) =>
      new Coordinator({
        store: over,
        clock,
        ids,
        profile: PROFILES[profile],
        executors: { local_process: executor },
      }),
    start: (manifest, workflow) =>
      applyAndStart(store, clock, manifest, { kind: "workflow", name: workflow }, ids.runId()),
  };
}

/** `store` whose transactions see `method` of their tx replaced by what `replace` makes of the tx. */
function storeReplacing<Method extends keyof StoreTx>(
  store: Store,
  method: Method,
  replace: (tx: StoreTx) => StoreTx[Method],
): Store {
  const replaced = (tx: StoreTx): StoreTx =>
    new Proxy(tx, {
      get: (target, key) => {
        if (key === method) return replace(target);
        const value = Reflect.get(target, key) as unknown;
        return typeof value === "function" ? (value as () => unknown).bind(target) : value;
      },
    });
  return {
    dialect: store.dialect,
    driverName: store.driverName,
    close: () => store.close(),
    transaction: (fn, options) => store.transaction((tx) => fn(replaced(tx)), options),
    read: (fn) => store.read((tx) => fn(replaced(tx))),
  };
}

/** A diamond run that succeeded with one counted attempt per step, after `attempts` admissions. */
function diamondSucceeded(attempts: number) {
  return {
    status: "succeeded",
    steps: ["succeeded", "succeeded", "succeeded", "succeeded"],
    attempts,
    admissions: attempts,
    stepCounts: [1, 1, 1, 1],
  };
}

async function runState(
  store: Store,
  runId: string,
): Promise<{
  status: string;
  steps: string[];
  attempts: number;
  admissions: number;
  stepCounts: number[];
}> {
  return store.transaction(async (tx) => {
    const run = await tx.getRun(runId);
    const steps = await tx.getSteps(runId);
    const attempts = await tx.getAttempts(runId);
    let admissions = 0;
    for (const step of steps)
      for (let version = 1; version <= step.version; version += 1)
        if ((await tx.getAdmission(runId, step.id, version)) !== null) admissions += 1;
    return {
      status: run?.status ?? "missing",
      steps: steps.map((step) => step.status),
      attempts: attempts.length,
      admissions,
      stepCounts: steps.map((step) => step.attemptCount),
    };
  });
}

/** Ticks (150 ms apart) while the run is running, at most 40 cycles. */
async function tickWhileRunning(
  c: Coordinator,
  store: Store,
  clock: TestClock,
  runId: string,
): Promise<void> {
  for (
    let cycle = 0;
    cycle < 40 && (await runState(store, runId)).status === "running";
    cycle += 1
  ) {
    await c.tick();
    clock.advance(150);
  }
}

/**
 * A standalone coordinator whose local executor launches with `launch` and answers everything
 * else (receipts, journals, inspections, stops) from the simulated `executor`.
 */
function coordinatorLaunchingWith(
  store: Store,
  clock: TestClock,
  executor: Executor,
  launch: Executor["launch"],
): Coordinator {
  const local: Executor = {
    type: "local_process",
    launch,
    readReceipt: (attempt) => executor.readReceipt(attempt),
    hasJournal: (attempt) => executor.hasJournal(attempt),
    inspect: (attempt) => executor.inspect(attempt),
    stop: (attempt, reason) => executor.stop(attempt, reason),
  };
  return new Coordinator({
    store,
    clock,
    ids: new SequentialIds("x"),
    profile: PROFILES.standalone,
    executors: { local_process: local },
  });
}

describe("the cadence cycle", () => {
  it("the tick runs its stages in the fixed order: cancellation, schedules and ordinary runs, frontier, admission, dispatch, execution control, notifications, purge", async () => {
    const { coordinator } = await rig();
    expect(STAGE_ORDER.join(" → ")).toBe(
      "cancellation → schedules → ordinary → frontier → admission → dispatch → execution_control → notifications → purge",
    );
    const report = await coordinator().tick();
    expect(report.stages.map((stage) => stage.name)).toEqual([...STAGE_ORDER]);
    expect(report.profile).toBe("standalone");
    expect(report.more).toBe(false);
  });

  it("edge and standalone budgets are ADR-0229's: cancellation 4×1 / 32×4, frontier 1×1 / 16×4, admission 1×1 / 16×4, dispatch 1 / 4", () => {
    const budgets = (name: ProfileName) => {
      const profile = PROFILES[name];
      return [profile.cancellation, profile.frontier, profile.admission, profile.dispatch];
    };
    expect(budgets("edge")).toEqual([
      { pageSize: 4, pages: 1 },
      { pageSize: 1, pages: 1 },
      { pageSize: 1, pages: 1 },
      1,
    ]);
    expect(budgets("standalone")).toEqual([
      { pageSize: 32, pages: 4 },
      { pageSize: 16, pages: 4 },
      { pageSize: 16, pages: 4 },
      4,
    ]);
  });

  it("an edge cycle admits and dispatches at most one step and says there is more", async () => {
    const { start, coordinator, store } = await rig();
    const runId = await start(wideManifest("wide", 5), "wide");
    const edge = coordinator("edge");
    const report = await edge.tick();
    const stage = (name: string) => report.stages.find((candidate) => candidate.name === name);
    expect(stage("frontier")?.processed).toBe(1);
    expect(stage("admission")).toMatchObject({ processed: 1, more: true });
    expect(stage("dispatch")?.processed).toBe(1);
    expect(report.more).toBe(true);
    expect((await runState(store, runId)).attempts).toBe(1);
  });

  it("a diamond workflow runs to succeeded with exactly one attempt and one admission per step, and attemptCount 1 each", async () => {
    const { start, coordinator, store, clock } = await rig();
    const runId = await start(diamondManifest("demo"), "diamond");
    const c = coordinator();
    await tickWhileRunning(c, store, clock, runId);
    expect(await runState(store, runId)).toEqual(diamondSucceeded(4));
  });

  it("a claim whose ready epoch moved on before it started is settled as lost, and the run still converges", async () => {
    const { start, coordinator, store, clock } = await rig();
    const runId = await start(diamondManifest("demo"), "diamond");
    const c = coordinator();
    // The frontier makes the first step ready; nothing is admitted yet.
    const first = await store.transaction(async (tx) => {
      const run = await tx.getRun(runId);
      if (run === null) throw new Error("run missing");
      const change = advanceFrontier(
        run,
        await tx.getSteps(runId),
        [],
        await tx.observe(clock.nowMs()),
      );
      if (change !== null) await tx.apply(change);
      return (await tx.getSteps(runId))[0];
    });
    if (first === undefined) throw new Error("the diamond has no first step");
    expect(first.status).toBe("ready");
    expect(await c.admit({ runId, stepRunId: first.id, stepRunVersion: first.version })).toBe(true);
    // The step gets a new ready epoch while its claim is still `claimed`: the claim may no
    // longer start (its epoch is gone), and a new claim is admitted for the new epoch.
    await store.transaction(async (tx) => {
      const run = await tx.getRun(runId);
      const step = await tx.getStep(first.id);
      if (run === null || step === null) throw new Error("run or step missing");
      const change = new RunChange(run, await tx.observe(clock.nowMs()));
      change.setStep(step, "ready", {}, { reason: "new ready epoch" });
      await tx.apply(change.build());
    });
    await tickWhileRunning(c, store, clock, runId);
    const attempts = await store.transaction(async (tx) => tx.getAttempts(runId));
    const stale = attempts.find((attempt) => attempt.stepRunVersion === first.version);
    expect(stale).toMatchObject({ stepRunId: first.id, status: "lost" });
    expect(attempts.filter((attempt) => attempt.status === "claimed")).toEqual([]);
    expect(await runState(store, runId)).toEqual(diamondSucceeded(5));
  });

  it("a workflow cancelled before the first cycle converges to cancelled in that cycle with no attempt started", async () => {
    const { start, coordinator, store, clock, executor } = await rig();
    const runId = await start(diamondManifest("demo"), "diamond");
    await store.transaction(async (tx) => cancelRun(tx, runId, await tx.observe(clock.nowMs())));
    const report = await coordinator().tick();
    expect(report.stages[0]).toMatchObject({ name: "cancellation", processed: 1 });
    expect(await runState(store, runId)).toMatchObject({
      status: "cancelled",
      steps: ["cancelled", "cancelled", "cancelled", "cancelled"],
      attempts: 0,
    });
    expect(executor.spawnCounts.size).toBe(0);
  });

  it("a failing stage is isolated and reported; the stages after it still run", async () => {
    const { start, coordinator, store } = await rig();
    const runId = await start(wideManifest("wide", 2), "wide");
    // The frontier's candidate listing fails on every call; admission and the rest go on.
    const failing = storeReplacing(
      store,
      "listFrontierRuns",
      () => () => Promise.reject(new Error("frontier index unavailable")),
    );
    const report = await coordinator("standalone", failing).tick();
    const frontier = report.stages.find((stage) => stage.name === "frontier");
    expect(frontier?.errors).toEqual([
      { code: "internal", message: "frontier index unavailable", subject: null },
    ]);
    expect(report.stages.map((stage) => stage.name)).toEqual([...STAGE_ORDER]);
    // Nothing was ready, so admission had nothing to do, but it ran and reported without error.
    expect(report.stages.find((stage) => stage.name === "admission")?.errors).toEqual([]);
    expect((await runState(store, runId)).steps).toEqual(["pending", "pending"]);
    // The next cycle on a healthy store retries the frontier.
    await coordinator().tick();
    expect((await runState(store, runId)).attempts).toBe(2);
  });

  it("a frozen coordinator neither admits nor dispatches, but still converges cancellation and the frontier", async () => {
    const { start, coordinator, store, clock } = await rig();
    const runId = await start(wideManifest("wide", 2), "wide");
    const c = coordinator();
    c.freezeAdmission();
    expect(c.admissionFrozen).toBe(true);
    await c.tick();
    expect(await runState(store, runId)).toMatchObject({ steps: ["ready", "ready"], attempts: 0 });
    await store.transaction(async (tx) => cancelRun(tx, runId, await tx.observe(clock.nowMs())));
    await c.tick();
    expect((await runState(store, runId)).status).toBe("cancelled");
  });

  it("dispatch launches a page's attempts concurrently, commits their outcomes in page order whatever order launches end in, and asks for a follow-up after a completion", async () => {
    const { store, clock, executor, start } = await rig();
    const runId = await start(wideManifest("wide", 4), "wide");
    let inFlight = 0;
    let maxInFlight = 0;
    const launchOrder: string[] = [];
    const coordinator = coordinatorLaunchingWith(store, clock, executor, async (request) => {
      inFlight += 1;
      maxInFlight = Math.max(maxInFlight, inFlight);
      // The first attempt of the page is the slowest: its launch ends last.
      const yields = launchOrder.length === 0 ? 20 : 1;
      launchOrder.push(request.attempt.id);
      for (let index = 0; index < yields; index += 1) await Promise.resolve();
      inFlight -= 1;
      return executor.launch(request);
    });
    const first = await coordinator.tick();
    expect(maxInFlight).toBe(PROFILES.standalone.dispatch);
    expect(first.followUp).toBe(false);
    const runningOrder = await store.transaction(async (tx) => {
      const events = await tx.listEvents(runId, 0, 500);
      return events
        .filter((event) => event.type === "attempt.status_changed" && event.data.to === "running")
        .map((event) => event.attemptId);
    });
    expect(runningOrder).toEqual([...launchOrder]);
    clock.nowMsValue += 1000;
    const second = await coordinator.tick();
    expect(second.followUp).toBe(true);
    expect((await runState(store, runId)).steps).toEqual([
      "succeeded",
      "succeeded",
      "succeeded",
      "succeeded",
    ]);
  });

  it("a spawn failure reported after the attempt's deadline is recorded at store time as a timeout, not a plain failure", async () => {
    const { store, clock, executor, start } = await rig();
    const runId = await start(diamondManifest("slow-start"), "diamond");
    const timeoutMs = await store.transaction(
      async (tx) =>
        (await tx.getTaskDefinitionFor((await tx.getRun(runId))!.reconciliationDigest, "work"))!
          .execution.timeoutMs,
    );
    // The launch hangs past the deadline (the clock moves while it runs), then fails to spawn.
    const coordinator = coordinatorLaunchingWith(store, clock, executor, () => {
      clock.nowMsValue += timeoutMs + 1;
      return Promise.reject(Object.assign(new Error("spawn ENOENT"), { code: "spawn_failed" }));
    });
    await coordinator.tick();
    const attempts = await store.transaction(async (tx) => tx.getAttempts(runId));
    expect(attempts.map((attempt) => [attempt.status, attempt.stopReason, attempt.error])).toEqual([
      ["timed_out", "timeout", "spawn ENOENT"],
    ]);
    expect((await runState(store, runId)).steps[0]).toBe("timed_out");
  });

  it("shutdown stops every running attempt, beyond the store's page cap", async () => {
    const { store, clock, executor, start } = await rig();
    const width = MAX_STORE_PAGE + 20;
    const runId = await start(wideManifest("wide", width), "wide");
    // A profile that admits and dispatches a page cap's worth per cycle: the run is running in a few cycles.
    const wide = {
      ...PROFILES.cluster,
      frontier: { pageSize: 64, pages: 20 },
      admission: { pageSize: 64, pages: 20 },
      dispatch: width,
    };
    const coordinator = new Coordinator({
      store,
      clock,
      ids: new SequentialIds("x"),
      profile: wide,
      // Beyond any runtime-wide limit: this test needs more running than one page holds.
      maxRunning: null,
      executors: { local_process: executor },
    });
    for (let cycle = 0; cycle < 10; cycle += 1) await coordinator.tick();
    const runningBefore = await store.transaction(
      async (tx) =>
        (await tx.getAttempts(runId)).filter((attempt) => attempt.status === "running").length,
    );
    expect(runningBefore).toBe(width);
    coordinator.freezeAdmission();
    expect(await coordinator.stopRunningForShutdown()).toBe(width);
    const stopReasons = await store.transaction(async (tx) =>
      (await tx.getAttempts(runId)).map((attempt) => attempt.stopReason),
    );
    expect(stopReasons.filter((reason) => reason === "shutdown")).toHaveLength(width);
    // 520 attempts through ten real cycles: seconds on a quiet machine, past 30 s on a loaded one.
  }, 120_000);

  it("ADR-0227 §3: the cadence never asks the store for more than 64 admission candidates, whatever the profile says", async () => {
    const { store, clock, executor, start } = await rig();
    await start(wideManifest("wide", 70), "wide");
    const asked: number[] = [];
    const recording = storeReplacing(
      store,
      "listAdmissionCandidates",
      (tx) => (after, limit, nowMs) => {
        asked.push(limit);
        return tx.listAdmissionCandidates(after, limit, nowMs);
      },
    );
    const greedy = { ...PROFILES.cluster, admission: { pageSize: 100, pages: 1 } };
    const coordinator = new Coordinator({
      store: recording,
      clock,
      ids: new SequentialIds("x"),
      profile: greedy,
      executors: { local_process: executor },
    });
    await coordinator.tick();
    await coordinator.tick();
    expect(asked.length).toBeGreaterThan(0);
    expect(Math.max(...asked)).toBeLessThanOrEqual(MAX_ADMISSION_PAGE);
  });
});
