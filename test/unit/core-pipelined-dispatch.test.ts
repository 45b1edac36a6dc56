import { describe, expect, it } from "vitest";
import type { Coordinator } from "../../src/coordinator.ts";
import { applyPackage, startRun } from "../../src/operations.ts";
import type { Executor, LaunchRequest } from "../../src/ports.ts";
import { diamondManifest, task, workflowStart } from "../support/fixtures.ts";
import { storeRig, type StoreRig } from "./store-rig.ts";

/**
 * Pipelined dispatch (`CoordinatorDeps.pipelinedLaunches`, used by `qlr serve`): with claims
 * waiting behind a page, a cycle hands its launches over and ends; a later cycle's dispatch
 * records them. Meanwhile nothing but a receipt may decide an attempt whose launch is in
 * flight, the pages in flight are bounded, and `idle()` (the stop's drain) waits for every
 * launch and records it. Over a real sql.js store, with launches held until the test lets
 * them go.
 */

/** The rig's executor, with each launch held until `release()`, and a journal answer that would settle an attempt if asked. */
function heldExecutor(rig: StoreRig): {
  executor: Executor;
  launches: LaunchRequest[];
  journalAsked: string[];
  release(): void;
} {
  const launches: LaunchRequest[] = [];
  const journalAsked: string[] = [];
  let release: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const inner = rig.executor;
  return {
    launches,
    journalAsked,
    release: () => release(),
    executor: {
      type: inner.type,
      launch: async (request) => {
        launches.push(request);
        await gate;
        return inner.launch(request);
      },
      readReceipt: (attempt) => inner.readReceipt(attempt),
      // "Proves" the process never spawned: execution control would settle the attempt as lost.
      hasJournal: (attempt) => {
        journalAsked.push(attempt.id);
        return Promise.resolve("never_spawned");
      },
      inspect: (attempt) => inner.inspect(attempt),
      stop: (attempt, reason) => inner.stop(attempt, reason),
    },
  };
}

async function startDiamonds(rig: StoreRig, count: number): Promise<void> {
  await rig.store.transaction(async (tx) => {
    const nowMs = await tx.observe(rig.clock.nowMs());
    await applyPackage(tx, diamondManifest("pd", { tasks: [task("work", ["true"])] }), nowMs);
    for (let index = 0; index < count; index += 1)
      await startRun(tx, workflowStart("pd", "diamond", rig.ids.runId()), nowMs);
  });
}

async function statuses(rig: StoreRig): Promise<Record<string, number>> {
  const attempts = await rig.store.transaction((tx) =>
    tx.listAttempts("local_process", ["claimed", "starting", "running", "failed"], null, 100),
  );
  const counts: Record<string, number> = {};
  for (const attempt of attempts) counts[attempt.status] = (counts[attempt.status] ?? 0) + 1;
  return counts;
}

/** Ticks until every root step is claimed or further (standalone admits them in one cycle). */
async function pipelinedRig(count: number): Promise<{
  rig: StoreRig;
  coordinator: Coordinator;
  held: ReturnType<typeof heldExecutor>;
  settled: { count: number };
}> {
  const rig = await storeRig(7);
  const held = heldExecutor(rig);
  const settled = { count: 0 };
  const coordinator = rig.coordinator("standalone", {
    executors: { local_process: held.executor },
    pipelinedLaunches: { pages: 2, settled: () => (settled.count += 1) },
  });
  await startDiamonds(rig, count);
  return { rig, coordinator, held, settled };
}

