import type { StageReport, TickReport } from "../../src/coordinator.ts";
import type { CompletionFacts } from "../../src/execution.ts";
import type { Lease, WorkerCompletion } from "../../src/lease-service.ts";
import type { LeaseControl } from "../../src/leases.ts";
import type { ApplyResult } from "../../src/operations.ts";
import type {
  AttemptStatus,
  ExecutorType,
  ProcessHandleFacts,
  Run,
  RunAttempt,
  RunCancelReason,
  RunEvent,
  RunKind,
  RunStatus,
  StepRun,
  StepStatus,
  StopReason,
} from "../../src/model.ts";
import type { Generation } from "../../src/packages.ts";
import type { PackageHead } from "../../src/ports.ts";
import type { ScheduleState } from "../../src/schedules.ts";
import type { NotificationEntry } from "../../src/notifications.ts";
import type { Overview } from "../../src/overview.ts";
import type { TaskSpec, WorkflowSpec } from "../../src/manifest/types.ts";
import type { JsonValue } from "../../src/canonical-json.ts";
import type { RunInput } from "../../src/run-inputs.ts";

/**
 * The public HTTP contract (docs/API.md), declared once: the shapes the app answers, built by
 * the view functions below from the core's records, and read by the one client (client.ts),
 * the CLI, the remote worker, the dashboard and the tests. Request bodies are validated by the
 * routes (routes/*.ts); their accepted shapes are the `*Request` types here.
 */

// ---- errors ----

export interface ErrorDetail {
  readonly path: string;
  readonly message: string;
}

/** Every error answer: `{error: {code, message, details}}`. */
export interface ErrorBody {
  readonly error: {
    readonly code: string;
    readonly message: string;
    readonly details: readonly ErrorDetail[];
  };
}

// ---- runs ----

export interface RunView {
  readonly id: string;
  readonly kind: RunKind;
  readonly status: RunStatus;
  readonly package: string;
  readonly generation: number;
  readonly target: string;
  readonly createdAtMs: number;
  readonly finishedAtMs: number | null;
  readonly cancelRequestedAtMs: number | null;
  /**
   * Why the run was cancelled, set with `cancelRequestedAtMs`: `user` (an explicit cancel) or
   * `shutdown` (the runtime was stopping); null when no cancel was requested.
   */
  readonly cancelReason: RunCancelReason | null;
  readonly idempotencyKey: string | null;
  readonly scheduleName: string | null;
  /** The resolved run input (declared defaults filled in); `{}` when none. */
  readonly input: RunInput;
  /** The run this one reruns, or null. */
  readonly rerunOf: string | null;
  /**
   * The seq of the run's last event: what `GET /runs/:id?wait=change&after=SEQ` compares with.
   * Absent from older runtimes.
   */
  readonly eventSeq?: number;
}

export interface StepView {
  readonly id: string;
  readonly name: string;
  readonly task: string;
  readonly needs: readonly string[];
  readonly status: StepStatus;
  readonly version: number;
  readonly attemptCount: number;
  readonly startedAtMs: number | null;
  readonly finishedAtMs: number | null;
  /** What the steps that need this one receive: its succeeded attempt's output (or a rerun's reused one); null: none. */
  readonly output: JsonValue | null;
  /**
   * Why a ready step without an attempt waits, when a limit holds it back right now
   * (src/backpressure.ts): `waiting: task "fetch" at its concurrency limit (2 of 2 running)`
   * or `waiting: runtime at --max-running 4`; null otherwise. Absent from older runtimes.
   */
  readonly waiting?: string | null;
}

export interface AttemptView {
  readonly id: string;
  readonly stepRunId: string | null;
  readonly number: number;
  readonly status: AttemptStatus;
  readonly executor: ExecutorType;
  readonly startedAtMs: number | null;
  readonly finishedAtMs: number | null;
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly pid: number | null;
  readonly stopReason: StopReason | null;
  readonly error: string | null;
  /** The JSON the task left at `QLR_OUTPUT`, recorded with its completion; null: none. */
  readonly output: JsonValue | null;
}

