import type { InputDeclaration } from "./run-inputs.ts";
import { digestOf, type Digest } from "./digest.ts";
import { QlrError } from "./errors.ts";
import type { ExecutorType } from "./model.ts";
import type { Manifest, TaskSpec, WorkflowSpec } from "./manifest/types.ts";
import { topologicalOrder } from "./manifest/dag.ts";

/**
 * Package generations, task reconciliation, execution revisions and workflow plans
 * (ADR-0227 background and §1). Everything here is immutable and digest-addressed: a
 * running workflow stays bound to the generation it started in, whatever is applied later.
 */

export interface Generation {
  readonly package: string;
  readonly generation: number;
  readonly manifestDigest: Digest;
  readonly manifest: Manifest;
  readonly createdAtMs: number;
}

export type GenerationDecision =
  | { readonly changed: false; readonly generation: number }
  | { readonly changed: true; readonly generation: Generation };

export function manifestDigest(manifest: Manifest): Digest {
  return digestOf(manifest);
}

/** An unchanged canonical digest never creates a new generation. */
export function nextGeneration(
  head: { readonly generation: number; readonly manifestDigest: Digest } | null,
  manifest: Manifest,
  nowMs: number,
): GenerationDecision {
  const digest = manifestDigest(manifest);
  if (head !== null && head.manifestDigest === digest)
    return { changed: false, generation: head.generation };
  return {
    changed: true,
    generation: {
      package: manifest.package,
      generation: (head?.generation ?? 0) + 1,
      manifestDigest: digest,
      manifest,
      createdAtMs: nowMs,
    },
  };
}

export interface LocalProcessRevision {
  readonly executor: "local_process";
  readonly argv: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  readonly cwd: string | null;
  /** Absent when the task runs as the runtime's user (so older digests are unchanged). */
  readonly user?: string;
  readonly timeoutMs: number;
  readonly stdin: "none";
  readonly shell: boolean;
}

export interface RemoteWorkerRevision {
  readonly executor: "remote_worker";
  readonly pool: string;
  readonly argv: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  readonly timeoutMs: number;
  readonly shell: boolean;
}

export type ExecutionRevision = LocalProcessRevision | RemoteWorkerRevision;

export interface NormalizedExecution {
  readonly revision: ExecutionRevision;
  readonly digest: Digest;
}

function sortedEnv(env: Readonly<Record<string, string>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const key of Object.keys(env).sort()) out[key] = env[key] ?? "";
  return out;
}

/**
 * The normalizers rebuild the revision field by field from what they are given and always
 * recompute its digest: a digest or executor type claimed by a caller is never trusted.
 */
export function normalizeLocalProcess(input: {
  argv: readonly string[];
  env: Readonly<Record<string, string>>;
  cwd: string | null;
  user?: string | undefined;
  timeoutMs: number;
  shell: boolean;
}): NormalizedExecution {
  const revision: LocalProcessRevision = {
    executor: "local_process",
    argv: [...input.argv],
    env: sortedEnv(input.env),
    cwd: input.cwd,
    ...(input.user === undefined ? {} : { user: input.user }),
    timeoutMs: input.timeoutMs,
    stdin: "none",
    shell: input.shell,
  };
  return { revision, digest: digestOf(revision) };
}

export function normalizeRemoteWorker(input: {
  pool: string;
  argv: readonly string[];
  env: Readonly<Record<string, string>>;
  timeoutMs: number;
  shell: boolean;
}): NormalizedExecution {
  const revision: RemoteWorkerRevision = {
    executor: "remote_worker",
    pool: input.pool,
    argv: [...input.argv],
    env: sortedEnv(input.env),
    timeoutMs: input.timeoutMs,
    shell: input.shell,
  };
  return { revision, digest: digestOf(revision) };
}

/** Re-normalizes a stored or received revision; a tampered field changes the digest. */
export function renormalize(revision: ExecutionRevision): NormalizedExecution {
  return revision.executor === "local_process"
    ? normalizeLocalProcess(revision)
    : normalizeRemoteWorker(revision);
}

