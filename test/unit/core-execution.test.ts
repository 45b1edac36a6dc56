import { describe, expect, it } from "vitest";
import {
  complete,
  decideOutcome,
  holdsEpoch,
  markRunning,
  markStarting,
  requestShutdownStop,
  requestTimeoutStop,
  settleStrandedClaim,
  startFailed,
  stepMayRetry,
} from "../../src/execution.ts";
import type { RunAttempt } from "../../src/model.ts";
import { requestCancel } from "../../src/runs.ts";
import { diamondManifest, task } from "../support/fixtures.ts";
import {
  claimedOrdinaryAttempt,
  claimedStepA,
  completion,
  CoreWorld,
  errorCode,
  exitFacts,
  expectAttemptAndStepA,
  expectOneVersionBump,
  expectTransition,
  handleAt,
  NO_RETRY,
  readyDiamondWorld,
  refusal,
  runningOrdinaryAttempt,
  runningStepA,
  startingStepA,
  T0,
} from "./core-fixtures.ts";

/**
 * Execution transitions of one attempt (ADR-0227 §4–§5, ADR-0229 §2 and §5): a workflow task
 * attempt advances only its attempt and its step, in one change set; the parent run stays
 * `running` with one version bump per change.
 */

const TIMEOUT_MS = 1_000;
const RETRY_TWICE = { max: 2, backoffMs: 500, idempotent: true };

function worldWith(retry = NO_RETRY): CoreWorld {
  return readyDiamondWorld({ timeoutMs: TIMEOUT_MS, retry });
}

const claimed = claimedStepA;
const starting = startingStepA;

/** Running with the handle's pre-spawn start at T0 + 4, recorded at T0 + 50. */
function running(world: CoreWorld): RunAttempt {
  return runningStepA(world, T0 + 50);
}

