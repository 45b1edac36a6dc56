import { describe, expect, it } from "vitest";
import type { RunAttempt } from "../../src/model.ts";
import { expireLease } from "../../src/leases.ts";
import { admitOrdinaryAttempt } from "../../src/ordinary.ts";
import {
  applyLoss,
  applyRecovery,
  decideLoss,
  decideRecovery,
  resolveFailedClosed,
  type LiveInspection,
  type RecoveryDecision,
  type RecoveryEvidence,
} from "../../src/recovery.ts";
import { requestCancel } from "../../src/runs.ts";
import { diamondManifest, task } from "../support/fixtures.ts";
import {
  claimedStepA,
  CoreWorld,
  definitionOf,
  errorCode,
  expectLostIntoNewEpoch,
  NEVER_SPAWNED,
  exitFacts,
  expectAttemptAndStepA,
  expectOneVersionBump,
  expectTransition,
  handleAt,
  readyDiamondWorld,
  runningStepA,
  startingStepA,
  T0,
} from "./core-fixtures.ts";

/**
 * Start-up recovery of workflow task attempts (ADR-0229 §3, ADR-0227 §6), one attempt at a
 * time: orphaned claims get a new ready epoch; past the start barrier only a receipt, two
 * consistent live inspections or trusted not-running evidence decide; everything else fails
 * closed. Recovery never finalizes the parent workflow run.
 */

const NO_RETRY = { max: 0, backoffMs: 0, idempotent: false };
const IDEMPOTENT = { max: 2, backoffMs: 250, idempotent: true };

const NO_EVIDENCE: RecoveryEvidence = {
  receipt: { status: "none" },
  journal: "present",
  inspections: [],
};

function worldWith(retry = NO_RETRY): CoreWorld {
  return readyDiamondWorld({ retry });
}

const claimed = claimedStepA;
const starting = startingStepA;

function running(world: CoreWorld): RunAttempt {
  return runningStepA(world, T0 + 5);
}

function decide(
  world: CoreWorld,
  attempt: RunAttempt,
  evidence: RecoveryEvidence,
): RecoveryDecision {
  return decideRecovery(world.model.scope(attempt.id), evidence);
}

/** Recovers the attempt from `evidence` at T0 + 100. */
function recover(
  world: CoreWorld,
  attempt: RunAttempt,
  evidence: RecoveryEvidence,
): RecoveryDecision {
  return world.recover(attempt.id, evidence, T0 + 100);
}

/** Applies `decision` to the attempt at T0 + 100, whatever the evidence would have said. */
function decideAs(world: CoreWorld, attempt: RunAttempt, decision: RecoveryDecision): void {
  world.apply(applyRecovery(world.model.scope(attempt.id), decision, NO_RETRY, T0 + 100));
}

function inspected(first: LiveInspection, second: LiveInspection): RecoveryEvidence {
  return { ...NO_EVIDENCE, inspections: [first, second] };
}

