import { AdmissionStage, MAX_ADMISSION_WALK_PAGES } from "./admission-stage.ts";
import { findAttemptScope } from "./attempt-scope.ts";
import { afterComplete, completeWrite, type CompletionSignals } from "./completion-write.ts";
import { isQlrError, QlrError } from "./errors.ts";
import {
  type CompletionFacts,
  markRunning,
  markStarting,
  settleStrandedClaim,
  startFailed,
} from "./execution.ts";
import type { ProcessHandleFacts, RunAttempt } from "./model.ts";
import {
  MAX_STORE_PAGE,
  type AdmissionCandidate,
  type Clock,
  type CoordinatorRecord,
  type Executor,
  type IdSource,
  type LaunchRequest,
  type PurgedRun,
  type Store,
} from "./ports.ts";
import type { RetentionPolicy } from "./retention.ts";
import type { Profile } from "./profiles.ts";
import { handleInStoreTime } from "./host-time.ts";
import { storePageSize } from "./paging.ts";
import {
  COORDINATOR_RENEW_EVERY_MS,
  registerNode,
  renewNode,
  validateNodeIdentity,
  type NodeIdentity,
} from "./ownership.ts";
import { taskContext } from "./task-context.ts";
import { drainNotifications, type NotificationSender } from "./notification-stage.ts";
import type { RetryPolicy } from "./packages.ts";
import { ORPHAN_SWEEP_EVERY_PURGES, ORPHAN_SWEEP_PAGE, PurgeStage } from "./purge-stage.ts";
import { ExecutionControl } from "./execution-control.ts";
import { RunStages } from "./run-stages.ts";
import {
  describe,
  StagePages,
  type FaultPoint,
  type PageReport,
  type PageWrite,
  type StageContext,
} from "./stage-pages.ts";
import {
  MAX_RECOVERED_ATTEMPTS,
  StartupRecovery,
  type RecoveryResult,
} from "./startup-recovery.ts";

export type { FaultPoint, PageReport, RecoveryResult };
export { MAX_ADMISSION_WALK_PAGES, ORPHAN_SWEEP_EVERY_PURGES, ORPHAN_SWEEP_PAGE };

/**
 * One cadence, one bounded cycle (ADR-0229 §1, DESIGN.md §4). The stages run in a fixed
 * order, each bounded by the profile's budget; a failing stage is isolated and reported, the
 * others still run, and the next cycle retries it. No timer lives here: whoever calls
 * `tick()` (an in-process timer, a cron trigger, `POST /tick`, a simulation) is the cadence.
 */

/** Attempts remembered as never launched after a failed `starting` write; beyond it, a restart settles them. */
const MAX_UNLAUNCHED_STARTING = 10_000;

export type StageName =
  | "cancellation"
  | "schedules"
  | "ordinary"
  | "frontier"
  | "admission"
  | "dispatch"
  | "execution_control"
  | "notifications"
  | "purge";
export const STAGE_ORDER: readonly StageName[] = [
  "cancellation",
  "schedules",
  "ordinary",
  "frontier",
  "admission",
  "dispatch",
  "execution_control",
  "notifications",
  "purge",
];

