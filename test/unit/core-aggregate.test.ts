import { describe, expect, it } from "vitest";
import { derivedId, digestOf } from "../../src/digest.ts";
import {
  assertNotBefore,
  eventId,
  frontierMarks,
  mergeChangeSets,
  RunChange,
  stepDigest,
} from "../../src/aggregate.ts";
import { advanceFrontier } from "../../src/frontier.ts";
import { EMPTY_CHANGE_SET } from "../../src/model.ts";
import {
  createOrdinaryRun,
  createWorkflowRun,
  MAX_IDEMPOTENCY_KEY_LENGTH,
  requestCancel,
  stepRunId,
} from "../../src/runs.ts";
import { diamondManifest, task } from "../support/fixtures.ts";
import {
  applyManifest,
  CoreWorld,
  definitionOf,
  errorCode,
  expectOneVersionBump,
  planOf,
  readyDiamondWorld,
  T0,
  twoDiamondGenerations,
} from "./core-fixtures.ts";

/**
 * The run aggregate: creation of runs, the RunChange builder every transition goes through
 * (one version bump per transaction, contiguous events, a canonical mutation per step change)
 * and the cancel intent.
 */

/** Run-1 of the diamond with its step `a` made ready at T0 + 1 by one RunChange, not yet built. */
function stepAMadeReady() {
  const world = new CoreWorld();
  const run = world.startWorkflow();
  const a = world.model.step(run.id, "a");
  const change = new RunChange(run, T0 + 1);
  const ready = change.setStep(a, "ready", { readyAtMs: T0 + 1 });
  return { run, a, change, ready };
}

describe("run creation", () => {
  it("a workflow run is created running with every step pending, one run.created event and one mutation per step", () => {
    const pkg = applyManifest(diamondManifest("demo"));
    const plan = planOf(pkg, "diamond");
    const { run, steps, change } = createWorkflowRun(plan, pkg.reconciliation.receipt, {
      runId: "run-1",
      nowMs: T0,
      idempotencyKey: "key-1",
      scheduleName: null,
    });
    expect(run).toMatchObject({
      kind: "workflow",
      status: "running",
      version: 1,
      eventSeq: 1,
      attemptSeq: 0,
      planDigest: plan.digest,
      reconciliationDigest: pkg.reconciliation.receipt.digest,
      generation: 1,
      target: "diamond",
      cancelRequestedAtMs: null,
      finishedAtMs: null,
    });
    expect(steps.map((step) => [step.name, step.status, step.version, step.attemptCount])).toEqual([
      ["a", "pending", 1, 0],
      ["b", "pending", 1, 0],
      ["c", "pending", 1, 0],
      ["d", "pending", 1, 0],
    ]);
    expect(change.events).toEqual([
      expect.objectContaining({ id: eventId("run-1", 1), seq: 1, type: "run.created" }),
    ]);
    expect(
      change.mutations.map((mutation) => [
        mutation.stepRunId,
        mutation.fromStatus,
        mutation.toStatus,
        mutation.eventSeq,
      ]),
    ).toEqual(steps.map((step) => [step.id, null, "pending", 1]));
    expect(change.runs).toEqual([{ before: null, after: run }]);
  });

  it("step run ids are derived from the run and the step name, and each step's digest covers its canonical state", () => {
    const world = new CoreWorld();
    world.startWorkflow();
    for (const step of world.model.stepsOf("run-1")) {
      expect(step.id).toBe(stepRunId("run-1", step.name));
      const { digest, ...rest } = step;
      expect(digest).toBe(stepDigest(rest));
    }
  });

  it("an ordinary run is created queued and bound to a task definition of its reconciliation", () => {
    const pkg = applyManifest(diamondManifest("demo"));
    const { run, change } = createOrdinaryRun(
      definitionOf(pkg, "work"),
      pkg.reconciliation.receipt,
      { runId: "run-o", nowMs: T0, idempotencyKey: null, scheduleName: "nightly" },
    );
    expect(run).toMatchObject({
      kind: "ordinary",
      status: "queued",
      target: "work",
      planDigest: null,
      version: 1,
      eventSeq: 1,
      scheduleName: "nightly",
    });
    expect(change.events[0]?.data).toMatchObject({
      taskRevision: definitionOf(pkg, "work").revision,
    });
  });

  it("an ordinary run is refused a task definition that is not part of the reconciliation receipt", () => {
    const { first, second } = twoDiamondGenerations([task("work", ["false"])]);
    expect(
      errorCode(() =>
        createOrdinaryRun(definitionOf(second, "work"), first.reconciliation.receipt, {
          runId: "run-o",
          nowMs: T0,
          idempotencyKey: null,
          scheduleName: null,
        }),
      ),
    ).toBe("integrity");
  });

  it("run ids must be portable identities and idempotency keys bounded printable text", () => {
    const pkg = applyManifest(diamondManifest("demo"));
    const plan = planOf(pkg, "diamond");
    const create = (runId: string, idempotencyKey: string | null) => () =>
      createWorkflowRun(plan, pkg.reconciliation.receipt, {
        runId,
        nowMs: T0,
        idempotencyKey,
        scheduleName: null,
      });
    expect(errorCode(create("../run", null))).toBe("invalid_identity");
    expect(errorCode(create("run-1", ""))).toBe("invalid_request");
    expect(errorCode(create("run-1", "x".repeat(MAX_IDEMPOTENCY_KEY_LENGTH + 1)))).toBe(
      "invalid_request",
    );
    expect(errorCode(create("run-1", "line\nbreak"))).toBe("invalid_request");
    expect(errorCode(create("run-1", "x".repeat(MAX_IDEMPOTENCY_KEY_LENGTH)))).toBe("no error");
  });
});

