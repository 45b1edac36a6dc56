import { derivedId } from "./digest.ts";
import { QlrError } from "./errors.ts";
import { assertPortableId } from "./identity.ts";
import type { JsonValue } from "./canonical-json.ts";
import type { RunInput } from "./run-inputs.ts";
import { eventId, frontierMarks, RunChange, stepDigest } from "./aggregate.ts";
import type {
  ChangeSet,
  RowChange,
  Run,
  RunCancelReason,
  RunEvent,
  StepMutation,
  StepRun,
} from "./model.ts";
import {
  EMPTY_CHANGE_SET,
  RUN_CANCEL_REASONS,
  sameGeneration,
  TERMINAL_RUN_STATUSES,
} from "./model.ts";
import type { ReconciliationReceipt, TaskDefinition, WorkflowPlan } from "./packages.ts";

export const MAX_IDEMPOTENCY_KEY_LENGTH = 128;

export function stepRunId(runId: string, stepName: string): string {
  return derivedId("stp", [runId, stepName]);
}

function checkIdempotencyKey(key: string | null): void {
  if (key === null) return;
  if (
    key.length === 0 ||
    key.length > MAX_IDEMPOTENCY_KEY_LENGTH ||
    [...key].some((char) => char.charCodeAt(0) < 0x20)
  ) {
    throw new QlrError(
      "invalid_request",
      `idempotencyKey must be 1–${MAX_IDEMPOTENCY_KEY_LENGTH} printable characters`,
      { details: [{ path: "idempotencyKey", message: "invalid" }] },
    );
  }
}

export interface NewRunOptions {
  readonly runId: string;
  readonly nowMs: number;
  readonly idempotencyKey: string | null;
  readonly scheduleName: string | null;
  /** The resolved input (see `resolveRunInput`); absent: `{}`. */
  readonly input?: RunInput;
  /** A rerun: the run it reruns; absent: null. */
  readonly rerunOf?: string | null;
}

/** A created run and the change that writes it; nothing is stored until the change is applied. */
export interface NewRun {
  readonly run: Run;
  readonly change: ChangeSet;
}

/**
 * A rerun's reused steps: step name to the output it keeps. Each is created `succeeded` with
 * that output and never runs again; the frontier readies what needs it as usual.
 */
export type ReusedSteps = ReadonlyMap<
  string,
  { readonly output: JsonValue | null; readonly fromStepRunId: string }
>;

/**
 * A workflow run is created `running` with every step `pending`, bound to one plan and the
 * reconciliation receipt of the same generation. One `run.created` event carries the plan;
 * each step's creation leaves its canonical mutation.
 */
export function createWorkflowRun(
  plan: WorkflowPlan,
  reconciliation: ReconciliationReceipt,
  options: NewRunOptions,
  reused: ReusedSteps = new Map(),
): { run: Run; steps: StepRun[]; change: ChangeSet } {
  assertPortableId(options.runId, "runId");
  checkIdempotencyKey(options.idempotencyKey);
  if (
    !sameGeneration(reconciliation, plan) ||
    reconciliation.digest !== plan.reconciliationDigest
  ) {
    throw new QlrError(
      "integrity",
      `plan ${plan.digest} is not bound to reconciliation receipt ${reconciliation.digest}`,
    );
  }
  const run = newRun(
    {
      kind: "workflow",
      package: plan.package,
      generation: plan.generation,
      target: plan.workflow,
      planDigest: plan.digest,
      reconciliationDigest: reconciliation.digest,
      status: "running",
    },
    options,
  );
  const created = runCreatedEvent(
    run,
    options,
    {
      kind: "workflow",
      package: plan.package,
      generation: plan.generation,
      workflow: plan.workflow,
      planDigest: plan.digest,
      steps: plan.steps.map((step) => step.name),
    },
    reused.size === 0
      ? {}
      : {
          reusedSteps: [...reused.entries()].map(([name, from]) => ({
            step: name,
            fromStepRunId: from.fromStepRunId,
          })),
        },
  );
  for (const name of reused.keys()) {
    if (!plan.steps.some((step) => step.name === name))
      throw new QlrError(
        "integrity",
        `rerun reuses step ${name}, which plan ${plan.digest} does not have`,
      );
  }
  const steps: StepRun[] = plan.steps.map((planStep) => {
    const kept = reused.get(planStep.name);
    const base: Omit<StepRun, "digest"> = {
      id: stepRunId(run.id, planStep.name),
      runId: run.id,
      name: planStep.name,
      task: planStep.task,
      needs: [...planStep.needs],
      status: kept === undefined ? "pending" : "succeeded",
      version: 1,
      attemptCount: 0,
      readyAtMs: null,
      notBeforeMs: null,
      startedAtMs: null,
      finishedAtMs: kept === undefined ? null : options.nowMs,
      createdAtMs: options.nowMs,
      output: kept?.output ?? null,
    };
    return { ...base, digest: stepDigest(base) };
  });
  const mutations: StepMutation[] = steps.map((step) => ({
    runId: run.id,
    stepRunId: step.id,
    version: 1,
    fromStatus: null,
    toStatus: step.status,
    fromDigest: null,
    toDigest: step.digest,
    eventSeq: 1,
    atMs: options.nowMs,
  }));
  const runs: RowChange<Run>[] = [{ before: null, after: run }];
  const stepRows: RowChange<StepRun>[] = steps.map((step) => ({ before: null, after: step }));
  return {
    run,
    steps,
    change: {
      runs,
      steps: stepRows,
      attempts: [],
      events: [created],
      mutations,
      admissions: [],
      frontierDue: frontierMarks(runs, stepRows),
    },
  };
}