export function executionForTask(task: TaskSpec): NormalizedExecution {
  if (task.executor === "remote_worker") {
    if (task.pool === null)
      throw new QlrError("invalid_manifest", `task ${task.name}: remote_worker needs a pool`);
    return normalizeRemoteWorker({
      pool: task.pool,
      argv: task.argv,
      env: task.env,
      timeoutMs: task.timeoutMs,
      shell: task.shell,
    });
  }
  return normalizeLocalProcess({
    argv: task.argv,
    env: task.env,
    cwd: task.cwd,
    user: task.user,
    timeoutMs: task.timeoutMs,
    shell: task.shell,
  });
}

export interface RetryPolicy {
  readonly max: number;
  readonly backoffMs: number;
  readonly idempotent: boolean;
}

export interface TaskDefinition {
  /** `pkg:<package>:<task>` */
  readonly id: string;
  /** `qltd:v1:<generation>:<definition digest>` */
  readonly revision: string;
  readonly package: string;
  readonly task: string;
  readonly generation: number;
  readonly executor: ExecutorType;
  readonly execution: ExecutionRevision;
  readonly executionDigest: Digest;
  readonly retry: RetryPolicy;
  /**
   * The task's `concurrency:` limit (live attempts across all runs of the package), checked at
   * admission (src/backpressure.ts). Absent without one, and then left out of the digest, so
   * every definition stored before the limit existed keeps its digest and revision.
   */
  readonly concurrency?: number;
  readonly definitionDigest: Digest;
}

export function runtimeTaskId(packageName: string, task: string): string {
  return `pkg:${packageName}:${task}`;
}

export function taskDefinitionFor(
  packageName: string,
  generation: number,
  task: TaskSpec,
): TaskDefinition {
  const execution = executionForTask(task);
  const retry: RetryPolicy = {
    max: task.retry.max,
    backoffMs: task.retry.backoffMs,
    idempotent: task.retry.idempotent,
  };
  const concurrency = task.concurrency === undefined ? {} : { concurrency: task.concurrency };
  const definitionDigest = digestOf({
    package: packageName,
    task: task.name,
    execution: execution.revision,
    executionDigest: execution.digest,
    retry,
    ...concurrency,
  });
  return {
    id: runtimeTaskId(packageName, task.name),
    revision: `qltd:v1:${generation}:${definitionDigest}`,
    package: packageName,
    task: task.name,
    generation,
    executor: execution.revision.executor,
    execution: execution.revision,
    executionDigest: execution.digest,
    retry,
    ...concurrency,
    definitionDigest,
  };
}

export interface ReconciliationItem {
  readonly task: string;
  readonly runtimeTaskId: string;
  readonly runtimeTaskRevision: string;
  readonly definitionDigest: Digest;
  readonly executionDigest: Digest;
}

export interface ReconciliationReceipt {
  readonly package: string;
  readonly generation: number;
  readonly manifestDigest: Digest;
  readonly lockDigest: Digest;
  readonly items: readonly ReconciliationItem[];
  readonly createdAtMs: number;
  readonly digest: Digest;
}

export interface Reconciliation {
  readonly definitions: readonly TaskDefinition[];
  readonly receipt: ReconciliationReceipt;
}

/** Task reconciliation of one generation: its runtime task definitions and one immutable receipt. */
export function reconcileTasks(generation: Generation): Reconciliation {
  const definitions = [...generation.manifest.tasks]
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .map((task) => taskDefinitionFor(generation.package, generation.generation, task));
  const items: ReconciliationItem[] = definitions.map((definition) => ({
    task: definition.task,
    runtimeTaskId: definition.id,
    runtimeTaskRevision: definition.revision,
    definitionDigest: definition.definitionDigest,
    executionDigest: definition.executionDigest,
  }));
  const lockDigest = digestOf(items);
  const body = {
    package: generation.package,
    generation: generation.generation,
    manifestDigest: generation.manifestDigest,
    lockDigest,
    items,
    createdAtMs: generation.createdAtMs,
  };
  return { definitions, receipt: { ...body, digest: digestOf(body) } };
}

