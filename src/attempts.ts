import type { RunAttempt } from "./model.ts";
import type { ExecutionRevision } from "./packages.ts";

/**
 * A new attempt as admission creates it: a `claimed` dispatch intent with no process, lease
 * or outcome yet. Workflow and ordinary admission differ only in the identity fields.
 */
export function claimedAttempt(
  identity: Pick<RunAttempt, "id" | "runId" | "stepRunId" | "stepRunVersion" | "number">,
  execution: ExecutionRevision,
  nowMs: number,
): RunAttempt {
  return {
    ...identity,
    status: "claimed",
    executor: execution.executor,
    pool: execution.executor === "remote_worker" ? execution.pool : null,
    version: 1,
    createdAtMs: nowMs,
    startedAtMs: null,
    finishedAtMs: null,
    deadlineAtMs: null,
    timeoutMs: execution.timeoutMs,
    exitCode: null,
    signal: null,
    pid: null,
    processStartTicks: null,
    bootId: null,
    stopReason: null,
    stopRequestedAtMs: null,
    error: null,
    output: null,
    leaseWorkerId: null,
    leaseVersion: 0,
    leaseExpiresAtMs: null,
    leaseSecretDigest: null,
    ownerNodeId: null,
  };
}
