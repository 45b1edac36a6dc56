import { derivedId, digestOf } from "./digest.ts";
import { QlrError } from "./errors.ts";
import { RunChange } from "./aggregate.ts";
import { claimedAttempt } from "./attempts.ts";
import {
  sameGeneration,
  type AdmissionReceipt,
  type ChangeSet,
  type Run,
  type RunAttempt,
  type StepRun,
} from "./model.ts";
import {
  renormalize,
  verifyPlan,
  verifyReconciliationReceipt,
  verifyTaskDefinition,
  type ReconciliationReceipt,
  type TaskDefinition,
  type WorkflowPlan,
} from "./packages.ts";

/**
 * Generation-bound workflow task attempt admission (ADR-0227 §1–§3). One admission creates
 * only a durable dispatch intent: a `claimed` attempt, one `workflow.task_attempt_admitted`
 * event, one run version bump, and an immutable receipt binding everything it was decided
 * from. The step stays `ready`; it becomes `running` only when the process has started.
 */

/** Candidate pages never exceed this, whatever a profile asks. */
export const MAX_ADMISSION_PAGE = 64;

export function workflowAttemptId(
  runId: string,
  stepRunId: string,
  stepRunVersion: number,
): string {
  return derivedId("wta", [runId, stepRunId, stepRunVersion]);
}

export function admissionEventId(runId: string, stepRunId: string, stepRunVersion: number): string {
  return derivedId("wte", [runId, stepRunId, stepRunVersion]);
}

export interface AdmissionInput {
  readonly plan: WorkflowPlan;
  readonly run: Run;
  readonly step: StepRun;
  readonly reconciliation: ReconciliationReceipt;
  readonly definition: TaskDefinition;
  /** The stored receipt for this exact ready epoch, if one exists (exact replay). */
  readonly existing: AdmissionReceipt | null;
  readonly nowMs: number;
}

export type AdmissionResult =
  | {
      readonly kind: "admitted";
      readonly receipt: AdmissionReceipt;
      readonly attempt: RunAttempt;
      readonly change: ChangeSet;
    }
  | { readonly kind: "replayed"; readonly receipt: AdmissionReceipt };

function reject(message: string): never {
  throw new QlrError("integrity", `admission refused: ${message}`);
}

export function admissionReceiptDigest(
  receipt: Omit<AdmissionReceipt, "digest">,
): AdmissionReceipt["digest"] {
  return digestOf(receipt);
}

