import { expect } from "vitest";
import { admitTaskAttempt, type AdmissionResult } from "../../src/admission.ts";
import { isQlrError, QlrError } from "../../src/errors.ts";
import { convergeCancellation } from "../../src/cancellation.ts";
import {
  complete,
  markRunning,
  markStarting,
  startFailed,
  type AttemptScope,
  type CompletionFacts,
} from "../../src/execution.ts";
import { advanceFrontier } from "../../src/frontier.ts";
import type { Manifest, TaskSpec } from "../../src/manifest/types.ts";
import type {
  AdmissionReceipt,
  AttemptStatus,
  ChangeSet,
  ProcessHandleFacts,
  Run,
  RunAttempt,
  RunEvent,
  StepMutation,
  StepRun,
} from "../../src/model.ts";
import { admitOrdinaryAttempt } from "../../src/ordinary.ts";
import {
  materializePlans,
  nextGeneration,
  reconcileTasks,
  type Generation,
  type Reconciliation,
  type RetryPolicy,
  type TaskDefinition,
  type WorkflowPlan,
} from "../../src/packages.ts";
import {
  applyRecovery,
  decideRecovery,
  type RecoveryDecision,
  type RecoveryEvidence,
} from "../../src/recovery.ts";
import { createOrdinaryRun, createWorkflowRun } from "../../src/runs.ts";
import { diamondManifest, task } from "../support/fixtures.ts";

/** Unit tests read a launcher's report from here, with the other fixtures of the core. */
export { exitFacts } from "../support/fixtures.ts";

/**
 * Shared helpers of the core unit tests: an applied package (generation, reconciliation,
 * plans) and an in-memory model that applies change sets the way the SQL store does (CAS on
 * `before.version`, unique events and admission receipts), so the pure functions can be driven
 * through whole lifecycles without a database.
 */

/** The time every test world starts at; later times are offsets from it. */
export const T0 = 1_800_000_000_000;

export interface AppliedPackage {
  readonly manifest: Manifest;
  readonly generation: Generation;
  readonly reconciliation: Reconciliation;
  readonly plans: readonly WorkflowPlan[];
}

export function applyManifest(
  manifest: Manifest,
  nowMs = T0,
  head: { generation: number; manifestDigest: Generation["manifestDigest"] } | null = null,
): AppliedPackage {
  const decision = nextGeneration(head, manifest, nowMs);
  if (!decision.changed) throw new Error("the manifest did not change: no generation to apply");
  const reconciliation = reconcileTasks(decision.generation);
  return {
    manifest,
    generation: decision.generation,
    reconciliation,
    plans: materializePlans(decision.generation, reconciliation),
  };
}

/**
 * Generation 1 of the diamond package (`work` only) and generation 2 over `secondTasks`, applied
 * at T0 + 1 on top of the first: the two generations a binding test compares.
 */
export function twoDiamondGenerations(secondTasks: TaskSpec[]): {
  first: AppliedPackage;
  second: AppliedPackage;
} {
  const first = applyManifest(diamondManifest("demo"));
  const second = applyManifest(diamondManifest("demo", { tasks: secondTasks }), T0 + 1, {
    generation: 1,
    manifestDigest: first.generation.manifestDigest,
  });
  return { first, second };
}

export function definitionOf(pkg: AppliedPackage, task: string): TaskDefinition {
  const found = pkg.reconciliation.definitions.find((definition) => definition.task === task);
  if (found === undefined) throw new Error(`no definition for task ${task}`);
  return found;
}

export function planOf(pkg: AppliedPackage, workflow: string): WorkflowPlan {
  const found = pkg.plans.find((plan) => plan.workflow === workflow);
  if (found === undefined) throw new Error(`no plan for workflow ${workflow}`);
  return found;
}

export function handleAt(startedAtMs: number, pid = 4242): ProcessHandleFacts {
  return { pid, processStartTicks: `ticks-${pid}`, bootId: "boot-1", startedAtMs };
}

function epochKey(runId: string, stepRunId: string, stepRunVersion: number): string {
  return `${runId}|${stepRunId}|${stepRunVersion}`;
}

