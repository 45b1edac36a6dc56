import { describe, expect, it } from "vitest";
import { markRunning, markStarting } from "../../src/execution.ts";
import { advanceFrontier } from "../../src/frontier.ts";
import type { Manifest } from "../../src/manifest/types.ts";
import type { RunAttempt } from "../../src/model.ts";
import { frontierMarks } from "../../src/aggregate.ts";
import { createOrdinaryRun, createWorkflowRun, requestCancel } from "../../src/runs.ts";
import { diamondManifest, task } from "../support/fixtures.ts";
import {
  completion,
  CoreWorld,
  definitionOf,
  exitFacts,
  expectOneVersionBump,
  handleAt,
  T0,
  workflowManifest,
} from "./core-fixtures.ts";

/**
 * The workflow frontier (DESIGN.md §3–§4, ADR-0229 §2): the only place that moves pending
 * steps to ready or skipped and the only place that finalizes a workflow run as succeeded or
 * failed. Execution and recovery advance attempts and steps only.
 */

/** Admits, starts and runs one step; returns the running attempt. */
function runStep(world: CoreWorld, name: string, nowMs: number, runId = "run-1"): RunAttempt {
  const attempt = world.admit(runId, name, nowMs);
  world.markStarting(attempt.id, nowMs);
  world.markRunning(attempt.id, nowMs, nowMs);
  return world.model.attempt(attempt.id);
}

function finishStep(world: CoreWorld, name: string, nowMs: number, exitCode: number | null): void {
  const attempt = runStep(world, name, nowMs);
  world.apply(completion(world, attempt.id, exitFacts(nowMs, nowMs + 1, exitCode), nowMs + 1));
}

/** The diamond run-1 after its first step `a` ran (T0 + 2) with `exitCode` and the frontier moved at T0 + 4. */
function afterStepA(exitCode: number): CoreWorld {
  const world = new CoreWorld();
  world.startWorkflow();
  world.frontier(T0 + 1);
  finishStep(world, "a", T0 + 2, exitCode);
  world.frontier(T0 + 4);
  return world;
}

function statuses(world: CoreWorld, runId = "run-1"): Record<string, string> {
  return Object.fromEntries(world.model.stepsOf(runId).map((step) => [step.name, step.status]));
}