describe("dispatch and start", () => {
  it("markStarting moves claimed → starting and leaves the step ready with its attempt count", () => {
    const world = worldWith();
    const attempt = claimed(world);
    const before = world.model.run("run-1");
    const change = markStarting(world.model.scope(attempt.id), T0 + 3);
    expectOneVersionBump(change, before);
    expect(change.steps).toEqual([]);
    world.apply(change);
    expectAttemptAndStepA(world, attempt.id, "starting", { status: "ready", attemptCount: 0 });
  });

  it("a workflow attempt is dispatched only while its exact ready epoch holds and its parent is running without a cancel intent", () => {
    const world = worldWith();
    const attempt = claimed(world);
    const scope = world.model.scope(attempt.id);
    const step = scope.step!;
    const epoch = `not the ready epoch ${step.version} of attempt ${attempt.id}`;
    expect(
      refusal(() =>
        markStarting({ ...scope, step: { ...step, version: step.version + 1 } }, T0 + 3),
      ),
    ).toEqual({
      code: "conflict",
      message: `step ${step.id} is ready at version ${step.version + 1}, ${epoch}`,
    });
    expect(
      refusal(() => markStarting({ ...scope, step: { ...step, status: "cancelled" } }, T0 + 3)),
    ).toEqual({
      code: "conflict",
      message: `step ${step.id} is cancelled at version ${step.version}, ${epoch}`,
    });
    expect(
      refusal(() => markStarting({ ...scope, run: { ...scope.run, status: "failed" } }, T0 + 3)),
    ).toEqual({
      code: "conflict",
      message: `run run-1 is failed; attempt ${attempt.id} is not dispatched`,
    });
    world.apply(requestCancel(world.model.run("run-1"), T0 + 3, "user"));
    expect(refusal(() => markStarting(world.model.scope(attempt.id), T0 + 4))).toEqual({
      code: "conflict",
      message: `run run-1 has a cancel intent; attempt ${attempt.id} is not dispatched`,
    });
  });

  it("the dispatching node of a cluster becomes the attempt's owner at starting; a single node records none", () => {
    const world = worldWith();
    const scope = world.model.scope(claimed(world).id);
    expect(scope.attempt.ownerNodeId).toBeNull();
    expect(
      markStarting(scope, T0 + 3, { ownerNodeId: "node-b" }).attempts[0]?.after.ownerNodeId,
    ).toBe("node-b");
    expect(markStarting(scope, T0 + 3).attempts[0]?.after.ownerNodeId).toBeNull();
  });

  it("an attempt that is not bound to its step is refused", () => {
    const world = worldWith();
    const attempt = claimed(world);
    const scope = world.model.scope(attempt.id);
    const unbound = {
      code: "integrity",
      message: `attempt ${attempt.id} is not bound to its step`,
    };
    expect(
      refusal(() => markStarting({ ...scope, step: world.model.step("run-1", "b") }, T0 + 3)),
    ).toEqual(unbound);
    expect(refusal(() => markStarting({ ...scope, step: null }, T0 + 3))).toEqual(unbound);
  });

  it("markRunning moves the attempt to running and the step ready → running in one change; the parent stays running", () => {
    const world = worldWith();
    const attempt = starting(world);
    const before = world.model.run("run-1");
    const change = markRunning(world.model.scope(attempt.id), handleAt(T0 + 4), T0 + 50);
    expectOneVersionBump(change, before);
    expect(change.runs[0]?.after.status).toBe("running");
    expect(change.events).toMatchObject([
      { type: "attempt.status_changed", data: { from: "starting", to: "running", pid: 4242 } },
      {
        type: "step.status_changed",
        data: { from: "ready", to: "running", attemptId: attempt.id },
      },
    ]);
    expect(change.events[0]?.data).toEqual({ from: "starting", to: "running", pid: 4242 });
    expect(change.mutations.map((mutation) => [mutation.fromStatus, mutation.toStatus])).toEqual([
      ["ready", "running"],
    ]);
  });

  it("attemptCount increases only on entering running", () => {
    const world = worldWith();
    const attempt = running(world);
    expect(world.model.step("run-1", "a").attemptCount).toBe(1);
    world.apply(requestTimeoutStop(world.model.scope(attempt.id), T0 + 4 + TIMEOUT_MS));
    world.apply(
      completion(
        world,
        attempt.id,
        exitFacts(T0 + 4, T0 + 2_000, null, { stopReason: "timeout" }),
        T0 + 2_000,
      ),
    );
    expect(world.model.step("run-1", "a").attemptCount).toBe(1);
  });

  it("startedAtMs of attempt and step is the handle fact, never the observation time", () => {
    const world = worldWith();
    const attempt = running(world);
    expect(world.model.attempt(attempt.id)).toMatchObject({
      startedAtMs: T0 + 4,
      pid: 4242,
      processStartTicks: "ticks-4242",
      bootId: "boot-1",
    });
    expect(world.model.step("run-1", "a").startedAtMs).toBe(T0 + 4);
    expect(world.model.events.at(-1)?.atMs).toBe(T0 + 50);
  });

  it("the deadline is the handle's startedAtMs plus the task timeout", () => {
    const world = worldWith();
    expect(running(world).deadlineAtMs).toBe(T0 + 4 + TIMEOUT_MS);
  });

  it("markRunning of an attempt that is not starting is an illegal transition", () => {
    const world = worldWith();
    const attempt = claimed(world);
    expect(
      refusal(() => markRunning(world.model.scope(attempt.id), handleAt(T0 + 4), T0 + 5)),
    ).toEqual({
      code: "illegal_transition",
      message: `attempt ${attempt.id} is claimed, not starting`,
    });
  });
});

