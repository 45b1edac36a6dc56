import { describe, expect, it } from "vitest";
import {
  complete,
  decideOutcome,
  markRunning,
  markStarting,
  requestShutdownStop,
  requestTimeoutStop,
  startFailed,
  stepMayRetry,
} from "../../src/execution.ts";
import { convergeCancellation } from "../../src/cancellation.ts";
import type { RunAttempt } from "../../src/model.ts";
import { admitOrdinaryAttempt } from "../../src/ordinary.ts";
import { requestCancel } from "../../src/runs.ts";
import { diamondManifest, task } from "../support/fixtures.ts";
import {
  claimedStepA,
  CoreWorld,
  definitionOf,
  errorCode,
  exitFacts,
  expectOneVersionBump,
  handleAt,
  readyDiamondWorld,
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
const NO_RETRY = { max: 0, backoffMs: 0, idempotent: false };
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
    expect(world.model.attempt(attempt.id).status).toBe("starting");
    expect(world.model.step("run-1", "a")).toMatchObject({ status: "ready", attemptCount: 0 });
  });

  it("a workflow attempt is dispatched only while its exact ready epoch holds and its parent is running without a cancel intent", () => {
    const world = worldWith();
    const attempt = claimed(world);
    const scope = world.model.scope(attempt.id);
    expect(
      errorCode(() =>
        markStarting(
          { ...scope, step: { ...scope.step!, version: scope.step!.version + 1 } },
          T0 + 3,
        ),
      ),
    ).toBe("conflict");
    expect(
      errorCode(() =>
        markStarting({ ...scope, step: { ...scope.step!, status: "cancelled" } }, T0 + 3),
      ),
    ).toBe("conflict");
    expect(
      errorCode(() => markStarting({ ...scope, run: { ...scope.run, status: "failed" } }, T0 + 3)),
    ).toBe("conflict");
    world.apply(requestCancel(world.model.run("run-1"), T0 + 3, "user"));
    expect(errorCode(() => markStarting(world.model.scope(attempt.id), T0 + 4))).toBe("conflict");
  });

  it("an attempt that is not bound to its step is refused", () => {
    const world = worldWith();
    const attempt = claimed(world);
    const scope = world.model.scope(attempt.id);
    expect(
      errorCode(() => markStarting({ ...scope, step: world.model.step("run-1", "b") }, T0 + 3)),
    ).toBe("integrity");
    expect(errorCode(() => markStarting({ ...scope, step: null }, T0 + 3))).toBe("integrity");
  });

  it("markRunning moves the attempt to running and the step ready → running in one change; the parent stays running", () => {
    const world = worldWith();
    const attempt = starting(world);
    const before = world.model.run("run-1");
    const change = markRunning(world.model.scope(attempt.id), handleAt(T0 + 4), T0 + 50);
    expectOneVersionBump(change, before);
    expect(change.runs[0]?.after.status).toBe("running");
    expect(change.events.map((event) => event.type)).toEqual([
      "attempt.status_changed",
      "step.status_changed",
    ]);
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
      complete(
        world.model.scope(attempt.id),
        exitFacts(T0 + 4, T0 + 2_000, null, { stopReason: "timeout" }),
        NO_RETRY,
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
      errorCode(() => markRunning(world.model.scope(attempt.id), handleAt(T0 + 4), T0 + 5)),
    ).toBe("illegal_transition");
  });
});

