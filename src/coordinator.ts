import { AdmissionStage, MAX_ADMISSION_WALK_PAGES } from "./admission-stage.ts";
import { DispatchStage, isSpawnFailure, type LaunchInFlight } from "./dispatch-stage.ts";
import { isQlrError } from "./errors.ts";
import { ExecutionControl } from "./execution-control.ts";
import type { ProcessHandleFacts, RunAttempt } from "./model.ts";
import {
  MAX_STORE_PAGE,
  type AdmissionCandidate,
  type Clock,
  type CoordinatorRecord,
  type Executor,
  type IdSource,
  type PurgedRun,
  type Store,
} from "./ports.ts";
import type { RetentionPolicy } from "./retention.ts";
import type { Profile } from "./profiles.ts";
import { storePageSize } from "./paging.ts";
import {
  COORDINATOR_RENEW_EVERY_MS,
  PEERS_CHECK_EVERY_MS,
  registerNode,
  renewNode,
  validateNodeIdentity,
  type NodeIdentity,
} from "./ownership.ts";
import { drainNotifications, type NotificationSender } from "./notification-stage.ts";
import type { RetryPolicy } from "./packages.ts";
import { ORPHAN_SWEEP_EVERY_PURGES, ORPHAN_SWEEP_PAGE, PurgeStage } from "./purge-stage.ts";
import { RunStages } from "./run-stages.ts";
import {
  describe,
  StagePages,
  type FaultPoint,
  type PageReport,
  type StageContext,
} from "./stage-pages.ts";
import {
  MAX_RECOVERED_ATTEMPTS,
  StartupRecovery,
  type RecoveryResult,
} from "./startup-recovery.ts";

/**
 * One cadence, one bounded cycle (ADR-0229 §1, DESIGN.md §4). The stages run in a fixed
 * order, each bounded by the profile's budget; a failing stage is isolated and reported, the
 * others still run, and the next cycle retries it. No timer lives here: whoever calls
 * `tick()` (an in-process timer, a cron trigger, `POST /tick`, a simulation) is the cadence.
 *
 * The class is the cycle's orchestration: the tick, the stage order and the state the stages
 * share (the round-robin cursors in `StagePages`, launches in flight, the attempts a failed
 * write left for execution control). Each stage is a collaborator of its own, given only what
 * it needs: `RunStages` (cancellation, schedules, ordinary, frontier, src/run-stages.ts),
 * `AdmissionStage` (src/admission-stage.ts), `DispatchStage` (src/dispatch-stage.ts),
 * `ExecutionControl` (src/execution-control.ts, shutdown stops too), `drainNotifications`
 * (src/notification-stage.ts), `PurgeStage` (src/purge-stage.ts); `StartupRecovery`
 * (src/startup-recovery.ts) runs before the first cycle.
 */

export type { FaultPoint, PageReport, RecoveryResult, RetryPolicy };
export { isSpawnFailure, MAX_ADMISSION_WALK_PAGES, ORPHAN_SWEEP_EVERY_PURGES, ORPHAN_SWEEP_PAGE };

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
  private readonly node: NodeIdentity | null;
  /** When a node alone looks for peers again (`notePeers`), on this host's clock. */
  private peersDueAtHostMs = 0;
  /** The incarnation this runtime registered; null until `register` ran. */
  private incarnation: number | null = null;
  /** Host time after which the next cycle renews the node's lease. */
  private renewDueAtHostMs = 0;
  /** The stages' transactions, walks and round-robin cursors. */
  private readonly pages: StagePages;
  private readonly runStages: RunStages;
  private readonly admissionStage: AdmissionStage;
  private readonly dispatchStage: DispatchStage;
  private readonly control: ExecutionControl;
  private readonly purgeStage: PurgeStage;
  private readonly recovery: StartupRecovery;

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
    this.runStages = new RunStages({ pages, ids: deps.ids, fault, maxRunning });
    this.admissionStage = new AdmissionStage({ pages, fault, maxRunning });
    this.dispatchStage = new DispatchStage({
      pages,
      executors: deps.executors,
      pipelinedLaunches: deps.pipelinedLaunches,
      node,
      fault,
      followUp,
      launching: this.launching,
      unrecordedHandles: this.unrecordedHandles,
      unlaunchedStarting: this.unlaunchedStarting,
    });
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
    // Peers are assumed until looked for: nodes of a cluster often start together.
    this.pages.takeTurns(true);
    this.peersDueAtHostMs = this.deps.clock.nowMs() + PEERS_CHECK_EVERY_MS;
    return record;
  }

  /**
   * Whether another coordinator's lease is live, read once per PEERS_CHECK_EVERY_MS at the
   * heartbeat: this node's pages take turns with theirs only then (`StagePages.takeTurns`). A
   * node takes turns from its registration until its first look; a lone node that a new one
   * joins starts within PEERS_CHECK_EVERY_MS, and until then only their pages may overlap, as
   * any transactions may: the turn orders pages, nothing relies on it.
   */
  private async notePeers(node: NodeIdentity): Promise<void> {
    const peers = await this.deps.store.read(async (tx) => {
      const nowMs = await tx.observe(this.deps.clock.nowMs());
      return (await tx.listCoordinators(MAX_STORE_PAGE)).some(
        (other) => other.nodeId !== node.nodeId && other.leaseExpiresAtMs > nowMs,
      );
    });
    this.pages.takeTurns(peers);
    this.peersDueAtHostMs = this.deps.clock.nowMs() + PEERS_CHECK_EVERY_MS;
  }

  /** Renews the node's lease when due; a superseded incarnation freezes admission and dispatch. */
  private async heartbeat(): Promise<void> {
    const node = this.node;
    if (node === null) return;
    if (this.incarnation === null) {
      await this.register();
      return;
    }
    const hostNowMs = this.deps.clock.nowMs();
    if (hostNowMs >= this.peersDueAtHostMs) await this.notePeers(node);
    if (hostNowMs < this.renewDueAtHostMs) return;
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
          if (name === "dispatch") await this.dispatchStage.recordSettledLaunches(context);
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
        return this.dispatchStage.run(profile.dispatch, context);
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
