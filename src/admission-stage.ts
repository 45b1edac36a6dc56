import { admitTaskAttempt, MAX_ADMISSION_PAGE } from "./admission.ts";
import { QlrError } from "./errors.ts";
import type { ExecutorType } from "./model.ts";
import { slotFor, type WaitReason } from "./backpressure.ts";
import type { AdmissionCandidate, ListedAdmissionCandidate } from "./ports.ts";
import type { StageBudget } from "./profiles.ts";
import { walkKeyset } from "./paging.ts";
import {
  countOne,
  PageAbandoned,
  type FaultHook,
  type PageWrite,
  type StageContext,
  type StagePages,
} from "./stage-pages.ts";

/**
 * The admission stage of the cycle (ARCHITECTURE §3, stage 5): generation-bound task attempt
 * admission of ready steps (ADR-0227), within the limits of backpressure, one page of
 * candidates per transaction.
 */

/**
 * Pages of candidates one admission pass reads at most. Candidates held back by a limit are
 * passed over without a transaction, so a pass can look past many of them to a task with a
 * free slot; beyond this many the rest wait for the next cycle.
 */
export const MAX_ADMISSION_WALK_PAGES = 8;

type AdmissionOutcome =
  | { readonly kind: "admitted" | "skipped"; readonly executor: ExecutorType | null }
  | { readonly kind: "waiting"; readonly reason: WaitReason };

/**
 * What one admission pass learned about limits: the tasks found at their own limit, and
 * whether the runtime-wide limit is reached (with the tasks known to run locally, which it
 * holds). Lives for one pass only: the next cycle counts again.
 */
class AdmissionHold {
  private readonly fullTasks = new Set<string>();
  private readonly localTasks = new Set<string>();
  private runtimeFull = false;

  holds(candidate: ListedAdmissionCandidate): boolean {
    const key = taskKey(candidate);
    return this.fullTasks.has(key) || (this.runtimeFull && this.localTasks.has(key));
  }

  hold(candidate: ListedAdmissionCandidate, reason: WaitReason): void {
    const key = taskKey(candidate);
    if (reason.kind === "task_limit") this.fullTasks.add(key);
    else {
      this.runtimeFull = true;
      this.localTasks.add(key);
    }
  }

  /** Whether a task or the runtime was found at its limit: the pass now passes over candidates. */
  get holdsAny(): boolean {
    return this.runtimeFull || this.fullTasks.size > 0;
  }

  /** The runtime-wide limit is reached: the local tasks learned so far wait for the rest of the pass. */
  holdRuntime(): void {
    this.runtimeFull = true;
  }

  learn(candidate: ListedAdmissionCandidate, executor: ExecutorType | null): void {
    if (executor === "local_process") this.localTasks.add(taskKey(candidate));
  }

  /** A copy that a page transaction learns into: kept only when the page commits. */
  copy(): AdmissionHold {
    const copy = new AdmissionHold();
    for (const key of this.fullTasks) copy.fullTasks.add(key);
    for (const key of this.localTasks) copy.localTasks.add(key);
    copy.runtimeFull = this.runtimeFull;
    return copy;
  }
}

/** What one admission page decided in its shared transaction (see `AdmissionStage.admitPage`). */
interface AdmissionPage {
  readonly held: AdmissionHold;
  readonly decided: number;
  readonly admitted: number;
  /** The pass's decision budget ran out inside this page. */
  readonly budgetReached: boolean;
}

function taskKey(candidate: ListedAdmissionCandidate): string {
  return `${candidate.package}\u0000${candidate.task}`;
}

export interface AdmissionStageDeps {
  readonly pages: StagePages;
  readonly fault: FaultHook;
  /** The runtime-wide limit on live local attempts (`Coordinator.maxRunning`). */
  readonly maxRunning: () => number | null;
}

export class AdmissionStage {
  private readonly pages: StagePages;

  constructor(private readonly deps: AdmissionStageDeps) {
    this.pages = deps.pages;
  }