describe("the workflow frontier", () => {
  it("steps without needs become ready on the first frontier, with readyAtMs the frontier's time", () => {
    const world = new CoreWorld();
    const run = world.startWorkflow();
    const change = advanceFrontier(run, world.model.stepsOf(run.id), [], T0 + 5);
    expect(change).not.toBeNull();
    expectOneVersionBump(change!, run);
    world.apply(change);
    expect(statuses(world)).toEqual({ a: "ready", b: "pending", c: "pending", d: "pending" });
    expect(world.model.step("run-1", "a").readyAtMs).toBe(T0 + 5);
  });

  it("a pending step whose needs all succeeded becomes ready; one that still waits stays pending", () => {
    const world = afterStepA(0);
    expect(statuses(world)).toEqual({ a: "succeeded", b: "ready", c: "ready", d: "pending" });
    finishStep(world, "b", T0 + 5, 0);
    world.frontier(T0 + 7);
    expect(statuses(world).d).toBe("pending");
  });

  it("a workflow run is finalized only by the frontier: the last completion leaves it running", () => {
    const world = afterStepA(0);
    finishStep(world, "b", T0 + 5, 0);
    finishStep(world, "c", T0 + 5, 0);
    world.frontier(T0 + 7);
    finishStep(world, "d", T0 + 8, 0);
    expect(world.model.run("run-1").status).toBe("running");
    expect(world.model.run("run-1").finishedAtMs).toBeNull();
    world.frontier(T0 + 10);
    expect(world.model.run("run-1")).toMatchObject({ status: "succeeded", finishedAtMs: T0 + 10 });
    const last = world.model.eventsOf("run-1").at(-1);
    expect(last).toMatchObject({
      type: "run.status_changed",
      data: { from: "running", to: "succeeded", failedSteps: [] },
    });
  });

  it("frontier skips steps downstream of a failed step and then fails the run", () => {
    const world = afterStepA(1);
    // One pass settles the whole chain of skips (steps are in topological order) and the run.
    expect(statuses(world)).toEqual({ a: "failed", b: "skipped", c: "skipped", d: "skipped" });
    expect(world.model.run("run-1").status).toBe("failed");
    const skipD = world.model
      .eventsOf("run-1")
      .find((event) => event.type === "step.status_changed" && event.data.step === "d");
    expect(skipD?.data).toMatchObject({ to: "skipped", blockedBy: ["b", "c"] });
    expect(world.model.eventsOf("run-1").at(-1)?.data).toMatchObject({
      to: "failed",
      failedSteps: ["a"],
    });
  });

  it("a downstream step is skipped as soon as one upstream failed, but the run waits for the sibling still running", () => {
    const world = afterStepA(0);
    finishStep(world, "b", T0 + 5, 1);
    const c = runStep(world, "c", T0 + 6);
    world.frontier(T0 + 7);
    expect(statuses(world)).toEqual({ a: "succeeded", b: "failed", c: "running", d: "skipped" });
    // The skip names only the settled upstream that did not succeed (not the running sibling) and records its time.
    const d = world.model.step("run-1", "d");
    expect(d.finishedAtMs).toBe(T0 + 7);
    expect(
      world.model
        .eventsOf("run-1")
        .find((event) => event.stepRunId === d.id && event.data.to === "skipped")?.data,
    ).toMatchObject({ from: "pending", blockedBy: ["b"] });
    expect(world.model.run("run-1").status).toBe("running");
    world.apply(completion(world, c.id, exitFacts(T0 + 6, T0 + 8, 0), T0 + 8));
    world.frontier(T0 + 9);
    expect(world.model.run("run-1").status).toBe("failed");
    expect(world.model.eventsOf("run-1").at(-1)?.data).toMatchObject({ failedSteps: ["b"] });
  });

  it("a timed out step fails the run: a workflow run is never timed_out", () => {
    const world = new CoreWorld(
      diamondManifest("demo", { tasks: [task("work", ["true"], { timeoutMs: 100 })] }),
    );
    world.startWorkflow();
    world.frontier(T0 + 1);
    const a = runStep(world, "a", T0 + 2);
    world.apply(completion(world, a.id, exitFacts(T0 + 2, T0 + 500, 0), T0 + 500));
    expect(statuses(world).a).toBe("timed_out");
    world.frontier(T0 + 501);
    expect(world.model.run("run-1").status).toBe("failed");
    expect(world.model.eventsOf("run-1").at(-1)?.data).toMatchObject({ failedSteps: ["a"] });
  });

  it("a step that failed to start fails the run like any failure", () => {
    const world = new CoreWorld();
    world.startWorkflow();
    world.frontier(T0 + 1);
    const attempt = world.admit("run-1", "a", T0 + 2);
    world.markStarting(attempt.id, T0 + 2);
    world.startFailed(attempt.id, T0 + 3);
    world.frontier(T0 + 4);
    expect(world.model.run("run-1").status).toBe("failed");
  });

  it("the run is not finalized while an attempt is live, even if every step looks settled", () => {
    const world = new CoreWorld(singleStep());
    world.startWorkflow("one");
    world.frontier(T0 + 1);
    const attempt = world.admit("run-1", "only", T0 + 2);
    const settledLooking = world.model
      .stepsOf("run-1")
      .map((step) => ({ ...step, status: "failed" as const }));
    expect(advanceFrontier(world.model.run("run-1"), settledLooking, [attempt], T0 + 3)).toBeNull();
  });

  it("the run is not finalized while one attempt is live beside settled ones", () => {
    const world = new CoreWorld(twoRoots());
    world.startWorkflow("pair");
    world.frontier(T0 + 1);
    finishStep(world, "x", T0 + 2, 1);
    world.admit("run-1", "y", T0 + 3);
    const attempts = world.model.attemptsOf("run-1");
    expect(attempts.map((attempt) => attempt.status)).toEqual(["failed", "claimed"]);
    const settledLooking = world.model
      .stepsOf("run-1")
      .map((step) => ({ ...step, status: "failed" as const }));
    expect(advanceFrontier(world.model.run("run-1"), settledLooking, attempts, T0 + 4)).toBeNull();
  });

  it("a need that names no step of the run is never taken as met: its step waits, and so does the run", () => {
    const world = new CoreWorld();
    world.startWorkflow();
    world.frontier(T0 + 1);
    finishStep(world, "a", T0 + 2, 1);
    const steps = world.model
      .stepsOf("run-1")
      .map((step) => (step.name === "b" ? { ...step, needs: ["a", "gone"] } : step));
    world.apply(
      advanceFrontier(world.model.run("run-1"), steps, world.model.attemptsOf("run-1"), T0 + 4),
    );
    expect(statuses(world)).toEqual({ a: "failed", b: "pending", c: "skipped", d: "skipped" });
    expect(world.model.run("run-1").status).toBe("running");
  });

  it("frontier is frozen for a run with a cancel intent: whole-run cancellation owns it", () => {
    const world = new CoreWorld();
    const run = world.startWorkflow();
    world.apply(requestCancel(run, T0 + 1, "user"));
    expect(
      advanceFrontier(world.model.run("run-1"), world.model.stepsOf("run-1"), [], T0 + 2),
    ).toBeNull();
  });

  it("frontier ignores ordinary runs and terminal workflow runs", () => {
    const world = new CoreWorld();
    const ordinary = world.startTask();
    expect(advanceFrontier(ordinary, [], [], T0 + 1)).toBeNull();
    // A running ordinary run has no steps to settle: the frontier never finalizes it, even
    // handed no live attempt (its latest attempt's completion ends it).
    expect(advanceFrontier({ ...ordinary, status: "running" }, [], [], T0 + 1)).toBeNull();
    const run = world.startWorkflow();
    expect(
      advanceFrontier({ ...run, status: "failed" }, world.model.stepsOf(run.id), [], T0 + 1),
    ).toBeNull();
  });

  it("a frontier with nothing to move writes nothing", () => {
    const world = new CoreWorld();
    world.startWorkflow();
    world.frontier(T0 + 1);
    expect(
      advanceFrontier(
        world.model.run("run-1"),
        world.model.stepsOf("run-1"),
        world.model.attemptsOf("run-1"),
        T0 + 2,
      ),
    ).toBeNull();
  });

  it("one root failed, one succeeded: the skip's blockedBy names only the upstream that did not succeed, and failedSteps names failed steps but not skipped ones", () => {
    const world = new CoreWorld(twoRoots());
    world.startWorkflow("pair");
    world.frontier(T0 + 1);
    finishStep(world, "x", T0 + 2, 1);
    finishStep(world, "y", T0 + 2, 0);
    world.frontier(T0 + 4);
    expect(statuses(world)).toEqual({ x: "failed", y: "succeeded", z: "skipped" });
    const z = world.model.step("run-1", "z");
    expect(
      world.model.eventsOf("run-1").find((event) => event.stepRunId === z.id)?.data,
    ).toMatchObject({ from: "pending", to: "skipped", blockedBy: ["x"] });
    expect(world.model.eventsOf("run-1").at(-1)?.data).toMatchObject({
      to: "failed",
      failedSteps: ["x"],
    });
  });
});