/**
 * The rows of a store held in maps. `apply` refuses exactly what the SQL store refuses: an
 * update whose `before.version` is not the stored version (`conflict`), an insert of an
 * existing row, a duplicate `(runId, seq)` event and a second admission receipt of one ready
 * epoch. A refused change set writes nothing.
 */
export class MemoryModel {
  readonly runs = new Map<string, Run>();
  readonly steps = new Map<string, StepRun>();
  readonly attempts = new Map<string, RunAttempt>();
  readonly events: RunEvent[] = [];
  readonly mutations: StepMutation[] = [];
  readonly admissions = new Map<string, AdmissionReceipt>();
  /** Step ids of each run in plan order. */
  private readonly stepOrder = new Map<string, string[]>();
  changeSets = 0;

  apply(change: ChangeSet): void {
    const problem = this.check(change);
    if (problem !== null) throw new QlrError("conflict", problem);
    for (const { after } of change.runs) this.runs.set(after.id, after);
    for (const { before, after } of change.steps) {
      if (before === null)
        this.stepOrder.set(after.runId, [...(this.stepOrder.get(after.runId) ?? []), after.id]);
      this.steps.set(after.id, after);
    }
    for (const { after } of change.attempts) this.attempts.set(after.id, after);
    this.events.push(...change.events);
    this.mutations.push(...change.mutations);
    for (const receipt of change.admissions)
      this.admissions.set(
        epochKey(receipt.runId, receipt.stepRunId, receipt.stepRunVersion),
        receipt,
      );
    this.changeSets += 1;
  }

  private check(change: ChangeSet): string | null {
    const cas = <T extends { id: string; version: number }>(
      table: string,
      rows: ReadonlyMap<string, T>,
      before: T | null,
      after: T,
    ): string | null => {
      const held = rows.get(after.id);
      if (before === null) return held === undefined ? null : `${table} ${after.id} already exists`;
      if (held === undefined) return `${table} ${after.id} does not exist`;
      return held.version === before.version
        ? null
        : `${table} ${after.id} is at version ${held.version}, the change expected ${before.version}`;
    };
    for (const { before, after } of change.runs) {
      const problem = cas("run", this.runs, before, after);
      if (problem !== null) return problem;
    }
    for (const { before, after } of change.steps) {
      const problem = cas("step", this.steps, before, after);
      if (problem !== null) return problem;
    }
    for (const { before, after } of change.attempts) {
      const problem = cas("attempt", this.attempts, before, after);
      if (problem !== null) return problem;
    }
    const seqs = new Set(this.events.map((event) => `${event.runId}|${event.seq}`));
    const ids = new Set(this.events.map((event) => event.id));
    for (const event of change.events) {
      if (seqs.has(`${event.runId}|${event.seq}`))
        return `event ${event.runId}#${event.seq} already exists`;
      if (ids.has(event.id)) return `event id ${event.id} already exists`;
      seqs.add(`${event.runId}|${event.seq}`);
      ids.add(event.id);
    }
    for (const receipt of change.admissions) {
      if (this.admissions.has(epochKey(receipt.runId, receipt.stepRunId, receipt.stepRunVersion)))
        return `ready epoch ${receipt.stepRunId}@${receipt.stepRunVersion} already has a winner`;
    }
    return null;
  }

  run(runId: string): Run {
    const run = this.runs.get(runId);
    if (run === undefined) throw new Error(`no run ${runId}`);
    return run;
  }

  stepsOf(runId: string): StepRun[] {
    return (this.stepOrder.get(runId) ?? [])
      .map((id) => this.steps.get(id))
      .filter((step): step is StepRun => step !== undefined);
  }

  step(runId: string, name: string): StepRun {
    const found = this.stepsOf(runId).find((step) => step.name === name);
    if (found === undefined) throw new Error(`run ${runId} has no step ${name}`);
    return found;
  }

  attemptsOf(runId: string): RunAttempt[] {
    return [...this.attempts.values()]
      .filter((attempt) => attempt.runId === runId)
      .sort((a, b) => a.number - b.number);
  }

