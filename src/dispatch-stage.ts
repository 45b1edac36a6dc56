import { findAttemptScope } from "./attempt-scope.ts";
import { QlrError } from "./errors.ts";
import {
  type CompletionFacts,
  markRunning,
  markStarting,
  settleStrandedClaim,
  startFailed,
} from "./execution.ts";
import { afterComplete, completeWrite, type CompletionSignals } from "./completion-write.ts";
import type { ProcessHandleFacts, RunAttempt } from "./model.ts";
import { MAX_STORE_PAGE, type Executor, type LaunchRequest } from "./ports.ts";
import { handleInStoreTime } from "./host-time.ts";
import { storePageSize } from "./paging.ts";
import type { NodeIdentity } from "./ownership.ts";
import { taskContext } from "./task-context.ts";
import { describe, type PageWrite, type StageContext, type StagePages } from "./stage-pages.ts";

/**
 * The dispatch stage of the cycle (ARCHITECTURE §3, stage 6): `claimed` attempts of each owned
 * executor are started, a page at a time, journal before spawn; with pipelined launches, the
 * outcomes of launches handed over by earlier cycles are recorded first.
 */

/** Attempts remembered as never launched after a failed `starting` write; beyond it, a restart settles them. */
const MAX_UNLAUNCHED_STARTING = 10_000;

/** A launch to record (`recordLaunches`): who launched it, the attempt as handed over (`starting`), and how it went. */
interface SettledLaunch {
  readonly executor: Executor;
  readonly attempt: RunAttempt;
  readonly startingAtMs: number;
  readonly launch: PromiseSettledResult<ProcessHandleFacts>;
}

/** A launch handed to an executor by a pipelined dispatch, not yet recorded. */
export interface LaunchInFlight {
  readonly executor: Executor;
  readonly attempt: RunAttempt;
  readonly startingAtMs: number;
  /** Null until the launch settles. */
  outcome: PromiseSettledResult<ProcessHandleFacts> | null;
  /** Resolves (never rejects) when the launch has settled. */
  readonly settled: Promise<void>;
}

/** Executors signal "the task could not be started, nothing ran" with code `spawn_failed`. */
export function isSpawnFailure(error: unknown): boolean {
  return (
    typeof error === "object" &&
    error !== null &&
    (error as { code?: unknown }).code === "spawn_failed"
  );
}

export interface DispatchStageDeps extends CompletionSignals {
  readonly pages: StagePages;
  readonly executors: Partial<Record<RunAttempt["executor"], Executor>>;
  /** See `CoordinatorDeps.pipelinedLaunches`. */
  readonly pipelinedLaunches?: { readonly pages: number; readonly settled: () => void } | null;
  /** This runtime as a node of a shared store, recorded as the owner of what it starts; null: the only coordinator. */
  readonly node: NodeIdentity | null;
  /** Launches handed over and not yet recorded, in hand-over order (`Coordinator.launching`). */
  readonly launching: Map<string, LaunchInFlight>;
  /** Handles of processes whose `running` write failed, for execution control to write again. */
  readonly unrecordedHandles: Map<string, ProcessHandleFacts>;
  /** Attempts whose `starting` write failed in this incarnation, so none was handed to a launcher. */
  readonly unlaunchedStarting: Set<string>;
}

export class DispatchStage {
  private readonly pages: StagePages;
  private readonly launching: Map<string, LaunchInFlight>;
  private readonly unrecordedHandles: Map<string, ProcessHandleFacts>;
  private readonly unlaunchedStarting: Set<string>;

  constructor(private readonly deps: DispatchStageDeps) {
    this.pages = deps.pages;
    this.launching = deps.launching;
    this.unrecordedHandles = deps.unrecordedHandles;
    this.unlaunchedStarting = deps.unlaunchedStarting;
  }

