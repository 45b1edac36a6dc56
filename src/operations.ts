import { requireAttemptScope } from "./attempt-scope.ts";
import { QlrError } from "./errors.ts";
import { manifestError, type Manifest } from "./manifest/index.ts";
import type { Run, RunAttempt, RunEvent, StepRun } from "./model.ts";
import { TERMINAL_RUN_STATUSES } from "./model.ts";
import { materializePlans, nextGeneration, reconcileTasks, type WorkflowPlan } from "./packages.ts";
import type { StoreTx } from "./ports.ts";
import { resolveFailedClosed } from "./recovery.ts";
import { createOrdinaryRun, createWorkflowRun, requestCancel } from "./runs.ts";
import { resolveRunInput, sameInput, type InputDeclaration } from "./run-inputs.ts";
import { initialScheduleState, type ScheduleState } from "./schedules.ts";

/**
 * The operations behind the public API, each one short transaction body. They take the
 * store transaction and the observed time; the caller (HTTP app, CLI, simulation) opens the
 * transaction, so the same code serves every runtime.
 */

export interface ApplyResult {
  readonly package: string;
  readonly generation: number;
  readonly digest: string;
  readonly changed: boolean;
}

/** Applying an unchanged manifest changes nothing; a changed one creates a new immutable generation. */
export async function applyPackage(tx: StoreTx, manifest: Manifest, nowMs: number): Promise<ApplyResult> {
  const head = await tx.getPackageHead(manifest.package);
  const decision = nextGeneration(head, manifest, nowMs);
  if (!decision.changed) return { package: manifest.package, generation: decision.generation, digest: head?.manifestDigest ?? "", changed: false };
  const generation = decision.generation;
  const reconciliation = reconcileTasks(generation);
  const plans = materializePlans(generation, reconciliation);
  await tx.putGeneration(generation, reconciliation.receipt, reconciliation.definitions, plans, head?.generation ?? null);

  // Schedules follow the head generation; removed ones are deleted, kept ones keep their history.
  const previous = new Map((await tx.getSchedules(manifest.package)).map((state) => [state.name, state]));
  for (const spec of manifest.schedules) {
    const before = previous.get(spec.name) ?? null;
    await tx.putSchedule(initialScheduleState(manifest.package, generation.generation, spec, nowMs, before), before?.version ?? null);
    previous.delete(spec.name);
  }
  for (const removed of previous.keys()) await tx.deleteSchedule(manifest.package, removed);
  return { package: manifest.package, generation: generation.generation, digest: generation.manifestDigest, changed: true };
}

export type RunTarget = { readonly kind: "workflow"; readonly name: string } | { readonly kind: "task"; readonly name: string };

export interface StartRunRequest {
  readonly package: string;
  readonly target: RunTarget;
  readonly idempotencyKey: string | null;
  readonly scheduleName: string | null;
  readonly runId: string;
  /** The raw run input, checked against the workflow's declared inputs; absent: none. */
  readonly input?: unknown;
}

/** The input declarations a run of this plan is checked against; null: the workflow declares none. */
function declaredInputs(plan: WorkflowPlan | null): readonly InputDeclaration[] | null {
  return plan?.inputs ?? null;
}

/**
 * Creates a run on the package's head generation. The same idempotency key returns the same
 * run, but only for the same target and the same input: a key names one request, and a
 * different input under it is a conflict, never silently the earlier run.
 */