  /**
   * Every cycle walks the candidates from the start (an admitted epoch is no longer a
   * candidate), in run order, so the oldest waiting step takes a freed slot. The budget counts
   * admission decisions; a step held back by a limit costs no budget, and once a task (or the
   * runtime) is found at its limit the pass passes over that task's later candidates without a
   * transaction, so a full task neither stalls the others nor is overtaken within its own.
   */
  async run(budget: StageBudget, context: StageContext): Promise<void> {
    const decisions = budget.pageSize * budget.pages;
    let held = new AdmissionHold();
    let decided = 0;
    let budgetReached = false;
    // Pages the walk leaves unread hold only candidates it passed over (held back by a limit):
    // they ask for no next cycle, a freed slot wakes the cadence. A spent budget does.
    await walkKeyset<ListedAdmissionCandidate, AdmissionCandidate>({
      after: null,
      pageSize: MAX_ADMISSION_PAGE,
      pages: MAX_ADMISSION_WALK_PAGES,
      // Each page one list call of at most MAX_ADMISSION_PAGE candidates (ADR-0227 §3), the
      // pages asked at once in one short read transaction.
      read: (after, limit, pages) =>
        this.pages.store.read(async (tx) => {
          const nowMs = await this.pages.storeNow(tx);
          const found: ListedAdmissionCandidate[] = [];
          let cursor = after;
          for (let page = 0; page < pages; page += 1) {
            const listed = await tx.listAdmissionCandidates(cursor, limit, nowMs);
            found.push(...listed);
            const last = listed[listed.length - 1];
            if (listed.length < limit || last === undefined) break;
            cursor = last;
          }
          return found;
        }),
      cursorOf: (candidate) => candidate,
      done: () => budgetReached,
      // Once a limit holds candidates back, the pass mostly passes over the rest of its pages:
      // they are read at once, in one short transaction instead of one each.
      pagesAtOnce: () => (held.holdsAny ? MAX_ADMISSION_WALK_PAGES : 1),
      handlePage: async (candidates) => {
        const grouped = await this.admitPage(candidates, held, decided, decisions);
        if (grouped !== null) {
          held = grouped.held;
          decided = grouped.decided;
          budgetReached = grouped.budgetReached;
          // One reach per admission, all after the page's one commit: an occurrence count still
          // names one admission, and the window is the whole page committed (ARCHITECTURE §16).
          for (let index = 0; index < grouped.admitted; index += 1) {
            context.processed += 1;
            await this.deps.fault("admission.after_commit");
          }
          return;
        }
        // The page failed as a whole: one transaction per candidate.
        for (const candidate of candidates) {
          if (held.holds(candidate)) continue;
          if (decided >= decisions) {
            budgetReached = true;
            return;
          }
          await countOne(context, candidate.stepRunId, async () => {
            const outcome = await this.admitWithinLimits(candidate);
            if (outcome.kind === "waiting") {
              held.hold(candidate, outcome.reason);
              return false;
            }
            held.learn(candidate, outcome.executor);
            decided += 1;
            return outcome.kind === "admitted";
          });
        }
      },
    });
    if (budgetReached) context.more = true;
  }

