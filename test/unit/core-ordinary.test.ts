import { describe, expect, it } from "vitest";
import { finishOrdinary, startFailed } from "../../src/execution.ts";
import { RunChange } from "../../src/aggregate.ts";
import type { RunStatus } from "../../src/model.ts";
import { admitOrdinaryAttempt, ordinaryAttemptId } from "../../src/ordinary.ts";
import type { RetryPolicy } from "../../src/packages.ts";
import { requestCancel } from "../../src/runs.ts";
import { diamondManifest, task } from "../support/fixtures.ts";
import {
  completion,
  CoreWorld,
  definitionOf,
  errorCode,
  exitFacts,
  expectOneVersionBump,
  NO_RETRY,
  runningOrdinaryAttempt,
  startingOrdinaryAttempt,
  T0,
} from "./core-fixtures.ts";

/**
 * The ordinary run path (ADR-0229 §2: unchanged by workflows): one task per run, latest-attempt
 * semantics, `queued → dispatching → running → terminal`, retries back to `queued`.
 */

const RETRY_ONCE: RetryPolicy = { max: 1, backoffMs: 0, idempotent: false };

function worldWith(retry: RetryPolicy = NO_RETRY): CoreWorld {
  return new CoreWorld(
    diamondManifest("demo", { tasks: [task("work", ["true"], { retry, timeoutMs: 1_000 })] }),
  );
}