export async function startRun(tx: StoreTx, request: StartRunRequest, nowMs: number): Promise<{ run: Run; created: boolean }> {
  if (request.idempotencyKey !== null) {
    const existing = await tx.getRunByIdempotencyKey(request.idempotencyKey);
    if (existing !== null) {
      if (existing.package !== request.package || existing.target !== request.target.name || (existing.kind === "workflow") !== (request.target.kind === "workflow")) {
        throw new QlrError("conflict", `idempotency key ${JSON.stringify(request.idempotencyKey)} already names run ${existing.id} of another target`);
      }
      // Resolved against the declarations the existing run was created under, so defaults compare equal.
      const plan = existing.planDigest === null ? null : await tx.getPlan(existing.planDigest);
      const input = resolveRunInput(request.input, declaredInputs(plan));
      if (!sameInput(existing.input, input)) {
        throw new QlrError("conflict", `idempotency key ${JSON.stringify(request.idempotencyKey)} already names run ${existing.id} with another input`, {
          details: [{ path: "input", message: "differs from the input of the run this idempotency key names" }],
        });
      }
      return { run: existing, created: false };
    }
  }
  const head = await tx.getPackageHead(request.package);
  if (head === null) throw new QlrError("not_found", `package ${request.package} is not applied`);
  const reconciliation = await tx.getReconciliation(head.reconciliationDigest);
  if (reconciliation === null) throw new QlrError("integrity", `package ${request.package}: reconciliation receipt missing`);
  const options = { runId: request.runId, nowMs, idempotencyKey: request.idempotencyKey, scheduleName: request.scheduleName, rerunOf: null };
  if (request.target.kind === "workflow") {
    const plan = await tx.findPlan(request.package, head.generation, request.target.name);
    if (plan === null) throw new QlrError("not_found", `package ${request.package} has no workflow ${request.target.name}`);
    const created = createWorkflowRun(plan, reconciliation, { ...options, input: resolveRunInput(request.input, declaredInputs(plan)) });
    await tx.apply(created.change);
    return { run: created.run, created: true };
  }
  const definition = await tx.getTaskDefinitionFor(reconciliation.digest, request.target.name);
  if (definition === null) throw new QlrError("not_found", `package ${request.package} has no task ${request.target.name}`);
  const created = createOrdinaryRun(definition, reconciliation, { ...options, input: resolveRunInput(request.input, null) });
  await tx.apply(created.change);
  return { run: created.run, created: true };
}

export async function fireSchedule(tx: StoreTx, schedule: ScheduleState, runId: string, nowMs: number): Promise<Run> {
  const target: RunTarget = schedule.spec.target.kind === "workflow" ? { kind: "workflow", name: schedule.spec.target.name } : { kind: "task", name: schedule.spec.target.name };
  const { run } = await startRun(tx, { package: schedule.package, target, idempotencyKey: null, scheduleName: schedule.name, runId, input: schedule.spec.input }, nowMs);
  return run;
}

export interface RerunRequest {
  readonly runId: string;
  /** Reuse the succeeded steps' outcomes and outputs; run only what did not succeed. */
  readonly fromFailed: boolean;
  readonly newRunId: string;
  readonly idempotencyKey: string | null;
}

/**
 * `qlr rerun`: a new run of the same generation (the same plan and reconciliation receipt, not
 * the package head) with the same input, linked to the old one by `rerunOf`. From the failed
 * steps, every succeeded step is created `succeeded` with the output it had and never runs
 * again; the others run as in a fresh run. Only a finished run can be rerun, and a rerun from
 * the failed steps of a run that failed nothing is refused: there would be nothing to run.
 * The same idempotency key returns the same rerun for the same request, and is a conflict for
 * another one.
 */