describe("a claim that may no longer start (settleStrandedClaim)", () => {
  it("a claim whose step moved to a new ready epoch becomes lost with both epochs in its error and event, and its step is left alone", () => {
    const world = worldWith();
    const attempt = claimed(world);
    const scope = world.model.scope(attempt.id);
    const epoch = scope.step!.version;
    const moved = { ...scope, step: { ...scope.step!, version: epoch + 1 } };
    const change = settleStrandedClaim(moved, T0 + 5);
    expect(change).not.toBeNull();
    expectOneVersionBump(change!, scope.run);
    expect(change!.steps).toEqual([]);
    expect(change!.attempts[0]?.after).toMatchObject({
      status: "lost",
      finishedAtMs: T0 + 5,
      error: `claim of ready epoch ${epoch} may no longer start: its step moved to ready epoch ${epoch + 1}`,
    });
    expect(change!.events).toEqual([
      expect.objectContaining({
        type: "attempt.status_changed",
        attemptId: attempt.id,
        data: {
          from: "claimed",
          to: "lost",
          reason: `its step moved to ready epoch ${epoch + 1}`,
          stepRunVersion: epoch,
          currentStepRunVersion: epoch + 1,
        },
      }),
    ]);
    world.apply(change);
    expect(world.model.step("run-1", "a")).toEqual(scope.step);
  });

  it("a claim whose step settled, or whose run is no longer running, becomes lost and says which", () => {
    const world = worldWith();
    const attempt = claimed(world);
    const scope = world.model.scope(attempt.id);
    const epoch = scope.step!.version;
    const settled = settleStrandedClaim(
      { ...scope, step: { ...scope.step!, status: "succeeded" } },
      T0 + 5,
    );
    expect(settled?.events[0]?.data).toEqual({
      from: "claimed",
      to: "lost",
      reason: "its step is succeeded",
      stepRunVersion: epoch,
      currentStepRunVersion: epoch,
    });
    // The run's status is named first, even when the step moved on too.
    const ended = settleStrandedClaim(
      {
        ...scope,
        run: { ...scope.run, status: "failed" },
        step: { ...scope.step!, version: epoch + 1 },
      },
      T0 + 5,
    );
    expect(ended?.attempts[0]?.after.error).toBe(
      `claim of ready epoch ${epoch} may no longer start: its run is failed`,
    );
  });

  it("a claim whose exact ready epoch holds is left to start", () => {
    const world = worldWith();
    const attempt = claimed(world);
    expect(settleStrandedClaim(world.model.scope(attempt.id), T0 + 5)).toBeNull();
  });

  it("only a workflow claim without a cancel intent is settled here: not an attempt past its claim, an ordinary claim or a cancelled run's claim", () => {
    const world = worldWith();
    const attempt = starting(world);
    const scope = world.model.scope(attempt.id);
    const moved = { ...scope, step: { ...scope.step!, version: scope.step!.version + 1 } };
    expect(settleStrandedClaim(moved, T0 + 5)).toBeNull();

    const ordinary = worldWith();
    const run = ordinary.startTask();
    const ordinaryScope = ordinary.model.scope(claimedOrdinaryAttempt(ordinary, run.id, T0 + 1).id);
    expect(
      settleStrandedClaim(
        { ...ordinaryScope, run: { ...ordinaryScope.run, status: "failed" } },
        T0 + 2,
      ),
    ).toBeNull();

    const cancelled = worldWith();
    const claim = claimed(cancelled);
    cancelled.apply(requestCancel(cancelled.model.run("run-1"), T0 + 3, "user"));
    const cancelledScope = cancelled.model.scope(claim.id);
    expect(
      settleStrandedClaim(
        {
          ...cancelledScope,
          step: { ...cancelledScope.step!, version: cancelledScope.step!.version + 1 },
        },
        T0 + 4,
      ),
    ).toBeNull();
  });

  it("a workflow claim that is not bound to its step is refused", () => {
    const world = worldWith();
    const scope = world.model.scope(claimed(world).id);
    expect(errorCode(() => settleStrandedClaim({ ...scope, step: null }, T0 + 5))).toBe(
      "integrity",
    );
  });
});