export interface CoordinatorDeps {
  readonly store: Store;
  readonly clock: Clock;
  readonly ids: IdSource;
  readonly profile: Profile;
  /** Executors by type; a type without an executor here is dispatched elsewhere (remote leases). */
  readonly executors: Partial<Record<RunAttempt["executor"], Executor>>;
  /**
   * This runtime as one node of a store several coordinators share (src/ownership.ts): it
   * registers with a heartbeat lease, records itself as the owner of what it dispatches, and
   * recovers and controls only its own attempts. Absent: the store's only coordinator, which
   * treats every attempt as its own (a device, a Durable Object, the simulation).
   */
  readonly node?: NodeIdentity;
  readonly fault?: (point: FaultPoint) => void | Promise<void>;
  /**
   * Retention (bounded history). Absent: the purge stage does nothing and every run is kept;
   * the runtimes always pass one (default 7 days, 10 000 runs).
   */
  readonly retention?: RetentionPolicy | null;
  /**
   * Sends alerts from the notification outbox. Absent: the notifications stage does nothing
   * and entries stay pending (visible through the API) until a runtime with a sender drains them.
   */
  readonly notifier?: NotificationSender | null;
  /**
   * `--max-running`: live `local_process` attempts at once (src/backpressure.ts). Absent: the
   * profile's default; null: no runtime-wide limit.
   */
  readonly maxRunning?: number | null;
  /**
   * Group commit: one store transaction per stage page, or one per item. Absent: on, for a node
   * of a shared store too: since a page costs a few multi-row statements rather than a few per
   * item, pages of 2–3 coordinators on one PostgreSQL outran one transaction per item even with
   * the pages that met a serialization failure and went item by item. The benches set it to
   * compare both.
   */
  readonly groupCommit?: boolean;
  /** Observes each stage page written as a group: its size and whether it committed as one; never required. */
  readonly onPage?: (page: PageReport) => void;
  /** Observes each purged run after its rows are deleted (simulation checkers); never required. */
  readonly onPurge?: (purged: PurgedRun, atMs: number) => void;
  /** Observes stage timings for metrics; never required. */
  readonly onStage?: (stage: StageReport) => void;
  /** Observes every finished cycle, whoever called it (a timer, `POST /tick`, a cron trigger); never required. */
  readonly onTick?: (report: TickReport) => void;
  /** The monotonic-ish duration source for reports (performance.now on hosts); defaults to the clock. */
  readonly elapsedMs?: () => number;
  /**
   * Pipelined dispatch: a cycle hands its page of launches to the executor and goes on; the
   * outcomes are recorded (`running`, or a start failure) by the dispatch stage of a later
   * cycle, in the order the launches were handed over. At most `pages` dispatch pages of
   * launches are in flight per executor; `settled` is called as each launch settles (the
   * runtime wakes its cadence). The order of every attempt's writes is unchanged: `starting`
   * commits before its launch begins, and nothing else decides an attempt whose launch is in
   * flight but its receipt. Absent: each cycle waits for its page's launches (the simulation,
   * the Workers runtime, whose executors answer at once).
   */
  readonly pipelinedLaunches?: { readonly pages: number; readonly settled: () => void } | null;
}

/** A launch to record (`recordLaunches`): who launched it, the attempt as handed over (`starting`), and how it went. */
interface SettledLaunch {
  readonly executor: Executor;
  readonly attempt: RunAttempt;
  readonly startingAtMs: number;
  readonly launch: PromiseSettledResult<ProcessHandleFacts>;
}

/** A launch handed to an executor by a pipelined dispatch, not yet recorded. */
interface LaunchInFlight {
  readonly executor: Executor;
  readonly attempt: RunAttempt;
  readonly startingAtMs: number;
  /** Null until the launch settles. */
  outcome: PromiseSettledResult<ProcessHandleFacts> | null;
  /** Resolves (never rejects) when the launch has settled. */
  readonly settled: Promise<void>;
}

export interface StageReport {
  readonly name: StageName;
  readonly processed: number;
  readonly errors: readonly {
    readonly code: string;
    readonly message: string;
    readonly subject: string | null;
  }[];
  readonly more: boolean;
  readonly durationMs: number;
}

export interface TickReport {
  readonly profile: string;
  readonly stages: readonly StageReport[];
  readonly more: boolean;
  /**
   * The cycle recorded an outcome (a completion, a start failure) that an earlier stage of the
   * next cycle acts on (the frontier, retries): a runtime that wants low latency runs the next
   * cycle at once rather than after its interval.
   */
  readonly followUp: boolean;
  readonly durationMs: number;
}

/** Executors signal "the task could not be started, nothing ran" with code `spawn_failed`. */
export function isSpawnFailure(error: unknown): boolean {
  return (
    typeof error === "object" &&
    error !== null &&
    (error as { code?: unknown }).code === "spawn_failed"
  );
}

