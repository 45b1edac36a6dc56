import { QlrError } from "./errors.ts";
import { requireAttemptScope } from "./attempt-scope.ts";
import { settleStrandedClaim, type CompletionFacts } from "./execution.ts";
import {
  checkFence,
  DEFAULT_LEASE_TTL_MS,
  grantLease,
  heartbeat,
  isClaimable,
  MAX_CLAIM_CAPACITY,
  workerComplete,
  workerRunning,
  workerStarting,
  type LeaseControl,
  type LeaseFence,
} from "./leases.ts";
import type { ProcessHandleFacts, RunAttempt } from "./model.ts";
import type { RemoteWorkerRevision } from "./packages.ts";
import {
  transactAtStoreTime,
  type Clock,
  type SecretSource,
  type Store,
  type StoreTx,
} from "./ports.ts";
import { applyLoss, decideLoss } from "./recovery.ts";
import { taskContext, type TaskContext } from "./task-context.ts";

/**
 * The lease protocol over the store: one short transaction per call, the same operations for
 * every runtime that serves `/worker/*` (the Worker, a server, a cluster replica).
 */

export interface Lease {
  readonly attemptId: string;
  readonly leaseVersion: number;
  /** Presented on every later call of this lease; answered once, here, and stored only as a digest. */
  readonly leaseSecret: string;
  readonly leaseExpiresAtMs: number;
  readonly runId: string;
  readonly stepRunId: string | null;
  readonly taskRevision: string;
  readonly execution: RemoteWorkerRevision;
  /** What the task is told about its run: the worker builds the task's environment from it. */
  readonly context: TaskContext;
}

export interface LeaseServiceDeps {
  readonly store: Store;
  readonly clock: Clock;
  readonly secrets: SecretSource;
  readonly ttlMs?: number;
}

export type WorkerCompletion = {
  readonly status: RunAttempt["status"];
  readonly replayed: boolean;
};

/**
 * The leased attempt as this transaction just wrote it. Missing, or without a lease expiry, it
 * would mean the store lost its own write inside one transaction: an integrity error, never a
 * made-up answer.
 */
async function writtenLease(
  tx: StoreTx,
  attemptId: string,
): Promise<RunAttempt & { readonly leaseExpiresAtMs: number }> {
  const attempt = await tx.getAttempt(attemptId);
  // Unreachable (the row was written or read in this very transaction): only the mutants that
  // cannot change an answer are marked; those that make it refuse every call are still tested.
  // Stryker disable next-line LogicalOperator: equivalent, both parts are false for a written lease
  if (attempt === null || attempt.leaseExpiresAtMs === null)
    // Stryker disable next-line StringLiteral: unreachable message
    throw new QlrError("integrity", `attempt ${attemptId} has no lease after its own write`);
  return { ...attempt, leaseExpiresAtMs: attempt.leaseExpiresAtMs };
}

export class LeaseService {
  private readonly deps: LeaseServiceDeps;
  private readonly ttlMs: number;

  constructor(deps: LeaseServiceDeps) {
    this.deps = deps;
    this.ttlMs = deps.ttlMs ?? DEFAULT_LEASE_TTL_MS;
  }

  private write<T>(fn: (tx: StoreTx, nowMs: number) => Promise<T>): Promise<T> {
    return transactAtStoreTime(this.deps.store, this.deps.clock, fn);
  }