describe("completion", () => {
  it("an exit 0 in time succeeds the attempt and the step; the parent stays running and is bumped once", () => {
    const world = worldWith();
    const attempt = running(world);
    const before = world.model.run("run-1");
    const change = completion(world, attempt.id, exitFacts(T0 + 4, T0 + 900, 0), T0 + 950);
    expectOneVersionBump(change, before);
    expect(change.runs[0]?.after.status).toBe("running");
    world.apply(change);
    expect(world.model.attempt(attempt.id)).toMatchObject({
      status: "succeeded",
      exitCode: 0,
      finishedAtMs: T0 + 900,
    });
    expect(world.model.step("run-1", "a")).toMatchObject({
      status: "succeeded",
      finishedAtMs: T0 + 900,
    });
  });

  it("a non-zero exit or a signal fails the attempt and the step, whose event names the exit code", () => {
    for (const facts of [
      exitFacts(T0 + 4, T0 + 10, 3),
      exitFacts(T0 + 4, T0 + 10, null, { signal: "SIGKILL" }),
      // Contradictory facts (a report can carry both) are no success either.
      exitFacts(T0 + 4, T0 + 10, 0, { signal: "SIGKILL" }),
    ]) {
      const world = worldWith();
      const attempt = running(world);
      const change = completion(world, attempt.id, facts, T0 + 60);
      world.apply(change);
      expect([
        world.model.attempt(attempt.id).status,
        world.model.step("run-1", "a").status,
      ]).toEqual(["failed", "failed"]);
      expectTransition(
        change.events.find((event) => event.type === "step.status_changed"),
        "running",
        "failed",
        { exitCode: facts.exitCode },
      );
    }
  });

  it("a receipt without a handle for a starting attempt keeps the process identity unknown and runs the deadline from the receipt's start", () => {
    const world = worldWith();
    const attempt = starting(world);
    world.apply(completion(world, attempt.id, exitFacts(T0 + 4, T0 + 20, 0), T0 + 30));
    expect(world.model.attempt(attempt.id)).toMatchObject({
      status: "succeeded",
      pid: null,
      processStartTicks: null,
      bootId: null,
      startedAtMs: T0 + 4,
      deadlineAtMs: T0 + 4 + TIMEOUT_MS,
    });
  });

  it("a receipt for a starting attempt writes ready → running → terminal atomically", () => {
    const world = worldWith();
    const attempt = starting(world);
    const before = world.model.run("run-1");
    const facts = exitFacts(T0 + 4, T0 + 20, 0, { handle: handleAt(T0 + 4, 777) });
    const change = completion(world, attempt.id, facts, T0 + 30);
    expectOneVersionBump(change, before);
    expect(change.mutations.map((mutation) => [mutation.fromStatus, mutation.toStatus])).toEqual([
      ["ready", "running"],
      ["running", "succeeded"],
    ]);
    expect(
      change.events
        .filter((event) => event.type === "attempt.status_changed")
        .map((event) => [event.data.from, event.data.to]),
    ).toEqual([
      ["starting", "running"],
      ["running", "succeeded"],
    ]);
    world.apply(change);
    expect(world.model.step("run-1", "a")).toMatchObject({
      status: "succeeded",
      attemptCount: 1,
      startedAtMs: T0 + 4,
    });
    expect(world.model.attempt(attempt.id)).toMatchObject({ pid: 777, startedAtMs: T0 + 4 });
  });

  it("a completion of an attempt that is already terminal is refused and cannot rewrite its outcome", () => {
    const world = worldWith();
    const attempt = running(world);
    world.apply(completion(world, attempt.id, exitFacts(T0 + 4, T0 + 10, 1), T0 + 60));
    expect(
      refusal(() => completion(world, attempt.id, exitFacts(T0 + 4, T0 + 10, 0), T0 + 61)),
    ).toEqual({
      code: "illegal_transition",
      message: `attempt ${attempt.id} is failed; only a running attempt completes`,
    });
    expect(world.model.attempt(attempt.id).status).toBe("failed");
  });

  it("a recorded completion stays as it is after the parent is cancelled: a late replay cannot rewrite it", () => {
    const world = worldWith();
    const attempt = running(world);
    world.apply(completion(world, attempt.id, exitFacts(T0 + 4, T0 + 60, 0), T0 + 61));
    world.apply(requestCancel(world.model.run("run-1"), T0 + 62, "user"));
    world.converge(T0 + 63);
    expect(world.model.run("run-1").status).toBe("cancelled");
    expect(
      errorCode(() => completion(world, attempt.id, exitFacts(T0 + 4, T0 + 60, 1), T0 + 64)),
    ).toBe("illegal_transition");
    expect([world.model.attempt(attempt.id).status, world.model.step("run-1", "a").status]).toEqual(
      ["succeeded", "succeeded"],
    );
  });

  it("a claimed attempt cannot complete: it never crossed the start barrier", () => {
    const world = worldWith();
    const attempt = claimed(world);
    expect(
      errorCode(() => completion(world, attempt.id, exitFacts(T0 + 4, T0 + 10, 0), T0 + 11)),
    ).toBe("illegal_transition");
  });

  it("a start failure fails the attempt (starting → failed) and the step (ready → failed); the parent stays running", () => {
    const world = worldWith();
    const attempt = starting(world);
    const change = startFailed(
      world.model.scope(attempt.id),
      "ENOENT: no such file",
      NO_RETRY,
      T0 + 5,
    );
    world.apply(change);
    expect(world.model.attempt(attempt.id)).toMatchObject({
      status: "failed",
      error: "ENOENT: no such file",
      startedAtMs: null,
      stopReason: null,
      finishedAtMs: T0 + 5,
    });
    expect(world.model.step("run-1", "a")).toMatchObject({
      status: "failed",
      attemptCount: 0,
      finishedAtMs: T0 + 5,
    });
    expect(world.model.run("run-1").status).toBe("running");
    expect(change.events.map((event) => [event.type, event.data])).toEqual([
      ["attempt.status_changed", { from: "starting", to: "failed", error: "ENOENT: no such file" }],
      [
        "step.status_changed",
        expect.objectContaining({ from: "ready", to: "failed", error: "ENOENT: no such file" }),
      ],
    ]);
  });

  it("a start failure recorded after the deadline (store time past starting + timeout) times the attempt and the step out", () => {
    const world = worldWith();
    const attempt = starting(world);
    // On time: exactly at the deadline is still a plain failure.
    expect(
      startFailed(world.model.scope(attempt.id), "ENOENT", NO_RETRY, T0 + 3 + TIMEOUT_MS, T0 + 3)
        .attempts[0]?.after.status,
    ).toBe("failed");
    world.apply(
      startFailed(world.model.scope(attempt.id), "ENOENT", NO_RETRY, T0 + 4 + TIMEOUT_MS, T0 + 3),
    );
    expect(world.model.attempt(attempt.id)).toMatchObject({
      status: "timed_out",
      stopReason: "timeout",
      finishedAtMs: T0 + 4 + TIMEOUT_MS,
      error: "ENOENT",
    });
    expect(world.model.step("run-1", "a")).toMatchObject({ status: "timed_out", attemptCount: 0 });
    expect(world.model.run("run-1")).toMatchObject({
      status: "running",
      cancelRequestedAtMs: null,
    });
    expect(
      world.model
        .eventsOf("run-1")
        .find((event) => event.attemptId === attempt.id && event.data.to === "timed_out")?.data,
    ).toMatchObject({ from: "starting", deadlineAtMs: T0 + 3 + TIMEOUT_MS });
  });

  it("a recorded deadline wins over the starting time; without either a start failure stays a failure", () => {
    const world = worldWith();
    const attempt = starting(world);
    const withDeadline = {
      ...world.model.scope(attempt.id),
      attempt: { ...attempt, deadlineAtMs: T0 + 10 },
    };
    expect(
      startFailed(withDeadline, "ENOENT", NO_RETRY, T0 + 11, T0 + 3).attempts[0]?.after.status,
    ).toBe("timed_out");
    expect(
      startFailed(world.model.scope(attempt.id), "ENOENT", NO_RETRY, T0 + 10 * TIMEOUT_MS)
        .attempts[0]?.after.status,
    ).toBe("failed");
  });
});

