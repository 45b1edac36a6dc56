import { canonicalJson, type JsonValue } from "./canonical-json.ts";
import { digestOf, hmacSha256Hex, sha256Hex } from "./digest.ts";
import type { Manifest, NotifierSpec } from "./manifest/types.ts";
import {
  SETTLED_STEP_STATUSES,
  TERMINAL_RUN_STATUSES,
  type ChangeSet,
  type RowChange,
  type Run,
  type RunStatus,
  type StepRun,
  type StepStatus,
} from "./model.ts";
import { utf8ToBytes } from "@noble/hashes/utils.js";

/**
 * Alerts (DESIGN.md §6 `notify:`). A run that ends failed, timed out or lost leaves one outbox
 * entry per notifier, written by the store in the same transaction as the run's terminal
 * transition, so an alert is never lost across a crash. The cadence's notifications stage
 * drains the outbox: it claims an entry (a short lease), sends it through the
 * `NotificationSender` port outside any transaction, and records the outcome: delivered, a
 * retry after an exponential backoff, or failed after the last attempt. A crash between the
 * send and its record sends the entry again after the claim expires, with the same
 * `idempotency-key` (the entry id), so a receiver that honours the key acts once.
 *
 * A workflow's step that ends failed or timed out (its retries spent; a lost attempt ends its
 * step failed) fires its task's `notify:` as a `step.*` event, written in the transaction of
 * the step's transition, exactly like a run's. The run's own notifiers (the workflow's, the
 * schedule's) still fire for the run's `run.*` event: the two are different events with
 * different ids, so a notifier named on both the task and the workflow hears of both.
 */

export const ALERT_RUN_STATUSES: ReadonlySet<RunStatus> = new Set(["failed", "timed_out", "lost"]);
export const ALERT_STEP_STATUSES: ReadonlySet<StepStatus> = new Set(["failed", "timed_out"]);
export const NOTIFICATION_EVENTS = [
  "run.failed",
  "run.timed_out",
  "run.lost",
  "step.failed",
  "step.timed_out",
] as const;
export type NotificationEvent = (typeof NOTIFICATION_EVENTS)[number];
export const NOTIFICATION_STATES = ["pending", "delivered", "failed"] as const;
export type NotificationState = (typeof NOTIFICATION_STATES)[number];

/** How hard an entry is tried. */
const DELIVERY = {
  /** Attempts per entry before it is marked failed. */
  maxAttempts: 8,
  /** The first retry waits this long; each further one twice as long, up to the cap. */
  backoffBaseMs: 5_000,
  backoffCapMs: 3_600_000,
  /** A recorded delivery error is cut to this many characters. */
  maxErrorLength: 500,
} as const;

/**
 * How long a claimed entry is held before another cycle (or coordinator) may send it again:
 * longer than a sender's own timeout, so a send in progress is never doubled by a live runtime.
 */
export const DELIVERY_CLAIM_MS = 60_000;

export interface NotificationEntry {
  /** `ntf:` + 32 hex: derived from the run, its terminal status and the notifier, so it is stable. */
  readonly id: string;
  readonly runId: string;
  readonly package: string;
  readonly event: NotificationEvent;
  /** The workflow step a `step.*` event is about; null for a `run.*` event. */
  readonly stepName: string | null;
  readonly notifier: NotifierSpec;
  /** The exact JSON body sent on every attempt. */
  readonly payload: string;
  readonly state: NotificationState;
  readonly attempts: number;
  readonly nextAttemptAtMs: number;
  readonly lastError: string | null;
  readonly createdAtMs: number;
  readonly updatedAtMs: number;
  readonly deliveredAtMs: number | null;
  /** CAS fence for the claim and the outcome. */
  readonly version: number;
}

/** What a sender is asked to do: the core computes every byte and header; the sender only moves them. */
export type DeliveryRequest =
  | {
      readonly kind: "webhook";
      readonly url: string;
      readonly body: string;
      readonly headers: Readonly<Record<string, string>>;
    }
  | {
      readonly kind: "command";
      readonly argv: readonly string[];
      readonly stdin: string;
      readonly env: Readonly<Record<string, string>>;
    };

export type DeliveryOutcome =
  | { readonly ok: true }
  | { readonly ok: false; readonly error: string; readonly retryable: boolean };

/** Delivery of one request (runtimes/node: fetch and a local command; runtimes/worker: fetch). */
export interface NotificationSender {
  send(request: DeliveryRequest): Promise<DeliveryOutcome>;
}