  /**
   * Leases up to `capacity` claimable attempts of the pool; each lease is its own transaction.
   * One candidate that cannot be leased (an integrity error: its admission and definition
   * disagree) is passed over, so it cannot hold the pool's other work back claim after claim;
   * the claim fails only when nothing was leased, naming that error.
   */
  async claim(workerId: string, pool: string, capacity: number): Promise<Lease[]> {
    const limit = Math.max(0, Math.min(capacity, MAX_CLAIM_CAPACITY));
    if (limit === 0) return [];
    // Store time, as every lease decision: a coordinator whose clock lags must still see
    // expired leases as claimable.
    const candidates = await this.write(async (tx, nowMs) =>
      tx.listClaimableRemote(pool, nowMs, limit),
    );
    const leases: Lease[] = [];
    let passedOver: Error | null = null;
    for (const candidate of candidates) {
      try {
        // Drawn outside the transaction: a PostgreSQL retry re-runs the function, and the secret
        // must be the one the answer carries.
        const leaseSecret = this.deps.secrets.leaseSecret();
        const lease = await this.write(async (tx, nowMs) => {
          const scope = await requireAttemptScope(tx, candidate.id);
          // Re-read inside the transaction: another worker may have won it meanwhile.
          if (!isClaimable(scope.attempt, nowMs) || scope.run.cancelRequestedAtMs !== null)
            return null;
          // Narrows the execution for the answer; never true, admission checked the executor.
          if (scope.definition.execution.executor !== "remote_worker") return null;
          // A claim whose ready epoch is gone may no longer start: settled, not leased.
          const stranded = settleStrandedClaim(scope, nowMs);
          if (stranded !== null) {
            await tx.apply(stranded);
            return null;
          }
          await tx.apply(grantLease(scope, workerId, leaseSecret, nowMs, this.ttlMs));
          const leased = await writtenLease(tx, candidate.id);
          return {
            attemptId: leased.id,
            leaseVersion: leased.leaseVersion,
            leaseSecret,
            leaseExpiresAtMs: leased.leaseExpiresAtMs,
            runId: leased.runId,
            stepRunId: leased.stepRunId,
            taskRevision: scope.definition.revision,
            execution: scope.definition.execution,
            // An ordinary run has no steps: its context names no needs either way.
            context: taskContext(
              { ...scope, attempt: leased },
              await tx.getSteps(scope.run.id),
              scope.definition.task,
            ),
          } satisfies Lease;
        });
        if (lease !== null) leases.push(lease);
      } catch (error) {
        // Losing a race for one lease (a CAS conflict) is normal. A storage error ends the
        // claim (the next candidate would meet it too); any other error is this candidate's.
        const code = (error as { code?: unknown }).code;
        if (code === "conflict") continue;
        if (typeof code === "string" && code.startsWith("storage_")) throw error;
        passedOver ??= error instanceof Error ? error : new Error(String(error));
      }
    }
    if (leases.length === 0 && passedOver !== null) throw passedOver;
    return leases;
  }

  async start(
    attemptId: string,
    fence: LeaseFence,
    phase: "starting" | "running",
    handle: ProcessHandleFacts | null,
  ): Promise<{ status: RunAttempt["status"]; leaseExpiresAtMs: number }> {
    return this.write(async (tx, nowMs) => {
      const scope = await requireAttemptScope(tx, attemptId);
      if (phase === "starting") {
        await tx.apply(workerStarting(scope, fence, nowMs, this.ttlMs));
      } else {
        if (handle === null)
          throw new QlrError("invalid_request", "phase running needs the process handle");
        await tx.apply(workerRunning(scope, fence, handle, nowMs, this.ttlMs));
      }
      const after = await writtenLease(tx, attemptId);
      return { status: after.status, leaseExpiresAtMs: after.leaseExpiresAtMs };
    });
  }

  async heartbeat(attemptId: string, fence: LeaseFence): Promise<LeaseControl> {
    return this.write(async (tx, nowMs) => {
      const scope = await requireAttemptScope(tx, attemptId);
      const { control, change } = heartbeat(scope, fence, nowMs, this.ttlMs);
      await tx.apply(change);
      return control;
    });
  }

  async complete(
    attemptId: string,
    fence: LeaseFence,
    facts: CompletionFacts,
  ): Promise<WorkerCompletion> {
    return this.write(async (tx, nowMs) => {
      const scope = await requireAttemptScope(tx, attemptId);
      const answer = workerComplete(scope, fence, facts, scope.definition.retry, nowMs);
      if (answer.kind === "replayed") return { status: answer.status, replayed: true };
      await tx.apply(answer.change);
      return { status: (await writtenLease(tx, attemptId)).status, replayed: false };
    });
  }

  /**
   * The worker's trusted evidence that the process is gone without a receipt. `neverSpawned`
   * says the worker's launcher proves the process never started (no journal record, or one
   * with no spawn record and no supervisor left that could write one): a `starting` attempt is
   * then lost before the start barrier and its step gets a new ready epoch, as the device's
   * recovery decides the same evidence (`decideLoss`). The fact counts only from the lease's
   * holder under its current fence; a stale fence is refused and writes nothing, and so is the
   * fact on a `running` attempt, whose process the worker itself reported.
   */
  async lost(
    attemptId: string,
    fence: LeaseFence,
    reason: string,
    evidence: { readonly neverSpawned?: boolean } = {},
  ): Promise<WorkerCompletion> {
    return this.write(async (tx, nowMs) => {
      const scope = await requireAttemptScope(tx, attemptId);
      checkFence(scope.attempt, fence);
      if (scope.attempt.status === "lost") return { status: "lost", replayed: true };
      const decision = decideLoss(
        scope.attempt,
        evidence.neverSpawned === true
          ? "never_spawned"
          : // Stryker disable next-line StringLiteral: equivalent, only "never_spawned" is told apart
            "unknown",
        `worker ${fence.workerId}: ${reason}`,
      );
      await tx.apply(applyLoss(scope, decision, scope.definition.retry, nowMs));
      return { status: (await writtenLease(tx, attemptId)).status, replayed: false };
    });
  }
}