describe("orphaned claims", () => {
  it("recovery of an orphaned claimed attempt marks it lost and opens a new ready epoch keeping attempt count and ready time", () => {
    const world = worldWith();
    const attempt = claimed(world);
    const stepBefore = world.model.step("run-1", "a");
    const runBefore = world.model.run("run-1");
    const scope = world.model.scope(attempt.id);
    const decision = decideRecovery(scope, {
      receipt: { status: "none" },
      journal: "absent",
      inspections: [],
    });
    expect(decision.kind).toBe("lost_new_epoch");
    const change = applyRecovery(scope, decision, NO_RETRY, T0 + 100)!;
    expectOneVersionBump(change, runBefore);
    world.apply(change);
    expect(world.model.attempt(attempt.id)).toMatchObject({
      status: "lost",
      finishedAtMs: T0 + 100,
    });
    const step = world.model.step("run-1", "a");
    expect(step).toMatchObject({
      status: "ready",
      version: stepBefore.version + 1,
      attemptCount: stepBefore.attemptCount,
      readyAtMs: stepBefore.readyAtMs,
    });
    expect(step.digest).not.toBe(stepBefore.digest);
    expect(
      change.mutations.map((mutation) => [
        mutation.fromStatus,
        mutation.toStatus,
        mutation.fromDigest,
        mutation.toDigest,
      ]),
    ).toEqual([["ready", "ready", stepBefore.digest, step.digest]]);
    expect(world.model.run("run-1").status).toBe("running");
  });

  it("an orphaned claim of an epoch its step already left is lost without moving the step, so the current epoch's claim keeps its epoch", () => {
    const world = worldWith();
    const attempt = claimed(world);
    const scope = world.model.scope(attempt.id);
    const step = scope.step!;
    // The step already holds a newer ready epoch (another claim's): the orphan is not of it.
    const moved = { ...scope, step: { ...step, version: step.version + 1 } };
    const decision = decideRecovery(moved, { ...NO_EVIDENCE, journal: "absent" });
    expect(decision.kind).toBe("lost_new_epoch");
    const change = applyRecovery(moved, decision, NO_RETRY, T0 + 100)!;
    expect(change.steps).toEqual([]);
    expect(change.attempts.map((row) => row.after.status)).toEqual(["lost"]);
    // A step that moved past `ready` (its newer epoch started) is not an integrity failure either.
    const started = {
      ...scope,
      step: { ...step, status: "running" as const, version: step.version + 2 },
    };
    const change2 = applyRecovery(started, decision, NO_RETRY, T0 + 100)!;
    expect(change2.steps).toEqual([]);
    expect(change2.attempts.map((row) => row.after.status)).toEqual(["lost"]);
  });

  it("the new epoch is admitted again through the normal admission path, and the old receipt stays with the old epoch", () => {
    const world = worldWith();
    const first = claimed(world);
    recover(world, first, NEVER_SPAWNED);
    expect(world.tryAdmit("run-1", "a", T0 + 101).kind).toBe("admitted");
    expect(world.model.admission("run-1", first.stepRunId!, first.stepRunVersion!)?.attemptId).toBe(
      first.id,
    );
  });

  it("a claim is orphaned whatever evidence is offered, since it never crossed the start barrier", () => {
    const world = worldWith();
    const attempt = claimed(world);
    for (const evidence of [
      NO_EVIDENCE,
      inspected("running", "running"),
      { ...NO_EVIDENCE, receipt: { status: "invalid" as const, reason: "x" } },
    ]) {
      expect(decide(world, attempt, evidence).kind).toBe("lost_new_epoch");
    }
  });

  it("recovery of a starting attempt without a journal record treats it as never spawned and opens a new epoch", () => {
    const world = worldWith();
    const attempt = starting(world);
    expect(recover(world, attempt, NEVER_SPAWNED).kind).toBe("lost_new_epoch");
    expect(world.model.step("run-1", "a")).toMatchObject({ status: "ready", attemptCount: 0 });
  });

  it("an ordinary orphaned claim is lost and its run goes back to queued", () => {
    const world = new CoreWorld();
    const run = world.startTask();
    const admitted = admitOrdinaryAttempt(run, definitionOf(world.pkg, "work"), T0 + 1)!;
    world.apply(admitted.change);
    recover(world, admitted.attempt, {
      receipt: { status: "none" },
      journal: "absent",
      inspections: [],
    });
    expect(world.model.attempt(admitted.attempt.id).status).toBe("lost");
    expect(world.model.run(run.id).status).toBe("queued");
  });
});