describe("the ordinary run path", () => {
  it("a due queued run gets a claimed latest attempt ora:<32 hex> and moves to dispatching in one change", () => {
    const world = worldWith();
    const run = world.startTask();
    const admitted = admitOrdinaryAttempt(run, definitionOf(world.pkg, "work"), T0 + 1)!;
    expectOneVersionBump(admitted.change, run);
    expect(admitted.attempt).toMatchObject({
      id: ordinaryAttemptId(run.id, 1),
      stepRunId: null,
      stepRunVersion: null,
      number: 1,
      status: "claimed",
      executor: "local_process",
      timeoutMs: 1_000,
    });
    expect(admitted.attempt.id).toMatch(/^ora:[0-9a-f]{32}$/);
    expect(admitted.change.runs[0]?.after).toMatchObject({ status: "dispatching", attemptSeq: 1 });
  });

  it("a run goes queued → dispatching → running → succeeded with its latest attempt", () => {
    const world = worldWith();
    const run = world.startTask();
    const attempt = runningOrdinaryAttempt(world, run.id, T0 + 1);
    expect(world.model.run(run.id).status).toBe("running");
    world.apply(completion(world, attempt.id, exitFacts(T0 + 1, T0 + 10, 0), T0 + 11));
    expect(world.model.run(run.id)).toMatchObject({ status: "succeeded", finishedAtMs: T0 + 11 });
    const transitions = world.model
      .eventsOf(run.id)
      .filter((event) => event.type === "run.status_changed")
      .map((event) => event.data);
    expect(transitions).toEqual([
      expect.objectContaining({ from: "queued", to: "dispatching" }),
      { from: "dispatching", to: "running", attemptId: attempt.id },
      { from: "running", to: "succeeded", attemptNumber: 1 },
    ]);
  });

  it("a run that is not queued, waits for its backoff or has a cancel intent is not admitted", () => {
    const world = worldWith();
    const run = world.startTask();
    const definition = definitionOf(world.pkg, "work");
    expect(admitOrdinaryAttempt({ ...run, notBeforeMs: T0 + 100 }, definition, T0 + 99)).toBeNull();
    expect(
      admitOrdinaryAttempt({ ...run, notBeforeMs: T0 + 100 }, definition, T0 + 100),
    ).not.toBeNull();
    expect(admitOrdinaryAttempt({ ...run, status: "dispatching" }, definition, T0 + 1)).toBeNull();
    expect(
      admitOrdinaryAttempt(requestCancel(run, T0 + 1, "user")!.runs[0]!.after, definition, T0 + 2),
    ).toBeNull();
    const workflow = world.startWorkflow();
    expect(admitOrdinaryAttempt(workflow, definition, T0 + 1)).toBeNull();
  });

  it("an ordinary run is refused a definition of another task or generation, and a tampered execution digest", () => {
    const world = worldWith();
    const run = world.startTask();
    const definition = definitionOf(world.pkg, "work");
    expect(
      errorCode(() => admitOrdinaryAttempt(run, { ...definition, generation: 2 }, T0 + 1)),
    ).toBe("integrity");
    expect(
      errorCode(() => admitOrdinaryAttempt(run, { ...definition, task: "other" }, T0 + 1)),
    ).toBe("integrity");
    expect(
      errorCode(() =>
        admitOrdinaryAttempt(
          run,
          { ...definition, execution: { ...definition.execution, argv: ["evil"] } },
          T0 + 1,
        ),
      ),
    ).toBe("integrity");
  });

  it("ordinary runs retry definite failures within their budget and never a lost attempt (ADR-0227 §6)", () => {
    const cases: [RetryPolicy, "failed" | "timed_out" | "lost", number, RunStatus][] = [
      [{ max: 2, backoffMs: 10, idempotent: false }, "failed", 1, "queued"],
      [{ max: 2, backoffMs: 10, idempotent: false }, "timed_out", 2, "queued"],
      [{ max: 2, backoffMs: 10, idempotent: false }, "failed", 3, "failed"],
      [{ max: 2, backoffMs: 10, idempotent: false }, "lost", 1, "lost"],
      [{ max: 2, backoffMs: 10, idempotent: true }, "lost", 1, "lost"],
      [{ max: 2, backoffMs: 10, idempotent: true }, "lost", 3, "lost"],
      [{ max: 0, backoffMs: 10, idempotent: true }, "failed", 1, "failed"],
    ];
    for (const [retry, outcome, attemptNumber, expected] of cases) {
      const world = worldWith();
      const run = world.startTask();
      const change = new RunChange({ ...run, status: "running" }, T0 + 5);
      finishOrdinary(change, outcome, attemptNumber, retry, T0 + 5);
      expect(change.run.status).toBe(expected);
      if (expected === "queued") expect(change.run.notBeforeMs).toBe(T0 + 15);
    }
  });

  it("a retried run waits for its backoff, then admits its next attempt with the next run-global number", () => {
    const retry = { max: 1, backoffMs: 100, idempotent: false };
    const world = worldWith(retry);
    const run = world.startTask();
    const first = runningOrdinaryAttempt(world, run.id, T0 + 1);
    world.apply(completion(world, first.id, exitFacts(T0 + 1, T0 + 5, 2), T0 + 6, retry));
    expect(world.model.run(run.id)).toMatchObject({ status: "queued", notBeforeMs: T0 + 106 });
    expect(world.model.eventsOf(run.id).at(-1)?.data).toEqual({
      from: "running",
      to: "queued",
      retry: 1,
      outcome: "failed",
    });
    expect(
      admitOrdinaryAttempt(world.model.run(run.id), definitionOf(world.pkg, "work"), T0 + 105),
    ).toBeNull();
    const second = runningOrdinaryAttempt(world, run.id, T0 + 106);
    expect(second).toMatchObject({ number: 2, id: ordinaryAttemptId(run.id, 2) });
    expect(world.model.run(run.id).notBeforeMs).toBeNull();
    world.apply(completion(world, second.id, exitFacts(T0 + 106, T0 + 110, 2), T0 + 111, retry));
    expect(world.model.run(run.id).status).toBe("failed");
  });

  it("a start failure fails the run, or returns it to queued while budget is left; reported after the deadline it times the run out instead", () => {
    const timeoutMs = 1_000;
    for (const [retry, reportedAtMs, attemptStatus, runStatus] of [
      [NO_RETRY, T0 + 3, "failed", "failed"],
      [RETRY_ONCE, T0 + 3, "failed", "queued"],
      [NO_RETRY, T0 + 3 + timeoutMs, "timed_out", "timed_out"],
      [RETRY_ONCE, T0 + 3 + timeoutMs, "timed_out", "queued"],
    ] as const) {
      const world = worldWith(retry);
      const run = world.startTask();
      const attempt = startingOrdinaryAttempt(world, run.id, T0 + 2);
      expect(attempt.timeoutMs).toBe(timeoutMs);
      world.apply(
        startFailed(world.model.scope(attempt.id), "ENOENT", retry, reportedAtMs, T0 + 2),
      );
      expect([world.model.attempt(attempt.id).status, world.model.run(run.id).status]).toEqual([
        attemptStatus,
        runStatus,
      ]);
    }
  });

  it("a run with a cancel intent is never retried", () => {
    const retry = { max: 3, backoffMs: 0, idempotent: true };
    const world = worldWith(retry);
    const run = world.startTask();
    const attempt = runningOrdinaryAttempt(world, run.id, T0 + 1);
    world.apply(requestCancel(world.model.run(run.id), T0 + 2, "user"));
    world.apply(completion(world, attempt.id, exitFacts(T0 + 1, T0 + 3, 1), T0 + 4, retry));
    expect(world.model.run(run.id).status).toBe("failed");
  });

  it("a receipt for a starting ordinary attempt moves the run dispatching → running → terminal atomically", () => {
    const world = worldWith();
    const run = world.startTask();
    const attempt = startingOrdinaryAttempt(world, run.id, T0 + 2);
    const change = completion(world, attempt.id, exitFacts(T0 + 2, T0 + 5, 0), T0 + 6);
    expect(
      change.events
        .filter((event) => event.type === "run.status_changed")
        .map((event) => event.data.to),
    ).toEqual(["running", "succeeded"]);
  });
});
