import type { RunAttempt } from "./model.ts";
import type { Executor, PurgedRun, StoreTx } from "./ports.ts";
import {
  countBoundaryMaxAgeMs,
  decidePurge,
  purgeRange,
  type PurgeCandidate,
  type PurgeKey,
  type PurgeRange,
  type RetentionPolicy,
} from "./retention.ts";
import type { StageBudget } from "./profiles.ts";
import { walkKeyset } from "./paging.ts";
import {
  countOne,
  describe,
  itself,
  type FaultHook,
  type StageContext,
  type StagePages,
} from "./stage-pages.ts";

/**
 * The purge stage of the cycle (ARCHITECTURE §3, stage 9, and §14): retention deletes terminal
 * runs past the horizon or beyond the newest N, rows first and files after, and sweeps the
 * files a purge interrupted between the two left behind.
 */

/**
 * Journal names the orphan sweep checks per page (`budget.pages` pages per cycle). Larger than
 * a purge page on purpose: a name costs one indexed lookup, and after a crash the sweep should
 * cover a device's whole journal (10 000 runs' worth) in tens of cycles, not thousands.
 */
export const ORPHAN_SWEEP_PAGE = 256;

/**
 * Every this many purge stages the orphan sweep walks the journal again, even without a crash
 * or a failed discard: coordinator replicas sharing one database each keep their own state
 * dir, and a run purged by one replica leaves the files another replica's launcher wrote.
 * About 8.5 minutes at the standalone interval; a pass is a few journal listings.
 */
export const ORPHAN_SWEEP_EVERY_PURGES = 1024;

export interface PurgeStageDeps {
  readonly pages: StagePages;
  readonly executors: Partial<Record<RunAttempt["executor"], Executor>>;
  readonly fault: FaultHook;
  /** See `CoordinatorDeps.retention`; absent or null: nothing is purged. */
  readonly retention?: RetentionPolicy | null;
  /** See `CoordinatorDeps.onPurge`. */
  readonly onPurge?: (purged: PurgedRun, atMs: number) => void;
}

export class PurgeStage {
  private readonly pages: StagePages;
  /** Where the purge resumes, with the range it walks (kept for one pass; a stale range only purges less). */
  private purgePass: { range: PurgeRange; after: PurgeKey | null } | null = null;
  /**
   * Whether the orphan file sweep still has to walk the executors' journals. True at start-up
   * (a crash between a purge's commit and its file discard leaves files whose rows are gone)
   * and again after a discard failed; one full pass clears it.
   */
  private sweepDue = true;
  private purgeStages = 0;
  /**
   * The count boundary last found by rank (the `maxRuns`-th newest terminal run, null: fewer
   * exist), with the store time it was found at and the policy's count; reused while younger
   * than `countBoundaryMaxAgeMs` (retention.ts says why an old one is safe).
   */
  private countBoundary: {
    readonly key: PurgeKey | null;
    readonly foundAtMs: number;
    readonly maxRuns: number;
  } | null = null;

  constructor(private readonly deps: PurgeStageDeps) {
    this.pages = deps.pages;
  }

  /**
   * Retention: first the orphan file sweep (bounded, only while due), then a bounded page walk
   * over terminal runs in purge order, each purged in its own short transaction. `processed`
   * counts purged runs. `more` is reported only when the budget filled while runs were being
   * purged: a page of runs the rules keep (a schedule's last run, an idempotency window) must
   * not make the device spin cycles back to back.
   */
  async run(budget: StageBudget, context: StageContext): Promise<void> {
    const policy = this.deps.retention ?? null;
    if (policy === null) return;
    this.purgeStages += 1;
    if (this.purgeStages % ORPHAN_SWEEP_EVERY_PURGES === 0) this.sweepDue = true;
    try {
      await this.sweepOrphanFiles(budget);
    } catch (error) {
      // A sweep that fails (an unreadable directory) is reported and retried; purging goes on.
      context.errors.push({ ...describe(error), subject: "orphan file sweep" });
    }
    let pass = this.purgePass;
    if (pass === null) {
      const range = await this.pages.write(async (tx, nowMs) =>
        purgeRange(policy, nowMs, await this.countBoundaryAt(tx, nowMs, policy)),
      );
      pass = { range, after: null };
    }
    const { range } = pass;
    const more = await walkKeyset<PurgeCandidate, PurgeKey>({
      after: pass.after,
      pageSize: budget.pageSize,
      pages: budget.pages,
      read: (after, limit) =>
        this.pages.store.read(async (tx) => tx.listPurgeCandidates(after, range.end, limit)),
      // A candidate without a finish time cannot be passed in purge order: the pass ends there.
      cursorOf: (candidate) =>
        candidate.finishedAtMs === null
          ? null
          : { finishedAtMs: candidate.finishedAtMs, runId: candidate.runId },
      handle: async (candidate) => {
        if (decidePurge(candidate, range).purge)
          await countOne(context, candidate.runId, () =>
            this.purgeOne(candidate.runId, range, context),
          );
      },
      saved: (after) => {
        this.purgePass = after === null ? null : { range, after };
      },
    });
    if (more && context.processed > 0) context.more = true;
  }