describe("attempts past the start barrier", () => {
  it("a valid receipt completes a starting attempt through ready → running → terminal", () => {
    const world = worldWith();
    const attempt = starting(world);
    const decision = recover(world, attempt, {
      ...NO_EVIDENCE,
      receipt: {
        status: "valid",
        facts: exitFacts(T0 + 4, T0 + 40, 0, { handle: handleAt(T0 + 4) }),
      },
    });
    expect(decision.kind).toBe("complete");
    expectAttemptAndStepA(world, attempt.id, "succeeded", {
      status: "succeeded",
      attemptCount: 1,
      startedAtMs: T0 + 4,
    });
  });

  it("a receipt is read first: it decides even when the inspections disagree", () => {
    const world = worldWith();
    const attempt = running(world);
    const decision = decide(world, attempt, {
      receipt: { status: "valid", facts: exitFacts(T0 + 4, T0 + 40, 1) },
      journal: "present",
      inspections: ["changed_identity", "unverifiable"],
    });
    expect(decision.kind).toBe("complete");
  });

  it("recovery with a tampered receipt fails closed", () => {
    const world = worldWith();
    const attempt = running(world);
    const decision = recover(world, attempt, {
      receipt: { status: "invalid", reason: "mac mismatch" },
      journal: "present",
      inspections: ["not_running", "not_running"],
    });
    expect(decision).toEqual({ kind: "fail_closed", reason: "receipt rejected: mac mismatch" });
    expect(world.model.attempt(attempt.id)).toMatchObject({
      status: "running",
      error: "receipt rejected: mac mismatch",
    });
    expect(world.model.step("run-1", "a").status).toBe("running");
  });

  it("recovery with a rejected journal record fails closed", () => {
    const world = worldWith();
    const attempt = running(world);
    expect(
      decide(world, attempt, {
        ...NO_EVIDENCE,
        journal: "invalid",
        inspections: ["not_running", "not_running"],
      }).kind,
    ).toBe("fail_closed");
  });

  it("recovery of a starting attempt without receipt and with a changed identity fails closed", () => {
    const world = worldWith();
    const attempt = starting(world);
    const decision = recover(world, attempt, inspected("changed_identity", "changed_identity"));
    expect(decision.kind).toBe("fail_closed");
    expect(world.model.attempt(attempt.id).status).toBe("starting");
    expect(world.model.step("run-1", "a").status).toBe("ready");
  });

  it("recovery of a running attempt whose pid now belongs to another process fails closed", () => {
    const world = worldWith();
    const attempt = running(world);
    expect(decide(world, attempt, inspected("changed_identity", "running"))).toEqual({
      kind: "fail_closed",
      reason: "the pid now belongs to another process",
    });
    expect(decide(world, attempt, inspected("not_running", "changed_identity")).kind).toBe(
      "fail_closed",
    );
  });

  it("an unverifiable platform, a single inspection, inconsistent inspections or a missing handle fail closed", () => {
    const world = worldWith();
    const attempt = running(world);
    expect(decide(world, attempt, inspected("unverifiable", "unverifiable")).kind).toBe(
      "fail_closed",
    );
    expect(decide(world, attempt, { ...NO_EVIDENCE, inspections: ["not_running"] }).kind).toBe(
      "fail_closed",
    );
    expect(decide(world, attempt, inspected("running", "not_running")).kind).toBe("fail_closed");
    expect(decide(world, attempt, inspected("not_running", "running")).kind).toBe("fail_closed");
    const withoutHandle = { ...world.model.scope(attempt.id), attempt: { ...attempt, pid: null } };
    expect(decideRecovery(withoutHandle, inspected("running", "running"))).toEqual({
      kind: "fail_closed",
      reason: "no persisted process handle to inspect",
    });
  });

  it("trusted not-running evidence needs no persisted handle: a starting attempt whose journal proves the process gone is lost and its step failed", () => {
    // The journal's boot id proves a process of an earlier boot is gone even when the runtime
    // died before it persisted the handle; the step then fails, never silently retried.
    const world = worldWith();
    const attempt = starting(world);
    expect(recover(world, attempt, inspected("not_running", "not_running")).kind).toBe(
      "lost_failed",
    );
    expectAttemptAndStepA(world, attempt.id, "lost", { status: "failed", attemptCount: 0 });
  });

  it("two consistent live inspections of the exact identity re-adopt the attempt and write nothing", () => {
    const world = worldWith();
    const attempt = running(world);
    const scope = world.model.scope(attempt.id);
    const decision = decideRecovery(scope, inspected("running", "running"));
    expect(decision).toEqual({ kind: "readopt" });
    expect(applyRecovery(scope, decision, NO_RETRY, T0 + 100)).toBeNull();
  });

  it("failing closed records the reason once, changes no status, and repeating the same decision writes nothing", () => {
    const world = worldWith();
    const attempt = running(world);
    const before = world.model.run("run-1");
    const scope = world.model.scope(attempt.id);
    const decision = decideRecovery(scope, inspected("unverifiable", "unverifiable"));
    const change = applyRecovery(scope, decision, NO_RETRY, T0 + 100)!;
    expectOneVersionBump(change, before);
    expect(change.events.map((event) => event.type)).toEqual(["attempt.recovery_failed_closed"]);
    expect(change.steps).toEqual([]);
    world.apply(change);
    const again = world.model.scope(attempt.id);
    expect(
      applyRecovery(
        again,
        decideRecovery(again, inspected("unverifiable", "unverifiable")),
        NO_RETRY,
        T0 + 200,
      ),
    ).toBeNull();
  });

  it("recovery of a running attempt with trusted not-running evidence yields attempt lost and step failed (running → lost → failed chain)", () => {
    const world = worldWith();
    const attempt = running(world);
    const scope = world.model.scope(attempt.id);
    const decision = decideRecovery(scope, inspected("not_running", "not_running"));
    expect(decision.kind).toBe("lost_failed");
    const change = applyRecovery(scope, decision, NO_RETRY, T0 + 100)!;
    expect(change.events.map((event) => [event.type, event.data.from, event.data.to])).toEqual([
      ["attempt.status_changed", "running", "lost"],
      ["step.status_changed", "running", "failed"],
    ]);
    expect(change.mutations.map((mutation) => [mutation.fromStatus, mutation.toStatus])).toEqual([
      ["running", "failed"],
    ]);
    world.apply(change);
    expectAttemptAndStepA(world, attempt.id, "lost", { status: "failed", attemptCount: 1 });
  });

  it("ADR-0227 §6: a running attempt lost on trusted evidence is never retried after the start barrier, even for an idempotent task with budget left", () => {
    const world = worldWith(IDEMPOTENT);
    const attempt = running(world);
    const before = world.model.step("run-1", "a");
    recover(world, attempt, inspected("not_running", "not_running"));
    expectAttemptAndStepA(world, attempt.id, "lost", {
      status: "failed",
      version: before.version + 1,
      attemptCount: 1,
    });
    // Nothing new to admit: the step is terminal.
    expect(world.model.attemptsOf("run-1")).toHaveLength(1);
  });

  it("a lost attempt of an idempotent task is not retried after a cancel intent", () => {
    const world = worldWith(IDEMPOTENT);
    const attempt = running(world);
    world.apply(requestCancel(world.model.run("run-1"), T0 + 50, "user"));
    recover(world, attempt, inspected("not_running", "not_running"));
    expect(world.model.step("run-1", "a").status).toBe("failed");
  });

  it("recovery never finalizes the parent workflow run", () => {
    const world = worldWith();
    const attempt = running(world);
    const scope = world.model.scope(attempt.id);
    const change = applyRecovery(
      scope,
      decideRecovery(scope, inspected("not_running", "not_running")),
      NO_RETRY,
      T0 + 100,
    )!;
    expect(change.events.some((event) => event.type === "run.status_changed")).toBe(false);
    world.apply(change);
    // Nothing is live and the failed step decides the run, yet it stays running until the frontier sees it.
    expect(world.model.run("run-1").status).toBe("running");
    world.frontier(T0 + 101);
    expect(world.model.run("run-1").status).toBe("failed");
  });

  it("ADR-0227 §6: an ordinary running attempt lost on trusted evidence loses the run, whatever its retry policy", () => {
    for (const [retry, expected] of [
      [NO_RETRY, "lost"],
      [{ max: 1, backoffMs: 0, idempotent: false }, "lost"],
      [IDEMPOTENT, "lost"],
    ] as const) {
      const world = new CoreWorld(
        diamondManifest("demo", { tasks: [task("work", ["true"], { retry })] }),
      );
      const run = world.startTask();
      const admitted = admitOrdinaryAttempt(run, definitionOf(world.pkg, "work"), T0 + 1)!;
      world.apply(admitted.change);
      world.markStarting(admitted.attempt.id, T0 + 2);
      world.markRunning(admitted.attempt.id, T0 + 2, T0 + 3);
      recover(
        world,
        world.model.attempt(admitted.attempt.id),
        inspected("not_running", "not_running"),
      );
      expect(world.model.run(run.id).status).toBe(expected);
    }
  });

  it("a pristine remote claim that never held a lease is dispatcher backlog, never lost for its missing lease", () => {
    const world = new CoreWorld(
      diamondManifest("demo", {
        tasks: [task("work", ["run"], { executor: "remote_worker", pool: "gpu" })],
      }),
    );
    const run = world.startWorkflow();
    world.frontier(T0 + 1, run.id);
    const attempt = world.admit("run-1", "a", T0 + 2);
    expect(attempt).toMatchObject({
      executor: "remote_worker",
      leaseExpiresAtMs: null,
      leaseVersion: 0,
    });
    expect(expireLease(world.model.scope(attempt.id), NO_RETRY, T0 + 10 * 60_000)).toBeNull();
    // Once a lease was held and expired before the start barrier, the claim is lost and the step gets a new epoch.
    const leased = {
      ...attempt,
      leaseWorkerId: "worker-1",
      leaseVersion: 1,
      leaseExpiresAtMs: T0 + 30_000,
    };
    const change = expireLease(
      { ...world.model.scope(attempt.id), attempt: leased },
      NO_RETRY,
      T0 + 30_000,
    );
    expect(change?.attempts[0]?.after.status).toBe("lost");
    expect(change?.mutations.map((mutation) => [mutation.fromStatus, mutation.toStatus])).toEqual([
      ["ready", "ready"],
    ]);
  });

  it("terminal attempts need no recovery", () => {
    const world = worldWith();
    const attempt = claimed(world);
    recover(world, attempt, NEVER_SPAWNED);
    expect(decide(world, world.model.attempt(attempt.id), NO_EVIDENCE)).toEqual({ kind: "none" });
  });
});