  attempt(attemptId: string): RunAttempt {
    const found = this.attempts.get(attemptId);
    if (found === undefined) throw new Error(`no attempt ${attemptId}`);
    return found;
  }

  eventsOf(runId: string): RunEvent[] {
    return this.events.filter((event) => event.runId === runId);
  }

  admission(runId: string, stepRunId: string, stepRunVersion: number): AdmissionReceipt | null {
    return this.admissions.get(epochKey(runId, stepRunId, stepRunVersion)) ?? null;
  }

  /** The scope of one attempt as a transaction would read it. */
  scope(attemptId: string): AttemptScope {
    const attempt = this.attempt(attemptId);
    const step = attempt.stepRunId === null ? null : (this.steps.get(attempt.stepRunId) ?? null);
    return { run: this.run(attempt.runId), step, attempt };
  }
}

/** A world of one applied package and its runs. */
export class CoreWorld {
  readonly model = new MemoryModel();
  readonly pkg: AppliedPackage;

  constructor(manifest: Manifest = diamondManifest("demo")) {
    this.pkg = applyManifest(manifest);
  }

  startWorkflow(workflow = "diamond", runId = "run-1", nowMs = T0): Run {
    const created = createWorkflowRun(planOf(this.pkg, workflow), this.pkg.reconciliation.receipt, {
      runId,
      nowMs,
      idempotencyKey: null,
      scheduleName: null,
    });
    this.model.apply(created.change);
    return created.run;
  }

  startTask(task = "work", runId = "run-o1", nowMs = T0): Run {
    const created = createOrdinaryRun(
      definitionOf(this.pkg, task),
      this.pkg.reconciliation.receipt,
      { runId, nowMs, idempotencyKey: null, scheduleName: null },
    );
    this.model.apply(created.change);
    return created.run;
  }

  planFor(run: Run): WorkflowPlan {
    const plan = this.pkg.plans.find((candidate) => candidate.digest === run.planDigest);
    if (plan === undefined) throw new Error(`run ${run.id} has no plan in this package`);
    return plan;
  }

  /** Runs the pure admission of one step against the model's current rows, without applying it. */
  tryAdmit(runId: string, stepName: string, nowMs: number): AdmissionResult {
    const run = this.model.run(runId);
    const step = this.model.step(runId, stepName);
    return admitTaskAttempt({
      plan: this.planFor(run),
      run,
      step,
      reconciliation: this.pkg.reconciliation.receipt,
      definition: definitionOf(this.pkg, step.task),
      existing: this.model.admission(runId, step.id, step.version),
      nowMs,
    });
  }

  /** Admits one step and applies the result; returns the new attempt. */
  admit(runId: string, stepName: string, nowMs: number): RunAttempt {
    const result = this.tryAdmit(runId, stepName, nowMs);
    if (result.kind !== "admitted") throw new Error(`step ${stepName} was replayed, not admitted`);
    this.model.apply(result.change);
    return result.attempt;
  }

  apply(change: ChangeSet | null): void {
    if (change !== null) this.model.apply(change);
  }

  /** Runs the frontier over run `runId`'s current rows at `nowMs` and applies it; its change, or null. */
  frontier(nowMs: number, runId = "run-1"): ChangeSet | null {
    return this.passOver(advanceFrontier, nowMs, runId);
  }

  /** Converges run `runId`'s cancellation over its current rows at `nowMs` and applies it; its change, or null. */
  converge(nowMs: number, runId = "run-1"): ChangeSet | null {
    return this.passOver(convergeCancellation, nowMs, runId);
  }

  /** A whole-run pass (the frontier or cancellation convergence) over the run's current rows, applied. */
  private passOver(
    pass: (run: Run, steps: StepRun[], attempts: RunAttempt[], nowMs: number) => ChangeSet | null,
    nowMs: number,
    runId: string,
  ): ChangeSet | null {
    const change = pass(
      this.model.run(runId),
      this.model.stepsOf(runId),
      this.model.attemptsOf(runId),
      nowMs,
    );
    this.apply(change);
    return change;
  }

