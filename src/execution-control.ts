import { findAttemptScope } from "./attempt-scope.ts";
import {
  type CompletionFacts,
  markRunning,
  requestShutdownStop,
  requestTimeoutStop,
} from "./execution.ts";
import { expireLease } from "./leases.ts";
import type { ProcessHandleFacts, RunAttempt } from "./model.ts";
import { MAX_STORE_PAGE, type Executor } from "./ports.ts";
import type { StageBudget } from "./profiles.ts";
import { handleInStoreTime } from "./host-time.ts";
import { applyRecovery, decideRecovery, type ReceiptEvidence } from "./recovery.ts";
import { orphanedReason, ownershipOf, type NodeIdentity } from "./ownership.ts";
import { afterComplete, completeWrite, type CompletionSignals } from "./completion-write.ts";
import {
  attemptIdOf,
  countOne,
  describe,
  type PageWrite,
  type StageContext,
  type StagePages,
} from "./stage-pages.ts";

/**
 * Execution control (ARCHITECTURE §3, stage 7, and §8): for the attempts this runtime owns,
 * receipts become completions, passed deadlines become task-scoped timeout stops, stop intents
 * stop exactly those processes; expired remote leases and orphans of expired nodes fail
 * closed; and at shutdown, the durable stop intents of every running attempt.
 */

/** Every item of a list, in the largest pages the store returns: a shutdown must reach them all. */
const WHOLE_LIST: StageBudget = { pageSize: MAX_STORE_PAGE, pages: Infinity };

/**
 * Whether execution control must open a transaction for a running attempt without a receipt:
 * it is not running by this row (another decision applies), it carries a stop intent, or its
 * deadline is reached at the store time of the list that returned the row. Otherwise the
 * transaction would read the attempt's whole scope to decide, every cycle, that nothing is due.
 */
function stopDue(attempt: RunAttempt, listedAtMs: number): boolean {
  if (attempt.status !== "running" || attempt.stopReason !== null) return true;
  return attempt.deadlineAtMs !== null && listedAtMs >= attempt.deadlineAtMs;
}

export interface ExecutionControlDeps extends CompletionSignals {
  readonly pages: StagePages;
  readonly executors: Partial<Record<RunAttempt["executor"], Executor>>;
  /** This runtime as a node of a shared store, which controls only its own attempts; null: the only coordinator. */
  readonly node: NodeIdentity | null;
  /** Attempts whose launch is in flight (pipelined dispatch): the dispatch stage records them. */
  readonly launching: { has(attemptId: string): boolean };
  /** Handles of processes whose `running` write failed (`Coordinator.unrecordedHandles`). */
  readonly unrecordedHandles: Map<string, ProcessHandleFacts>;
  /** Attempts never handed to a launcher after a failed `starting` write (`Coordinator.unlaunchedStarting`). */
  readonly unlaunchedStarting: Set<string>;
  /** Attempts whose start-up recovery could not record its decision (`Coordinator.unrecordedRecoveries`). */
  readonly unrecordedRecoveries: ReadonlySet<string>;
  /** Start-up recovery's decision made again for one of `unrecordedRecoveries`; true when it changed the attempt. */
  readonly recoverAgain: (executor: Executor, attempt: RunAttempt) => Promise<boolean>;
}

export class ExecutionControl {
  private readonly pages: StagePages;
  private readonly unrecordedHandles: Map<string, ProcessHandleFacts>;
  private readonly unlaunchedStarting: Set<string>;

  constructor(private readonly deps: ExecutionControlDeps) {
    this.pages = deps.pages;
    this.unrecordedHandles = deps.unrecordedHandles;
    this.unlaunchedStarting = deps.unlaunchedStarting;
  }

  /** A running attempt whose supervisor died: two inspections and the recovery decision; true when it was settled. */
  private async settleOrphan(executor: Executor, attempt: RunAttempt): Promise<boolean> {
    const inspections = [await executor.inspect(attempt), await executor.inspect(attempt)];
    const receipt = await executor.readReceipt(attempt);
    const settled = await this.pages.write(async (tx, nowMs) => {
      const scope = await findAttemptScope(tx, attempt.id);
      if (scope === null || scope.attempt.status !== "running") return false;
      const decision = decideRecovery(scope, { receipt, journal: "present", inspections });
      if (decision.kind !== "lost_failed" && decision.kind !== "complete") return false;
      const change = applyRecovery(scope, decision, scope.definition.retry, nowMs);
      if (change === null) return false;
      await tx.apply(change);
      return true;
    });
    if (settled) this.deps.followUp();
    return settled;
  }