  /**
   * One page of admission candidates decided in one transaction (group commit, see
   * `writePage`): each candidate is read and decided in page order against the page's earlier
   * admissions, with the pass's holds and budget carried through the page. Null when the page
   * failed as a whole (nothing of it committed, or a lost commit response left it unknown): the
   * caller then decides each candidate in a transaction of its own. Nothing is learned from a
   * page before its commit returns.
   */
  private async admitPage(
    candidates: readonly ListedAdmissionCandidate[],
    held: AdmissionHold,
    decided: number,
    decisions: number,
  ): Promise<AdmissionPage | null> {
    // No transaction for a page with nothing to decide: every candidate held, or no budget left.
    if (!candidates.some((candidate) => !held.holds(candidate)))
      return { held, decided, admitted: 0, budgetReached: false };
    if (decided >= decisions) return { held, decided, admitted: 0, budgetReached: true };
    if (!this.pages.grouping) return null;
    let runs = 0;
    let size = 0;
    try {
      const page = await this.pages.write(
        async (tx, nowMs, hostOffsetMs): Promise<AdmissionPage> => {
          runs += 1;
          if (runs > 1) throw new PageAbandoned();
          size = 0;
          // The candidates the budget can still reach, read whole at once (see `writePage`).
          await tx.preloadRuns(
            candidates
              .filter((candidate) => !held.holds(candidate))
              .slice(0, decisions - decided)
              .map((candidate) => candidate.runId),
          );
          const pageHeld = held.copy();
          let pageDecided = decided;
          let admitted = 0;
          let admittedLocal = false;
          for (const candidate of candidates) {
            if (pageHeld.holds(candidate)) continue;
            if (pageDecided >= decisions)
              return { held: pageHeld, decided: pageDecided, admitted, budgetReached: true };
            size += 1;
            const outcome = await this.admissionWrite(candidate)(tx, nowMs, hostOffsetMs);
            if (outcome.kind === "waiting") {
              pageHeld.hold(candidate, outcome.reason);
              continue;
            }
            pageHeld.learn(candidate, outcome.executor);
            pageDecided += 1;
            if (outcome.kind === "admitted") {
              admitted += 1;
              if (outcome.executor === "local_process") admittedLocal = true;
            }
          }
          // A page that took the runtime's last slot teaches what a refused candidate would
          // have: the local tasks' later candidates wait for the rest of the pass, without a
          // page transaction of their own to find the limit reached. The count is the one this
          // transaction read for its admissions, moved by its own writes: no statement.
          const maxRunning = this.deps.maxRunning();
          if (
            admittedLocal &&
            maxRunning !== null &&
            (await tx.countLiveAttempts("local_process")) >= maxRunning
          )
            pageHeld.holdRuntime();
          return { held: pageHeld, decided: pageDecided, admitted, budgetReached: false };
        },
        this.pages.pageTransaction,
      );
      this.pages.reportPage({ size, committed: true });
      return page;
    } catch {
      this.pages.reportPage({ size, committed: false });
      return null;
    }
  }

  /** Admits one exact ready epoch; an existing winner is replayed from its receipt, nothing new is written. */
  async admit(candidate: AdmissionCandidate): Promise<boolean> {
    return (await this.admitWithinLimits(candidate)).kind === "admitted";
  }

  private async admitWithinLimits(candidate: AdmissionCandidate): Promise<AdmissionOutcome> {
    const outcome = await this.pages.write(this.admissionWrite(candidate));
    if (outcome.kind === "admitted") await this.deps.fault("admission.after_commit");
    return outcome;
  }

  private admissionWrite(candidate: AdmissionCandidate): PageWrite<AdmissionOutcome> {
    return async (tx, nowMs): Promise<AdmissionOutcome> => {
      const skipped: AdmissionOutcome = { kind: "skipped", executor: null };
      const run = await tx.getRun(candidate.runId);
      const step = await tx.getStep(candidate.stepRunId);
      if (
        run === null ||
        step === null ||
        step.runId !== run.id ||
        step.version !== candidate.stepRunVersion ||
        step.status !== "ready"
      )
        return skipped;
      if (run.status !== "running" || run.cancelRequestedAtMs !== null) return skipped;
      const plan = run.planDigest === null ? null : await tx.getPlan(run.planDigest);
      const reconciliation = await tx.getReconciliation(run.reconciliationDigest);
      const definition = await tx.getTaskDefinitionFor(run.reconciliationDigest, step.task);
      if (plan === null || reconciliation === null || definition === null)
        throw new QlrError(
          "integrity",
          `run ${run.id}: plan, reconciliation or task definition missing`,
        );
      const existing = await tx.getAdmission(run.id, step.id, step.version);
      // A replay answers from its receipt whatever the counts say now; a new winner needs a slot.
      if (existing === null) {
        const reason = await slotFor(tx, definition, this.deps.maxRunning());
        if (reason !== null) return { kind: "waiting", reason };
      }
      const result = admitTaskAttempt({
        plan,
        run,
        step,
        reconciliation,
        definition,
        existing,
        nowMs,
      });
      if (result.kind === "replayed") return { kind: "skipped", executor: definition.executor };
      await tx.apply(result.change);
      return { kind: "admitted", executor: definition.executor };
    };
  }
}