export async function rerunRun(tx: StoreTx, request: RerunRequest, nowMs: number): Promise<{ run: Run; created: boolean }> {
  if (request.idempotencyKey !== null) {
    const existing = await tx.getRunByIdempotencyKey(request.idempotencyKey);
    if (existing !== null) {
      if (existing.rerunOf !== request.runId) throw new QlrError("conflict", `idempotency key ${JSON.stringify(request.idempotencyKey)} already names run ${existing.id}, which is not a rerun of ${request.runId}`);
      return { run: existing, created: false };
    }
  }
  const old = await tx.getRun(request.runId);
  if (old === null) throw new QlrError("not_found", `run ${request.runId} does not exist`);
  if (!TERMINAL_RUN_STATUSES.has(old.status)) throw new QlrError("conflict", `run ${old.id} is ${old.status}: only a finished run can be rerun`);
  const reconciliation = await tx.getReconciliation(old.reconciliationDigest);
  if (reconciliation === null) throw new QlrError("integrity", `run ${old.id}: reconciliation receipt missing`);
  const options = { runId: request.newRunId, nowMs, idempotencyKey: request.idempotencyKey, scheduleName: null, input: old.input, rerunOf: old.id };
  if (old.kind === "ordinary") {
    if (request.fromFailed && old.status === "succeeded") throw new QlrError("conflict", `run ${old.id} succeeded: there is no failed step to rerun`);
    const definition = await tx.getTaskDefinitionFor(old.reconciliationDigest, old.target);
    if (definition === null) throw new QlrError("integrity", `run ${old.id}: task ${old.target} has no definition in its generation`);
    const created = createOrdinaryRun(definition, reconciliation, options);
    await tx.apply(created.change);
    return { run: created.run, created: true };
  }
  const plan = old.planDigest === null ? null : await tx.getPlan(old.planDigest);
  if (plan === null) throw new QlrError("integrity", `run ${old.id}: plan ${String(old.planDigest)} missing`);
  const reused = new Map<string, { output: StepRun["output"]; fromStepRunId: string }>();
  if (request.fromFailed) {
    const steps = await tx.getSteps(old.id);
    for (const step of steps) {
      // Failed, timed-out, cancelled and skipped steps (anything but succeeded) run again.
      if (step.status === "succeeded") reused.set(step.name, { output: step.output, fromStepRunId: step.id });
    }
    if (reused.size === steps.length) throw new QlrError("conflict", `run ${old.id}: every step succeeded, there is no failed step to rerun`);
  }
  const created = createWorkflowRun(plan, reconciliation, options, reused);
  await tx.apply(created.change);
  return { run: created.run, created: true };
}

export async function cancelRun(tx: StoreTx, runId: string, nowMs: number, reason = "user"): Promise<Run> {
  const run = await tx.getRun(runId);
  if (run === null) throw new QlrError("not_found", `run ${runId} does not exist`);
  const change = requestCancel(run, nowMs, reason);
  if (change === null) return run;
  await tx.apply(change);
  return change.runs[0]?.after ?? run;
}

/** `POST /attempts/:id/resolve`: an operator settles an attempt that failed closed (see `resolveFailedClosed`). */
export async function resolveAttempt(tx: StoreTx, attemptId: string, resolution: { readonly as: "lost"; readonly reason: string }, nowMs: number): Promise<RunAttempt> {
  const scope = await requireAttemptScope(tx, attemptId);
  await tx.apply(resolveFailedClosed(scope, resolution.reason, scope.definition.retry, nowMs));
  const resolved = await tx.getAttempt(attemptId);
  if (resolved === null) throw new QlrError("integrity", `attempt ${attemptId} vanished while it was resolved`);
  return resolved;
}

export interface RunDetail {
  readonly run: Run;
  readonly steps: StepRun[];
  readonly attempts: RunAttempt[];
}

export async function getRunDetail(tx: StoreTx, runId: string): Promise<RunDetail> {
  const run = await tx.getRun(runId);
  if (run === null) throw new QlrError("not_found", `run ${runId} does not exist`);
  return { run, steps: await tx.getSteps(runId), attempts: await tx.getAttempts(runId) };
}

export async function getRunEvents(tx: StoreTx, runId: string, afterSeq: number, limit: number): Promise<RunEvent[]> {
  const run = await tx.getRun(runId);
  if (run === null) throw new QlrError("not_found", `run ${runId} does not exist`);
  return tx.listEvents(runId, afterSeq, limit);
}

/**
 * The attempt whose log answers "the log of step NAME": the step's latest attempt. A task run
 * has no steps: its latest attempt answers whatever name is asked (the dashboard and the CLI
 * name it by the task). Null when no attempt has started yet; a workflow run without that step
 * is not found.
 */
export async function latestStepAttempt(tx: StoreTx, runId: string, stepName: string): Promise<RunAttempt | null> {
  const detail = await getRunDetail(tx, runId);
  let stepRunId: string | null = null;
  if (detail.run.kind === "workflow") {
    const step = detail.steps.find((candidate) => candidate.name === stepName);
    if (step === undefined) throw new QlrError("not_found", `run ${runId} has no step ${stepName}`);
    stepRunId = step.id;
  }
  return detail.attempts.filter((attempt) => attempt.stepRunId === stepRunId).at(-1) ?? null;
}

export { manifestError };