describe("pipelined dispatch", () => {
  it("hands a page over without waiting for it when claims wait behind it, bounded by its pages, and records the outcomes in a later cycle", async () => {
    // 10 roots, standalone dispatch 4, two pages in flight: at most 8 launches handed over.
    const { rig, coordinator, held, settled } = await pipelinedRig(10);
    for (let cycle = 0; cycle < 4; cycle += 1) await coordinator.tick();
    // The cycles returned with every launch still held.
    expect(held.launches).toHaveLength(8);
    expect(await statuses(rig)).toEqual({ claimed: 2, starting: 8 });
    expect(coordinator.launchesFull).toBe(true);
    // Execution control asked nothing of the attempts whose launch is in flight.
    expect(held.journalAsked).toEqual([]);

    held.release();
    await Promise.resolve();
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled.count).toBe(8);
    expect(coordinator.launchesFull).toBe(false);
    await coordinator.tick();
    // The next dispatch records the eight, then hands over the last two: that page empties
    // the backlog with nothing in flight, so the cycle waits for it and records it too.
    expect(held.launches).toHaveLength(10);
    expect(await statuses(rig)).toEqual({ running: 10 });
    expect(held.journalAsked).toEqual([]);
    await rig.store.close();
  });

  it("waits for a page that empties the backlog, so a lone run's launch is recorded in the cycle that made it", async () => {
    const { rig, coordinator, held } = await pipelinedRig(1);
    const ticked = coordinator.tick();
    let done = false;
    void ticked.then(() => (done = true));
    for (let turn = 0; turn < 5; turn += 1) await new Promise((resolve) => setImmediate(resolve));
    expect(held.launches).toHaveLength(1);
    expect(done).toBe(false);
    held.release();
    await ticked;
    expect(await statuses(rig)).toEqual({ running: 1 });
    await rig.store.close();
  });

  it("commits a launch whose process has already ended with its completion, in the same transaction, and execution control reads nothing for launches in flight", async () => {
    const rig = await storeRig(7);
    const held = heldExecutor(rig);
    const receiptsRead: string[] = [];
    const reading: Executor = {
      ...held.executor,
      readReceipt: (attempt) => {
        receiptsRead.push(attempt.id);
        return held.executor.readReceipt(attempt);
      },
    };
    const processed: Record<string, number> = {};
    const coordinator = rig.coordinator("standalone", {
      executors: { local_process: reading },
      pipelinedLaunches: { pages: 2, settled: () => undefined },
      onStage: (stage) => (processed[stage.name] = (processed[stage.name] ?? 0) + stage.processed),
    });
    // 6 roots, standalone dispatch 4: the first page is handed over with 2 claims behind it.
    await startDiamonds(rig, 6);
    await coordinator.tick();
    expect(held.launches).toHaveLength(4);
    // Execution control skipped the four in flight: no receipt read for them.
    expect(receiptsRead).toEqual([]);
    const firstPage = held.launches.map((request) => request.attempt.id);

    held.release();
    await new Promise((resolve) => setImmediate(resolve));
    // Every process of the first page ends (100 ms of the clock) before its launch is recorded.
    rig.clock.advance(1000);
    processed.execution_control = 0;
    processed.dispatch = 0;
    await coordinator.tick();
    for (const attemptId of firstPage) {
      const attempt = await rig.store.transaction((tx) => tx.getAttempt(attemptId));
      expect(attempt?.status).toBe("succeeded");
    }
    // Recorded by the dispatch stage (four launches, then the last two claims), not by
    // execution control: each `running` and its completion committed together.
    expect(processed.execution_control).toBe(0);
    expect(processed.dispatch).toBeGreaterThanOrEqual(4);
    // The events still tell every transition: starting, running, succeeded, in order.
    const first = held.launches[0]?.attempt;
    const events = await rig.store.transaction((tx) => tx.listEvents(first?.runId ?? "", 0, 200));
    const statuses = events
      .filter((event) => event.type === "attempt.status_changed" && event.attemptId === first?.id)
      .map((event) => event.data.to);
    expect(statuses.slice(-3)).toEqual(["starting", "running", "succeeded"]);
    await rig.store.close();
  });

  it("idle() after a freeze waits for every launch in flight and records it, so a stop sees it running", async () => {
    const { rig, coordinator, held } = await pipelinedRig(6);
    for (let cycle = 0; cycle < 3; cycle += 1) await coordinator.tick();
    expect(held.launches).toHaveLength(6);
    expect(await statuses(rig)).toEqual({ starting: 6 });
    coordinator.freezeAdmission();
    let idle = false;
    const drained = coordinator.idle().then(() => (idle = true));
    for (let turn = 0; turn < 5; turn += 1) await new Promise((resolve) => setImmediate(resolve));
    expect(idle).toBe(false);
    held.release();
    await drained;
    expect(await statuses(rig)).toEqual({ running: 6 });
    await rig.store.close();
  });
});