describe("an operator resolves an attempt that failed closed", () => {
  it("a starting attempt without a handle that failed closed becomes lost with the operator's reason; its step fails and is never retried", () => {
    const world = worldWith(IDEMPOTENT);
    const attempt = starting(world);
    const decision = recover(world, attempt, {
      receipt: { status: "none" },
      journal: "present",
      inspections: [],
    });
    expect(decision.kind).toBe("fail_closed");
    const failedClosed = world.model.attempt(attempt.id);
    expect(failedClosed.status).toBe("starting");
    expect(failedClosed.error).not.toBeNull();
    world.apply(
      resolveFailedClosed(
        world.model.scope(attempt.id),
        "host rebooted, no such process",
        IDEMPOTENT,
        T0 + 200,
      ),
    );
    const resolved = world.model.attempt(attempt.id);
    expect(resolved.status).toBe("lost");
    expect(resolved.error).toBe("resolved as lost by an operator: host rebooted, no such process");
    expect(world.model.step("run-1", "a").status).toBe("failed");
    expect(world.model.attemptsOf("run-1")).toHaveLength(1);
  });

  it("refuses a live attempt that did not fail closed, and a settled one, writing nothing", () => {
    const world = worldWith();
    const attempt = running(world);
    expect(() =>
      resolveFailedClosed(world.model.scope(attempt.id), "looks stuck", NO_RETRY, T0 + 200),
    ).toThrow(/has not failed closed/);
    recover(world, attempt, inspected("not_running", "not_running"));
    expect(world.model.attempt(attempt.id).status).toBe("lost");
    expect(() =>
      resolveFailedClosed(world.model.scope(attempt.id), "again", NO_RETRY, T0 + 300),
    ).toThrow(/only a starting or running attempt/);
  });
});