describe("deadlines and stops", () => {
  it("a deadline yields a task-scoped timeout stop and never touches the parent's cancel intent", () => {
    const world = worldWith();
    const attempt = running(world);
    const change = requestTimeoutStop(world.model.scope(attempt.id), T0 + 4 + TIMEOUT_MS);
    expect(change).not.toBeNull();
    expect(change!.runs[0]?.after.cancelRequestedAtMs).toBeNull();
    expect(change!.runs[0]?.after.status).toBe("running");
    expect(change!.events).toEqual([
      expect.objectContaining({
        type: "workflow.task_timeout_requested",
        stepRunId: attempt.stepRunId,
        attemptId: attempt.id,
        data: { reason: "timeout", deadlineAtMs: T0 + 4 + TIMEOUT_MS },
      }),
    ]);
    expect(change!.steps).toEqual([]);
    world.apply(change);
    expect(world.model.attempt(attempt.id)).toMatchObject({
      status: "running",
      stopReason: "timeout",
      stopRequestedAtMs: T0 + 4 + TIMEOUT_MS,
    });
  });

  it("no timeout stop before the deadline, twice, or for an attempt that is not running", () => {
    const world = worldWith();
    const attempt = running(world);
    expect(requestTimeoutStop(world.model.scope(attempt.id), T0 + 3 + TIMEOUT_MS)).toBeNull();
    world.apply(requestTimeoutStop(world.model.scope(attempt.id), T0 + 4 + TIMEOUT_MS));
    expect(requestTimeoutStop(world.model.scope(attempt.id), T0 + 9 + TIMEOUT_MS)).toBeNull();
    const other = worldWith();
    expect(
      requestTimeoutStop(other.model.scope(starting(other).id), T0 + 10 * TIMEOUT_MS),
    ).toBeNull();
    // An attempt that ended in time keeps its deadline and no stop reason: it is past stopping.
    const ended = worldWith();
    const done = running(ended);
    ended.apply(completion(ended, done.id, exitFacts(T0 + 4, T0 + 10, 0), T0 + 11));
    expect(ended.model.attempt(done.id)).toMatchObject({ status: "succeeded", stopReason: null });
    expect(requestTimeoutStop(ended.model.scope(done.id), T0 + 10 * TIMEOUT_MS)).toBeNull();
    expect(requestShutdownStop(ended.model.scope(done.id), T0 + 12)).toBeNull();
  });

  it("an ordinary attempt's timeout stop is an attempt.stop_requested event", () => {
    const world = new CoreWorld(
      diamondManifest("demo", { tasks: [task("work", ["true"], { timeoutMs: TIMEOUT_MS })] }),
    );
    const run = world.startTask();
    const attempt = runningOrdinaryAttempt(world, run.id, T0 + 2);
    const change = requestTimeoutStop(world.model.scope(attempt.id), T0 + 2 + TIMEOUT_MS);
    expect(change?.events.map((event) => event.type)).toEqual(["attempt.stop_requested"]);
  });

  it("a completion with stop reason timeout is timed_out, whatever the exit", () => {
    const world = worldWith();
    const attempt = running(world);
    world.apply(requestTimeoutStop(world.model.scope(attempt.id), T0 + 4 + TIMEOUT_MS));
    world.apply(
      completion(
        world,
        attempt.id,
        exitFacts(T0 + 4, T0 + 4 + TIMEOUT_MS, null, { stopReason: "timeout" }),
        T0 + 5 + TIMEOUT_MS,
      ),
    );
    expect([world.model.attempt(attempt.id).status, world.model.step("run-1", "a").status]).toEqual(
      ["timed_out", "timed_out"],
    );
    expect(world.model.run("run-1").cancelRequestedAtMs).toBeNull();
  });

  it("completion after the deadline is timed_out even without a stop, whatever the exit code", () => {
    for (const exitCode of [0, 1, null]) {
      const world = worldWith();
      const attempt = running(world);
      const late = exitFacts(T0 + 4, T0 + 5 + TIMEOUT_MS, exitCode);
      world.apply(completion(world, attempt.id, late, T0 + 6 + TIMEOUT_MS));
      const { status, stopReason } = world.model.attempt(attempt.id);
      expect([status, stopReason, world.model.step("run-1", "a").status]).toEqual([
        "timed_out",
        "timeout",
        "timed_out",
      ]);
    }
  });

  it("a completion exactly at the deadline is in time", () => {
    const world = worldWith();
    const attempt = running(world);
    world.apply(
      completion(world, attempt.id, exitFacts(T0 + 4, T0 + 4 + TIMEOUT_MS, 0), T0 + 5 + TIMEOUT_MS),
    );
    expect(world.model.attempt(attempt.id).status).toBe("succeeded");
  });

  it("the deadline of a starting attempt completed from its receipt is its handle start plus the timeout", () => {
    const attempt = { timeoutMs: TIMEOUT_MS, deadlineAtMs: null } as RunAttempt;
    expect(decideOutcome(attempt, exitFacts(T0, T0 + TIMEOUT_MS, 0)).attempt).toBe("succeeded");
    expect(decideOutcome(attempt, exitFacts(T0, T0 + TIMEOUT_MS + 1, 0)).attempt).toBe("timed_out");
  });

  it("a shutdown stop is persisted once and ends the attempt cancelled and the step failed, leaving the parent's cancel intent alone", () => {
    const world = worldWith();
    const attempt = running(world);
    const change = requestShutdownStop(world.model.scope(attempt.id), T0 + 60);
    expect(change?.events.map((event) => [event.type, event.data])).toEqual([
      ["attempt.stop_requested", { reason: "shutdown" }],
    ]);
    world.apply(change);
    expect(world.model.attempt(attempt.id)).toMatchObject({
      status: "running",
      stopReason: "shutdown",
      stopRequestedAtMs: T0 + 60,
    });
    expect(requestShutdownStop(world.model.scope(attempt.id), T0 + 61)).toBeNull();
    const stopped = exitFacts(T0 + 4, T0 + 70, null, { stopReason: "shutdown" });
    world.apply(completion(world, attempt.id, stopped, T0 + 70));
    expect([world.model.attempt(attempt.id).status, world.model.step("run-1", "a").status]).toEqual(
      ["cancelled", "failed"],
    );
    expect(world.model.run("run-1")).toMatchObject({
      status: "running",
      cancelRequestedAtMs: null,
    });
  });
});