describe("a step's digest and an event's id", () => {
  it("a step's digest covers exactly its canonical fields, and leaves output out while it has none so older digests stay valid", () => {
    const world = new CoreWorld();
    world.startWorkflow();
    const { digest: _stored, ...d } = world.model.step("run-1", "d");
    expect(d.needs).toEqual(["b", "c"]);
    const canonical = {
      id: d.id,
      runId: d.runId,
      name: d.name,
      task: d.task,
      needs: ["b", "c"],
      status: d.status,
      version: d.version,
      attemptCount: d.attemptCount,
      readyAtMs: d.readyAtMs,
      notBeforeMs: d.notBeforeMs,
      startedAtMs: d.startedAtMs,
      finishedAtMs: d.finishedAtMs,
    };
    expect(d.output).toBeNull();
    expect(stepDigest(d)).toBe(digestOf(canonical));
    const withOutput = { ...d, output: { rows: 3 } };
    expect(stepDigest(withOutput)).toBe(digestOf({ ...canonical, output: { rows: 3 } }));
    // The row's creation time is not canonical state: the same state digests the same.
    expect(stepDigest({ ...d, createdAtMs: d.createdAtMs + 1 })).toBe(stepDigest(d));
  });

  it("an event's id is derived from its run and seq alone, so a replayed change names the same event", () => {
    expect(eventId("run-1", 3)).toBe(derivedId("evt", ["run-1", 3]));
    expect(eventId("run-1", 3)).toMatch(/^evt:[0-9a-f]{32}$/);
    expect(eventId("run-1", 4)).not.toBe(eventId("run-1", 3));
    expect(eventId("run-2", 3)).not.toBe(eventId("run-1", 3));
  });
});

