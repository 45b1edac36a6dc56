import { findAttemptScope } from "./attempt-scope.ts";
import { isQlrError } from "./errors.ts";
import type { RunAttempt } from "./model.ts";
import { LIVE_ATTEMPT_STATUSES } from "./model.ts";
import type { Executor, StoreTx } from "./ports.ts";
import type { StageBudget } from "./profiles.ts";
import { receiptInStoreTime } from "./host-time.ts";
import { applyRecovery, decideRecovery, type RecoveryDecision } from "./recovery.ts";
import type { NodeIdentity } from "./ownership.ts";
import { attemptIdOf, describe, type StagePages } from "./stage-pages.ts";

/**
 * Start-up recovery (ARCHITECTURE §9, ADR-0229 §3): the live attempts this runtime owns are
 * decided from the executors' evidence, one attempt at a time; a decision the store refused is
 * made again by execution control (`recoverAgain`).
 */

/** What start-up recovery decided for one attempt. */
export interface RecoveryResult {
  readonly attemptId: string;
  readonly decision: RecoveryDecision["kind"];
  readonly reason: string | null;
}

/**
 * What a cluster node's start-up recovery reads: only attempts that crossed the start barrier.
 * A claim is a dispatch intent that belongs to no node (any node's dispatch starts it, or settles
 * it when its epoch is gone), so it is never an orphan of this node's last incarnation.
 */
const STARTED_ATTEMPT_STATUSES: readonly RunAttempt["status"][] = ["starting", "running"];
/** How often recovery repeats a read, or reads and decides one attempt again, after its transaction failed. */
const RECOVERY_WRITE_TRIES = 3;
/** Live attempts start-up recovery reads per page: each costs two inspections and a receipt read. */
const RECOVERY_PAGE = 64;
/** A bound on one start-up recovery: attempts beyond it keep their state until the next start-up. */
export const MAX_RECOVERED_ATTEMPTS = 10_000;
/** Start-up recovery walks every live attempt, in pages of `RECOVERY_PAGE` (bounded by `MAX_RECOVERED_ATTEMPTS`). */
const RECOVERY_WALK: StageBudget = { pageSize: RECOVERY_PAGE, pages: Infinity };

export interface StartupRecoveryDeps {
  readonly pages: StagePages;
  readonly executors: Partial<Record<RunAttempt["executor"], Executor>>;
  /** This runtime as a node of a shared store, which recovers only its own attempts; null: the only coordinator. */
  readonly node: NodeIdentity | null;
  /** The cycle recorded an outcome the next cycle acts on (`TickReport.followUp`). */
  readonly followUp: () => void;
  /** Started attempts whose recovery could not record its decision (`Coordinator.unrecordedRecoveries`). */
  readonly unrecordedRecoveries: Set<string>;
}

export class StartupRecovery {
  private readonly pages: StagePages;
  private readonly unrecordedRecoveries: Set<string>;

  constructor(private readonly deps: StartupRecoveryDeps) {
    this.pages = deps.pages;
    this.unrecordedRecoveries = deps.unrecordedRecoveries;
  }

  /**
   * Start-up recovery of attempts this runtime owns, one attempt at a time. Returns each
   * decision so the runtime can report what failed closed.
   */
  async recover(limit = MAX_RECOVERED_ATTEMPTS): Promise<RecoveryResult[]> {
    const results: RecoveryResult[] = [];
    const owner = this.deps.node?.nodeId;
    // A lone runtime's claims were made by its previous incarnation and are orphaned (ADR-0229
    // §3); a cluster node's restart would otherwise lose every claim the other nodes just made.
    const statuses =
      this.deps.node === null ? [...LIVE_ATTEMPT_STATUSES] : STARTED_ATTEMPT_STATUSES;
    for (const executor of Object.values(this.deps.executors)) {
      if (executor === undefined) continue;
      // Bounded: recovery walks live attempts in pages until none remain or the limit is reached.
      await this.pages.walkStore({
        budget: RECOVERY_WALK,
        list: (tx, after, limit) => tx.listAttempts(executor.type, statuses, after, limit, owner),
        idOf: attemptIdOf,
        read: (fn) => this.readForRecovery(fn),
        handle: async (attempt) => {
          const result = await this.recoverOne(executor, attempt);
          if (result !== null) results.push(result);
        },
        done: () => results.length >= limit,
      });
    }
    return results;
  }