describe("step-level retry of idempotent tasks", () => {
  it("a failed step of an idempotent task is retried in a new ready epoch after its backoff", () => {
    const world = worldWith(RETRY_TWICE);
    const attempt = running(world);
    const stepBefore = world.model.step("run-1", "a");
    const change = completion(
      world,
      attempt.id,
      exitFacts(T0 + 4, T0 + 10, 1),
      T0 + 60,
      RETRY_TWICE,
    );
    world.apply(change);
    expectTransition(
      change.events.find((event) => event.type === "step.status_changed"),
      "running",
      "ready",
      { retry: 1, outcome: "failed" },
    );
    const step = world.model.step("run-1", "a");
    expect(step).toMatchObject({
      status: "ready",
      attemptCount: 1,
      readyAtMs: T0 + 60,
      notBeforeMs: T0 + 560,
      startedAtMs: null,
      version: stepBefore.version + 1,
    });
    expect(world.model.attempt(attempt.id).status).toBe("failed");
  });

  it("a step retry stops when the budget is spent", () => {
    const world = worldWith(RETRY_TWICE);
    let nowMs = T0 + 2;
    for (let attemptNumber = 1; attemptNumber <= 3; attemptNumber += 1) {
      const attempt = world.admit("run-1", "a", nowMs);
      world.markStarting(attempt.id, nowMs);
      world.markRunning(attempt.id, nowMs, nowMs);
      world.apply(
        completion(world, attempt.id, exitFacts(nowMs, nowMs + 1, 1), nowMs + 1, RETRY_TWICE),
      );
      nowMs += 1_000;
    }
    expect(world.model.step("run-1", "a")).toMatchObject({ status: "failed", attemptCount: 3 });
  });

  it("a non-idempotent task is never retried at step level, and a cancelled outcome never is", () => {
    const step = { attemptCount: 1 } as Parameters<typeof stepMayRetry>[0];
    expect(stepMayRetry(step, "failed", { max: 5, backoffMs: 0, idempotent: false })).toBe(false);
    expect(stepMayRetry(step, "cancelled", RETRY_TWICE)).toBe(false);
    expect(stepMayRetry(step, "succeeded", RETRY_TWICE)).toBe(false);
    expect(stepMayRetry(step, "timed_out", RETRY_TWICE)).toBe(true);
  });
});

