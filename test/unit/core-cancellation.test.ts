import { describe, expect, it } from "vitest";
import { convergeCancellation } from "../../src/cancellation.ts";
import { markStarting } from "../../src/execution.ts";
import type { Manifest } from "../../src/manifest/types.ts";
import { requestCancel } from "../../src/runs.ts";
import { task } from "../support/fixtures.ts";
import {
  claimedOrdinaryAttempt,
  completion,
  CoreWorld,
  definitionOf,
  exitFacts,
  expectOneVersionBump,
  refusal,
  runningOrdinaryAttempt,
  T0,
} from "./core-fixtures.ts";

/**
 * Whole-workflow cancellation convergence (ADR-0228 as used by ADR-0229 §1 step 1): after a
 * cancel intent the frontier and admission are frozen, the start barrier is respected, and
 * the parent run is finalized as cancelled only once nothing is live.
 */

/** Four independent steps, so one run can hold a claimed, a starting, a running and an untouched step at once. */
function fanOut(idempotent = false): Manifest {
  return {
    package: "demo",
    description: null,
    tasks: [task("work", ["true"], { retry: { max: 3, backoffMs: 0, idempotent } })],
    workflows: [
      {
        name: "fan",
        description: null,
        steps: ["p", "q", "r", "s"].map((name) => ({ name, task: "work", needs: [] })),
      },
    ],
    schedules: [],
  };
}

/** Run "run-1" of the fan: p claimed, q starting, r running, s ready without attempt. */
function mixedWorld(
  idempotent = false,
  reason: "user" | "shutdown" = "user",
): {
  world: CoreWorld;
  ids: Record<"p" | "q" | "r", string>;
} {
  const world = new CoreWorld(fanOut(idempotent));
  const run = world.startWorkflow("fan");
  world.frontier(T0 + 1, run.id);
  const p = world.admit("run-1", "p", T0 + 2);
  const q = world.admit("run-1", "q", T0 + 2);
  world.markStarting(q.id, T0 + 3);
  const r = world.admit("run-1", "r", T0 + 2);
  world.markStarting(r.id, T0 + 3);
  world.markRunning(r.id, T0 + 3, T0 + 4);
  world.apply(requestCancel(world.model.run("run-1"), T0 + 10, reason));
  return { world, ids: { p: p.id, q: q.id, r: r.id } };
}