describe("completion", () => {
  it("an exit 0 in time succeeds the attempt and the step; the parent stays running and is bumped once", () => {
    const world = worldWith();
    const attempt = running(world);
    const before = world.model.run("run-1");
    const change = complete(
      world.model.scope(attempt.id),
      exitFacts(T0 + 4, T0 + 900, 0),
      NO_RETRY,
      T0 + 950,
    );
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

  it("a non-zero exit or a signal fails the attempt and the step", () => {
    for (const facts of [
      exitFacts(T0 + 4, T0 + 10, 3),
      exitFacts(T0 + 4, T0 + 10, null, { signal: "SIGKILL" }),
    ]) {
      const world = worldWith();
      const attempt = running(world);
      world.apply(complete(world.model.scope(attempt.id), facts, NO_RETRY, T0 + 60));
      expect([
        world.model.attempt(attempt.id).status,
        world.model.step("run-1", "a").status,
      ]).toEqual(["failed", "failed"]);
    }
  });

  it("a receipt for a starting attempt writes ready → running → terminal atomically", () => {
    const world = worldWith();
    const attempt = starting(world);
    const before = world.model.run("run-1");
    const facts = exitFacts(T0 + 4, T0 + 20, 0, { handle: handleAt(T0 + 4, 777) });
    const change = complete(world.model.scope(attempt.id), facts, NO_RETRY, T0 + 30);
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
    world.apply(
      complete(world.model.scope(attempt.id), exitFacts(T0 + 4, T0 + 10, 1), NO_RETRY, T0 + 60),
    );
    expect(
      errorCode(() =>
        complete(world.model.scope(attempt.id), exitFacts(T0 + 4, T0 + 10, 0), NO_RETRY, T0 + 61),
      ),
    ).toBe("illegal_transition");
    expect(world.model.attempt(attempt.id).status).toBe("failed");
  });

  it("a recorded completion stays as it is after the parent is cancelled: a late replay cannot rewrite it", () => {
    const world = worldWith();
    const attempt = running(world);
    world.apply(
      complete(world.model.scope(attempt.id), exitFacts(T0 + 4, T0 + 60, 0), NO_RETRY, T0 + 61),
    );
    world.apply(requestCancel(world.model.run("run-1"), T0 + 62, "user"));
    world.apply(
      convergeCancellation(
        world.model.run("run-1"),
        world.model.stepsOf("run-1"),
        world.model.attemptsOf("run-1"),
        T0 + 63,
      ),
    );
    expect(world.model.run("run-1").status).toBe("cancelled");
    expect(
      errorCode(() =>
        complete(world.model.scope(attempt.id), exitFacts(T0 + 4, T0 + 60, 1), NO_RETRY, T0 + 64),
      ),
    ).toBe("illegal_transition");
    expect([world.model.attempt(attempt.id).status, world.model.step("run-1", "a").status]).toEqual(
      ["succeeded", "succeeded"],
    );
  });

  it("a claimed attempt cannot complete: it never crossed the start barrier", () => {
    const world = worldWith();
    const attempt = claimed(world);
    expect(
      errorCode(() =>
        complete(world.model.scope(attempt.id), exitFacts(T0 + 4, T0 + 10, 0), NO_RETRY, T0 + 11),
      ),
    ).toBe("illegal_transition");
  });

  it("a start failure fails the attempt (starting → failed) and the step (ready → failed); the parent stays running", () => {
    const world = worldWith();
    const attempt = starting(world);
    world.apply(
      startFailed(world.model.scope(attempt.id), "ENOENT: no such file", NO_RETRY, T0 + 5),
    );
    expect(world.model.attempt(attempt.id)).toMatchObject({
      status: "failed",
      error: "ENOENT: no such file",
      startedAtMs: null,
    });
    expect(world.model.step("run-1", "a")).toMatchObject({ status: "failed", attemptCount: 0 });
    expect(world.model.run("run-1").status).toBe("running");
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
  });

  it("an ordinary attempt's timeout stop is an attempt.stop_requested event", () => {
    const world = new CoreWorld(
      diamondManifest("demo", { tasks: [task("work", ["true"], { timeoutMs: TIMEOUT_MS })] }),
    );
    const run = world.startTask();
    const definition = definitionOf(world.pkg, "work");
    const admitted = admitOrdinaryAttempt(run, definition, T0 + 1)!;
    world.apply(admitted.change);
    world.apply(markStarting(world.model.scope(admitted.attempt.id), T0 + 2));
    world.apply(markRunning(world.model.scope(admitted.attempt.id), handleAt(T0 + 2), T0 + 3));
    const change = requestTimeoutStop(world.model.scope(admitted.attempt.id), T0 + 2 + TIMEOUT_MS);
    expect(change?.events.map((event) => event.type)).toEqual(["attempt.stop_requested"]);
  });

  it("a completion with stop reason timeout is timed_out, whatever the exit", () => {
    const world = worldWith();
    const attempt = running(world);
    world.apply(requestTimeoutStop(world.model.scope(attempt.id), T0 + 4 + TIMEOUT_MS));
    world.apply(
      complete(
        world.model.scope(attempt.id),
        exitFacts(T0 + 4, T0 + 4 + TIMEOUT_MS, null, { stopReason: "timeout" }),
        NO_RETRY,
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
      world.apply(
        complete(
          world.model.scope(attempt.id),
          exitFacts(T0 + 4, T0 + 5 + TIMEOUT_MS, exitCode),
          NO_RETRY,
          T0 + 6 + TIMEOUT_MS,
        ),
      );
      expect(world.model.attempt(attempt.id)).toMatchObject({
        status: "timed_out",
        stopReason: "timeout",
      });
      expect(world.model.step("run-1", "a").status).toBe("timed_out");
    }
  });

  it("a completion exactly at the deadline is in time", () => {
    const world = worldWith();
    const attempt = running(world);
    world.apply(
      complete(
        world.model.scope(attempt.id),
        exitFacts(T0 + 4, T0 + 4 + TIMEOUT_MS, 0),
        NO_RETRY,
        T0 + 5 + TIMEOUT_MS,
      ),
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
    expect(requestShutdownStop(world.model.scope(attempt.id), T0 + 61)).toBeNull();
    world.apply(
      complete(
        world.model.scope(attempt.id),
        exitFacts(T0 + 4, T0 + 70, null, { stopReason: "shutdown" }),
        NO_RETRY,
        T0 + 70,
      ),
    );
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
    world.apply(
      complete(world.model.scope(attempt.id), exitFacts(T0 + 4, T0 + 10, 1), RETRY_TWICE, T0 + 60),
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
      world.apply(markStarting(world.model.scope(attempt.id), nowMs));
      world.apply(markRunning(world.model.scope(attempt.id), handleAt(nowMs), nowMs));
      world.apply(
        complete(
          world.model.scope(attempt.id),
          exitFacts(nowMs, nowMs + 1, 1),
          RETRY_TWICE,
          nowMs + 1,
        ),
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
    const change = complete(
      world.model.scope(attempt.id),
      exitFacts(T0 + 4, T0 + 60, 0, { output: { rows: 2 } }),
      NO_RETRY,
      T0 + 61,
    );
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
    const change = complete(
      world.model.scope(attempt.id),
      exitFacts(T0 + 4, T0 + 60, 0, { output: { rows: 2 }, outputError: "too large" }),
      NO_RETRY,
      T0 + 61,
    );
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
    const change = complete(
      world.model.scope(attempt.id),
      exitFacts(T0 + 4, T0 + 60, 0),
      NO_RETRY,
      T0 + 61,
    );
    expect(change.attempts[0]?.after).toMatchObject({ output: null, error: null });
    expect(change.events[0]?.data).not.toHaveProperty("output");
  });
});
