import { assertNotBefore, RunChange } from "./aggregate.ts";
import { sha256Hex, timingSafeEqualText } from "./digest.ts";
import { QlrError } from "./errors.ts";
import {
  complete,
  markRunning,
  markStarting,
  requestTimeoutStop,
  type AttemptScope,
  type CompletionFacts,
} from "./execution.ts";
import type { ChangeSet, ProcessHandleFacts, RunAttempt, StopReason } from "./model.ts";
import { EMPTY_CHANGE_SET, TERMINAL_ATTEMPT_STATUSES } from "./model.ts";
import type { RetryPolicy } from "./packages.ts";
import { applyRecovery, decideLoss } from "./recovery.ts";

/**
 * Leases for remote workers (ADR-0227 §4–§6). A remote attempt is admitted `claimed` like any
 * other; a worker's claim leases it (worker id, a fencing version, an expiry). Every later call
 * carries the fence; a stale fence is refused and changes nothing. The parent run is never
 * touched by lease control: task deadlines are task-scoped stop intents, and whole-run cancel
 * stays the parent's authority.
 */

export const DEFAULT_LEASE_TTL_MS = 30_000;
export const MIN_LEASE_TTL_MS = 1_000;
export const MAX_LEASE_TTL_MS = 10 * 60_000;
/** The most leases one claim call hands out. */
export const MAX_CLAIM_CAPACITY = 64;

/**
 * What a worker presents on every lease call after the claim. The worker id and version are
 * not secret (they appear in events); the lease secret, handed out once at claim and stored
 * only as its sha256, is what proves the caller holds the lease.
 */
export interface LeaseFence {
  readonly workerId: string;
  readonly leaseVersion: number;
  readonly leaseSecret: string;
}

export const LEASE_SECRET_PATTERN = /^[A-Za-z0-9_-]{16,128}$/;

/**
 * How far a worker's clock may run from the coordinator's before its reported times are
 * refused. Worker times come from another machine; NTP keeps real clocks far closer than this,
 * and a time further off is a broken clock or a forged report.
 */
export const WORKER_CLOCK_SKEW_MAX_MS = 10_000;

/**
 * The one answer to a fence that does not match, whoever holds the lease: it names neither the
 * holder nor its version, so a refused caller learns nothing it could use next time.
 */
export function staleFence(attemptId: string): QlrError {
  return new QlrError(
    "conflict",
    `the lease fence for attempt ${attemptId} does not match a live lease`,
  );
}

export function leaseSecretDigest(secret: string): string {
  return sha256Hex(secret);
}

export type LeaseControl =
  | { readonly action: "continue"; readonly leaseExpiresAtMs: number }
  | {
      readonly action: "stop_requested";
      readonly reason: StopReason;
      readonly leaseExpiresAtMs: number;
    };

/** A lease can be granted on a claimed remote attempt that no worker holds, or whose lease expired. */
export function isClaimable(attempt: RunAttempt, nowMs: number): boolean {
  return (
    attempt.executor === "remote_worker" &&
    attempt.status === "claimed" &&
    // Stryker disable next-line ConditionalExpression: equivalent (`null <= nowMs` is true); kept to read
    (attempt.leaseExpiresAtMs === null || attempt.leaseExpiresAtMs <= nowMs)
  );
}

/** What a refused secret is compared with: no stored sha256 hex digest ever equals it. */
// Stryker disable next-line StringLiteral: equivalent, any text but 64 hex digits is refused alike
const NO_PRESENTED_DIGEST = "";

export function checkFence(attempt: RunAttempt, fence: LeaseFence): void {
  // Every comparison runs whatever the earlier ones found, and the secret's digest is compared
  // in constant time, so neither the answer nor its timing says which part was wrong.
  const presentedDigest =
    typeof fence.leaseSecret === "string" && LEASE_SECRET_PATTERN.test(fence.leaseSecret)
      ? leaseSecretDigest(fence.leaseSecret)
      : NO_PRESENTED_DIGEST;
  const secretMatches =
    attempt.leaseSecretDigest !== null &&
    timingSafeEqualText(presentedDigest, attempt.leaseSecretDigest);
  const holderMatches =
    attempt.leaseWorkerId === fence.workerId && attempt.leaseVersion === fence.leaseVersion;
  if (attempt.executor !== "remote_worker" || !holderMatches || !secretMatches)
    throw staleFence(attempt.id);
}