/**
 * Objects already verified. Only frozen objects are remembered (the store freezes the immutable
 * bodies it caches), so nothing verified can change afterwards; this spares re-hashing a plan
 * on every admission without trusting anything that was not checked once.
 */
const verified = new WeakSet<object>();

function verifiedOnce(value: object, check: () => boolean): boolean {
  if (verified.has(value)) return true;
  const ok = check();
  if (ok && Object.isFrozen(value)) verified.add(value);
  return ok;
}

export function verifyReconciliationReceipt(receipt: ReconciliationReceipt): boolean {
  return verifiedOnce(receipt, () => {
    const { digest, ...body } = receipt;
    return digestOf(body) === digest && digestOf(receipt.items) === receipt.lockDigest;
  });
}

export function verifyTaskDefinition(definition: TaskDefinition): boolean {
  return verifiedOnce(definition, () => checkTaskDefinition(definition));
}

function checkTaskDefinition(definition: TaskDefinition): boolean {
  const execution = renormalize(definition.execution);
  const definitionDigest = digestOf({
    package: definition.package,
    task: definition.task,
    execution: execution.revision,
    executionDigest: execution.digest,
    retry: definition.retry,
    ...(definition.concurrency === undefined ? {} : { concurrency: definition.concurrency }),
  });
  return (
    execution.digest === definition.executionDigest &&
    definitionDigest === definition.definitionDigest &&
    definition.revision === `qltd:v1:${definition.generation}:${definitionDigest}` &&
    definition.id === runtimeTaskId(definition.package, definition.task) &&
    definition.executor === execution.revision.executor
  );
}

export interface PlanStep {
  readonly name: string;
  readonly task: string;
  readonly needs: readonly string[];
  /** The source task's definition digest in the same generation. */
  readonly sourceTaskDigest: Digest;
}

export interface WorkflowPlan {
  readonly package: string;
  readonly generation: number;
  readonly workflow: string;
  readonly manifestDigest: Digest;
  readonly reconciliationDigest: Digest;
  /** Steps in a deterministic topological order. */
  readonly steps: readonly PlanStep[];
  /** The workflow's declared inputs; present only when it declares any, so other plan digests stay as they were. */
  readonly inputs?: readonly InputDeclaration[];
  readonly digest: Digest;
}

/** Materializes every workflow of a generation into an immutable, digest-addressed plan. */
export function materializePlans(
  generation: Generation,
  reconciliation: Reconciliation,
): WorkflowPlan[] {
  const byTask = new Map(
    reconciliation.definitions.map((definition) => [definition.task, definition]),
  );
  return generation.manifest.workflows.map((workflow) =>
    materializePlan(generation, reconciliation.receipt, byTask, workflow),
  );
}

function materializePlan(
  generation: Generation,
  receipt: ReconciliationReceipt,
  byTask: ReadonlyMap<string, TaskDefinition>,
  workflow: WorkflowSpec,
): WorkflowPlan {
  const order = topologicalOrder(workflow.steps);
  const byName = new Map(workflow.steps.map((step) => [step.name, step]));
  const steps: PlanStep[] = order.map((name) => {
    const step = byName.get(name);
    if (step === undefined) throw new QlrError("internal", `plan order names unknown step ${name}`);
    const definition = byTask.get(step.task);
    if (definition === undefined)
      throw new QlrError(
        "invalid_manifest",
        `workflow ${workflow.name} step ${name} names unknown task ${step.task}`,
      );
    return {
      name,
      task: step.task,
      needs: [...step.needs].sort(),
      sourceTaskDigest: definition.definitionDigest,
    };
  });
  const body = {
    package: generation.package,
    generation: generation.generation,
    workflow: workflow.name,
    manifestDigest: generation.manifestDigest,
    reconciliationDigest: receipt.digest,
    steps,
    ...(workflow.inputs === undefined ? {} : { inputs: workflow.inputs }),
  };
  return { ...body, digest: digestOf(body) };
}

export function verifyPlan(plan: WorkflowPlan): boolean {
  return verifiedOnce(plan, () => {
    const { digest, ...body } = plan;
    return digestOf(body) === digest;
  });
}