  /**
   * A `starting` attempt without a receipt, seen by execution control: its launch ended
   * without a recorded handle (the runtime crashed between spawn and the running write, or
   * that write failed). Re-examined every cycle, not only at start-up:
   * - a handle this runtime still holds is written again;
   * - an executor that proves the process never spawned (journal, but no spawn record and no
   *   supervisor that could still write one) settles it as lost before the start barrier;
   * - otherwise it may run: a cancel is passed to the executor, which stops the exact process
   *   by durable intent without a handle; its deadline is enforced by the executor too, and
   *   either way the receipt then completes it.
   */
  private async controlStarting(executor: Executor, attempt: RunAttempt): Promise<boolean> {
    const held = this.unrecordedHandles.get(attempt.id);
    if (held !== undefined) {
      const recorded = await this.pages.write(async (tx, nowMs, hostOffsetMs) => {
        const scope = await findAttemptScope(tx, attempt.id);
        if (scope === null || scope.attempt.status !== "starting") return false;
        await tx.apply(markRunning(scope, handleInStoreTime(held, hostOffsetMs), nowMs));
        return true;
      });
      this.unrecordedHandles.delete(attempt.id);
      return recorded;
    }
    const journal = await executor.hasJournal(attempt);
    // An absent journal is conclusive for an attempt this incarnation never handed to a launcher.
    if (
      journal === "never_spawned" ||
      (journal === "absent" && this.unlaunchedStarting.has(attempt.id))
    ) {
      const settled = await this.pages.write(async (tx, nowMs) => {
        const scope = await findAttemptScope(tx, attempt.id);
        if (scope === null || scope.attempt.status !== "starting") return false;
        const change = applyRecovery(
          scope,
          decideRecovery(scope, { receipt: { status: "none" }, journal, inspections: [] }),
          scope.definition.retry,
          nowMs,
        );
        if (change === null) return false;
        await tx.apply(change);
        return true;
      });
      if (settled) {
        this.deps.followUp();
        this.unlaunchedStarting.delete(attempt.id);
      }
      return settled;
    }
    const cancelRequested = await this.pages.store.read(
      async (tx) => (await tx.getRun(attempt.runId))?.cancelRequestedAtMs ?? null,
    );
    // Repeated each cycle until the receipt lands; the executor's stop is idempotent (the
    // first durable intent wins) and does not count as progress.
    if (cancelRequested !== null) await executor.stop(attempt, "cancel");
    return false;
  }

  /**
   * Execution control for attempts this runtime owns: receipts become completions, passed
   * deadlines become task-scoped timeout stops, stop intents stop exactly those processes.
   */
  async run(budget: StageBudget, context: StageContext): Promise<void> {
    await this.expireLeases(budget, context);
    await this.reportOrphans(budget, context);
    const owner = this.deps.node?.nodeId;
    for (const executor of Object.values(this.deps.executors)) {
      if (executor === undefined) continue;
      // The store time of the page's list, read in the list's transaction (see `stopDue`).
      let listedAtMs = 0;
      await this.pages.stageWalk(context, {
        resume: `control:${executor.type}`,
        budget,
        list: async (tx, after, limit) => {
          listedAtMs = await this.pages.storeNow(tx);
          return tx.listAttempts(executor.type, ["starting", "running"], after, limit, owner);
        },
        idOf: attemptIdOf,
        handlePage: (attempts) => this.controlPage(context, executor, attempts, listedAtMs),
      });
    }
  }

