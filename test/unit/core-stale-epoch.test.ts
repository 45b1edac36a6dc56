import { describe, expect, it } from "vitest";
import { RunChange } from "../../src/aggregate.ts";
import { holdsEpoch, markStarting, startFailed } from "../../src/execution.ts";
import type { RunAttempt } from "../../src/model.ts";
import { applyLoss, resolveFailedClosed } from "../../src/recovery.ts";
import {
  CoreWorld,
  NO_RETRY,
  T0,
  completion,
  exitFacts,
  readyDiamondWorld,
  startingOrdinaryAttempt,
  startingStepA,
} from "./core-fixtures.ts";

/**
 * A settle of an attempt whose step (or ordinary run) already moved on past the attempt's ready
 * epoch: the attempt settles itself, and the step and run stay with the current epoch's claim
 * (ADR-0229 §2: only the exact ready epoch may move its step). Every write re-reads its scope in
 * its transaction and the run's version fences it, so the window is opened here directly, the
 * way a store holding a live attempt of an older epoch would show it; the decision must not
 * depend on that never happening.
 */

const T = T0 + 100;

/** Step `a` moved to a new ready epoch while `stale` stayed live, and the new epoch admitted. */
function staleStartingStep(): { world: CoreWorld; stale: RunAttempt; current: RunAttempt } {
  const world = readyDiamondWorld();
  const stale = startingStepA(world);
  const scope = world.model.scope(stale.id);
  const move = new RunChange(scope.run, T0 + 10);
  move.setStep(scope.step!, "ready", {}, { reason: "new ready epoch" });
  world.apply(move.build());
  const current = world.admit("run-1", "a", T0 + 11);
  expect(current.stepRunVersion).toBe(stale.stepRunVersion! + 1);
  return { world, stale: world.model.attempt(stale.id), current };
}

function expectCurrentEpochIntact(world: CoreWorld, current: RunAttempt): void {
  const step = world.model.step("run-1", "a");
  expect(step).toMatchObject({ status: "ready", version: current.stepRunVersion });
  // The current epoch's claim may still cross the start barrier.
  expect(() => markStarting(world.model.scope(current.id), T + 1)).not.toThrow();
}

describe("a settle of an attempt whose step already left its ready epoch", () => {
  it("holdsEpoch: the exact ready epoch, or running from it; never an older epoch", () => {
    const { world, stale, current } = staleStartingStep();
    expect(holdsEpoch(world.model.scope(stale.id))).toBe(false);
    expect(holdsEpoch(world.model.scope(current.id))).toBe(true);
    world.markStarting(current.id, T);
    world.markRunning(current.id, T + 1, T + 1);
    expect(holdsEpoch(world.model.scope(current.id))).toBe(true);
    expect(holdsEpoch(world.model.scope(stale.id))).toBe(false);
  });

  it.each([
    {
      title:
        "a loss after the start barrier settles the attempt only; the step keeps its new epoch",
      settle: (world: CoreWorld, stale: RunAttempt) =>
        applyLoss(
          world.model.scope(stale.id),
          { kind: "lost_failed", reason: "trusted not-running evidence" },
          NO_RETRY,
          T,
        ),
      settled: { status: "lost" },
    },
    {
      title:
        "a receipt of the stale attempt records its outcome without running or settling the step",
      settle: (world: CoreWorld, stale: RunAttempt) =>
        completion(world, stale.id, exitFacts(T0 + 4, T0 + 50, 0), T),
      settled: { status: "succeeded", exitCode: 0 },
    },
    {
      title: "a spawn failure of the stale attempt fails the attempt, not the step",
      settle: (world: CoreWorld, stale: RunAttempt) =>
        startFailed(world.model.scope(stale.id), "ENOENT", NO_RETRY, T),
      settled: { status: "failed" },
    },
  ])("$title", ({ settle, settled }) => {
    const { world, stale, current } = staleStartingStep();
    const change = settle(world, stale);
    expect(change.steps).toEqual([]);
    world.apply(change);
    expect(world.model.attempt(stale.id)).toMatchObject(settled);
    expectCurrentEpochIntact(world, current);
  });

  it("an operator's resolve of a stale failed-closed attempt leaves the step alone too", () => {
    const { world, stale, current } = staleStartingStep();
    const failedClosed = new RunChange(world.model.run("run-1"), T0 + 20);
    failedClosed.setAttempt(
      stale,
      null,
      { error: "lease expired" },
      {},
      "attempt.recovery_failed_closed",
    );
    world.apply(failedClosed.build());
    world.apply(resolveFailedClosed(world.model.scope(stale.id), "host is gone", NO_RETRY, T));
    expect(world.model.attempt(stale.id).status).toBe("lost");
    expectCurrentEpochIntact(world, current);
  });

  it("an orphaned claim of an older epoch is lost without opening yet another epoch", () => {
    const { world, stale, current } = staleStartingStep();
    world.apply(
      applyLoss(
        world.model.scope(stale.id),
        { kind: "lost_new_epoch", reason: "gone" },
        NO_RETRY,
        T,
      ),
    );
    expectCurrentEpochIntact(world, current);
  });

  it("an ordinary run: a stale attempt's loss neither requeues nor ends the run of the next claim", () => {
    const world = new CoreWorld();
    world.startTask();
    const stale = startingOrdinaryAttempt(world, "run-o1", T0 + 1);
    const requeue = new RunChange(world.model.run("run-o1"), T0 + 10);
    requeue.setRunStatus("queued", { reason: "retry" });
    world.apply(requeue.build());
    const current = startingOrdinaryAttempt(world, "run-o1", T0 + 11);
    expect(holdsEpoch(world.model.scope(stale.id))).toBe(false);
    for (const kind of ["lost_new_epoch", "lost_failed"] as const) {
      const change = applyLoss(world.model.scope(stale.id), { kind, reason: "gone" }, NO_RETRY, T);
      expect(change.runs[0]?.after.status).toBe("dispatching");
    }
    world.apply(
      applyLoss(world.model.scope(stale.id), { kind: "lost_failed", reason: "gone" }, NO_RETRY, T),
    );
    expect(world.model.run("run-o1").status).toBe("dispatching");
    world.markRunning(current.id, T + 1, T + 1);
    expect(world.model.run("run-o1").status).toBe("running");
  });
});