describe("the RunChange builder", () => {
  it("bumps the run version exactly once however many changes it holds, and appends contiguous events", () => {
    const world = new CoreWorld();
    const run = world.startWorkflow();
    const change = new RunChange(run, T0 + 5);
    for (const step of world.model.stepsOf(run.id))
      change.setStep(step, "ready", { readyAtMs: T0 + 5 });
    change.patchRun({ cancelRequestedAtMs: T0 + 5 });
    change.emit("run.cancel_requested", {}, { reason: "test" });
    const built = change.build();
    expectOneVersionBump(built, run);
    expect(built.events).toHaveLength(5);
    expect(built.runs[0]?.after).toMatchObject({
      version: 2,
      eventSeq: 6,
      updatedAtMs: T0 + 5,
      cancelRequestedAtMs: T0 + 5,
    });
  });

  it("a RunChange with nothing in it builds an empty change set and is not changed", () => {
    const world = new CoreWorld();
    const change = new RunChange(world.startWorkflow(), T0);
    expect(change.changed).toBe(false);
    const built = change.build();
    expect(built).toEqual(EMPTY_CHANGE_SET);
    // Not only equal to the declared empty set: every list of it is empty.
    expect(Object.values(built).flat()).toEqual([]);
  });

  it("every step change leaves a canonical mutation beside its event, with from/to status, from/to digest and the event seq", () => {
    const { run, a, change, ready } = stepAMadeReady();
    const built = change.build();
    expect(built.mutations).toEqual([
      {
        runId: run.id,
        stepRunId: a.id,
        version: 2,
        fromStatus: "pending",
        toStatus: "ready",
        fromDigest: a.digest,
        toDigest: ready.digest,
        eventSeq: 2,
        atMs: T0 + 1,
      },
    ]);
    expect(built.events[0]).toMatchObject({
      seq: 2,
      type: "step.status_changed",
      stepRunId: a.id,
      data: { step: "a", from: "pending", to: "ready", version: 2 },
    });
    expect(built.steps).toEqual([{ before: a, after: ready }]);
  });

  it("a step's version and digest move together, also for a ready → ready epoch", () => {
    const { a, change, ready } = stepAMadeReady();
    // Handed the step as this transaction sees it, the builder still keeps the stored row as the CAS before.
    const epoch = change.setStep(ready, "ready");
    expect(epoch.version).toBe(ready.version + 1);
    expect(epoch.digest).not.toBe(ready.digest);
    expect(epoch.readyAtMs).toBe(ready.readyAtMs);
    // Both changes of one step in one transaction keep the row's original as the CAS `before`.
    expect(change.build().steps).toEqual([{ before: a, after: epoch }]);
  });

  it("an attempt change without a status transition (a stop request) keeps the status, bumps the attempt's version, and its event carries only its own data", () => {
    const world = readyDiamondWorld();
    const run = world.model.run("run-1");
    const attempt = world.admit(run.id, "a", T0 + 2);
    const change = new RunChange(world.model.run(run.id), T0 + 3);
    const next = change.setAttempt(
      attempt,
      null,
      { stopRequestedAtMs: T0 + 3 },
      { reason: "user" },
      "attempt.stop_requested",
    );
    expect(next).toMatchObject({
      status: "claimed",
      version: attempt.version + 1,
      stopRequestedAtMs: T0 + 3,
    });
    const built = change.build();
    expect(built.events).toEqual([
      expect.objectContaining({
        type: "attempt.stop_requested",
        stepRunId: attempt.stepRunId,
        attemptId: attempt.id,
        data: { reason: "user" },
      }),
    ]);
    expect(built.attempts).toEqual([{ before: attempt, after: next }]);
  });

  it("an attempt transition's event names from and to, and two changes of one attempt in one transaction keep the row's original as the CAS before", () => {
    const world = readyDiamondWorld();
    const run = world.model.run("run-1");
    const attempt = world.admit(run.id, "a", T0 + 2);
    const change = new RunChange(world.model.run(run.id), T0 + 3);
    const starting = change.setAttempt(attempt, "starting", {});
    expect(change.attempt(attempt)).toBe(starting);
    // The second change is handed the row as this transaction sees it: the CAS before stays the stored row.
    const failed = change.setAttempt(starting, "failed", { finishedAtMs: T0 + 3 });
    expect(failed.version).toBe(attempt.version + 2);
    const built = change.build();
    expect(built.events.map((event) => [event.type, event.data])).toEqual([
      ["attempt.status_changed", { from: "claimed", to: "starting" }],
      ["attempt.status_changed", { from: "starting", to: "failed" }],
    ]);
    expect(built.attempts).toEqual([{ before: attempt, after: failed }]);
  });

  it("an attempt inserted twice in one transaction is refused; an inserted attempt is a row without a before", () => {
    const world = readyDiamondWorld();
    const run = world.model.run("run-1");
    const admitted = world.tryAdmit(run.id, "a", T0 + 2);
    if (admitted.kind !== "admitted") throw new Error("step a was not admitted");
    const change = new RunChange(world.model.run(run.id), T0 + 2);
    change.insertAttempt(admitted.attempt);
    expect(() => change.insertAttempt(admitted.attempt)).toThrow(
      new RegExp(`attempt ${admitted.attempt.id} inserted twice`),
    );
    expect(errorCode(() => change.insertAttempt(admitted.attempt))).toBe("internal");
    const built = change.build();
    expect(built.attempts).toEqual([{ before: null, after: admitted.attempt }]);
    expect(built.events.map((event) => [event.type, event.attemptId, event.data])).toEqual([
      ["attempt.status_changed", admitted.attempt.id, { to: "claimed", number: 1 }],
    ]);
  });

  it("an event takes the id it is given, or the one derived from its run and seq, and names no step or attempt unless told", () => {
    const world = new CoreWorld();
    const run = world.startWorkflow();
    const change = new RunChange(run, T0 + 1);
    const given = change.emit("run.cancel_requested", { id: "evt-given" });
    const derived = change.emit("run.cancel_requested", {});
    expect(given).toEqual({
      id: "evt-given",
      runId: run.id,
      seq: run.eventSeq + 1,
      type: "run.cancel_requested",
      atMs: T0 + 1,
      stepRunId: null,
      attemptId: null,
      data: {},
    });
    expect(derived.id).toBe(eventId(run.id, run.eventSeq + 2));
  });

  it("a run status that is not terminal leaves finishedAtMs empty, and its event carries from, to and the caller's data", () => {
    const world = new CoreWorld();
    const run = world.startTask();
    const change = new RunChange(run, T0 + 1);
    change.setRunStatus("dispatching", { reason: "admitted" });
    const built = change.build();
    expect(built.runs[0]?.after).toMatchObject({ status: "dispatching", finishedAtMs: null });
    expect(built.events.map((event) => [event.type, event.data])).toEqual([
      ["run.status_changed", { from: "queued", to: "dispatching", reason: "admitted" }],
    ]);
  });

  it("event time before the run's creation is a clock_regression, and nothing is built", () => {
    const world = new CoreWorld();
    const run = world.startWorkflow("diamond", "run-1", T0 + 100);
    expect(errorCode(() => new RunChange(run, T0 + 99))).toBe("clock_regression");
    expect(errorCode(() => requestCancel(run, T0 + 99, "user"))).toBe("clock_regression");
    expect(() => assertNotBefore(T0, T0, "same instant")).not.toThrow();
  });

  it("event time before an attempt's creation is a clock_regression", () => {
    const world = readyDiamondWorld();
    const attempt = world.admit("run-1", "a", T0 + 50);
    // The run itself is older than the reading, the attempt is not: the attempt's creation is the bound.
    const change = new RunChange(world.model.run("run-1"), T0 + 40);
    expect(errorCode(() => change.setAttempt(attempt, "starting", {}))).toBe("clock_regression");
  });

  it("a refused time names its subject and both times, so an operator can tell which row's clock went back", () => {
    expect(() => assertNotBefore(T0 - 1, T0, "run run-1")).toThrow(
      `run run-1: observation time ${T0 - 1} is before its creation at ${T0}; refusing to write`,
    );
    expect(() => assertNotBefore(T0 + 0.5, T0, "run run-1")).toThrow(
      "run run-1: time must be an integer of milliseconds",
    );
    expect(
      () => new RunChange({ ...new CoreWorld().startWorkflow(), createdAtMs: T0 + 1 }, T0),
    ).toThrow(/^run run-1: observation time/);
    const world = new CoreWorld();
    const run = world.startWorkflow();
    const a = world.model.step(run.id, "a");
    // A step row created after the reading (its run is older): the step is named.
    const change = new RunChange(run, T0 + 1);
    expect(() => change.setStep({ ...a, createdAtMs: T0 + 2 }, "ready")).toThrow(
      new RegExp(`^step ${a.id}: observation time`),
    );
    world.apply(advanceFrontier(run, world.model.stepsOf(run.id), [], T0 + 1));
    const attempt = world.admit(run.id, "a", T0 + 50);
    expect(() =>
      new RunChange(world.model.run(run.id), T0 + 40).setAttempt(attempt, "starting", {}),
    ).toThrow(new RegExp(`^attempt ${attempt.id}: observation time`));
    const other = world.startWorkflow("diamond", "run-2");
    expect(() =>
      new RunChange(other, T0 + 1).setStep(world.model.step("run-1", "b"), "ready"),
    ).toThrow(`step ${world.model.step("run-1", "b").id} is not part of run run-2`);
  });

  it("a time that is not an integer of milliseconds is refused", () => {
    const world = new CoreWorld();
    const run = world.startWorkflow();
    expect(errorCode(() => new RunChange(run, T0 + 0.5))).toBe("invalid_request");
    expect(errorCode(() => new RunChange(run, Number.NaN))).toBe("invalid_request");
  });

  it("an illegal transition through the builder throws illegal_transition", () => {
    const world = new CoreWorld();
    const run = world.startWorkflow();
    const change = new RunChange(run, T0 + 1);
    expect(errorCode(() => change.setStep(world.model.step(run.id, "a"), "running"))).toBe(
      "illegal_transition",
    );
    expect(errorCode(() => change.setRunStatus("timed_out"))).toBe("illegal_transition");
    world.apply(advanceFrontier(run, world.model.stepsOf(run.id), [], T0 + 1));
    const attempt = world.admit(run.id, "a", T0 + 1);
    expect(errorCode(() => change.setAttempt(attempt, "succeeded", {}))).toBe("illegal_transition");
    expect(change.changed).toBe(false);
  });

  it("a step of another run is refused", () => {
    const world = new CoreWorld();
    world.startWorkflow("diamond", "run-1");
    const other = world.startWorkflow("diamond", "run-2");
    const change = new RunChange(other, T0 + 1);
    expect(errorCode(() => change.setStep(world.model.step("run-1", "a"), "ready"))).toBe(
      "internal",
    );
  });

  it("a terminal run status sets finishedAtMs to the event time", () => {
    const world = new CoreWorld();
    const run = world.startTask();
    const change = new RunChange(run, T0 + 9);
    change.setRunStatus("cancelled");
    expect(change.build().runs[0]?.after).toMatchObject({
      status: "cancelled",
      finishedAtMs: T0 + 9,
    });
  });

  it("merging change sets keeps every kind of write of each, in order: runs, steps, attempts, events, mutations, admission receipts and frontier marks", () => {
    const world = readyDiamondWorld();
    const run = world.model.run("run-1");
    const admitted = world.tryAdmit(run.id, "a", T0 + 2);
    if (admitted.kind !== "admitted") throw new Error("step a was not admitted");
    const created = createWorkflowRun(
      planOf(world.pkg, "diamond"),
      world.pkg.reconciliation.receipt,
      {
        runId: "run-2",
        nowMs: T0 + 2,
        idempotencyKey: null,
        scheduleName: null,
      },
    ).change;
    const merged = mergeChangeSets([admitted.change, created]);
    expect(merged).toEqual({
      runs: [...admitted.change.runs, ...created.runs],
      steps: [...admitted.change.steps, ...created.steps],
      attempts: [...admitted.change.attempts, ...created.attempts],
      events: [...admitted.change.events, ...created.events],
      mutations: [...admitted.change.mutations, ...created.mutations],
      admissions: [...admitted.change.admissions, ...created.admissions],
      frontierDue: [...admitted.change.frontierDue, ...created.frontierDue],
    });
    // Each kind is present in the merge, so none of them can go missing unseen.
    expect(merged.attempts).toHaveLength(1);
    expect(merged.admissions).toHaveLength(1);
    expect(merged.steps).toHaveLength(4);
    expect(merged.mutations).toHaveLength(4);
    expect(merged.frontierDue).toEqual(["run-2"]);
  });

  it("merging change sets of different aggregates keeps every row and event", () => {
    const world = new CoreWorld();
    const a = requestCancel(world.startWorkflow("diamond", "run-1"), T0 + 1, "user");
    const b = requestCancel(world.startWorkflow("diamond", "run-2"), T0 + 1, "user");
    const merged = mergeChangeSets([a!, b!]);
    expect(merged.runs.map((row) => row.after.id)).toEqual(["run-1", "run-2"]);
    expect(merged.events).toHaveLength(2);
  });
});