describe("each recovery decision is its own rule's", () => {
  const twice = (inspection: LiveInspection): LiveInspection[] => [inspection, inspection];

  it("each kind of evidence decides with its own reason", () => {
    const world = worldWith();
    const live = running(world);
    const scope = world.model.scope(live.id);
    const startingScope = { ...scope, attempt: { ...live, status: "starting" as const } };
    const claimedScope = { ...scope, attempt: { ...live, status: "claimed" as const } };
    const evidence = (
      journal: RecoveryEvidence["journal"],
      inspections: LiveInspection[],
    ): RecoveryEvidence => ({ receipt: { status: "none" }, journal, inspections });
    const cases: [typeof scope, RecoveryEvidence, RecoveryDecision][] = [
      [
        claimedScope,
        NO_EVIDENCE,
        { kind: "lost_new_epoch", reason: "orphaned claim never crossed the start barrier" },
      ],
      [
        scope,
        { ...NO_EVIDENCE, receipt: { status: "invalid", reason: "bad mac" } },
        { kind: "fail_closed", reason: "receipt rejected: bad mac" },
      ],
      [
        scope,
        evidence("invalid", twice("running")),
        { kind: "fail_closed", reason: "journal record rejected" },
      ],
      [
        startingScope,
        evidence("absent", twice("running")),
        { kind: "lost_new_epoch", reason: "no journal record: the process was never spawned" },
      ],
      // A running attempt proved it spawned: a missing journal or spawn record does not undo that.
      [scope, evidence("absent", twice("running")), { kind: "readopt" }],
      [
        startingScope,
        evidence("never_spawned", twice("running")),
        {
          kind: "lost_new_epoch",
          reason:
            "journaled but never spawned: no spawn record and no supervisor that could still write one",
        },
      ],
      [scope, evidence("never_spawned", twice("running")), { kind: "readopt" }],
      [
        scope,
        evidence("present", ["running"]),
        { kind: "fail_closed", reason: "fewer than two live inspections" },
      ],
      [
        scope,
        evidence("present", twice("not_running")),
        {
          kind: "lost_failed",
          reason: "trusted evidence: the exact process is not running and left no receipt",
        },
      ],
      [scope, evidence("present", twice("running")), { kind: "readopt" }],
    ];
    for (const [caseScope, caseEvidence, expected] of cases)
      expect(decideRecovery(caseScope, caseEvidence)).toEqual(expected);
    // Two inspections that neither agree on running nor on not running: each pair's own reason.
    const failedClosedBy: Record<string, [LiveInspection, LiveInspection][]> = {
      "the pid now belongs to another process": [
        ["changed_identity", "running"],
        ["running", "changed_identity"],
        ["unverifiable", "changed_identity"],
      ],
      "the platform cannot verify the process identity": [
        ["unverifiable", "running"],
        ["running", "unverifiable"],
      ],
      "inconsistent inspections: running, not_running": [["running", "not_running"]],
    };
    for (const [reason, pairs] of Object.entries(failedClosedBy))
      for (const pair of pairs)
        expect(decideRecovery(scope, evidence("present", pair))).toEqual({
          kind: "fail_closed",
          reason,
        });
  });

  it("each missing part of the persisted handle fails closed where live inspections would re-adopt", () => {
    const world = worldWith();
    const live = running(world);
    const scope = world.model.scope(live.id);
    for (const missing of [{ pid: null }, { processStartTicks: null }, { bootId: null }])
      expect(
        decideRecovery(
          { ...scope, attempt: { ...live, ...missing } },
          { receipt: { status: "none" }, journal: "present", inspections: twice("running") },
        ),
      ).toEqual({ kind: "fail_closed", reason: "no persisted process handle to inspect" });
  });

  it("no decision and re-adoption write nothing", () => {
    const world = worldWith();
    const live = running(world);
    const scope = world.model.scope(live.id);
    expect(applyRecovery(scope, { kind: "none" }, NO_RETRY, T0 + 100)).toBeNull();
    expect(applyRecovery(scope, { kind: "readopt" }, NO_RETRY, T0 + 100)).toBeNull();
  });

  it("failing closed records the reason and the status it kept in its event", () => {
    const world = worldWith();
    const live = running(world);
    decideAs(world, live, { kind: "fail_closed", reason: "why" });
    expect(world.model.eventsOf("run-1").at(-1)).toMatchObject({
      type: "attempt.recovery_failed_closed",
      data: { reason: "why", status: "running" },
    });
  });

  it("a new ready epoch names its reason and the lost attempt in the attempt's and the step's events", () => {
    const world = worldWith();
    const attempt = claimed(world);
    decideAs(world, attempt, { kind: "lost_new_epoch", reason: "gone" });
    const [lost, epoch] = world.model.eventsOf("run-1").slice(-2);
    expect([lost?.type, epoch?.type]).toEqual(["attempt.status_changed", "step.status_changed"]);
    expectTransition(lost, "claimed", "lost", { reason: "gone" });
    expectTransition(epoch, "ready", "ready", {
      reason: "new ready epoch after orphaned claim",
      lostAttemptId: attempt.id,
    });
  });

  it("a new ready epoch for a step that is no longer ready is an integrity error", () => {
    const world = worldWith();
    const attempt = claimed(world);
    const scope = world.model.scope(attempt.id);
    const step = { ...scope.step!, status: "running" as const };
    expect(() =>
      applyRecovery(
        { ...scope, step },
        { kind: "lost_new_epoch", reason: "gone" },
        NO_RETRY,
        T0 + 100,
      ),
    ).toThrow(
      expect.objectContaining({
        code: "integrity",
        message: `step ${step.id} of orphaned attempt ${attempt.id} is running, not ready`,
      }),
    );
  });

  it("an ordinary orphaned claim requeues its run with the reason, and only a dispatching run", () => {
    const world = new CoreWorld();
    const run = world.startTask();
    const admitted = admitOrdinaryAttempt(run, definitionOf(world.pkg, "work"), T0 + 1)!;
    world.apply(admitted.change);
    const scope = world.model.scope(admitted.attempt.id);
    const lost = { kind: "lost_new_epoch", reason: "gone" } as const;
    const change = applyRecovery(scope, lost, NO_RETRY, T0 + 100)!;
    expect(change.runs[0]?.after.status).toBe("queued");
    expectTransition(change.events.at(-1), "dispatching", "queued", { reason: "gone" });
    const notDispatching = { ...scope, run: { ...scope.run, status: "running" as const } };
    expect(applyRecovery(notDispatching, lost, NO_RETRY, T0 + 100)!.runs[0]?.after.status).toBe(
      "running",
    );
  });

  it("a lost started attempt fails its step at the loss time with the reason and the attempt", () => {
    const world = worldWith();
    const live = running(world);
    decideAs(world, live, { kind: "lost_failed", reason: "gone" });
    expect(world.model.step("run-1", "a")).toMatchObject({
      status: "failed",
      finishedAtMs: T0 + 100,
    });
    const [lost, failed] = world.model.eventsOf("run-1").slice(-2);
    expectTransition(lost, "running", "lost", { reason: "gone" });
    expectTransition(failed, "running", "failed", { reason: "gone", lostAttemptId: live.id });
  });

  it("a lost attempt whose step already settled leaves the step as it is", () => {
    const world = worldWith();
    const live = running(world);
    const scope = world.model.scope(live.id);
    const settled = { ...scope, step: { ...scope.step!, status: "cancelled" as const } };
    const change = applyRecovery(
      settled,
      { kind: "lost_failed", reason: "gone" },
      NO_RETRY,
      T0 + 100,
    )!;
    expect(change.steps).toEqual([]);
    expect(change.attempts[0]?.after.status).toBe("lost");
  });

  it("an operator's resolution is refused with conflict", () => {
    const world = worldWith();
    const live = running(world);
    const scope = world.model.scope(live.id);
    for (const refused of [scope, { ...scope, attempt: { ...live, status: "lost" as const } }]) {
      let code = "no error";
      try {
        resolveFailedClosed(refused, "x", NO_RETRY, T0 + 200);
      } catch (error) {
        code = (error as { code: string }).code;
      }
      expect(code).toBe("conflict");
    }
  });
});

