import { QlrError } from "./errors.ts";
import type { AttemptScope } from "./execution.ts";
import type { TaskDefinition } from "./packages.ts";
import type { StoreTx } from "./ports.ts";

/** An attempt with its run, its step (null for an ordinary run) and the task definition it executes. */
export type DefinedAttemptScope = AttemptScope & { readonly definition: TaskDefinition };

/**
 * The one way the core loads what an attempt decision needs, inside the caller's transaction.
 * Null when the attempt or its run no longer exists (a purged or never-written row).
 *
 * What a workflow attempt executes is what its admission recorded (ADR-0227 §4, ADR-0229 §2):
 * the task identity, revision, definition digest and execution digest are read from the
 * immutable admission receipt of its ready epoch and verified against the definition they
 * name, never taken from the package head or looked up again by name. An attempt without its
 * receipt, or whose receipt and definition disagree, is an integrity error: nothing runs. An
 * ordinary run's attempt executes the task of the run's own generation.
 */
export async function findAttemptScope(
  tx: StoreTx,
  attemptId: string,
): Promise<DefinedAttemptScope | null> {
  const attempt = await tx.getAttempt(attemptId);
  if (attempt === null) return null;
  const run = await tx.getRun(attempt.runId);
  if (run === null) return null;
  const step = attempt.stepRunId === null ? null : await tx.getStep(attempt.stepRunId);
  if (step === null) {
    const definition = await tx.getTaskDefinitionFor(run.reconciliationDigest, run.target);
    if (definition === null)
      throw new QlrError(
        "integrity",
        `attempt ${attempt.id}: task ${run.target} has no definition in its generation`,
      );
    return { run, step, attempt, definition };
  }
  return { run, step, attempt, definition: await admittedDefinition(tx, attempt, step.task) };
}

async function admittedDefinition(
  tx: StoreTx,
  attempt: DefinedAttemptScope["attempt"],
  task: string,
): Promise<TaskDefinition> {
  const refuse = (reason: string): never => {
    throw new QlrError("integrity", `attempt ${attempt.id}: ${reason}; it is never executed`);
  };
  if (attempt.stepRunId === null || attempt.stepRunVersion === null)
    return refuse("a workflow attempt names no step epoch");
  const receipt = await tx.getAdmission(attempt.runId, attempt.stepRunId, attempt.stepRunVersion);
  if (receipt === null)
    return refuse(`no admission receipt for step epoch ${attempt.stepRunVersion}`);
  if (receipt.attemptId !== attempt.id)
    return refuse(`the admission of its epoch names attempt ${receipt.attemptId}`);
  const definition = await tx.getTaskDefinition(receipt.runtimeTaskRevision);
  if (definition === null)
    return refuse(`the admitted revision ${receipt.runtimeTaskRevision} has no definition`);
  if (definition.id !== receipt.runtimeTaskId || definition.task !== task)
    return refuse(`the admitted task ${receipt.runtimeTaskId} is not the step's task ${task}`);
  if (definition.definitionDigest !== receipt.taskDefinitionDigest)
    return refuse("the admitted definition digest does not match the stored definition");
  if (definition.executionDigest !== receipt.executionDigest)
    return refuse("the admitted execution digest does not match the stored definition");
  return definition;
}

/** `findAttemptScope` for callers answering a request: a missing attempt is `not_found`. */
export async function requireAttemptScope(
  tx: StoreTx,
  attemptId: string,
): Promise<DefinedAttemptScope> {
  const scope = await findAttemptScope(tx, attemptId);
  if (scope === null) throw new QlrError("not_found", `attempt ${attemptId} does not exist`);
  return scope;
}