describe("a completion's output", () => {
  it("a success keeps its output on the attempt and the step, and its event says an output came", () => {
    const world = worldWith();
    const attempt = running(world);
    const facts = exitFacts(T0 + 4, T0 + 60, 0, { output: { rows: 2 } });
    const change = completion(world, attempt.id, facts, T0 + 61);
    world.apply(change);
    expect(world.model.attempt(attempt.id)).toMatchObject({ output: { rows: 2 }, error: null });
    expect(world.model.step("run-1", "a")).toMatchObject({
      status: "succeeded",
      output: { rows: 2 },
      finishedAtMs: T0 + 60,
    });
    expect(change.events[0]).toMatchObject({
      type: "attempt.status_changed",
      data: { from: "running", to: "succeeded", exitCode: 0, signal: null, output: true },
    });
    expect(change.events[0]?.data).not.toHaveProperty("outputError");
  });

  it("a refused output fails the attempt with the reason in its error and event, and the step keeps no output", () => {
    const world = worldWith();
    const attempt = running(world);
    const refused = exitFacts(T0 + 4, T0 + 60, 0, {
      output: { rows: 2 },
      outputError: "too large",
    });
    const change = completion(world, attempt.id, refused, T0 + 61);
    world.apply(change);
    expect(world.model.attempt(attempt.id)).toMatchObject({
      status: "failed",
      error: "output refused: too large",
    });
    expect(world.model.step("run-1", "a")).toMatchObject({ status: "failed", output: null });
    expect(change.events[0]?.data).toMatchObject({ outputError: "too large", output: true });
  });

  it("a completion without output records none and says none", () => {
    const world = worldWith();
    const attempt = running(world);
    const change = completion(world, attempt.id, exitFacts(T0 + 4, T0 + 60, 0), T0 + 61);
    expect(change.attempts[0]?.after).toMatchObject({ output: null, error: null });
    expect(change.events[0]?.data).not.toHaveProperty("output");
  });
});