describe("one loss rule for local and remote attempts (ADR-0229 §3)", () => {
  it("lost before the start barrier (new epoch) only for a claim, or a starting attempt proven never spawned; otherwise after it", () => {
    const world = worldWith();
    const live = running(world);
    const as = (status: RunAttempt["status"]): RunAttempt => ({ ...live, status });
    expect(decideLoss(as("claimed"), "unknown", "r")).toEqual({
      kind: "lost_new_epoch",
      reason: "r",
    });
    expect(decideLoss(as("claimed"), "never_spawned", "r").kind).toBe("lost_new_epoch");
    expect(decideLoss(as("starting"), "never_spawned", "r")).toEqual({
      kind: "lost_new_epoch",
      reason: "r",
    });
    // Without proof, a starting attempt may have spawned: its outcome is unknown.
    expect(decideLoss(as("starting"), "unknown", "r")).toEqual({
      kind: "lost_failed",
      reason: "r",
    });
    expect(decideLoss(as("running"), "unknown", "r")).toEqual({ kind: "lost_failed", reason: "r" });
  });

  it("evidence that a running attempt never spawned contradicts its recorded process and is refused; a settled attempt is not lost again", () => {
    const world = worldWith();
    const live = running(world);
    expect(errorCode(() => decideLoss(live, "never_spawned", "r"))).toBe("conflict");
    for (const status of ["succeeded", "failed", "timed_out", "cancelled", "lost"] as const)
      for (const spawn of ["unknown", "never_spawned"] as const)
        expect(errorCode(() => decideLoss({ ...live, status }, spawn, "r"))).toBe("conflict");
  });

  it("a starting attempt proven never spawned opens a new ready epoch, whose claim runs the step; without the proof the step fails and is never retried", () => {
    const proven = worldWith(IDEMPOTENT);
    const first = starting(proven);
    const stepBefore = proven.model.step("run-1", "a");
    const scope = proven.model.scope(first.id);
    proven.apply(
      applyLoss(scope, decideLoss(first, "never_spawned", "never spawned"), IDEMPOTENT, T0 + 100),
    );
    expectLostIntoNewEpoch(proven, first.id, "never spawned", stepBefore);
    expect(proven.model.step("run-1", "a").attemptCount).toBe(0);
    const next = proven.admit("run-1", "a", T0 + 101);
    expect(next.id).not.toBe(first.id);
    expect(next.stepRunVersion).toBe(stepBefore.version + 1);

    // The same attempt, the same idempotent task with budget left: without proof it is lost after
    // the barrier, and ADR-0227 §6 forbids an automatic retry.
    const unproven = worldWith(IDEMPOTENT);
    const other = starting(unproven);
    unproven.apply(
      applyLoss(
        unproven.model.scope(other.id),
        decideLoss(other, "unknown", "gone"),
        IDEMPOTENT,
        T0 + 100,
      ),
    );
    expect(unproven.model.step("run-1", "a").status).toBe("failed");
    expect(errorCode(() => unproven.tryAdmit("run-1", "a", T0 + 101))).toBe("integrity");
  });

  it("the device's recovery decides through the same rule: never-spawned evidence on a starting attempt is the remote report's decision", () => {
    const world = worldWith();
    const attempt = starting(world);
    const scope = world.model.scope(attempt.id);
    const reason = "no journal record: the process was never spawned";
    expect(decideRecovery(scope, NEVER_SPAWNED)).toEqual(
      decideLoss(attempt, "never_spawned", reason),
    );
    expect(
      decideRecovery(scope, { ...NO_EVIDENCE, journal: "never_spawned", inspections: [] }).kind,
    ).toBe(decideLoss(attempt, "never_spawned", reason).kind);
    expect(decideRecovery(scope, inspected("not_running", "not_running")).kind).toBe(
      decideLoss(attempt, "unknown", reason).kind,
    );
  });

  it("a refused loss names the attempt and why: a running attempt's recorded process, a settled attempt's status", () => {
    const world = worldWith();
    const live = running(world);
    expect(() => decideLoss(live, "never_spawned", "r")).toThrow(
      `attempt ${live.id} is running: its process is on record, so it did spawn`,
    );
    expect(() => decideLoss({ ...live, status: "succeeded" }, "unknown", "r")).toThrow(
      `attempt ${live.id} is already succeeded`,
    );
  });
});