/** The scope's attempt, once the fence proved the caller holds its lease. */
function fencedAttempt(scope: AttemptScope, fence: LeaseFence): RunAttempt {
  checkFence(scope.attempt, fence);
  return scope.attempt;
}

/** Grants the lease; the secret is the worker's, only its digest is stored. */
export function grantLease(
  scope: AttemptScope,
  workerId: string,
  leaseSecret: string,
  nowMs: number,
  ttlMs: number,
): ChangeSet {
  if (!isClaimable(scope.attempt, nowMs))
    throw new QlrError("conflict", `attempt ${scope.attempt.id} is not claimable`);
  if (!LEASE_SECRET_PATTERN.test(leaseSecret))
    throw new QlrError(
      "integrity",
      "the lease secret source returned a value outside the lease secret pattern",
    );
  const change = new RunChange(scope.run, nowMs);
  change.setAttempt(
    scope.attempt,
    null,
    {
      leaseWorkerId: workerId,
      leaseVersion: scope.attempt.leaseVersion + 1,
      leaseExpiresAtMs: nowMs + ttlMs,
      leaseSecretDigest: leaseSecretDigest(leaseSecret),
    },
    { workerId, leaseVersion: scope.attempt.leaseVersion + 1 },
    "attempt.leased",
  );
  return change.build();
}

function implausible(path: string, message: string): QlrError {
  return new QlrError("invalid_request", `implausible worker time: ${path} ${message}`, {
    details: [{ path, message }],
  });
}

/**
 * Worker-reported times must be possible: a process starts no earlier than its attempt was
 * claimed, finishes no earlier than it started, and neither happens in the coordinator's
 * future. The bounds against the coordinator's clock allow WORKER_CLOCK_SKEW_MAX_MS of skew;
 * start ≤ finish is exact, since both readings come from the same worker clock.
 */
export function checkWorkerTimes(
  attempt: RunAttempt,
  times: { readonly startedAtMs: number; readonly finishedAtMs?: number },
  nowMs: number,
  paths: { readonly started: string; readonly finished?: string },
): void {
  const { startedAtMs, finishedAtMs } = times;
  if (startedAtMs < attempt.createdAtMs - WORKER_CLOCK_SKEW_MAX_MS)
    throw implausible(
      paths.started,
      `is before the attempt was claimed (${attempt.createdAtMs}) by more than ${WORKER_CLOCK_SKEW_MAX_MS} ms`,
    );
  if (startedAtMs > nowMs + WORKER_CLOCK_SKEW_MAX_MS)
    throw implausible(
      paths.started,
      `is more than ${WORKER_CLOCK_SKEW_MAX_MS} ms in the coordinator's future`,
    );
  // Stryker disable next-line ConditionalExpression: equivalent, `undefined` compares false below
  if (finishedAtMs === undefined) return;
  const finishedPath = paths.finished ?? "finishedAtMs";
  if (finishedAtMs < startedAtMs) throw implausible(finishedPath, "is before startedAtMs");
  if (finishedAtMs > nowMs + WORKER_CLOCK_SKEW_MAX_MS)
    throw implausible(
      finishedPath,
      `is more than ${WORKER_CLOCK_SKEW_MAX_MS} ms in the coordinator's future`,
    );
}

/**
 * Extends a live lease without an event: heartbeats are frequent and carry no decision, so
 * the run's history (events, mutations) does not grow. Only the attempt row changes, under its
 * own version fence; the store writes a change of attempts alone. This is the one change of a
 * run's rows that leaves the run's version where it was, which is why a store that keeps a
 * run's rows by its version keeps no attempts of a run that has a remote worker's.
 */
