import { convergeCancellation } from "./cancellation.ts";
import { QlrError } from "./errors.ts";
import { advanceFrontier } from "./frontier.ts";
import type { ChangeSet } from "./model.ts";
import { TERMINAL_RUN_STATUSES } from "./model.ts";
import { admitOrdinaryAttempt } from "./ordinary.ts";
import { slotFor } from "./backpressure.ts";
import type { IdSource, StoreTx } from "./ports.ts";
import type { StageBudget } from "./profiles.ts";
import { storePageSize } from "./paging.ts";
import { fireSchedule } from "./run-start.ts";
import { decideSchedule } from "./schedules.ts";
import {
  describe,
  itself,
  wholeRunChange,
  type FaultHook,
  type PageWrite,
  type StageContext,
  type StagePages,
} from "./stage-pages.ts";

/**
 * The stages of the cycle that move whole runs: cancellation convergence, due schedules,
 * ordinary task runs' next attempts and the workflow frontier (ARCHITECTURE §3, stages 1–4).
 */

/** A stage that walks run ids and writes each page in one transaction (`RunStages.pagedRuns`). */
interface RunStage<T> {
  readonly list: (tx: StoreTx, after: string | null, limit: number) => Promise<string[]>;
  readonly write: (runId: string) => PageWrite<T>;
  /** What follows each committed item (fault points, follow-ups); true counts it as processed. */
  readonly committed: (value: T) => Promise<boolean>;
}

export interface RunStagesDeps {
  readonly pages: StagePages;
  readonly ids: IdSource;
  readonly fault: FaultHook;
  /** The runtime-wide limit on live local attempts (`Coordinator.maxRunning`). */
  readonly maxRunning: () => number | null;
}

export class RunStages {
  private readonly pages: StagePages;

  constructor(private readonly deps: RunStagesDeps) {
    this.pages = deps.pages;
  }

  /** Runs with a cancel intent converge toward their terminal state, one page per transaction. */
  private readonly cancellationStage: RunStage<ChangeSet | null> = {
    list: (tx, after, limit) => tx.listCancellingRuns(after, limit),
    write: (runId) => this.convergeWrite(runId),
    committed: (change) => this.afterConverge(change),
  };

  /** Workflow runs marked when a step settled or the run was created move their frontier. */
  private readonly frontierStage: RunStage<boolean> = {
    list: (tx, after, limit) => tx.listFrontierRuns(after, limit),
    write: (runId) => this.frontierWrite(runId),
    committed: (advanced) => this.afterFrontier(advanced),
  };

  convergeCancellations(budget: StageBudget, context: StageContext): Promise<void> {
    return this.pagedRuns("cancellation", budget, context, this.cancellationStage);
  }

  advanceFrontiers(budget: StageBudget, context: StageContext): Promise<void> {
    return this.pagedRuns("frontier", budget, context, this.frontierStage);
  }

  async admitOrdinaryRuns(budget: StageBudget, context: StageContext): Promise<void> {
    let held = false;
    await this.pagedRuns("ordinary", budget, context, {
      list: async (tx, after, limit) =>
        tx.listQueuedOrdinaryRuns(after, limit, await this.pages.storeNow(tx)),
      write: (runId) => this.admitOrdinaryWrite(runId),
      committed: (outcome) => {
        if (outcome === "waiting") held = true;
        return Promise.resolve(outcome === "admitted");
      },
    });
    // Runs held back by a limit wait for a slot to free (a process exit wakes the cadence);
    // asking for the next cycle at once would only walk them again.
    if (held) context.more = false;
  }

  /**
   * Pages through candidate runs; each page's writes commit in one transaction (`writePage`); a
   * failing run is reported, the others go on. Each stage resumes where its previous cycle
   * stopped (round robin), so items that stay candidates (a run failing every cycle, a
   * long-running attempt) can never starve the ones behind them when a budget is smaller than
   * the backlog.
   */
  private async pagedRuns<T>(
    cursorKey: string,
    budget: StageBudget,
    context: StageContext,
    stage: RunStage<T>,
  ): Promise<void> {
    await this.pages.stageWalk(context, {
      resume: cursorKey,
      budget,
      list: stage.list,
      idOf: itself,
      handlePage: (runIds) =>
        this.pages.commitPage(context, runIds, itself, itself, stage.write, stage.committed),
    });
  }