/** The runs of a change set that have just entered an alerting terminal status. */
export function alertingRuns(change: ChangeSet): Run[] {
  return justEntered(change.runs, ALERT_RUN_STATUSES, TERMINAL_RUN_STATUSES);
}

/** The workflow steps of a change set that have just ended failed or timed out. */
export function alertingSteps(change: ChangeSet): StepRun[] {
  return justEntered(change.steps, ALERT_STEP_STATUSES, SETTLED_STEP_STATUSES);
}

/** The rows a change moves into one of `alerting` from no `final` status (or creates there). */
function justEntered<T extends { readonly status: string }>(
  changes: readonly RowChange<T>[],
  alerting: ReadonlySet<T["status"]>,
  final: ReadonlySet<T["status"]>,
): T[] {
  return changes
    .filter(
      ({ before, after }) =>
        alerting.has(after.status) && (before === null || !final.has(before.status)),
    )
    .map(({ after }) => after);
}

/** The notifiers of a workflow step: its task's `notify:`, one per distinct notifier. */
export function notifiersForStep(manifest: Manifest, step: Pick<StepRun, "task">): NotifierSpec[] {
  return distinct(manifest.tasks.find((task) => task.name === step.task)?.notify ?? []);
}

function distinct(notifiers: readonly NotifierSpec[]): NotifierSpec[] {
  const seen = new Set<string>();
  const out: NotifierSpec[] = [];
  for (const notifier of notifiers) {
    const key = digestOf(notifier);
    if (seen.has(key)) continue;
    seen.add(key);
    out.push(notifier);
  }
  return out;
}

/** The notifiers of a run: its workflow's or task's, then its schedule's; one per distinct notifier. */
export function notifiersForRun(
  manifest: Manifest,
  run: Pick<Run, "kind" | "target" | "scheduleName">,
): NotifierSpec[] {
  const own =
    run.kind === "workflow"
      ? manifest.workflows.find((workflow) => workflow.name === run.target)?.notify
      : manifest.tasks.find((task) => task.name === run.target)?.notify;
  const schedule =
    run.scheduleName === null
      ? undefined
      : manifest.schedules.find((item) => item.name === run.scheduleName)?.notify;
  return distinct([...(own ?? []), ...(schedule ?? [])]);
}

/** The outbox entries a run's terminal transition writes (none for a run without notifiers). */
export function entriesForRun(
  run: Run,
  notifiers: readonly NotifierSpec[],
  nowMs: number,
): NotificationEntry[] {
  if (!ALERT_RUN_STATUSES.has(run.status)) return [];
  return pendingEntries(run, null, {
    event: `run.${run.status}` as NotificationEvent,
    transition: [run.id, run.status],
    about: {
      run: { ...runIdentity(run), status: run.status, finishedAtMs: run.finishedAtMs },
    },
    notifiers,
    nowMs,
  });
}

/** The outbox entries a workflow step's failed or timed-out transition writes, one per notifier of its task. */
export function entriesForStep(
  run: Run,
  step: StepRun,
  notifiers: readonly NotifierSpec[],
  nowMs: number,
): NotificationEntry[] {
  if (!ALERT_STEP_STATUSES.has(step.status)) return [];
  return pendingEntries(run, step.name, {
    event: `step.${step.status}` as NotificationEvent,
    transition: [run.id, step.id, step.status],
    about: {
      run: runIdentity(run),
      step: {
        id: step.id,
        name: step.name,
        task: step.task,
        status: step.status,
        attempts: step.attemptCount,
        finishedAtMs: step.finishedAtMs,
      },
    },
    notifiers,
    nowMs,
  });
}

/**
 * What every alert's payload says of its run (canonical JSON sorts the keys, so the bytes do
 * not depend on the order written here). A step's alert leaves out the run's status: the run
 * is usually still going.
 */
function runIdentity(run: Run): Readonly<Record<string, JsonValue>> {
  return {
    id: run.id,
    kind: run.kind,
    package: run.package,
    generation: run.generation,
    target: run.target,
    schedule: run.scheduleName,
    createdAtMs: run.createdAtMs,
  };
}

/**
 * One pending entry per notifier for one alerting transition. The id is derived from the
 * transition and the notifier, so writing the same transition again yields the same ids; the
 * payload is the event and what it is `about`, fixed once for every delivery attempt.
 */
