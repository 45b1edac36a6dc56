import { requireAttemptScope } from "./attempt-scope.ts";
import { QlrError } from "./errors.ts";
import { manifestError, type Manifest } from "./manifest/index.ts";
import type { Run, RunAttempt, RunEvent, StepRun } from "./model.ts";
import { materializePlans, nextGeneration, reconcileTasks } from "./packages.ts";
import type { StoreTx } from "./ports.ts";
import { resolveFailedClosed } from "./recovery.ts";
import { createOrdinaryRun, createWorkflowRun, requestCancel } from "./runs.ts";
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
}

/** Creates a run on the package's head generation. The same idempotency key returns the same run. */
export async function startRun(tx: StoreTx, request: StartRunRequest, nowMs: number): Promise<{ run: Run; created: boolean }> {
  if (request.idempotencyKey !== null) {
    const existing = await tx.getRunByIdempotencyKey(request.idempotencyKey);
    if (existing !== null) {
      if (existing.package !== request.package || existing.target !== request.target.name || (existing.kind === "workflow") !== (request.target.kind === "workflow")) {
        throw new QlrError("conflict", `idempotency key ${JSON.stringify(request.idempotencyKey)} already names run ${existing.id} of another target`);
      }
      return { run: existing, created: false };
    }
  }
  const head = await tx.getPackageHead(request.package);
  if (head === null) throw new QlrError("not_found", `package ${request.package} is not applied`);
  const reconciliation = await tx.getReconciliation(head.reconciliationDigest);
  if (reconciliation === null) throw new QlrError("integrity", `package ${request.package}: reconciliation receipt missing`);
  const options = { runId: request.runId, nowMs, idempotencyKey: request.idempotencyKey, scheduleName: request.scheduleName };
  if (request.target.kind === "workflow") {
    const plan = await tx.findPlan(request.package, head.generation, request.target.name);
    if (plan === null) throw new QlrError("not_found", `package ${request.package} has no workflow ${request.target.name}`);
    const created = createWorkflowRun(plan, reconciliation, options);
    await tx.apply(created.change);
    return { run: created.run, created: true };
  }
  const definition = await tx.getTaskDefinitionFor(reconciliation.digest, request.target.name);
  if (definition === null) throw new QlrError("not_found", `package ${request.package} has no task ${request.target.name}`);
  const created = createOrdinaryRun(definition, reconciliation, options);
  await tx.apply(created.change);
  return { run: created.run, created: true };
}

export async function fireSchedule(tx: StoreTx, schedule: ScheduleState, runId: string, nowMs: number): Promise<Run> {
  const target: RunTarget = schedule.spec.target.kind === "workflow" ? { kind: "workflow", name: schedule.spec.target.name } : { kind: "task", name: schedule.spec.target.name };
  const { run } = await startRun(tx, { package: schedule.package, target, idempotencyKey: null, scheduleName: schedule.name, runId }, nowMs);
  return run;
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