export interface EventView {
  readonly seq: number;
  readonly type: string;
  readonly atMs: number;
  readonly stepRunId: string | null;
  readonly attemptId: string | null;
  readonly data: Readonly<Record<string, unknown>>;
}

/** `GET /runs/:id`. */
export interface RunDetail {
  readonly run: RunView;
  readonly steps: readonly StepView[];
  readonly attempts: readonly AttemptView[];
  /** Why a queued task run waits, when a limit holds it back right now; null otherwise (see `StepView.waiting`). */
  readonly waiting?: string | null;
}

/** `GET /runs`: newest first, keyset-paged by `nextCursor`. */
export interface RunPage {
  readonly runs: readonly RunView[];
  readonly nextCursor: string | null;
}

/** `POST /runs`, `POST /runs/:id/cancel`. */
export interface RunAnswer {
  readonly run: RunView;
}

/** `GET /runs/:id/events`. */
export interface EventPage {
  readonly events: readonly EventView[];
}

/** `POST /runs`: exactly one of `workflow` or `task`. */
export interface StartRunRequest {
  readonly package: string;
  readonly workflow?: string;
  readonly task?: string;
  readonly idempotencyKey?: string;
  /** The run's input: at most 64 keys, 8 KiB as canonical JSON; checked against the workflow's `inputs:`. */
  readonly input?: Readonly<Record<string, string | number | boolean>>;
}

/** `POST /runs/:id/rerun`. */
export interface RerunRequest {
  /** Reuse the succeeded steps (and their outputs); run the others. Default false: a full fresh run. */
  readonly fromFailed?: boolean;
  readonly idempotencyKey?: string;
}

/**
 * `GET /runs/:id?wait=terminal|change&after=SEQ&timeoutMs=N`: the run detail once the run is
 * terminal (`terminal`) or has an event after `after` (`change`), or as it stands when
 * `timeoutMs` (0–30000, default 10000) passed first.
 */
export interface RunWaitQuery {
  readonly wait: "terminal" | "change";
  /** With `change` only: the `eventSeq` the client last saw (default 0). */
  readonly after?: number;
  readonly timeoutMs?: number;
}

export interface RunListQuery {
  readonly status?: RunStatus | null;
  readonly limit?: number;
  readonly cursor?: string | null;
}

// ---- attempts ----

/** `POST /attempts/:id/resolve`. */
export interface ResolveRequest {
  readonly as: "lost";
  readonly reason: string;
}

export interface AttemptAnswer {
  readonly attempt: AttemptView;
}

// ---- packages ----

/** `POST /packages`: 201 when a new generation was created, 200 when unchanged. */
export type ApplyView = ApplyResult;

export type PackageHeadView = PackageHead;

export interface ScheduleView {
  readonly name: string;
  readonly cron: string;
  readonly timezone: string;
  readonly target: { readonly kind: "workflow" | "task"; readonly name: string };
  readonly overlap: string;
  readonly nextFireAtMs: number | null;
  readonly lastFireAtMs: number | null;
  readonly missedFires: number;
  readonly skippedOverlaps: number;
}

export interface TaskSummaryView {
  readonly name: string;
  readonly executor: ExecutorType;
  readonly timeoutMs: number;
}

export type GenerationView = Omit<Generation, "manifest">;

/** `GET /packages/:name`. */
export interface PackageDetailView {
  readonly package: PackageHeadView;
  readonly generations: readonly GenerationView[];
  readonly workflows: readonly ReturnType<typeof workflowSummaryView>[];
  readonly tasks: readonly TaskSummaryView[];
  readonly schedules: readonly ScheduleView[];
}

/** `GET /packages`. */
export interface PackageList {
  readonly packages: readonly PackageHeadView[];
}

// ---- system ----

export type StageView = StageReport;
export type TickReportView = TickReport;

/** `POST /tick`. */
export interface TickAnswer {
  readonly report: TickReportView;
}

/** `GET /info`: the runtime's profile and retention (null: it purges nothing). */
export interface RuntimeInfo {
  readonly profile: string | null;
  readonly retention: {
    readonly horizonMs: number;
    readonly maxRuns: number;
    readonly idempotencyWindowMs: number;
  } | null;
}

