import { QlrError, type QlrErrorDetail } from "./errors.ts";
import type { Run } from "./model.ts";
import type { ReconciliationReceipt, WorkflowPlan } from "./packages.ts";
import type { StoreTx } from "./ports.ts";
import { resolveRunInput, sameInput, type InputDeclaration } from "./run-inputs.ts";
import { createOrdinaryRun, createWorkflowRun, type NewRun } from "./runs.ts";
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

/** A run a request asked for: the one it created, or the one its idempotency key already named. */
export interface KeyedRun {
  readonly run: Run;
  readonly created: boolean;
}

/** How one kind of request creates its run under the idempotency-key rule (`createKeyedRun`). */
export interface KeyedRunCreation {
  /** Throws the conflict (see `keyConflict`) when the run the key names is not this request's. */
  requireSameRequest(existing: Run): Promise<void> | void;
  /** The new run and the change that writes it; called only when the key names no run. */
  create(): Promise<NewRun>;
}

/**
 * The idempotency-key rule a start and a rerun share: a key that already names a run answers
 * with that run, and only for the same request; otherwise the run is created and written in
 * this transaction.
 */
export async function createKeyedRun(
  tx: StoreTx,
  idempotencyKey: string | null,
  creation: KeyedRunCreation,
): Promise<KeyedRun> {
  const existing = idempotencyKey === null ? null : await tx.getRunByIdempotencyKey(idempotencyKey);
  if (existing !== null) {
    await creation.requireSameRequest(existing);
    return { run: existing, created: false };
  }
  const created = await creation.create();
  await tx.apply(created.change);
  return { run: created.run, created: true };
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

/** The reconciliation receipt a new run binds to; missing, it is an integrity fault of `subject`. */
export async function requireReconciliation(
  tx: StoreTx,
  digest: string,
  subject: string,
): Promise<ReconciliationReceipt> {
  const reconciliation = await tx.getReconciliation(digest);
  if (reconciliation === null)
    throw new QlrError("integrity", `${subject}: reconciliation receipt missing`);
  return reconciliation;
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
export function startRun(tx: StoreTx, request: StartRunRequest, nowMs: number): Promise<KeyedRun> {
  return createKeyedRun(tx, request.idempotencyKey, {
    requireSameRequest: (existing) => requireSameStart(tx, existing, request),
    create: () => createStartedRun(tx, request, nowMs),
  });
}

async function requireSameStart(
  tx: StoreTx,
  existing: Run,
  request: StartRunRequest,
): Promise<void> {
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
}

async function createStartedRun(
  tx: StoreTx,
  request: StartRunRequest,
  nowMs: number,
): Promise<NewRun> {
  const head = await tx.getPackageHead(request.package);
  if (head === null) throw new QlrError("not_found", `package ${request.package} is not applied`);
  const reconciliation = await requireReconciliation(
    tx,
    head.reconciliationDigest,
    `package ${request.package}`,
  );
  const options = {
    runId: request.runId,
    nowMs,
    idempotencyKey: request.idempotencyKey,
    scheduleName: request.scheduleName,
    rerunOf: null,
  };
  if (request.target.kind === "workflow") {
    const plan = await tx.findPlan(request.package, head.generation, request.target.name);
    if (plan === null) throw targetNotFound(request);
    return createWorkflowRun(plan, reconciliation, {
      ...options,
      input: resolveRunInput(request.input, declaredInputs(plan)),
    });
  }
  const definition = await tx.getTaskDefinitionFor(reconciliation.digest, request.target.name);
  if (definition === null) throw targetNotFound(request);
  return createOrdinaryRun(definition, reconciliation, {
    ...options,
    input: resolveRunInput(request.input, null),
  });
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