export class Coordinator {
  private frozen = false;
  /** Set by the stages of the cycle in progress; see `TickReport.followUp`. */
  private followUp = false;
  private ticking: Promise<unknown> = Promise.resolve();
  /**
   * Handles of launched processes whose `running` write failed (a store error after the
   * spawn). Execution control retries the write with the handle this runtime still holds, so
   * the attempt does not wait for a restart; lost with the process on a crash, where recovery
   * and the executor's own evidence take over. Bounded by the dispatch page per cycle and
   * emptied as the writes land or the attempts move on.
   */
  private readonly unrecordedHandles = new Map<string, ProcessHandleFacts>();
  /**
   * Attempts whose `claimed → starting` write failed in this incarnation, so none was handed
   * to a launcher: a write whose COMMIT answer was lost may have committed `starting` all the
   * same. For these, an absent journal proves the spawn never happened, and execution control
   * gives the step a new epoch instead of leaving it `starting` until a restart. Bounded;
   * entries leave as the attempts are dispatched or settled.
   */
  private readonly unlaunchedStarting = new Set<string>();
  /**
   * Started attempts (`starting`, `running`) whose start-up recovery could not record its
   * decision: the store refused every try. Execution control makes the decision again
   * (`recoverAgain`), so such an attempt does not wait for the next restart. Bounded by one
   * start-up recovery; an entry leaves once a decision is recorded or the attempt moved on.
   */
  private readonly unrecordedRecoveries = new Set<string>();
  /**
   * Pipelined dispatch (`CoordinatorDeps.pipelinedLaunches`): launches handed over and not yet
   * recorded, in hand-over order. Bounded by `pages` dispatch pages per executor; an entry
   * leaves when a dispatch stage records its outcome. Lost with the process on a crash, where
   * the attempt is `starting` and recovery decides it by the executor's evidence, as always.
   */
  private readonly launching = new Map<string, LaunchInFlight>();
  private readonly deps: CoordinatorDeps;
  /** The stages' transactions, walks and round-robin cursors. */
  private readonly pages: StagePages;
  /** What follows a completion dispatch records with its launch (`afterComplete`). */
  private readonly completion: CompletionSignals;
  private readonly runStages: RunStages;
  private readonly admissionStage: AdmissionStage;
  private readonly control: ExecutionControl;
  private readonly purgeStage: PurgeStage;
  private readonly recovery: StartupRecovery;
  private readonly node: NodeIdentity | null;
  /** The incarnation this runtime registered; null until `register` ran. */
  private incarnation: number | null = null;
  /** Host time after which the next cycle renews the node's lease. */
  private renewDueAtHostMs = 0;

  constructor(deps: CoordinatorDeps) {
    this.deps = deps;
    this.node = deps.node === undefined ? null : validateNodeIdentity(deps.node);
    const node = this.node;
    const pages = new StagePages(deps);
    const fault = (point: FaultPoint): Promise<void> => this.fault(point);
    const followUp = (): void => {
      this.followUp = true;
    };
    const maxRunning = (): number | null => this.maxRunning;
    this.pages = pages;
    this.completion = { fault, followUp };
    this.runStages = new RunStages({ pages, ids: deps.ids, fault, maxRunning });
    this.admissionStage = new AdmissionStage({ pages, fault, maxRunning });
    this.recovery = new StartupRecovery({
      pages,
      executors: deps.executors,
      node,
      followUp,
      unrecordedRecoveries: this.unrecordedRecoveries,
    });
    this.control = new ExecutionControl({
      pages,
      executors: deps.executors,
      node,
      fault,
      followUp,
      launching: this.launching,
      unrecordedHandles: this.unrecordedHandles,
      unlaunchedStarting: this.unlaunchedStarting,
      unrecordedRecoveries: this.unrecordedRecoveries,
      recoverAgain: (executor, attempt) => this.recovery.recoverAgain(executor, attempt),
    });
    this.purgeStage = new PurgeStage({
      pages,
      executors: deps.executors,
      fault,
      retention: deps.retention,
      onPurge: deps.onPurge,
    });
  }

  /** The runtime-wide limit on live local attempts this coordinator admits by; null: none. */
  get maxRunning(): number | null {
    return this.deps.maxRunning === undefined ? this.deps.profile.maxRunning : this.deps.maxRunning;
  }

  /** This runtime's node id in a shared store; null for the store's only coordinator. */
  get nodeId(): string | null {
    return this.node?.nodeId ?? null;
  }

  /**
   * Registers this node's next incarnation with a fresh lease (start-up, before recovery).
   * Returns null for the store's only coordinator, which registers nothing.
   */
  async register(): Promise<CoordinatorRecord | null> {
    const node = this.node;
    if (node === null) return null;
    const record = await this.pages.write(async (tx, nowMs) => {
      const previous = await tx.getCoordinator(node.nodeId);
      const next = registerNode(previous, node, nowMs);
      await tx.putCoordinator(next, previous?.incarnation ?? null);
      return next;
    });
    this.incarnation = record.incarnation;
    this.renewDueAtHostMs = this.deps.clock.nowMs() + COORDINATOR_RENEW_EVERY_MS;
    return record;
  }