export function extendLease(scope: AttemptScope, nowMs: number, ttlMs: number): ChangeSet {
  const { attempt } = scope;
  assertNotBefore(nowMs, attempt.createdAtMs, `attempt ${attempt.id}`);
  // Only the attempt row moves, under its own version fence: a lease expiry is operational
  // metadata, not a state transition, so it neither bumps the run version (which would make
  // every heartbeat contend with the cadence) nor appends an event.
  const after: RunAttempt = {
    ...attempt,
    leaseExpiresAtMs: nowMs + ttlMs,
    version: attempt.version + 1,
  };
  return { ...EMPTY_CHANGE_SET, attempts: [{ before: attempt, after }] };
}

function expiredOrFence(attempt: RunAttempt, fence: LeaseFence, nowMs: number): void {
  checkFence(attempt, fence);
  // The caller proved it holds the lease, so it may learn that its own lease expired.
  if (
    attempt.status === "claimed" &&
    attempt.leaseExpiresAtMs !== null &&
    attempt.leaseExpiresAtMs <= nowMs
  ) {
    throw new QlrError("conflict", `the lease of attempt ${attempt.id} expired before it started`);
  }
}

/**
 * The worker is about to journal and spawn: `claimed → starting` under the fence. A retry of
 * the same start whose answer was lost (the attempt is already `starting` under this very
 * fence) is answered from the durable state and writes nothing, like a repeated completion.
 */
export function workerStarting(
  scope: AttemptScope,
  fence: LeaseFence,
  nowMs: number,
  ttlMs: number,
): ChangeSet {
  checkFence(scope.attempt, fence);
  if (scope.attempt.status === "starting") return EMPTY_CHANGE_SET;
  expiredOrFence(scope.attempt, fence, nowMs);
  if (scope.attempt.status !== "claimed")
    throw new QlrError(
      "conflict",
      `attempt ${scope.attempt.id} is ${scope.attempt.status}, not claimed`,
    );
  // The fence check proved the lease names this worker: the attempt already records it.
  const change = markStarting(scope, nowMs);
  return withLeaseExpiry(change, scope.attempt.id, nowMs + ttlMs);
}

/** The process exists: `starting → running` with the worker's handle facts. */
export function workerRunning(
  scope: AttemptScope,
  fence: LeaseFence,
  handle: ProcessHandleFacts,
  nowMs: number,
  ttlMs: number,
): ChangeSet {
  const attempt = fencedAttempt(scope, fence);
  // The same running report repeated after a lost answer: already recorded, nothing to write.
  if (
    attempt.status === "running" &&
    attempt.pid === handle.pid &&
    attempt.processStartTicks === handle.processStartTicks &&
    attempt.bootId === handle.bootId &&
    attempt.startedAtMs === handle.startedAtMs
  ) {
    return EMPTY_CHANGE_SET;
  }
  checkWorkerTimes(attempt, { startedAtMs: handle.startedAtMs }, nowMs, {
    started: "handle.startedAtMs",
  });
  return withLeaseExpiry(markRunning(scope, handle, nowMs), scope.attempt.id, nowMs + ttlMs);
}

function withLeaseExpiry(
  change: ChangeSet,
  attemptId: string,
  leaseExpiresAtMs: number,
): ChangeSet {
  return {
    ...change,
    attempts: change.attempts.map((row) =>
      // Stryker disable next-line ConditionalExpression: equivalent, callers' change sets hold one attempt
      row.after.id === attemptId ? { ...row, after: { ...row.after, leaseExpiresAtMs } } : row,
    ),
  };
}

/**
 * A heartbeat extends the lease and answers `continue`, or `stop_requested` with the reason on
 * record. A passed deadline records `workflow.task_timeout_requested` (never the parent's
 * cancel intent) and answers `stop_requested(timeout)`.
 */