  async convergeRun(runId: string): Promise<boolean> {
    return this.afterConverge(await this.pages.write(this.convergeWrite(runId)));
  }

  private convergeWrite(runId: string): PageWrite<ChangeSet | null> {
    return async (tx, nowMs) => {
      const converged = await wholeRunChange(tx, runId, convergeCancellation, nowMs);
      if (converged !== null) await tx.apply(converged);
      return converged;
    };
  }

  private async afterConverge(change: ChangeSet | null): Promise<boolean> {
    if (change === null) return false;
    // The cancel stop intent of a running attempt is durable; its process is not stopped yet.
    if (change.events.some((event) => event.type === "attempt.stop_requested"))
      await this.deps.fault("cancellation.after_stop_intent");
    return true;
  }

  async fireSchedules(budget: StageBudget, context: StageContext): Promise<void> {
    // Not a keyset walk: a schedule that fired is no longer due, so each page reads the due list afresh.
    const pageSize = storePageSize(budget.pageSize);
    for (let page = 0; page < budget.pages; page += 1) {
      const due = await this.pages.store.read(async (tx) =>
        tx.listDueSchedules(await this.pages.storeNow(tx), pageSize),
      );
      for (const schedule of due) {
        try {
          await this.pages.write(async (tx, nowMs) => {
            const lastRun =
              schedule.lastRunId === null ? null : await tx.getRun(schedule.lastRunId);
            const lastRunLive = lastRun !== null && !TERMINAL_RUN_STATUSES.has(lastRun.status);
            const decision = decideSchedule(schedule, nowMs, lastRunLive);
            if (decision.kind === "idle") return;
            if (decision.kind === "fire") {
              const run = await fireSchedule(tx, decision.next, this.deps.ids.runId(), nowMs);
              await tx.putSchedule({ ...decision.next, lastRunId: run.id }, schedule.version);
            } else {
              await tx.putSchedule(decision.next, schedule.version);
            }
          });
          context.processed += 1;
        } catch (error) {
          context.errors.push({
            ...describe(error),
            subject: `${schedule.package}/${schedule.name}`,
          });
        }
      }
      if (due.length < pageSize) return;
      if (page === budget.pages - 1) context.more = true;
    }
  }

  private admitOrdinaryWrite(runId: string): PageWrite<"admitted" | "waiting" | "skipped"> {
    return async (tx, nowMs) => {
      const run = await tx.getRun(runId);
      if (run === null || run.kind !== "ordinary") return "skipped";
      const definition = await tx.getTaskDefinitionFor(run.reconciliationDigest, run.target);
      if (definition === null)
        throw new QlrError(
          "integrity",
          `run ${run.id}: task ${run.target} has no definition in its generation`,
        );
      if (run.status !== "queued") return "skipped";
      // A task run beyond a limit stays queued; the stage's next pass offers it again.
      if ((await slotFor(tx, definition, this.deps.maxRunning())) !== null) return "waiting";
      const admitted = admitOrdinaryAttempt(run, definition, nowMs);
      if (admitted === null) return "skipped";
      await tx.apply(admitted.change);
      return "admitted";
    };
  }

  async frontier(runId: string): Promise<boolean> {
    return this.afterFrontier(await this.pages.write(this.frontierWrite(runId)));
  }

  private frontierWrite(runId: string): PageWrite<boolean> {
    return async (tx, nowMs) => {
      // A run purged since it was listed has no mark left to clear: the update finds no row.
      const change = await wholeRunChange(tx, runId, advanceFrontier, nowMs);
      if (change !== null) await tx.apply(change);
      await tx.clearFrontierMark(runId);
      return change !== null;
    };
  }

  private async afterFrontier(advanced: boolean): Promise<boolean> {
    // Steps made ready or a run finalized (its alerts in the outbox) are durable; nothing has
    // admitted those steps or drained those alerts yet.
    if (advanced) await this.deps.fault("frontier.after_commit");
    return advanced;
  }
}