  /** Renews the node's lease when due; a superseded incarnation freezes admission and dispatch. */
  private async heartbeat(): Promise<void> {
    const node = this.node;
    if (node === null) return;
    if (this.incarnation === null) {
      await this.register();
      return;
    }
    if (this.deps.clock.nowMs() < this.renewDueAtHostMs) return;
    const incarnation = this.incarnation;
    try {
      await this.pages.write(async (tx, nowMs) => {
        const current = await tx.getCoordinator(node.nodeId);
        await tx.putCoordinator(renewNode(current, node.nodeId, incarnation, nowMs), incarnation);
      });
    } catch (error) {
      // Another runtime took this node's identity: it owns the attempts now, this one must not dispatch.
      if (isQlrError(error, "conflict")) this.frozen = true;
      throw error;
    }
    this.renewDueAtHostMs = this.deps.clock.nowMs() + COORDINATOR_RENEW_EVERY_MS;
  }

  /** Freezes admission and dispatch (scheduler stopAndDrain): later cycles only converge and control. */
  freezeAdmission(): void {
    this.frozen = true;
  }

  get admissionFrozen(): boolean {
    return this.frozen;
  }

  private elapsed(): number {
    return this.deps.elapsedMs?.() ?? this.deps.clock.nowMs();
  }

  private async fault(point: FaultPoint): Promise<void> {
    await this.deps.fault?.(point);
  }

  /**
   * One bounded cycle. Calls never overlap: a tick requested while another runs (a timer and
   * `POST /tick` at once) waits for it, so the stages keep their order and single authority.
   */
  tick(): Promise<TickReport> {
    const next = this.ticking.then(() => this.runTick());
    this.ticking = next.catch(() => undefined);
    return next;
  }

  /**
   * Pipelined dispatch: launches handed over and not yet recorded. Each wakes the cadence as
   * it settles, so a runtime may let other wakes wait for that one while any is in flight:
   * each cycle then records and hands over a whole page rather than one fact.
   */
  get launchesInFlight(): number {
    return this.launching.size;
  }

  /** Pipelined dispatch: true while the launches in flight fill the pages allowed (see `launchesInFlight`). */
  get launchesFull(): boolean {
    const pipelined = this.deps.pipelinedLaunches ?? null;
    if (pipelined === null || this.launching.size === 0) return false;
    const allowed = Math.max(1, pipelined.pages) * storePageSize(this.deps.profile.dispatch);
    for (const launch of this.launching.values()) if (launch.outcome !== null) return false;
    return this.launching.size >= allowed;
  }

  /**
   * Resolves when the tick in progress, if any, has finished, and every pipelined launch has
   * settled and been recorded (by frozen cycles when admission is frozen), so a stop that
   * follows sees each spawned attempt `running`.
   */
  async idle(): Promise<void> {
    await this.ticking;
    // Bounded: each cycle's dispatch stage removes every settled launch, and a frozen or
    // full dispatch hands over no new one.
    while (this.launching.size > 0) {
      await Promise.all([...this.launching.values()].map((launch) => launch.settled));
      await this.tick();
    }
  }

  private async runTick(): Promise<TickReport> {
    const startedMs = this.elapsed();
    const stages: StageReport[] = [];
    this.followUp = false;
    for (const name of STAGE_ORDER) {
      const stageStartedMs = this.elapsed();
      const context: StageContext = { processed: 0, more: false, errors: [] };
      try {
        if (
          this.frozen &&
          (name === "schedules" ||
            name === "ordinary" ||
            name === "admission" ||
            name === "dispatch" ||
            name === "notifications" ||
            name === "purge")
        ) {
          // Frozen for shutdown: no new admission or dispatch, no housekeeping writes, and no
          // network calls that would hold the stop up (the outbox keeps them for the next start).
          // Launches already handed over are still recorded: their processes exist.
          if (name === "dispatch") await this.recordSettledLaunches(context);
        } else {
          await this.runStage(name, context);
        }
      } catch (error) {
        context.errors.push({ ...describe(error), subject: null });
      }
      const report: StageReport = {
        name,
        processed: context.processed,
        errors: context.errors,
        more: context.more,
        durationMs: Math.max(0, this.elapsed() - stageStartedMs),
      };
      this.deps.onStage?.(report);
      stages.push(report);
    }
    const report: TickReport = {
      profile: this.deps.profile.name,
      stages,
      more: stages.some((stage) => stage.more),
      followUp: this.followUp,
      durationMs: Math.max(0, this.elapsed() - startedMs),
    };
    this.deps.onTick?.(report);
    return report;
  }