  /** Moves attempt `attemptId` claimed → starting at `nowMs` and applies it; its change. */
  markStarting(attemptId: string, nowMs: number): ChangeSet {
    const change = markStarting(this.model.scope(attemptId), nowMs);
    this.apply(change);
    return change;
  }

  /** Moves attempt `attemptId` to running with a handle started at `startedAtMs`, recorded at `nowMs`; its change. */
  markRunning(attemptId: string, startedAtMs: number, nowMs: number): ChangeSet {
    const change = markRunning(this.model.scope(attemptId), handleAt(startedAtMs), nowMs);
    this.apply(change);
    return change;
  }

  /** Fails the start of attempt `attemptId` (ENOENT) at `nowMs` under `retry` and applies it; its change. */
  startFailed(attemptId: string, nowMs: number, retry: RetryPolicy = NO_RETRY): ChangeSet {
    const change = startFailed(this.model.scope(attemptId), "ENOENT", retry, nowMs);
    this.apply(change);
    return change;
  }

  /** Decides one attempt's recovery from `evidence` and applies it under `retry`; returns the decision. */
  recover(
    attemptId: string,
    evidence: RecoveryEvidence,
    nowMs: number,
    retry: RetryPolicy = definitionOf(this.pkg, "work").retry,
  ): RecoveryDecision {
    const scope = this.model.scope(attemptId);
    const decision = decideRecovery(scope, evidence);
    this.apply(applyRecovery(scope, decision, retry, nowMs));
    return decision;
  }
}

/** What recovery finds of an attempt that never spawned: no receipt, no journal, no process. */
export const NEVER_SPAWNED: RecoveryEvidence = {
  receipt: { status: "none" },
  journal: "absent",
  inspections: [],
};

/** Asserts the shape every change set of one run must have: one run row, version +1, contiguous new events. */
export function expectOneVersionBump(change: ChangeSet, before: Run): void {
  expect(change.runs).toHaveLength(1);
  expect(change.runs[0]?.before).toEqual(before);
  expect(change.runs[0]?.after.version).toBe(before.version + 1);
  expect(change.events.map((event) => event.seq)).toEqual(
    change.events.map((_, index) => before.eventSeq + index + 1),
  );
  expect(change.runs[0]?.after.eventSeq).toBe(before.eventSeq + change.events.length);
}

/** Asserts attempt `attemptId` is lost with `error` and step `a` of run-1 is ready in the epoch after `stepBefore`'s. */
export function expectLostIntoNewEpoch(
  world: CoreWorld,
  attemptId: string,
  error: string,
  stepBefore: StepRun,
): void {
  expect(world.model.attempt(attemptId)).toMatchObject({ status: "lost", error });
  expect(world.model.step("run-1", "a")).toMatchObject({
    status: "ready",
    version: stepBefore.version + 1,
  });
}

/** Asserts attempt `attemptId` has `attemptStatus` and step `a` of run-1 matches `stepA`. */
export function expectAttemptAndStepA(
  world: CoreWorld,
  attemptId: string,
  attemptStatus: AttemptStatus,
  stepA: Partial<StepRun>,
): void {
  expect(world.model.attempt(attemptId).status).toBe(attemptStatus);
  expect(world.model.step("run-1", "a")).toMatchObject(stepA);
}

/** Asserts that `event` records a status change `from` → `to`, with whatever else `data` names. */
export function expectTransition(
  event: RunEvent | undefined,
  from: string,
  to: string,
  data: Readonly<Record<string, unknown>> = {},
): void {
  expect(event).toMatchObject({ data: { from, to, ...data } });
}

/** Calls `fn` and returns the QlrError code it threw (or "no error"). */
/** The code of the QlrError `fn` throws; null when it returns, "not a QlrError" for anything else. */
export function thrownCode(fn: () => unknown): string | null {
  try {
    fn();
    return null;
  } catch (error) {
    return isQlrError(error) ? error.code : "not a QlrError";
  }
}

export function errorCode(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    return (error as { code?: string }).code ?? "not a QlrError";
  }
  return "no error";
}