  /**
   * One page of claimed attempts per executor, in three phases: every `starting` commits, in
   * page order and in one transaction (`writePage`), then every launch runs at once (a launch
   * is a journal barrier and a process start: the slow part, and independent per attempt),
   * then every outcome commits in page order, again in one transaction. No launch begins
   * before the commit that recorded its `starting` has returned: grouping merges the commits,
   * never the order. The store sees the same sequence of writes whatever order the launches
   * finish in, so a seed replays exactly; the page size (the profile's `dispatch`) bounds the
   * concurrency.
   */
  async run(limit: number, context: StageContext): Promise<void> {
    const pipelined = this.deps.pipelinedLaunches ?? null;
    if (pipelined !== null) await this.recordSettledLaunches(context);
    for (const executor of Object.values(this.deps.executors)) {
      if (executor === undefined) continue;
      // One row beyond the page tells whether more wait; the page stays within what the store returns.
      let pageSize = Math.min(storePageSize(limit), MAX_STORE_PAGE - 1);
      let inFlight = 0;
      if (pipelined !== null) {
        for (const launch of this.launching.values())
          if (launch.executor.type === executor.type) inFlight += 1;
        // Full: a settling launch wakes the cadence, whose next dispatch hands over more.
        pageSize = Math.min(pageSize, Math.max(1, pipelined.pages) * pageSize - inFlight);
        if (pageSize <= 0) continue;
      }
      const cursorKey = `dispatch:${executor.type}`;
      const claimed = await this.pages.store.read(async (tx) =>
        tx.listAttempts(executor.type, ["claimed"], this.pages.cursor(cursorKey), pageSize + 1),
      );
      if (claimed.length > pageSize) context.more = true;
      const started: { readonly request: LaunchRequest; readonly startingAtMs: number }[] = [];
      const page = claimed.slice(0, pageSize);
      // Round robin: after a full page the next cycle resumes behind it, so claims that stay
      // `claimed` (a start that keeps failing, a run waiting for its cancel to converge) cannot
      // hold the head of every page while the claims behind them wait; a short page starts over.
      this.pages.saveCursor(
        cursorKey,
        claimed.length > pageSize ? (page[page.length - 1]?.id ?? null) : null,
      );
      const startings = await this.pages.writePage(
        page.map((attempt) => this.markStartingWrite(attempt.id)),
        page.map((attempt) => attempt.runId),
      );
      for (const [index, outcome] of startings.outcomes.entries()) {
        const attempt = page[index];
        if (attempt === undefined) continue;
        const attemptId = attempt.id;
        if (outcome.ok && outcome.value !== null) {
          this.unlaunchedStarting.delete(attemptId);
          started.push(outcome.value);
          continue;
        }
        // Not handed to a launcher. A failed write, or a page whose commit failed (its answer
        // may have been lost after the commit: the item's own write then finds it `starting`
        // already and launches nothing), may have left it `starting`: remembered, so its
        // absent journal settles it.
        if (
          (!outcome.ok || startings.pageError !== null) &&
          this.unlaunchedStarting.size < MAX_UNLAUNCHED_STARTING
        )
          this.unlaunchedStarting.add(attemptId);
        if (!outcome.ok) context.errors.push({ ...describe(outcome.error), subject: attemptId });
      }
      if (started.length === 0) continue;
      await this.deps.fault("dispatch.after_starting");
      // Handed over without waiting only when more claims wait behind this page or launches
      // are already in flight (whose outcomes must be recorded first): a page that empties the
      // backlog is waited for, so a lone run's `running` commits in the cycle that launched it.
      if (pipelined !== null && (claimed.length > pageSize || inFlight > 0)) {
        for (const { startingAtMs, request } of started) {
          const entry: { -readonly [K in keyof LaunchInFlight]: LaunchInFlight[K] } = {
            executor,
            attempt: request.attempt,
            startingAtMs,
            outcome: null,
            settled: Promise.resolve(),
          };
          entry.settled = executor.launch(request).then(
            (value) => {
              entry.outcome = { status: "fulfilled", value };
            },
            (reason: unknown) => {
              entry.outcome = { status: "rejected", reason };
            },
          );
          void entry.settled.then(() => pipelined.settled());
          this.launching.set(request.attempt.id, entry);
        }
        continue;
      }
      const launches = await Promise.allSettled(
        started.map(({ request }) => executor.launch(request)),
      );
      await this.deps.fault("dispatch.after_spawn");
      await this.recordLaunches(
        context,
        started.map(({ startingAtMs, request }, index) => ({
          executor,
          attempt: request.attempt,
          startingAtMs,
          launch: launches[index] ?? {
            status: "rejected",
            reason: new QlrError("internal", "no launch outcome"),
          },
        })),
      );
      await this.deps.fault("dispatch.after_running");
    }
  }

  /**
   * Pipelined dispatch: the launches that settled since the last dispatch stage, recorded in
   * hand-over order in one page (`recordLaunches`), between the same two fault points as a
   * cycle that waits for its launches. They leave `launching` first, so a failed write leaves
   * their handles to execution control, as in that cycle.
   */
  async recordSettledLaunches(context: StageContext): Promise<void> {
    const settled: SettledLaunch[] = [];
    for (const { executor, attempt, startingAtMs, outcome } of this.launching.values())
      if (outcome !== null) settled.push({ executor, attempt, startingAtMs, launch: outcome });
    if (settled.length === 0) return;
    for (const { attempt } of settled) this.launching.delete(attempt.id);
    await this.deps.fault("dispatch.after_spawn");
    await this.recordLaunches(context, settled);
    await this.deps.fault("dispatch.after_running");
  }