  /** A read of start-up recovery, tried again when its transaction fails (a read is safe to repeat). */
  private async readForRecovery<T>(read: (tx: StoreTx) => Promise<T>): Promise<T> {
    let lastError: unknown = null;
    for (let round = 0; round < RECOVERY_WRITE_TRIES; round += 1) {
      try {
        return await this.pages.store.transaction(read);
      } catch (error) {
        if (isQlrError(error, "clock_regression")) throw error;
        lastError = error;
      }
    }
    throw lastError;
  }

  /**
   * One attempt's recovery, met with a store failure the way the cadence's stages meet one:
   * read again and decide again. A lost commit response either left nothing (the decision is
   * made again from fresh evidence) or committed the decision (the attempt's version moved, so
   * nothing is applied twice). A clock that reads behind the store refuses start-up as before;
   * any other failure that persists is reported for this attempt, which keeps its state, and
   * recovery goes on with the next one.
   */
  private async recoverOne(executor: Executor, listed: RunAttempt): Promise<RecoveryResult | null> {
    let attempt = listed;
    let lastError: unknown = null;
    for (let round = 0; round < RECOVERY_WRITE_TRIES; round += 1) {
      if (round > 0) {
        const current = await this.readForRecovery((tx) => tx.getAttempt(listed.id));
        if (current === null || !LIVE_ATTEMPT_STATUSES.has(current.status)) return null;
        attempt = current;
      }
      // Inspect first, read the receipt last: a process seen gone (with the supervisor that
      // writes its receipt) has either left its receipt by then, or never will.
      const inspections =
        attempt.status === "running" || attempt.status === "starting"
          ? [await executor.inspect(attempt), await executor.inspect(attempt)]
          : [];
      const journal = attempt.status === "claimed" ? "absent" : await executor.hasJournal(attempt);
      const receipt =
        attempt.status === "claimed"
          ? ({ status: "none" } as const)
          : await executor.readReceipt(attempt);
      const expectedVersion = attempt.version;
      try {
        const outcome = await this.pages.write(async (tx, nowMs, hostOffsetMs) => {
          const scope = await findAttemptScope(tx, listed.id);
          if (scope === null || scope.attempt.version !== expectedVersion) return null;
          // Another node's attempt is never decided here (its evidence is on its own host).
          if (
            this.deps.node !== null &&
            scope.attempt.ownerNodeId !== null &&
            scope.attempt.ownerNodeId !== this.deps.node.nodeId
          )
            return null;
          // At start-up every claim of a local executor is orphaned: the runtime that claimed it is gone (ADR-0229 §3).
          const decision = decideRecovery(scope, {
            receipt: receiptInStoreTime(receipt, hostOffsetMs),
            journal,
            inspections,
          });
          const change = applyRecovery(scope, decision, scope.definition.retry, nowMs);
          if (change !== null) await tx.apply(change);
          return decision;
        });
        return outcome === null
          ? null
          : {
              attemptId: listed.id,
              decision: outcome.kind,
              reason: "reason" in outcome ? outcome.reason : null,
            };
      } catch (error) {
        if (isQlrError(error, "clock_regression")) throw error;
        lastError = error;
      }
    }
    // A claim is not kept: dispatch starts it, and a started claim is this incarnation's own.
    if (attempt.status !== "claimed" && this.unrecordedRecoveries.size < MAX_RECOVERED_ATTEMPTS)
      this.unrecordedRecoveries.add(listed.id);
    return {
      attemptId: listed.id,
      decision: "fail_closed",
      reason: `recovery could not record its decision: ${describe(lastError).message}`,
    };
  }

  /**
   * Execution control's hook for an attempt whose start-up recovery decision the store refused:
   * the same recovery, from fresh evidence, under the same version check (nothing is applied
   * twice). Refused again, the attempt stays in `unrecordedRecoveries` for the next cycle; true
   * when the recorded decision changed the attempt.
   */
  async recoverAgain(executor: Executor, attempt: RunAttempt): Promise<boolean> {
    this.unrecordedRecoveries.delete(attempt.id);
    let result: RecoveryResult | null;
    try {
      result = await this.recoverOne(executor, attempt);
    } catch (error) {
      this.unrecordedRecoveries.add(attempt.id);
      throw error;
    }
    if (result === null || this.unrecordedRecoveries.has(attempt.id)) return false;
    const changed = result.decision !== "readopt" && result.decision !== "none";
    if (changed) this.deps.followUp();
    return changed;
  }
}