describe("whole-run cancellation convergence", () => {
  it("cancellation cancels claims that never started, requests stops for running attempts, waits for starting ones, and cancels the run only when nothing is live", () => {
    const { world, ids } = mixedWorld();
    const before = world.model.run("run-1");
    const change = world.converge(T0 + 11);
    expectOneVersionBump(change!, before);
    expect(world.model.attempt(ids.p)).toMatchObject({
      status: "cancelled",
      stopReason: "cancel",
      finishedAtMs: T0 + 11,
    });
    expect(world.model.attempt(ids.q).status).toBe("starting");
    expect(world.model.attempt(ids.r)).toMatchObject({
      status: "running",
      stopReason: "cancel",
      stopRequestedAtMs: T0 + 11,
    });
    expect(
      Object.fromEntries(world.model.stepsOf("run-1").map((step) => [step.name, step.status])),
    ).toEqual({ p: "cancelled", q: "ready", r: "running", s: "cancelled" });
    expect(world.model.run("run-1").status).toBe("running");

    // The start of q settles (here: the spawn failed); r's process ends after its stop.
    world.startFailed(ids.q, T0 + 12);
    expect(world.converge(T0 + 13)).toBeNull();
    const stopped = exitFacts(T0 + 3, T0 + 14, null, { stopReason: "cancel" });
    world.apply(completion(world, ids.r, stopped, T0 + 14));
    expect(world.model.step("run-1", "r").status).toBe("cancelled");
    world.converge(T0 + 15);
    expect(world.model.run("run-1")).toMatchObject({ status: "cancelled", finishedAtMs: T0 + 15 });
    expect(world.model.step("run-1", "q").status).toBe("failed");
  });

  it("a shutdown cancel projects its reason: claims are cancelled and running attempts stopped with reason shutdown, and the stopped step is cancelled, not failed", () => {
    const { world, ids } = mixedWorld(false, "shutdown");
    world.converge(T0 + 11);
    expect(world.model.attempt(ids.p)).toMatchObject({
      status: "cancelled",
      stopReason: "shutdown",
    });
    expect(world.model.attempt(ids.r)).toMatchObject({
      status: "running",
      stopReason: "shutdown",
    });
    expect(
      world.model
        .eventsOf("run-1")
        .filter((event) => event.type === "attempt.stop_requested")
        .map((event) => event.data),
    ).toEqual([{ reason: "shutdown" }]);
    world.startFailed(ids.q, T0 + 12);
    const stopped = exitFacts(T0 + 3, T0 + 14, null, { stopReason: "shutdown" });
    world.apply(completion(world, ids.r, stopped, T0 + 14));
    expect(world.model.attempt(ids.r).status).toBe("cancelled");
    expect(world.model.step("run-1", "r").status).toBe("cancelled");
    world.converge(T0 + 15);
    expect(world.model.run("run-1")).toMatchObject({
      status: "cancelled",
      cancelReason: "shutdown",
    });
  });

  it("a stop intent is requested once: repeating convergence while a stop is pending writes nothing", () => {
    const { world } = mixedWorld();
    world.converge(T0 + 11);
    expect(world.converge(T0 + 12)).toBeNull();
    expect(
      world.model.eventsOf("run-1").filter((event) => event.type === "attempt.stop_requested"),
    ).toHaveLength(1);
  });

  it("a starting attempt that reaches running after the cancel intent then gets its stop", () => {
    const { world, ids } = mixedWorld();
    world.converge(T0 + 11);
    world.markRunning(ids.q, T0 + 11, T0 + 12);
    world.converge(T0 + 13);
    expect(world.model.attempt(ids.q)).toMatchObject({ status: "running", stopReason: "cancel" });
  });

  it("a step whose process finished before its stop keeps its own outcome, and the run is still cancelled", () => {
    const { world, ids } = mixedWorld();
    world.converge(T0 + 11);
    world.startFailed(ids.q, T0 + 12);
    world.apply(completion(world, ids.r, exitFacts(T0 + 3, T0 + 11, 0), T0 + 12));
    expect(world.model.step("run-1", "r").status).toBe("succeeded");
    world.converge(T0 + 13);
    expect(world.model.run("run-1").status).toBe("cancelled");
  });

  it("the cancel intent suppresses a step retry: an idempotent step that failed during cancellation stays failed", () => {
    const { world, ids } = mixedWorld(true);
    world.converge(T0 + 11);
    const retry = definitionOf(world.pkg, "work").retry;
    world.apply(completion(world, ids.r, exitFacts(T0 + 3, T0 + 12, 1), T0 + 12, retry));
    expect(world.model.step("run-1", "r").status).toBe("failed");
  });

  it("a claimed attempt is not dispatched after the cancel intent", () => {
    const { world, ids } = mixedWorld();
    expect(refusal(() => markStarting(world.model.scope(ids.p), T0 + 11))).toEqual({
      code: "conflict",
      message: `run run-1 has a cancel intent; attempt ${ids.p} is not dispatched`,
    });
  });

  it("a run with only pending and ready steps is cancelled in one convergence", () => {
    const world = new CoreWorld();
    const run = world.startWorkflow();
    world.frontier(T0 + 1, run.id);
    world.apply(requestCancel(world.model.run("run-1"), T0 + 2, "user"));
    world.converge(T0 + 3);
    expect(world.model.stepsOf("run-1").map((step) => step.status)).toEqual([
      "cancelled",
      "cancelled",
      "cancelled",
      "cancelled",
    ]);
    expect(world.model.run("run-1").status).toBe("cancelled");
  });

  it("nothing converges without a cancel intent or for a terminal run", () => {
    const world = new CoreWorld();
    const run = world.startWorkflow();
    expect(convergeCancellation(run, world.model.stepsOf(run.id), [], T0 + 1)).toBeNull();
    expect(
      convergeCancellation(
        { ...run, status: "succeeded", cancelRequestedAtMs: T0 },
        world.model.stepsOf(run.id),
        [],
        T0 + 1,
      ),
    ).toBeNull();
  });

  it("an ordinary queued run with a cancel intent converges to cancelled", () => {
    const world = new CoreWorld();
    const run = world.startTask();
    world.apply(requestCancel(run, T0 + 1, "user"));
    world.converge(T0 + 2, run.id);
    expect(world.model.run(run.id).status).toBe("cancelled");
  });

  it("an ordinary running run gets a stop and ends cancelled when its attempt ends", () => {
    const world = new CoreWorld();
    const attempt = runningOrdinaryAttempt(world, world.startTask().id, T0 + 2);
    world.apply(requestCancel(world.model.run(attempt.runId), T0 + 4, "user"));
    world.converge(T0 + 5, attempt.runId);
    expect([
      world.model.run(attempt.runId).status,
      world.model.attempt(attempt.id).stopReason,
    ]).toEqual(["running", "cancel"]);
    const stopped = exitFacts(T0 + 2, T0 + 6, null, { stopReason: "cancel" });
    world.apply(completion(world, attempt.id, stopped, T0 + 6));
    expect(world.model.run(attempt.runId).status).toBe("cancelled");
  });

  it("an ordinary dispatching run whose claim never started is cancelled with its claim", () => {
    const world = new CoreWorld();
    const run = world.startTask();
    const claim = claimedOrdinaryAttempt(world, run.id, T0 + 1);
    world.apply(requestCancel(world.model.run(run.id), T0 + 2, "user"));
    world.converge(T0 + 3, run.id);
    expect([world.model.attempt(claim.id).status, world.model.run(run.id).status]).toEqual([
      "cancelled",
      "cancelled",
    ]);
  });
});

describe("what a convergence records", () => {
  it("each change of a convergence says why in its event: a cancelled claim, a stop intent, a cancelled step with its finish time", () => {
    const { world, ids } = mixedWorld();
    const change = world.converge(T0 + 11)!;
    const data = (attemptId: string | null, stepName: string | null, type: string): unknown =>
      change.events.find(
        (event) =>
          event.type === type &&
          event.attemptId === attemptId &&
          (stepName === null || event.stepRunId === world.model.step("run-1", stepName).id),
      )?.data;
    expect(data(ids.p, null, "attempt.status_changed")).toEqual({
      from: "claimed",
      to: "cancelled",
      reason: "run cancelled before start",
    });
    expect(data(ids.r, null, "attempt.stop_requested")).toEqual({ reason: "cancel" });
    expect(data(null, "s", "step.status_changed")).toMatchObject({
      from: "ready",
      to: "cancelled",
      reason: "run cancelled",
    });
    expect(world.model.step("run-1", "s")).toMatchObject({
      status: "cancelled",
      finishedAtMs: T0 + 11,
    });
  });
});