  /**
   * Attempts of nodes whose lease expired fail closed, once each: their evidence is on another
   * host, so nothing here may decide them (src/ownership.ts). The owner settles them when it
   * returns; an operator may resolve them as lost. Only a node in a shared store does this.
   */
  private async reportOrphans(budget: StageBudget, context: StageContext): Promise<void> {
    const node = this.deps.node;
    if (node === null) return;
    for (const executor of Object.values(this.deps.executors)) {
      if (executor === undefined) continue;
      await this.pages.stageWalk(context, {
        budget,
        list: async (tx, after, limit) =>
          tx.listOrphanedAttempts(executor.type, await this.pages.storeNow(tx), after, limit),
        idOf: attemptIdOf,
        handle: (attempt) =>
          countOne(context, attempt.id, () =>
            this.pages.write(async (tx, nowMs) => {
              const scope = await findAttemptScope(tx, attempt.id);
              if (
                scope === null ||
                scope.attempt.ownerNodeId === null ||
                scope.attempt.error !== null
              )
                return false;
              const owner = await tx.getCoordinator(scope.attempt.ownerNodeId);
              if (ownershipOf(scope.attempt, node.nodeId, owner, nowMs) !== "foreign_expired")
                return false;
              const change = applyRecovery(
                scope,
                { kind: "fail_closed", reason: orphanedReason(scope.attempt, owner) },
                scope.definition.retry,
                nowMs,
              );
              if (change === null) return false;
              await tx.apply(change);
              return true;
            }),
          ),
      });
    }
  }

  /** Remote leases that expired: claims are re-opened, started attempts fail closed until their worker reports. */
  private async expireLeases(budget: StageBudget, context: StageContext): Promise<void> {
    await this.pages.stageWalk(context, {
      resume: "leases",
      budget,
      list: async (tx, after, limit) =>
        tx.listExpiredLeases(await this.pages.storeNow(tx), after, limit),
      idOf: attemptIdOf,
      handle: (attempt) =>
        countOne(context, attempt.id, () =>
          this.pages.write(async (tx, nowMs) => {
            const scope = await findAttemptScope(tx, attempt.id);
            if (scope === null) return false;
            const change = expireLease(scope, scope.definition.retry, nowMs);
            if (change === null) return false;
            await tx.apply(change);
            return true;
          }),
        ),
    });
  }

  /**
   * One page of execution control: every receipt is read first, the completions they prove
   * commit together in one transaction (`writePage`), then each other attempt is controlled on
   * its own (start-up checks, rejected receipts, orphans, deadlines, stop intents).
   */
  private async controlPage(
    context: StageContext,
    executor: Executor,
    attempts: readonly RunAttempt[],
    listedAtMs: number,
  ): Promise<void> {
    const read: { readonly attempt: RunAttempt; readonly receipt: ReceiptEvidence }[] = [];
    for (const attempt of attempts) {
      // A start-up recovery decision that could not be recorded is made again before anything
      // else touches the attempt.
      if (this.deps.unrecordedRecoveries.has(attempt.id)) {
        await countOne(context, attempt.id, () => this.deps.recoverAgain(executor, attempt));
        continue;
      }
      // Its launch is in flight (pipelined dispatch): the dispatch stage records its outcome
      // and reads its receipt then, so nothing is read for it here.
      if (this.deps.launching.has(attempt.id)) continue;
      try {
        const receipt = await executor.readReceipt(attempt);
        if (attempt.status !== "starting" || receipt.status !== "none") {
          this.unrecordedHandles.delete(attempt.id);
          this.unlaunchedStarting.delete(attempt.id);
        }
        read.push({ attempt, receipt });
      } catch (error) {
        context.errors.push({ ...describe(error), subject: attempt.id });
      }
    }
    const completions: { readonly attempt: RunAttempt; readonly facts: CompletionFacts }[] = [];
    for (const { attempt, receipt } of read) {
      if (receipt.status !== "valid") continue;
      try {
        // Once per completion, all before the page's one commit: a fault's occurrence count
        // still names the completion whose commit it precedes.
        await this.deps.fault("completion.before_commit");
        completions.push({ attempt, facts: receipt.facts });
      } catch (error) {
        context.errors.push({ ...describe(error), subject: attempt.id });
      }
    }
    if (completions.length > 0)
      await this.pages.commitPage(
        context,
        completions,
        ({ attempt }) => attempt.id,
        ({ attempt }) => attempt.runId,
        ({ attempt, facts }) => completeWrite(attempt.id, facts),
        (completed) => afterComplete(this.deps, completed),
      );
    for (const { attempt, receipt } of read) {
      if (receipt.status === "valid") continue;
      await countOne(context, attempt.id, () =>
        this.controlWithoutCompletion(executor, attempt, receipt, listedAtMs),
      );
    }
  }