describe("frontier marks over several runs", () => {
  it("a settled step marks its own run only, and a step row that arrives settled counts as settling", () => {
    const world = new CoreWorld();
    const one = world.startWorkflow("diamond", "run-1");
    const two = world.startWorkflow("diamond", "run-2");
    const runs = [
      { before: one, after: one },
      { before: two, after: two },
    ];
    const a2 = world.model.step("run-2", "a");
    const succeeded = { ...a2, status: "succeeded" as const };
    expect(frontierMarks(runs, [{ before: a2, after: succeeded }])).toEqual(["run-2"]);
    expect(frontierMarks(runs, [{ before: null, after: succeeded }])).toEqual(["run-2"]);
    expect(frontierMarks(runs, [{ before: succeeded, after: succeeded }])).toEqual([]);
  });

  it("only a workflow run has a frontier: an ordinary run is never marked, even one written running", () => {
    const world = new CoreWorld();
    const running = { ...world.startWorkflow("diamond", "run-1"), kind: "ordinary" as const };
    expect(frontierMarks([{ before: null, after: running }], [])).toEqual([]);
  });
});

describe("the cancel intent", () => {
  it("records the intent once, as one event and one version bump, without changing the run's status", () => {
    const world = new CoreWorld();
    const run = world.startWorkflow();
    const change = requestCancel(run, T0 + 3, "user");
    expect(change).not.toBeNull();
    expectOneVersionBump(change!, run);
    expect(change!.runs[0]?.after).toMatchObject({
      status: "running",
      cancelRequestedAtMs: T0 + 3,
      cancelReason: "user",
    });
    expect(change!.events.map((event) => [event.type, event.data])).toEqual([
      ["run.cancel_requested", { reason: "user" }],
    ]);
    world.apply(change);
    // The first intent stands: a later shutdown cancel neither replaces its reason nor its time.
    expect(requestCancel(world.model.run(run.id), T0 + 4, "shutdown")).toBeNull();
  });

  it("records a shutdown cancel with its reason, and refuses a reason it does not know", () => {
    const world = new CoreWorld();
    const run = world.startWorkflow();
    const change = requestCancel(run, T0 + 3, "shutdown");
    expect(change!.runs[0]?.after).toMatchObject({
      cancelRequestedAtMs: T0 + 3,
      cancelReason: "shutdown",
    });
    expect(change!.events.map((event) => [event.type, event.data])).toEqual([
      ["run.cancel_requested", { reason: "shutdown" }],
    ]);
    expect(() => requestCancel(run, T0 + 3, "policy" as "user")).toThrow(/unknown cancel reason/);
  });

  it("cancelling a terminal run writes nothing", () => {
    const world = new CoreWorld();
    const run = world.startTask();
    const change = new RunChange(run, T0 + 1);
    change.setRunStatus("cancelled");
    world.apply(change.build());
    expect(requestCancel(world.model.run(run.id), T0 + 2, "user")).toBeNull();
  });
});