  /** claimed → starting: the launch request and the commit's store time, or null when the attempt may not start. */
  private markStartingWrite(
    attemptId: string,
  ): PageWrite<{ readonly request: LaunchRequest; readonly startingAtMs: number } | null> {
    return async (tx, nowMs) => {
      const scope = await findAttemptScope(tx, attemptId);
      if (scope === null || scope.attempt.status !== "claimed") return null;
      // A cancel intent's convergence cancels the claim; nothing starts after it.
      if (scope.run.cancelRequestedAtMs !== null) return null;
      // A claim whose ready epoch is gone is settled here, or it would stay `claimed` for good.
      const stranded = settleStrandedClaim(scope, nowMs);
      if (stranded !== null) {
        await tx.apply(stranded);
        this.deps.followUp();
        return null;
      }
      await tx.apply(
        markStarting(
          scope,
          nowMs,
          this.deps.node === null ? {} : { ownerNodeId: this.deps.node.nodeId },
        ),
      );
      const context = taskContext(
        scope,
        scope.step === null ? [] : await tx.getSteps(scope.run.id),
        scope.definition.task,
      );
      return {
        request: {
          attempt: (await tx.getAttempt(attemptId)) ?? scope.attempt,
          definition: scope.definition,
          context,
        },
        startingAtMs: nowMs,
      };
    };
  }

  /**
   * starting → running with each handle's pre-spawn `startedAtMs`, the page's outcomes in one
   * transaction (`writePage`). Only a definite spawn failure (nothing ran) settles the attempt
   * as a start failure (timed out when it is recorded after the deadline counted from
   * `startingAtMs`); any other launch error leaves it `starting`, since the process may exist,
   * and only its receipt or recovery's evidence may settle it.
   *
   * A process that has already ended by then (a short task, whose exit often arrives before its
   * launch is recorded) has a receipt: its completion commits with its `running`, in the same
   * transaction, exactly as execution control would have written it one commit later. The
   * events still say starting → running → completed; only the commit between them is saved.
   */
  private async recordLaunches(
    context: StageContext,
    launches: readonly SettledLaunch[],
  ): Promise<void> {
    const recordable = launches.filter(({ attempt, launch }) => {
      if (launch.status === "fulfilled" || isSpawnFailure(launch.reason)) return true;
      // Nothing to write: the attempt stays `starting` for its receipt or recovery.
      context.errors.push({ ...describe(launch.reason), subject: attempt.id });
      return false;
    });
    const endings: (CompletionFacts | null)[] = [];
    for (const { executor, attempt, launch } of recordable)
      endings.push(
        launch.status === "fulfilled" ? await this.endedAtLaunch(context, executor, attempt) : null,
      );
    const { outcomes } = await this.pages.writePage(
      recordable.map(({ attempt, startingAtMs, launch }, index) =>
        this.launchOutcomeWrite(attempt.id, startingAtMs, launch, endings[index] ?? null),
      ),
      recordable.map(({ attempt }) => attempt.runId),
    );
    for (const [index, outcome] of outcomes.entries()) {
      const entry = recordable[index];
      if (entry === undefined) continue;
      if (outcome.ok) {
        if (entry.launch.status === "rejected") this.deps.followUp();
        context.processed += 1;
        if (outcome.value !== null) await afterComplete(this.deps, outcome.value);
        continue;
      }
      // The process runs but its handle is not recorded: execution control writes it again.
      if (entry.launch.status === "fulfilled")
        this.unrecordedHandles.set(entry.attempt.id, entry.launch.value);
      context.errors.push({ ...describe(outcome.error), subject: entry.attempt.id });
    }
  }

  /**
   * The completion facts of a launched process that has already ended (its receipt is valid),
   * or null: still running, no receipt yet, or evidence execution control must judge. Reading
   * costs nothing while the process runs under a supervisor that would report its end.
   */
  private async endedAtLaunch(
    context: StageContext,
    executor: Executor,
    attempt: RunAttempt,
  ): Promise<CompletionFacts | null> {
    try {
      const receipt = await executor.readReceipt(attempt);
      if (receipt.status !== "valid") return null;
      // As in execution control: once per completion, before the commit that records it.
      await this.deps.fault("completion.before_commit");
      return receipt.facts;
    } catch (error) {
      // Execution control reads it again; the launch is recorded as running meanwhile.
      context.errors.push({ ...describe(error), subject: attempt.id });
      return null;
    }
  }

  /** The launch's outcome; with `ended`, the completion too (`completeWrite`), in the same transaction. */
  private launchOutcomeWrite(
    attemptId: string,
    startingAtMs: number,
    launch: PromiseSettledResult<ProcessHandleFacts>,
    ended: CompletionFacts | null,
  ): PageWrite<{ readonly frontierAdvanced: boolean } | null> {
    return async (tx, nowMs, hostOffsetMs) => {
      const scope = await findAttemptScope(tx, attemptId);
      if (scope === null || scope.attempt.status !== "starting") return null;
      if (launch.status === "rejected") {
        // The failure is recorded at store time and checked against the deadline (ADR-0227 §5).
        const message = describe(launch.reason).message;
        await tx.apply(startFailed(scope, message, scope.definition.retry, nowMs, startingAtMs));
        return null;
      }
      await tx.apply(markRunning(scope, handleInStoreTime(launch.value, hostOffsetMs), nowMs));
      return ended === null ? null : completeWrite(attemptId, ended)(tx, nowMs, hostOffsetMs);
    };
  }
}