const singleStep = (): Manifest => workflowManifest("one", { only: [] });
const twoRoots = (): Manifest => workflowManifest("pair", { x: [], y: [], z: ["x", "y"] });

describe("which changes mark a run for the frontier stage", () => {
  it("a new workflow run is marked, a new ordinary run is not", () => {
    const world = new CoreWorld();
    const workflow = createWorkflowRun(
      world.planFor(world.startWorkflow("diamond", "run-seed")),
      world.pkg.reconciliation.receipt,
      { runId: "run-2", nowMs: T0, idempotencyKey: null, scheduleName: null },
    );
    expect(workflow.change.frontierDue).toEqual(["run-2"]);
    const ordinary = createOrdinaryRun(
      definitionOf(world.pkg, "work"),
      world.pkg.reconciliation.receipt,
      { runId: "run-3", nowMs: T0, idempotencyKey: null, scheduleName: null },
    );
    expect(ordinary.change.frontierDue).toEqual([]);
  });

  it("a step that settles marks its run; readiness, admission and a start do not", () => {
    const world = new CoreWorld();
    const run = world.startWorkflow();
    const ready = advanceFrontier(run, world.model.stepsOf(run.id), [], T0 + 1);
    expect(ready?.frontierDue).toEqual([]);
    world.apply(ready);
    const admitted = world.tryAdmit(run.id, "a", T0 + 2);
    expect(admitted.kind === "admitted" ? admitted.change.frontierDue : null).toEqual([]);
    const attempt = world.admit(run.id, "a", T0 + 2);
    const starting = markStarting(world.model.scope(attempt.id), T0 + 3);
    expect(starting.frontierDue).toEqual([]);
    world.apply(starting);
    const running = markRunning(world.model.scope(attempt.id), handleAt(T0 + 3), T0 + 3);
    expect(running.frontierDue).toEqual([]);
    world.apply(running);
    const completed = completion(world, attempt.id, exitFacts(T0 + 3, T0 + 4, 1), T0 + 4);
    expect(completed.frontierDue).toEqual([run.id]);
  });

  it("the change that finishes a workflow run does not mark it: a terminal run has no frontier left", () => {
    const world = new CoreWorld();
    world.startWorkflow();
    world.frontier(T0 + 1);
    for (const [index, name] of ["a", "b", "c", "d"].entries()) {
      finishStep(world, name, T0 + 10 * index + 2, 0);
      world.frontier(T0 + 10 * index + 4);
    }
    expect(world.model.run("run-1").status).toBe("succeeded");
    const steps = world.model.stepsOf("run-1");
    // The run row going terminal together with a settling step (a cancellation converging the last step) is still not marked.
    const before = { ...world.model.run("run-1"), status: "running" as const };
    const after = world.model.run("run-1");
    expect(
      frontierMarks(
        [{ before, after }],
        [{ before: { ...steps[0]!, status: "running" }, after: steps[0]! }],
      ),
    ).toEqual([]);
    expect(
      frontierMarks(
        [{ before, after: { ...after, status: "running" } }],
        [{ before: { ...steps[0]!, status: "running" }, after: steps[0]! }],
      ),
    ).toEqual(["run-1"]);
    expect(
      frontierMarks(
        [{ before, after: { ...after, status: "running" } }],
        [{ before: steps[0]!, after: steps[0]! }],
      ),
    ).toEqual([]);
  });
});