describe("an attempt whose step or run moved on settles itself only", () => {
  it("an attempt holds its step while it is ready at the attempt's epoch or running from it, and an ordinary attempt while it is its run's latest", () => {
    const world = worldWith();
    const live = starting(world);
    const scope = world.model.scope(live.id);
    const epoch = live.stepRunVersion!;
    const at = (
      status: "ready" | "running" | "succeeded",
      version: number,
      stepRunVersion: number | null = epoch,
    ) =>
      holdsEpoch({
        ...scope,
        step: { ...scope.step!, status, version },
        attempt: { ...live, stepRunVersion },
      });
    expect(at("ready", epoch)).toBe(true);
    expect(at("running", epoch + 1)).toBe(true);
    for (const [status, version] of [
      ["ready", epoch + 1],
      ["running", epoch],
      ["running", epoch + 2],
      ["succeeded", epoch],
      ["succeeded", epoch + 1],
    ] as const)
      expect(at(status, version)).toBe(false);
    // An attempt bound to no epoch holds none, even a running step at version 1.
    expect(at("running", 1, null)).toBe(false);
    const ordinary = new CoreWorld();
    const run = ordinary.startTask();
    const attempt = claimedOrdinaryAttempt(ordinary, run.id, T0 + 1);
    const ordinaryScope = ordinary.model.scope(attempt.id);
    expect(holdsEpoch(ordinaryScope)).toBe(true);
    const later = { ...ordinaryScope.run, attemptSeq: attempt.number + 1 };
    expect(holdsEpoch({ ...ordinaryScope, run: later })).toBe(false);
  });

  it("a stale attempt's start, completion and start failure write its own row and leave the step alone", () => {
    const world = worldWith();
    const live = starting(world);
    const scope = world.model.scope(live.id);
    const moved = { ...scope, step: { ...scope.step!, version: scope.step!.version + 5 } };
    const started = markRunning(moved, handleAt(T0 + 4), T0 + 5);
    expect(started.attempts.map((row) => row.after.status)).toEqual(["running"]);
    expect(started.steps).toEqual([]);
    const failed = startFailed(moved, "ENOENT", NO_RETRY, T0 + 5);
    expect(failed.attempts.map((row) => row.after.status)).toEqual(["failed"]);
    expect(failed.steps).toEqual([]);
    const runningWorld = worldWith();
    const runningAttempt = running(runningWorld);
    const runningScope = runningWorld.model.scope(runningAttempt.id);
    const retried = {
      ...runningScope,
      step: { ...runningScope.step!, version: runningScope.step!.version + 5 },
    };
    const completed = complete(retried, exitFacts(T0 + 4, T0 + 60, 0), NO_RETRY, T0 + 60);
    expect(completed.attempts.map((row) => row.after.status)).toEqual(["succeeded"]);
    expect(completed.steps).toEqual([]);
  });
});