export interface RecoveryView {
  readonly attemptId: string;
  readonly decision: string;
  readonly reason: string | null;
}

/** `GET /recovery`. */
export interface RecoveryList {
  readonly recovery: readonly RecoveryView[];
}

// ---- remote workers (`/worker/*`) ----

/** Presented on every lease call but claim. */
export interface LeaseFenceRequest {
  readonly attemptId: string;
  readonly workerId: string;
  readonly leaseVersion: number;
  readonly leaseSecret: string;
}

export interface ClaimRequest {
  readonly workerId: string;
  readonly pool: string;
  readonly capacity: number;
}

export type LeaseView = Lease;

/** `POST /worker/claim`: the leases granted, at most `capacity`. */
export interface ClaimAnswer {
  readonly leases: readonly LeaseView[];
}

/** The process a worker started, as the core records it. */
export type ProcessHandleRequest = ProcessHandleFacts;

export interface LeaseStartRequest extends LeaseFenceRequest {
  readonly phase: "starting" | "running";
  readonly handle?: ProcessHandleRequest;
}

/**
 * The completion a worker reports: the core's completion facts, with the output its receipt
 * carries (null: none) and why it was refused; absent: none. The handle travels on start.
 */
export interface LeaseCompleteRequest extends LeaseFenceRequest, Omit<CompletionFacts, "handle"> {}

export interface LeaseLostRequest extends LeaseFenceRequest {
  readonly reason: string;
  /**
   * The worker's launcher proves the process never started (no journal record, or no spawn
   * record and no supervisor left that could write one): a `starting` attempt is then lost
   * before the start barrier and its step gets a new ready epoch. Absent or false: the outcome
   * is unknown, and a started attempt is lost with its step failed. Refused on a `running` attempt.
   */
  readonly neverSpawned?: boolean;
}

/** `POST /worker/start`. */
export interface LeaseStartAnswer {
  readonly status: AttemptStatus;
  readonly leaseExpiresAtMs: number;
}

/** `POST /worker/heartbeat`: `continue`, or `stop_requested` with the reason on record. */
export type LeaseControlView = LeaseControl;

/** `POST /worker/complete` and `/worker/lost`; `replayed` when the report was already recorded. */
export type WorkerCompletionView = WorkerCompletion;

// ---- views of the core's records ----

export function runView(run: Run): RunView {
  return {
    id: run.id,
    kind: run.kind,
    status: run.status,
    package: run.package,
    generation: run.generation,
    target: run.target,
    createdAtMs: run.createdAtMs,
    finishedAtMs: run.finishedAtMs,
    cancelRequestedAtMs: run.cancelRequestedAtMs,
    cancelReason: run.cancelReason,
    idempotencyKey: run.idempotencyKey,
    scheduleName: run.scheduleName,
    input: run.input,
    rerunOf: run.rerunOf,
    eventSeq: run.eventSeq,
  };
}

/** `waiting`: why the step waits (src/backpressure.ts `explainWaiting`); null when nothing holds it back. */
export function stepView(step: StepRun, waiting: string | null): StepView {
  return {
    id: step.id,
    name: step.name,
    task: step.task,
    needs: step.needs,
    status: step.status,
    version: step.version,
    attemptCount: step.attemptCount,
    startedAtMs: step.startedAtMs,
    finishedAtMs: step.finishedAtMs,
    output: step.output,
    waiting,
  };
}

export function attemptView(attempt: RunAttempt): AttemptView {
  return {
    id: attempt.id,
    stepRunId: attempt.stepRunId,
    number: attempt.number,
    status: attempt.status,
    executor: attempt.executor,
    startedAtMs: attempt.startedAtMs,
    finishedAtMs: attempt.finishedAtMs,
    exitCode: attempt.exitCode,
    signal: attempt.signal,
    pid: attempt.pid,
    stopReason: attempt.stopReason,
    error: attempt.error,
    output: attempt.output,
  };
}

