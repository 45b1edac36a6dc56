import { QlrError, type QlrErrorDetail } from "./errors.ts";
import type { ChangeSet, Run } from "./model.ts";
import type { WorkflowPlan } from "./packages.ts";
import type { StoreTx } from "./ports.ts";
import { resolveRunInput, sameInput, type InputDeclaration } from "./run-inputs.ts";
import { createOrdinaryRun, createWorkflowRun } from "./runs.ts";
import type { ScheduleState } from "./schedules.ts";

/**
 * Starting a run on a package's head generation: the one rule behind `POST /runs` (through
 * operations.ts) and a schedule firing (the coordinator's schedule stage), so a run started by
 * hand and one started by a schedule are created the same way.
 */

export type RunTarget =
  | { readonly kind: "workflow"; readonly name: string }
  | { readonly kind: "task"; readonly name: string };

export interface StartRunRequest {
  readonly package: string;
  readonly target: RunTarget;
  readonly idempotencyKey: string | null;
  readonly scheduleName: string | null;
  readonly runId: string;
  /** The raw run input, checked against the workflow's declared inputs; absent: none. */
  readonly input?: unknown;
}

/** The run an idempotency key already names; null when there is no key or it names no run. */
export async function runNamedByKey(tx: StoreTx, key: string | null): Promise<Run | null> {
  return key === null ? null : tx.getRunByIdempotencyKey(key);
}

/**
 * The refusal of a request whose idempotency key already names `existing`, a run it does not
 * match; `mismatch` ends the sentence (" of another target").
 */
export function keyConflict(
  existing: Run,
  mismatch: string,
  details: readonly QlrErrorDetail[] = [],
): QlrError {
  return new QlrError(
    "conflict",
    `idempotency key ${JSON.stringify(existing.idempotencyKey)} already names run ${existing.id}${mismatch}`,
    { details },
  );
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
export async function startRun(
  tx: StoreTx,
  request: StartRunRequest,
  nowMs: number,
): Promise<{ run: Run; created: boolean }> {
  const existing = await runNamedByKey(tx, request.idempotencyKey);
  if (existing !== null) {
    if (
      existing.package !== request.package ||
      existing.target !== request.target.name ||
      (existing.kind === "workflow") !== (request.target.kind === "workflow")
    )
      throw keyConflict(existing, " of another target");
    // Resolved against the declarations the existing run was created under, so defaults compare equal.
    const plan = existing.planDigest === null ? null : await tx.getPlan(existing.planDigest);
    const input = resolveRunInput(request.input, declaredInputs(plan));
    if (!sameInput(existing.input, input))
      throw keyConflict(existing, " with another input", [
        { path: "input", message: "differs from the input of the run this idempotency key names" },
      ]);
    return { run: existing, created: false };
  }
  const head = await tx.getPackageHead(request.package);
  if (head === null) throw new QlrError("not_found", `package ${request.package} is not applied`);
  const reconciliation = await tx.getReconciliation(head.reconciliationDigest);
  if (reconciliation === null)
    throw new QlrError("integrity", `package ${request.package}: reconciliation receipt missing`);
  const options = {
    runId: request.runId,
    nowMs,
    idempotencyKey: request.idempotencyKey,
    scheduleName: request.scheduleName,
    rerunOf: null,
  };
  let created: { readonly run: Run; readonly change: ChangeSet };
  if (request.target.kind === "workflow") {
    const plan = await tx.findPlan(request.package, head.generation, request.target.name);
    if (plan === null) throw targetNotFound(request);
    created = createWorkflowRun(plan, reconciliation, {
      ...options,
      input: resolveRunInput(request.input, declaredInputs(plan)),
    });
  } else {
    const definition = await tx.getTaskDefinitionFor(reconciliation.digest, request.target.name);
    if (definition === null) throw targetNotFound(request);
    created = createOrdinaryRun(definition, reconciliation, {
      ...options,
      input: resolveRunInput(request.input, null),
    });
  }
  await tx.apply(created.change);
  return { run: created.run, created: true };
}

function targetNotFound(request: StartRunRequest): QlrError {
  const { kind, name } = request.target;
  return new QlrError("not_found", `package ${request.package} has no ${kind} ${name}`);
}

export async function fireSchedule(
  tx: StoreTx,
  schedule: ScheduleState,
  runId: string,
  nowMs: number,
): Promise<Run> {
  const target: RunTarget =
    schedule.spec.target.kind === "workflow"
      ? { kind: "workflow", name: schedule.spec.target.name }
      : { kind: "task", name: schedule.spec.target.name };
  const { run } = await startRun(
    tx,
    {
      package: schedule.package,
      target,
      idempotencyKey: null,
      scheduleName: schedule.name,
      runId,
      input: schedule.spec.input,
    },
    nowMs,
  );
  return run;
}
