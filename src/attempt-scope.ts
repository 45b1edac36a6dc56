import { QlrError } from "./errors.ts";
import type { AttemptScope } from "./execution.ts";
import type { TaskDefinition } from "./packages.ts";
import type { StoreTx } from "./ports.ts";

/** An attempt with its run, its step (null for an ordinary run) and the task definition it executes. */
export type DefinedAttemptScope = AttemptScope & { readonly definition: TaskDefinition };

/**
 * The one way the core loads what an attempt decision needs, inside the caller's transaction.
 * Null when the attempt or its run no longer exists (a purged or never-written row). The task
 * definition comes from the run's own generation, never the package head.
 */
export async function findAttemptScope(tx: StoreTx, attemptId: string): Promise<DefinedAttemptScope | null> {
  const attempt = await tx.getAttempt(attemptId);
  if (attempt === null) return null;
  const run = await tx.getRun(attempt.runId);
  if (run === null) return null;
  const step = attempt.stepRunId === null ? null : await tx.getStep(attempt.stepRunId);
  const taskName = step?.task ?? run.target;
  const definition = await tx.getTaskDefinitionFor(run.reconciliationDigest, taskName);
  if (definition === null) throw new QlrError("integrity", `attempt ${attempt.id}: task ${taskName} has no definition in its generation`);
  return { run, step, attempt, definition };
}

/** `findAttemptScope` for callers answering a request: a missing attempt is `not_found`. */
export async function requireAttemptScope(tx: StoreTx, attemptId: string): Promise<DefinedAttemptScope> {
  const scope = await findAttemptScope(tx, attemptId);
  if (scope === null) throw new QlrError("not_found", `attempt ${attemptId} does not exist`);
  return scope;
}