  private async runStage(name: StageName, context: StageContext): Promise<void> {
    const profile = this.deps.profile;
    switch (name) {
      case "cancellation":
        return this.runStages.convergeCancellations(profile.cancellation, context);
      case "schedules":
        return this.runStages.fireSchedules(profile.schedules, context);
      case "ordinary":
        return this.runStages.admitOrdinaryRuns(profile.ordinary, context);
      case "frontier":
        return this.runStages.advanceFrontiers(profile.frontier, context);
      case "admission":
        return this.admissionStage.run(profile.admission, context);
      case "dispatch":
        return this.dispatch(profile.dispatch, context);
      case "execution_control":
        try {
          await this.heartbeat();
        } catch (error) {
          context.errors.push({ ...describe(error), subject: this.node?.nodeId ?? null });
        }
        return this.control.run(profile.executionControl, context);
      case "notifications":
        return drainNotifications(
          {
            store: this.deps.store,
            clock: this.deps.clock,
            sender: this.deps.notifier ?? null,
            fault: (point) => this.fault(point),
          },
          profile.notifications,
          context,
        );
      case "purge":
        return this.purgeStage.run(profile.purge, context);
    }
  }

  /** Converges one run's cancellation now, as the cancellation stage would; true when it changed. */
  async convergeRun(runId: string): Promise<boolean> {
    return this.runStages.convergeRun(runId);
  }

  /** Moves one workflow run's frontier now, as the frontier stage would; true when it advanced. */
  async frontier(runId: string): Promise<boolean> {
    return this.runStages.frontier(runId);
  }

  /** Admits one exact ready epoch; an existing winner is replayed from its receipt, nothing new is written. */
  async admit(candidate: AdmissionCandidate): Promise<boolean> {
    return this.admissionStage.admit(candidate);
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
  private async dispatch(limit: number, context: StageContext): Promise<void> {
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
      const claimed = await this.deps.store.read(async (tx) =>
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
      await this.fault("dispatch.after_starting");
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
      await this.fault("dispatch.after_spawn");
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
      await this.fault("dispatch.after_running");
    }
  }

  /**
   * Pipelined dispatch: the launches that settled since the last dispatch stage, recorded in
   * hand-over order in one page (`recordLaunches`), between the same two fault points as a
   * cycle that waits for its launches. They leave `launching` first, so a failed write leaves
   * their handles to execution control, as in that cycle.
   */
  private async recordSettledLaunches(context: StageContext): Promise<void> {
    const settled: SettledLaunch[] = [];
    for (const { executor, attempt, startingAtMs, outcome } of this.launching.values())
      if (outcome !== null) settled.push({ executor, attempt, startingAtMs, launch: outcome });
    if (settled.length === 0) return;
    for (const { attempt } of settled) this.launching.delete(attempt.id);
    await this.fault("dispatch.after_spawn");
    await this.recordLaunches(context, settled);
    await this.fault("dispatch.after_running");
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
        this.followUp = true;
        return null;
      }
      await tx.apply(
        markStarting(scope, nowMs, this.node === null ? {} : { ownerNodeId: this.node.nodeId }),
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
        if (entry.launch.status === "rejected") this.followUp = true;
        context.processed += 1;
        if (outcome.value !== null) await afterComplete(this.completion, outcome.value);
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
      await this.fault("completion.before_commit");
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

  /**
   * Start-up recovery of attempts this runtime owns, one attempt at a time (`StartupRecovery`).
   * Returns each decision so the runtime can report what failed closed.
   */
  async recover(limit = MAX_RECOVERED_ATTEMPTS): Promise<RecoveryResult[]> {
    // A node registers its new incarnation first: from here its lease is live again, so no other
    // coordinator reports its attempts while it recovers them.
    if (this.node !== null && this.incarnation === null) await this.register();
    return this.recovery.recover(limit);
  }

  /** Execution control stopAndDrain: persist shutdown intent, then stop the exact processes. */
  async stopRunningForShutdown(): Promise<number> {
    return this.control.stopRunningForShutdown();
  }

  /** Shutdown intents for attempts leased to remote workers (`ExecutionControl.requestRemoteShutdownStops`). */
  async requestRemoteShutdownStops(): Promise<number> {
    return this.control.requestRemoteShutdownStops();
  }
}

export type { RetryPolicy };
