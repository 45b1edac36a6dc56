import { requireAttemptScope } from "./attempt-scope.ts";
import { QlrError } from "./errors.ts";
import { manifestError, type Manifest } from "./manifest/index.ts";
import type { Run, RunAttempt, RunCancelReason, RunEvent, StepRun } from "./model.ts";
import { TERMINAL_RUN_STATUSES } from "./model.ts";
import { materializePlans, nextGeneration, reconcileTasks } from "./packages.ts";
import type { StoreTx } from "./ports.ts";
import { resolveFailedClosed } from "./recovery.ts";
import { createOrdinaryRun, createWorkflowRun, requestCancel, type NewRun } from "./runs.ts";
import { createKeyedRun, keyConflict, requireReconciliation, type KeyedRun } from "./run-start.ts";
import { initialScheduleState } from "./schedules.ts";

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
export async function applyPackage(
  tx: StoreTx,
  manifest: Manifest,
  nowMs: number,
): Promise<ApplyResult> {
  const head = await tx.getPackageHead(manifest.package);
  const decision = nextGeneration(head, manifest, nowMs);
  if (!decision.changed)
    return {
      package: manifest.package,
      generation: decision.generation,
      digest: head?.manifestDigest ?? "",
      changed: false,
    };
  const generation = decision.generation;
  const reconciliation = reconcileTasks(generation);
  const plans = materializePlans(generation, reconciliation);
  await tx.putGeneration(
    generation,
    reconciliation.receipt,
    reconciliation.definitions,
    plans,
    head?.generation ?? null,
  );

  // Schedules follow the head generation; removed ones are deleted, kept ones keep their history.
  const previous = new Map(
    (await tx.getSchedules(manifest.package)).map((state) => [state.name, state]),
  );
  for (const spec of manifest.schedules) {
    const before = previous.get(spec.name) ?? null;
    await tx.putSchedule(
      initialScheduleState(manifest.package, generation.generation, spec, nowMs, before),
      before?.version ?? null,
    );
    previous.delete(spec.name);
  }
  for (const removed of previous.keys()) await tx.deleteSchedule(manifest.package, removed);
  return {
    package: manifest.package,
    generation: generation.generation,
    digest: generation.manifestDigest,
    changed: true,
  };
}

export { fireSchedule, startRun, type RunTarget, type StartRunRequest } from "./run-start.ts";

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
export function rerunRun(tx: StoreTx, request: RerunRequest, nowMs: number): Promise<KeyedRun> {
  return createKeyedRun(tx, request.idempotencyKey, {
    requireSameRequest: (existing) => {
      if (existing.rerunOf !== request.runId)
        throw keyConflict(existing, `, which is not a rerun of ${request.runId}`);
    },
    create: () => createRerun(tx, request, nowMs),
  });
}

async function createRerun(tx: StoreTx, request: RerunRequest, nowMs: number): Promise<NewRun> {
  const old = await tx.getRun(request.runId);
  if (old === null) throw new QlrError("not_found", `run ${request.runId} does not exist`);
  if (!TERMINAL_RUN_STATUSES.has(old.status))
    throw new QlrError(
      "conflict",
      `run ${old.id} is ${old.status}: only a finished run can be rerun`,
    );
  const reconciliation = await requireReconciliation(tx, old.reconciliationDigest, `run ${old.id}`);
  const options = {
    runId: request.newRunId,
    nowMs,
    idempotencyKey: request.idempotencyKey,
    scheduleName: null,
    input: old.input,
    rerunOf: old.id,
  };
  if (old.kind === "ordinary") {
    if (request.fromFailed && old.status === "succeeded")
      throw new QlrError("conflict", `run ${old.id} succeeded: there is no failed step to rerun`);
    const definition = await tx.getTaskDefinitionFor(old.reconciliationDigest, old.target);
    if (definition === null)
      throw new QlrError(
        "integrity",
        `run ${old.id}: task ${old.target} has no definition in its generation`,
      );
    return createOrdinaryRun(definition, reconciliation, options);
  }
  const plan = old.planDigest === null ? null : await tx.getPlan(old.planDigest);
  if (plan === null)
    throw new QlrError("integrity", `run ${old.id}: plan ${String(old.planDigest)} missing`);
  const reused = new Map<string, { output: StepRun["output"]; fromStepRunId: string }>();
  if (request.fromFailed) {
    const steps = await tx.getSteps(old.id);
    for (const step of steps) {
      // Failed, timed-out, cancelled and skipped steps (anything but succeeded) run again.
      if (step.status === "succeeded")
        reused.set(step.name, { output: step.output, fromStepRunId: step.id });
    }
    if (reused.size === steps.length)
      throw new QlrError(
        "conflict",
        `run ${old.id}: every step succeeded, there is no failed step to rerun`,
      );
  }
  return createWorkflowRun(plan, reconciliation, options, reused);
}

export async function cancelRun(
  tx: StoreTx,
  runId: string,
  nowMs: number,
  reason: RunCancelReason = "user",
): Promise<Run> {
  const run = await tx.getRun(runId);
  if (run === null) throw new QlrError("not_found", `run ${runId} does not exist`);
  const change = requestCancel(run, nowMs, reason);
  if (change === null) return run;
  await tx.apply(change);
  return change.runs[0]?.after ?? run;
}

/** `POST /attempts/:id/resolve`: an operator settles an attempt that failed closed (see `resolveFailedClosed`). */
export async function resolveAttempt(
  tx: StoreTx,
  attemptId: string,
  resolution: { readonly as: "lost"; readonly reason: string },
  nowMs: number,
): Promise<RunAttempt> {
  const scope = await requireAttemptScope(tx, attemptId);
  await tx.apply(resolveFailedClosed(scope, resolution.reason, scope.definition.retry, nowMs));
  const resolved = await tx.getAttempt(attemptId);
  if (resolved === null)
    throw new QlrError("integrity", `attempt ${attemptId} vanished while it was resolved`);
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

export async function getRunEvents(
  tx: StoreTx,
  runId: string,
  afterSeq: number,
  limit: number,
): Promise<RunEvent[]> {
  const run = await tx.getRun(runId);
  if (run === null) throw new QlrError("not_found", `run ${runId} does not exist`);
  return tx.listEvents(runId, afterSeq, limit);
}

/**
 * The attempt whose log answers "the log of step NAME": the step's latest attempt, or the one
 * named by `attemptId`. A task run has no steps: its attempts answer whatever name is asked
 * (the dashboard and the CLI name it by the task). Null when no attempt has started yet (or
 * none has that id); a workflow run without that step is not found.
 */
export async function stepAttempt(
  tx: StoreTx,
  runId: string,
  stepName: string,
  attemptId?: string,
): Promise<RunAttempt | null> {
  const detail = await getRunDetail(tx, runId);
  let stepRunId: string | null = null;
  if (detail.run.kind === "workflow") {
    const step = detail.steps.find((candidate) => candidate.name === stepName);
    if (step === undefined) throw new QlrError("not_found", `run ${runId} has no step ${stepName}`);
    stepRunId = step.id;
  }
  const attempts = detail.attempts.filter((attempt) => attempt.stepRunId === stepRunId);
  const found =
    attemptId === undefined ? attempts.at(-1) : attempts.find(({ id }) => id === attemptId);
  return found ?? null;
}

export { manifestError };