function pendingEntries(
  run: Run,
  stepName: string | null,
  alert: {
    readonly event: NotificationEvent;
    readonly transition: readonly string[];
    readonly about: Readonly<Record<string, JsonValue>>;
    readonly notifiers: readonly NotifierSpec[];
    readonly nowMs: number;
  },
): NotificationEntry[] {
  const { event, nowMs } = alert;
  return alert.notifiers.map((notifier) => {
    const id = `ntf:${sha256Hex(canonicalJson([...alert.transition, digestOf(notifier)])).slice(0, 32)}`;
    return {
      id,
      runId: run.id,
      package: run.package,
      event,
      stepName,
      notifier,
      payload: canonicalJson({ id, event, ...alert.about }),
      state: "pending",
      attempts: 0,
      nextAttemptAtMs: nowMs,
      lastError: null,
      createdAtMs: nowMs,
      updatedAtMs: nowMs,
      deliveredAtMs: null,
      version: 1,
    };
  });
}

/** The request for one entry: a signed POST, or a command given the payload on stdin. */
export function deliveryRequest(entry: NotificationEntry): DeliveryRequest {
  const notifier = entry.notifier;
  if (notifier.kind === "command") {
    return {
      kind: "command",
      argv: notifier.argv,
      stdin: entry.payload,
      env: {
        QLR_NOTIFICATION_ID: entry.id,
        QLR_EVENT: entry.event,
        QLR_RUN_ID: entry.runId,
        QLR_PACKAGE: entry.package,
        ...(entry.stepName === null ? {} : { QLR_STEP: entry.stepName }),
      },
    };
  }
  const headers: Record<string, string> = {
    "content-type": "application/json",
    "idempotency-key": entry.id,
    "x-qlr-event": entry.event,
  };
  if (notifier.secret !== null)
    headers["x-qlr-signature"] =
      `sha256=${hmacSha256Hex(utf8ToBytes(notifier.secret), entry.payload)}`;
  return { kind: "webhook", url: notifier.url, body: entry.payload, headers };
}

/** The wait before attempt `attempts + 1`, after `attempts` failed ones. */
export function retryDelayMs(attempts: number): number {
  return Math.min(DELIVERY.backoffCapMs, DELIVERY.backoffBaseMs * 2 ** Math.max(0, attempts - 1));
}

/** Claims a due pending entry for one send: one more attempt, held for `DELIVERY_CLAIM_MS`. Null when it is not due. */
export function claimForDelivery(
  entry: NotificationEntry,
  nowMs: number,
): NotificationEntry | null {
  if (!isDue(entry, nowMs) || entry.attempts >= DELIVERY.maxAttempts) return null;
  return revised(entry, nowMs, {
    attempts: entry.attempts + 1,
    nextAttemptAtMs: nowMs + DELIVERY_CLAIM_MS,
  });
}

/** Records one send's outcome on the claimed entry. */
export function recordDelivery(
  claimed: NotificationEntry,
  outcome: DeliveryOutcome,
  nowMs: number,
): NotificationEntry {
  if (outcome.ok)
    return revised(claimed, nowMs, { state: "delivered", deliveredAtMs: nowMs, lastError: null });
  const lastError = outcome.error.slice(0, DELIVERY.maxErrorLength);
  if (!outcome.retryable || claimed.attempts >= DELIVERY.maxAttempts)
    return revised(claimed, nowMs, { state: "failed", lastError });
  return revised(claimed, nowMs, {
    lastError,
    nextAttemptAtMs: nowMs + retryDelayMs(claimed.attempts),
  });
}

/**
 * An entry whose claim expired without a record (the runtime died during the send) is due
 * again; at its last attempt it is failed instead, since the claim already spent that attempt.
 */
export function expireStaleClaim(
  entry: NotificationEntry,
  nowMs: number,
): NotificationEntry | null {
  if (!isDue(entry, nowMs) || entry.attempts < DELIVERY.maxAttempts) return null;
  return revised(entry, nowMs, {
    state: "failed",
    lastError: entry.lastError ?? "the runtime stopped during the last delivery attempt",
  });
}

/**
 * A pending entry whose next attempt time has come: a retry whose backoff has passed, or a
 * claim (which holds the entry by moving that time) that expired without a record.
 */
function isDue(entry: NotificationEntry, nowMs: number): boolean {
  return entry.state === "pending" && entry.nextAttemptAtMs <= nowMs;
}

/** What a delivery step may change on an entry; its identity and payload never change. */
type DeliveryChange = Partial<
  Pick<NotificationEntry, "state" | "attempts" | "nextAttemptAtMs" | "lastError" | "deliveredAtMs">
>;

/** The next version of an entry: `changes` applied, stamped at `nowMs` for the CAS on `version`. */
function revised(
  entry: NotificationEntry,
  nowMs: number,
  changes: DeliveryChange,
): NotificationEntry {
  return { ...entry, ...changes, updatedAtMs: nowMs, version: entry.version + 1 };
}