  private async controlWithoutCompletion(
    executor: Executor,
    attempt: RunAttempt,
    receipt: Exclude<ReceiptEvidence, { readonly status: "valid" }>,
    listedAtMs: number,
  ): Promise<boolean> {
    if (attempt.status === "starting" && receipt.status === "none")
      return this.controlStarting(executor, attempt);
    if (receipt.status === "invalid") {
      await this.pages.write(async (tx, nowMs) => {
        const scope = await findAttemptScope(tx, attempt.id);
        if (scope === null) return;
        const change = applyRecovery(
          scope,
          { kind: "fail_closed", reason: `receipt rejected: ${receipt.reason}` },
          scope.definition.retry,
          nowMs,
        );
        if (change !== null) await tx.apply(change);
      });
      return false;
    }
    if (attempt.status === "running" && (await executor.orphaned?.(attempt)) === true) {
      // Its supervisor is gone, so no receipt is coming: the recovery rules decide, as at a
      // restart. Still running → re-adopted (the deadline and stops below still apply, by
      // exact identity); trusted not-running → lost.
      const settled = await this.settleOrphan(executor, attempt);
      if (settled) return true;
    }
    // No receipt yet: deadlines and stop intents. When the row listed in this cycle asks for
    // neither, no transaction: an intent or a deadline reached since the list is seen by the
    // next cycle, as if it had come just after this cycle's decision.
    if (!stopDue(attempt, listedAtMs)) return false;
    const stop = await this.pages.write(async (tx, nowMs) => {
      const scope = await findAttemptScope(tx, attempt.id);
      if (scope === null || scope.attempt.status !== "running") return null;
      if (scope.attempt.stopReason !== null) return scope.attempt;
      const change = requestTimeoutStop(scope, nowMs);
      if (change === null) return null;
      await tx.apply(change);
      return tx.getAttempt(attempt.id);
    });
    if (stop === null || stop.stopReason === null) return false;
    await executor.stop(stop, stop.stopReason);
    if (stop.stopReason === "cancel") await this.deps.fault("cancellation.after_stop");
    return true;
  }

  /** Execution control stopAndDrain: persist shutdown intent, then stop the exact processes. */
  async stopRunningForShutdown(): Promise<number> {
    let stopped = 0;
    for (const executor of Object.values(this.deps.executors)) {
      if (executor === undefined) continue;
      // Every running attempt, page by page: a shutdown that stopped only the first page would
      // leave the rest running without their runtime.
      await this.pages.walkStore({
        budget: WHOLE_LIST,
        list: (tx, after, limit) =>
          tx.listAttempts(executor.type, ["running"], after, limit, this.deps.node?.nodeId),
        idOf: attemptIdOf,
        handle: async (attempt) => {
          const stop = await this.pages.write(this.shutdownStopWrite(attempt.id));
          if (stop !== null && stop.status === "running") {
            await executor.stop(stop, stop.stopReason ?? "shutdown");
            stopped += 1;
          }
        },
      });
    }
    return stopped;
  }

  /**
   * Shutdown intents for attempts leased to remote workers (ADR-0227 §5, ADR-0229 §6): each
   * running remote attempt gets a durable `shutdown` stop intent, which its worker's next
   * heartbeat answers as `stop_requested(shutdown)`; the worker stops the process (grace, then
   * SIGKILL) and completes it `cancelled` with its step failed, as a local shutdown stop does.
   * Only a coordinator without a cluster node does this: it is the only one its workers can
   * reach, while a replica of a cluster going away leaves its workers to the others. Repeating
   * it changes nothing for an attempt already stopped; it answers how many remote attempts
   * carry a shutdown intent and are still running.
   */
  async requestRemoteShutdownStops(): Promise<number> {
    if (this.deps.node !== null) return 0;
    let pending = 0;
    await this.pages.walkStore({
      budget: WHOLE_LIST,
      list: (tx, after, limit) => tx.listAttempts("remote_worker", ["running"], after, limit),
      idOf: attemptIdOf,
      handle: async (attempt) => {
        const stopped = await this.pages.write(this.shutdownStopWrite(attempt.id));
        if (stopped !== null && stopped.status === "running" && stopped.stopReason === "shutdown")
          pending += 1;
      },
    });
    return pending;
  }

  /** A durable `shutdown` stop intent for a running attempt; the attempt as it stands after. */
  private shutdownStopWrite(attemptId: string): PageWrite<RunAttempt | null> {
    return async (tx, nowMs) => {
      const scope = await findAttemptScope(tx, attemptId);
      if (scope === null) return null;
      const change = requestShutdownStop(scope, nowMs);
      if (change !== null) await tx.apply(change);
      return tx.getAttempt(attemptId);
    };
  }
}