export function eventView(event: RunEvent): EventView {
  return {
    seq: event.seq,
    type: event.type,
    atMs: event.atMs,
    stepRunId: event.stepRunId,
    attemptId: event.attemptId,
    data: event.data,
  };
}

export function scheduleView(schedule: ScheduleState): ScheduleView {
  return {
    name: schedule.name,
    cron: schedule.spec.cron,
    timezone: schedule.spec.timezone,
    target: schedule.spec.target,
    overlap: schedule.spec.overlap,
    nextFireAtMs: schedule.nextFireAtMs,
    lastFireAtMs: schedule.lastFireAtMs,
    missedFires: schedule.missedFires,
    skippedOverlaps: schedule.skippedOverlaps,
  };
}

export function taskSummaryView(task: TaskSpec): TaskSummaryView {
  return { name: task.name, executor: task.executor, timeoutMs: task.timeoutMs };
}

// ---- watching: live logs, alerts, the overview (routes/observe.ts) ----

export type LogStream = "stdout" | "stderr";

/** `GET /runs/:id/steps/:name/log?offset=N`: one bounded chunk of one stream. */
export interface LogChunkView {
  readonly attemptId: string;
  readonly attemptStatus: RunAttempt["status"];
  readonly stream: LogStream;
  readonly offset: number;
  readonly nextOffset: number;
  readonly sizeBytes: number;
  readonly text: string;
  /** The attempt ended and this chunk reached the end of its stream: nothing more will come. */
  readonly finished: boolean;
}

/** A notification outbox entry as the API shows it: a webhook's secret never leaves the store. */
export interface NotificationView {
  readonly id: string;
  readonly runId: string;
  readonly package: string;
  readonly event: NotificationEntry["event"];
  /** The workflow step a `step.*` event is about; null for a `run.*` event. */
  readonly step: string | null;
  readonly notifier:
    | { readonly kind: "webhook"; readonly url: string; readonly signed: boolean }
    | { readonly kind: "command"; readonly argv: readonly string[] };
  readonly state: NotificationEntry["state"];
  readonly attempts: number;
  /** When a pending entry is tried next; null once delivered or failed. */
  readonly nextAttemptAtMs: number | null;
  readonly lastError: string | null;
  readonly createdAtMs: number;
  readonly deliveredAtMs: number | null;
}

export interface NotificationPage {
  readonly notifications: readonly NotificationView[];
  readonly nextCursor: string | null;
}

export interface NotificationQuery {
  readonly run?: string | null;
  readonly state?: NotificationEntry["state"] | null;
  readonly limit?: number;
  readonly cursor?: string | null;
}

export interface OverviewAnswer {
  readonly overview: Overview;
}

export function notificationView(entry: NotificationEntry): NotificationView {
  const notifier =
    entry.notifier.kind === "webhook"
      ? {
          kind: "webhook" as const,
          url: entry.notifier.url,
          signed: entry.notifier.secret !== null,
        }
      : { kind: "command" as const, argv: entry.notifier.argv };
  return {
    id: entry.id,
    runId: entry.runId,
    package: entry.package,
    event: entry.event,
    step: entry.stepName,
    notifier,
    state: entry.state,
    attempts: entry.attempts,
    nextAttemptAtMs: entry.state === "pending" ? entry.nextAttemptAtMs : null,
    lastError: entry.lastError,
    createdAtMs: entry.createdAtMs,
    deliveredAtMs: entry.deliveredAtMs,
  };
}

/** A workflow as `GET /packages/:name` shows it: its notifiers without their secrets. */
export function workflowSummaryView(
  workflow: WorkflowSpec,
): Omit<WorkflowSpec, "notify"> & { notify?: NotificationView["notifier"][] } {
  const { notify, ...rest } = workflow;
  if (notify === undefined) return rest;
  return {
    ...rest,
    notify: notify.map((notifier) =>
      notifier.kind === "webhook"
        ? { kind: "webhook" as const, url: notifier.url, signed: notifier.secret !== null }
        : { kind: "command" as const, argv: notifier.argv },
    ),
  };
}