/**
 * The diamond workflow over one task `work` with `overrides`, run-1 started and its first step
 * `a` ready at T0 + 1: where every test of one attempt's lifecycle starts.
 */
export function readyDiamondWorld(overrides: Partial<TaskSpec> = {}): CoreWorld {
  const world = new CoreWorld(
    diamondManifest("demo", { tasks: [task("work", ["true"], overrides)] }),
  );
  world.startWorkflow();
  world.frontier(T0 + 1);
  return world;
}

/** Step `a` of run-1 admitted at T0 + 2: its attempt, claimed. */
export function claimedStepA(world: CoreWorld): RunAttempt {
  return world.admit("run-1", "a", T0 + 2);
}

/** Step `a`'s attempt claimed, then starting at T0 + 3. */
export function startingStepA(world: CoreWorld): RunAttempt {
  const attempt = claimedStepA(world);
  world.markStarting(attempt.id, T0 + 3);
  return world.model.attempt(attempt.id);
}

/** Step `a`'s attempt running: the handle's pre-spawn start at T0 + 4, recorded at `recordedAtMs`. */
export function runningStepA(world: CoreWorld, recordedAtMs: number): RunAttempt {
  const attempt = startingStepA(world);
  world.markRunning(attempt.id, T0 + 4, recordedAtMs);
  return world.model.attempt(attempt.id);
}

/** The retry policy of a task that is never retried. */
export const NO_RETRY: RetryPolicy = { max: 0, backoffMs: 0, idempotent: false };

/**
 * The completion of attempt `attemptId` as its transaction would compute it from the model's
 * current rows (not applied).
 */
export function completion(
  world: CoreWorld,
  attemptId: string,
  facts: CompletionFacts,
  nowMs: number,
  retry: RetryPolicy = NO_RETRY,
): ChangeSet {
  return complete(world.model.scope(attemptId), facts, retry, nowMs);
}

/** Ordinary run `runId`'s next attempt admitted with its task's definition at `nowMs`: claimed. */
export function claimedOrdinaryAttempt(world: CoreWorld, runId: string, nowMs: number): RunAttempt {
  const run = world.model.run(runId);
  const admitted = admitOrdinaryAttempt(run, definitionOf(world.pkg, run.target), nowMs);
  if (admitted === null) throw new Error(`run ${runId} was not admitted`);
  world.apply(admitted.change);
  return admitted.attempt;
}

/** Ordinary run `runId`'s next attempt claimed and starting at `nowMs`. */
export function startingOrdinaryAttempt(
  world: CoreWorld,
  runId: string,
  nowMs: number,
): RunAttempt {
  const attempt = claimedOrdinaryAttempt(world, runId, nowMs);
  world.markStarting(attempt.id, nowMs);
  return world.model.attempt(attempt.id);
}

/** Ordinary run `runId`'s next attempt claimed, starting and running at `nowMs` (its handle's start). */
export function runningOrdinaryAttempt(world: CoreWorld, runId: string, nowMs: number): RunAttempt {
  const attempt = startingOrdinaryAttempt(world, runId, nowMs);
  world.markRunning(attempt.id, nowMs, nowMs);
  return world.model.attempt(attempt.id);
}

/** Calls `fn` and returns the code and message of the QlrError it threw (or "no error"). */
export function refusal(fn: () => unknown): { code: string; message: string } {
  try {
    fn();
  } catch (error) {
    const { code, message } = error as { code?: string; message?: string };
    return { code: code ?? "not a QlrError", message: message ?? "" };
  }
  return { code: "no error", message: "" };
}

/**
 * A package of one task `work` and one workflow `workflow` whose steps (in plan order) all run
 * it, each with the needs `needsByStep` gives it.
 */
export function workflowManifest(
  workflow: string,
  needsByStep: Readonly<Record<string, readonly string[]>>,
): Manifest {
  const steps = Object.entries(needsByStep).map(([name, needs]) => ({
    name,
    task: "work",
    needs: [...needs],
  }));
  return {
    package: "demo",
    description: null,
    tasks: [task("work")],
    workflows: [{ name: workflow, description: null, steps }],
    schedules: [],
  };
}