/** What a new run is bound to: the rest of its first row is the same for every kind. */
type RunBinding = Pick<
  Run,
  "kind" | "package" | "generation" | "target" | "planDigest" | "reconciliationDigest" | "status"
>;

/** A run's first row: version 1, its `run.created` event is seq 1, no attempt yet. */
function newRun(binding: RunBinding, options: NewRunOptions): Run {
  return {
    id: options.runId,
    ...binding,
    version: 1,
    eventSeq: 1,
    attemptSeq: 0,
    idempotencyKey: options.idempotencyKey,
    scheduleName: options.scheduleName,
    input: options.input ?? {},
    rerunOf: options.rerunOf ?? null,
    cancelRequestedAtMs: null,
    cancelReason: null,
    notBeforeMs: null,
    createdAtMs: options.nowMs,
    updatedAtMs: options.nowMs,
    finishedAtMs: null,
  };
}

/**
 * The `run.created` event: the target, then the input and the rerun link (only when there are
 * any), then what only one kind says (`rest`).
 */
function runCreatedEvent(
  run: Run,
  options: NewRunOptions,
  target: Record<string, unknown>,
  rest: Record<string, unknown> = {},
): RunEvent {
  return {
    id: eventId(run.id, 1),
    runId: run.id,
    seq: 1,
    type: "run.created",
    atMs: options.nowMs,
    stepRunId: null,
    attemptId: null,
    data: {
      ...target,
      ...(options.input === undefined || Object.keys(options.input).length === 0
        ? {}
        : { input: options.input }),
      ...(options.rerunOf === undefined || options.rerunOf === null
        ? {}
        : { rerunOf: options.rerunOf }),
      ...rest,
    },
  };
}

/** An ordinary run executes one task definition of its generation; it starts `queued`. */
export function createOrdinaryRun(
  definition: TaskDefinition,
  reconciliation: ReconciliationReceipt,
  options: NewRunOptions,
): NewRun {
  assertPortableId(options.runId, "runId");
  checkIdempotencyKey(options.idempotencyKey);
  const item = reconciliation.items.find((candidate) => candidate.task === definition.task);
  if (
    item === undefined ||
    item.runtimeTaskRevision !== definition.revision ||
    reconciliation.package !== definition.package
  ) {
    throw new QlrError(
      "integrity",
      `task definition ${definition.revision} is not part of reconciliation receipt ${reconciliation.digest}`,
    );
  }
  const run = newRun(
    {
      kind: "ordinary",
      package: definition.package,
      generation: definition.generation,
      target: definition.task,
      planDigest: null,
      reconciliationDigest: reconciliation.digest,
      status: "queued",
    },
    options,
  );
  const created = runCreatedEvent(run, options, {
    kind: "ordinary",
    package: definition.package,
    generation: definition.generation,
    task: definition.task,
    taskRevision: definition.revision,
  });
  return {
    run,
    change: { ...EMPTY_CHANGE_SET, runs: [{ before: null, after: run }], events: [created] },
  };
}

/**
 * Whole-run cancel intent. It only records the intent and its reason; convergence (stopping
 * processes with that reason, cancelling steps, finalizing the run) happens in the cadence.
 * Repeating it changes nothing, whatever the reason: the first intent stands.
 */
export function requestCancel(run: Run, nowMs: number, reason: RunCancelReason): ChangeSet | null {
  if (!RUN_CANCEL_REASONS.includes(reason))
    throw new QlrError("invalid_request", `unknown cancel reason ${JSON.stringify(reason)}`);
  if (TERMINAL_RUN_STATUSES.has(run.status) || run.cancelRequestedAtMs !== null) return null;
  const change = new RunChange(run, nowMs);
  change.patchRun({ cancelRequestedAtMs: nowMs, cancelReason: reason });
  change.emit("run.cancel_requested", {}, { reason });
  return change.build();
}