  /** The count boundary at store time `nowMs`: the one found last while it is young enough, else found again. */
  private async countBoundaryAt(
    tx: Pick<StoreTx, "terminalRunAtRank">,
    nowMs: number,
    policy: RetentionPolicy,
  ): Promise<PurgeKey | null> {
    const known = this.countBoundary;
    if (
      known !== null &&
      known.maxRuns === policy.maxRuns &&
      nowMs >= known.foundAtMs &&
      nowMs - known.foundAtMs < countBoundaryMaxAgeMs(policy)
    )
      return known.key;
    const key = await tx.terminalRunAtRank(policy.maxRuns);
    this.countBoundary = { key, foundAtMs: nowMs, maxRuns: policy.maxRuns };
    return key;
  }

  /**
   * Purges one run. The crash-safe order: (1) one transaction re-reads the run's facts,
   * re-decides and deletes every row of the run; (2) after the commit, the executors discard
   * the attempts' files, journal last. A crash after (1) leaves files without rows, which the
   * orphan sweep of the next start-up removes; no order ever leaves a row pointing at a
   * deleted file.
   */
  private async purgeOne(
    runId: string,
    range: PurgeRange,
    context: StageContext,
  ): Promise<boolean> {
    const purged = await this.pages.write(async (tx, nowMs) => {
      const candidate = await tx.getPurgeCandidate(runId);
      if (candidate === null || !decidePurge(candidate, range).purge) return null;
      return { run: await tx.purgeRun(runId), nowMs };
    });
    if (purged === null) return false;
    this.deps.onPurge?.(purged.run, purged.nowMs);
    await this.deps.fault("purge.after_commit");
    for (const executor of Object.values(this.deps.executors)) {
      if (executor?.discard === undefined) continue;
      const attemptIds = purged.run.attempts
        .filter((attempt) => attempt.executor === executor.type)
        .map((attempt) => attempt.id);
      if (attemptIds.length === 0) continue;
      try {
        await executor.discard(attemptIds);
      } catch (error) {
        // The rows are gone already: the files become orphans for the sweep to retry.
        this.sweepDue = true;
        context.errors.push({ ...describe(error), subject: runId });
      }
    }
    await this.deps.fault("purge.after_discard");
    return true;
  }

  /**
   * Removes files whose attempt no longer exists (a purge interrupted between its commit and
   * its discard). Walks each executor's journal in id order, at most the stage budget of ids
   * per cycle, resuming where the previous cycle stopped; a journal's row is always committed
   * before the journal is written, so an id without a row is an orphan, never a launch in
   * progress. Bounded: `ORPHAN_SWEEP_PAGE × budget.pages` names per executor per cycle.
   */
  private async sweepOrphanFiles(budget: StageBudget): Promise<void> {
    if (!this.sweepDue) return;
    let finished = true;
    for (const executor of Object.values(this.deps.executors)) {
      const listHeld = executor?.listHeld?.bind(executor);
      const discard = executor?.discard?.bind(executor);
      if (executor === undefined || listHeld === undefined || discard === undefined) continue;
      const cursorKey = `sweep:${executor.type}`;
      const more = await walkKeyset<string, string>({
        after: this.pages.cursor(cursorKey),
        pageSize: ORPHAN_SWEEP_PAGE,
        pages: budget.pages,
        read: listHeld,
        cursorOf: itself,
        handlePage: async (held) => {
          const existing = new Set(
            await this.pages.store.transaction(async (tx) => tx.existingAttemptIds(held)),
          );
          const orphans = held.filter((attemptId) => !existing.has(attemptId));
          if (orphans.length > 0) await discard(orphans);
        },
        saved: (after) => this.pages.saveCursor(cursorKey, after),
      });
      if (more) finished = false;
    }
    if (finished) this.sweepDue = false;
  }
}