export function admitTaskAttempt(input: AdmissionInput): AdmissionResult {
  const { plan, run, step, reconciliation, definition, existing, nowMs } = input;

  // Exact replay: the ready epoch already has its winner; answer from the durable receipt.
  if (existing !== null) {
    if (existing.runId !== run.id || existing.stepRunId !== step.id)
      reject("stored receipt belongs to another step");
    // The replay boundary is the exact ready epoch: a winner of an earlier epoch answers nothing about this one.
    if (existing.stepRunVersion !== step.version)
      reject(
        `stored receipt belongs to ready epoch ${existing.stepRunVersion}, not ${step.version}`,
      );
    const { digest, ...body } = existing;
    if (admissionReceiptDigest(body) !== digest)
      reject(`stored receipt for ${existing.attemptId} fails its digest`);
    return { kind: "replayed", receipt: existing };
  }

  if (run.kind !== "workflow") reject(`run ${run.id} is not a workflow run`);
  if (run.status !== "running") reject(`run ${run.id} is ${run.status}, not running`);
  if (run.cancelRequestedAtMs !== null) reject(`run ${run.id} has a cancel intent`);
  if (!verifyPlan(plan)) reject(`plan ${plan.digest} fails its digest`);
  if (run.planDigest !== plan.digest)
    reject(`run ${run.id} is bound to plan ${String(run.planDigest)}, not ${plan.digest}`);
  if (plan.package !== run.package || plan.generation !== run.generation)
    reject("plan and run belong to different generations");
  if (step.runId !== run.id) reject(`step ${step.id} is not part of run ${run.id}`);
  if (step.status !== "ready") reject(`step ${step.id} is ${step.status}, not ready`);
  if (step.notBeforeMs !== null && step.notBeforeMs > nowMs)
    reject(`step ${step.id} waits for its retry backoff`);
  const planStep = plan.steps.find((candidate) => candidate.name === step.name);
  if (planStep === undefined || planStep.task !== step.task)
    reject(`step ${step.name} is not in plan ${plan.digest}`);

  if (!verifyReconciliationReceipt(reconciliation))
    reject(`reconciliation receipt ${reconciliation.digest} fails its digest`);
  if (
    reconciliation.digest !== run.reconciliationDigest ||
    reconciliation.digest !== plan.reconciliationDigest
  )
    reject("reconciliation receipt is not the one the run and plan are bound to");
  if (
    !sameGeneration(reconciliation, plan) ||
    reconciliation.manifestDigest !== plan.manifestDigest
  ) {
    reject("reconciliation receipt belongs to another generation");
  }
  const item = reconciliation.items.find((candidate) => candidate.task === step.task);
  if (item === undefined)
    reject(`task ${step.task} is not reconciled in generation ${plan.generation}`);
  if (item.definitionDigest !== planStep.sourceTaskDigest)
    reject(`task ${step.task} differs from the plan's source task`);

  // The runtime identity comes from the reconciliation item; the execution digest is recomputed.
  if (
    definition.id !== item.runtimeTaskId ||
    definition.revision !== item.runtimeTaskRevision ||
    definition.definitionDigest !== item.definitionDigest
  ) {
    reject(
      `task definition ${definition.revision} is not the reconciled ${item.runtimeTaskRevision}`,
    );
  }
  const execution = renormalize(definition.execution);
  if (
    execution.digest !== item.executionDigest ||
    execution.digest !== definition.executionDigest
  ) {
    reject(
      `execution digest claimed ${definition.executionDigest} but the revision normalizes to ${execution.digest}`,
    );
  }
  if (execution.revision.executor !== definition.executor)
    reject(`executor type ${definition.executor} does not match its revision`);
  // The definition digest is recomputed too: a definition whose content (retry policy, names,
  // generation) differs from what its claimed digest and revision say is never admitted.
  if (!verifyTaskDefinition(definition))
    reject(
      `task definition ${definition.revision} does not recompute to its claimed digest and revision`,
    );

  const attemptId = workflowAttemptId(run.id, step.id, step.version);
  const eventId = admissionEventId(run.id, step.id, step.version);
  const number = run.attemptSeq + 1;
  const change = new RunChange(run, nowMs);
  change.patchRun({ attemptSeq: number });
  const attempt: RunAttempt = claimedAttempt(
    { id: attemptId, runId: run.id, stepRunId: step.id, stepRunVersion: step.version, number },
    execution.revision,
    nowMs,
  );
  change.insertAttempt(attempt, { id: eventId }, "workflow.task_attempt_admitted", {
    step: step.name,
    stepRunVersion: step.version,
    taskRevision: definition.revision,
    executor: definition.executor,
  });
  const body: Omit<AdmissionReceipt, "digest"> = {
    runId: run.id,
    stepRunId: step.id,
    stepRunVersion: step.version,
    stepRunDigest: step.digest,
    planDigest: plan.digest,
    reconciliationDigest: reconciliation.digest,
    runtimeTaskId: definition.id,
    runtimeTaskRevision: definition.revision,
    taskDefinitionDigest: definition.definitionDigest,
    executionDigest: execution.digest,
    attemptId,
    eventId,
    runVersion: run.version + 1,
    admittedAtMs: nowMs,
  };
  const receipt: AdmissionReceipt = { ...body, digest: admissionReceiptDigest(body) };
  change.addAdmission(receipt);
  return { kind: "admitted", receipt, attempt, change: change.build() };
}