export function heartbeat(
  scope: AttemptScope,
  fence: LeaseFence,
  nowMs: number,
  ttlMs: number,
): { control: LeaseControl; change: ChangeSet } {
  const attempt = fencedAttempt(scope, fence);
  if (TERMINAL_ATTEMPT_STATUSES.has(attempt.status))
    throw new QlrError("conflict", `attempt ${attempt.id} is already ${attempt.status}`);
  const leaseExpiresAtMs = nowMs + ttlMs;
  if (attempt.stopReason !== null) {
    return {
      control: { action: "stop_requested", reason: attempt.stopReason, leaseExpiresAtMs },
      change: extendLease(scope, nowMs, ttlMs),
    };
  }
  const timeout = requestTimeoutStop(scope, nowMs);
  if (timeout !== null)
    return {
      control: { action: "stop_requested", reason: "timeout", leaseExpiresAtMs },
      change: withLeaseExpiry(timeout, attempt.id, leaseExpiresAtMs),
    };
  return {
    control: { action: "continue", leaseExpiresAtMs },
    change: extendLease(scope, nowMs, ttlMs),
  };
}

export type CompletionAnswer =
  | { readonly kind: "recorded"; readonly change: ChangeSet }
  | { readonly kind: "replayed"; readonly status: RunAttempt["status"] };

/**
 * Completion under the fence. The deadline is rechecked with store time: a completion observed
 * after the deadline is `timed_out`. A completion already recorded (a retry after a lost
 * response) is answered from the durable attempt and writes nothing.
 */
export function workerComplete(
  scope: AttemptScope,
  fence: LeaseFence,
  facts: CompletionFacts,
  retry: RetryPolicy,
  nowMs: number,
): CompletionAnswer {
  const attempt = fencedAttempt(scope, fence);
  if (TERMINAL_ATTEMPT_STATUSES.has(attempt.status))
    return { kind: "replayed", status: attempt.status };
  checkWorkerTimes(
    attempt,
    { startedAtMs: facts.startedAtMs, finishedAtMs: facts.finishedAtMs },
    nowMs,
    { started: "startedAtMs", finished: "finishedAtMs" },
  );
  if (attempt.status !== "running" && attempt.status !== "starting")
    throw new QlrError("conflict", `attempt ${attempt.id} is ${attempt.status}; it never started`);
  const deadlineAtMs =
    attempt.deadlineAtMs ?? (facts.handle?.startedAtMs ?? facts.startedAtMs) + attempt.timeoutMs;
  const overran =
    nowMs > deadlineAtMs && facts.stopReason !== "cancel" && facts.stopReason !== "shutdown";
  const checked: CompletionFacts = overran ? { ...facts, stopReason: "timeout" } : facts;
  return { kind: "recorded", change: complete(scope, checked, retry, nowMs) };
}

/**
 * Lease expiry recovery. A claim that never started is `lost` and its step gets a new ready
 * epoch; a `starting`/`running` attempt may have side effects, and without trusted evidence the
 * coordinator cannot know, so it fails closed (reported) and keeps the fence: the worker can
 * still complete it when it comes back.
 */
export function expireLease(
  scope: AttemptScope,
  retry: RetryPolicy,
  nowMs: number,
): ChangeSet | null {
  const attempt = scope.attempt;
  if (
    attempt.executor !== "remote_worker" ||
    attempt.leaseExpiresAtMs === null ||
    attempt.leaseExpiresAtMs > nowMs
  )
    return null;
  if (attempt.status === "claimed")
    return applyRecovery(
      scope,
      decideLoss(
        attempt,
        // Stryker disable next-line StringLiteral: equivalent, a claim is lost before the barrier
        "unknown",
        "the lease expired before the attempt started",
      ),
      retry,
      nowMs,
    );
  if (attempt.status === "starting" || attempt.status === "running") {
    return applyRecovery(
      scope,
      {
        kind: "fail_closed",
        reason:
          "the lease expired while the attempt may be running; waiting for its worker's evidence",
      },
      retry,
      nowMs,
    );
  }
  return null;
}
