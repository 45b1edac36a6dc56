import { RunChange } from "./aggregate.ts";
import { QlrError } from "./errors.ts";
import {
  complete,
  finishOrdinary,
  holdsEpoch,
  type AttemptScope,
  type CompletionFacts,
} from "./execution.ts";
import type { ChangeSet, RunAttempt } from "./model.ts";
import type { RetryPolicy } from "./packages.ts";

/**
 * Start-up recovery of attempts the runtime owns, one attempt at a time (ADR-0229 §3,
 * ADR-0227 §6). The decision is pure; the evidence is gathered by the runtime (receipt,
 * launcher journal, two live inspections of the exact persisted process identity).
 *
 * - `claimed`: never crossed the start barrier → `lost`, and the step gets a new ready epoch
 *   (an ordinary run goes back to `queued`).
 * - `starting`/`running`: a valid receipt completes it; otherwise only two consistent live
 *   inspections re-adopt it, and only trusted not-running evidence loses it (step `failed`,
 *   never an automatic retry after the start barrier, ADR-0227 §6). A `starting`
 *   attempt with no journal record never spawned (the journal is written before spawn), so it
 *   is handled like an orphaned claim; so is one whose executor proves the spawn never
 *   happened (a journal but no spawn record, and no supervisor left that could write one).
 * - Anything else (tampered receipt, missing handle, changed identity, unverifiable platform,
 *   inconsistent inspections) fails closed: nothing changes and the attempt is reported.
 */

export type ReceiptEvidence =
  | { readonly status: "none" }
  | { readonly status: "valid"; readonly facts: CompletionFacts }
  | { readonly status: "invalid"; readonly reason: string };

export type LiveInspection = "running" | "not_running" | "changed_identity" | "unverifiable";

export interface RecoveryEvidence {
  readonly receipt: ReceiptEvidence;
  /** Whether the launcher's pre-spawn journal record exists, and whether the spawn provably never happened. */
  readonly journal: "present" | "absent" | "invalid" | "never_spawned";
  /**
   * Two inspections of the persisted identity, one after the other (docs/ARCHITECTURE.md §16,
   * deviation 1: each compares the exact identity, so spacing them makes no decision safer).
   */
  readonly inspections: readonly LiveInspection[];
}

export type RecoveryDecision =
  | { readonly kind: "none" }
  | { readonly kind: "complete"; readonly facts: CompletionFacts }
  | { readonly kind: "readopt" }
  | { readonly kind: "lost_new_epoch"; readonly reason: string }
  | { readonly kind: "lost_failed"; readonly reason: string }
  | { readonly kind: "fail_closed"; readonly reason: string };

export function decideRecovery(scope: AttemptScope, evidence: RecoveryEvidence): RecoveryDecision {
  const attempt = scope.attempt;
  switch (attempt.status) {
    case "claimed":
      return decideLoss(
        attempt,
        // Stryker disable next-line StringLiteral: equivalent, a claim is lost before the barrier
        "unknown",
        "orphaned claim never crossed the start barrier",
      );
    case "starting":
    case "running": {
      if (evidence.receipt.status === "invalid")
        return { kind: "fail_closed", reason: `receipt rejected: ${evidence.receipt.reason}` };
      if (evidence.receipt.status === "valid")
        return { kind: "complete", facts: evidence.receipt.facts };
      if (evidence.journal === "invalid")
        return { kind: "fail_closed", reason: "journal record rejected" };
      // A running attempt proved it spawned: a missing journal or spawn record does not undo that.
      if (attempt.status === "starting" && evidence.journal === "absent")
        return decideLoss(
          attempt,
          "never_spawned",
          "no journal record: the process was never spawned",
        );
      if (attempt.status === "starting" && evidence.journal === "never_spawned")
        return decideLoss(
          attempt,
          "never_spawned",
          "journaled but never spawned: no spawn record and no supervisor that could still write one",
        );
      if (evidence.inspections.length < 2)
        return { kind: "fail_closed", reason: "fewer than two live inspections" };
      const [first, second] = evidence.inspections;
      // Trusted not-running evidence needs no handle: a journal from an earlier boot proves the
      // process is gone even when the runtime died before persisting the handle (ADR-0229 §3
      // accepts trusted not-running evidence; docs/ARCHITECTURE.md §16, deviation 2).
      if (first === "not_running" && second === "not_running")
        return decideLoss(
          attempt,
          // Stryker disable next-line StringLiteral: equivalent, only "never_spawned" is told apart
          "unknown",
          "trusted evidence: the exact process is not running and left no receipt",
        );
      if (attempt.pid === null || attempt.processStartTicks === null || attempt.bootId === null) {
        return { kind: "fail_closed", reason: "no persisted process handle to inspect" };
      }
      if (first === "running" && second === "running") return { kind: "readopt" };
      if (first === "changed_identity" || second === "changed_identity")
        return { kind: "fail_closed", reason: "the pid now belongs to another process" };
      if (first === "unverifiable" || second === "unverifiable")
        return { kind: "fail_closed", reason: "the platform cannot verify the process identity" };
      return {
        kind: "fail_closed",
        reason: `inconsistent inspections: ${String(first)}, ${String(second)}`,
      };
    }
    default:
      return { kind: "none" };
  }
}

/** Applies a recovery decision as one change set; `null` when nothing is written. */
export function applyRecovery(
  scope: AttemptScope,
  decision: RecoveryDecision,
  retry: RetryPolicy,
  nowMs: number,
): ChangeSet | null {
  const { run, attempt } = scope;
  switch (decision.kind) {
    case "none":
    case "readopt":
      return null;
    case "complete":
      return complete(scope, decision.facts, retry, nowMs);
    case "fail_closed": {
      // Nothing about the attempt's state changes; the reason is recorded once so it is visible
      // in `qlr status` and the API, and repeating the same decision writes nothing.
      if (attempt.error === decision.reason) return null;
      const change = new RunChange(run, nowMs);
      change.setAttempt(
        attempt,
        null,
        { error: decision.reason },
        { reason: decision.reason, status: attempt.status },
        "attempt.recovery_failed_closed",
      );
      return change.build();
    }
    case "lost_new_epoch":
    case "lost_failed":
      return applyLoss(scope, decision, retry, nowMs);
  }
}

/** A decision that the attempt is lost: before the start barrier (new epoch) or after it. */
export type LossDecision = Extract<RecoveryDecision, { kind: "lost_new_epoch" | "lost_failed" }>;

/**
 * What is proven about the process of an attempt found lost: `never_spawned` when the
 * launcher's own records prove it never started (no journal record, or a journal record with no
 * spawn record and no supervisor left that could write one); `unknown` otherwise.
 */
export type SpawnEvidence = "never_spawned" | "unknown";

/**
 * The one rule for an attempt found lost, whoever found it: the device's recovery and execution
 * control, lease expiry, a remote worker's report (ADR-0229 §3, ADR-0227 §6). An attempt that
 * provably never crossed the start barrier (still `claimed`, or `starting` and proven never
 * spawned) has no side effects: it is lost before the barrier and its step gets a new ready
 * epoch. Any other is lost after the barrier with its outcome unknown, and is never retried.
 * A `running` attempt has a recorded process, so evidence that it never spawned contradicts the
 * record: refused, so that nothing is written on it.
 */
export function decideLoss(
  attempt: RunAttempt,
  spawn: SpawnEvidence,
  reason: string,
): LossDecision {
  switch (attempt.status) {
    case "claimed":
      return { kind: "lost_new_epoch", reason };
    case "starting":
      return spawn === "never_spawned"
        ? { kind: "lost_new_epoch", reason }
        : { kind: "lost_failed", reason };
    case "running":
      if (spawn === "never_spawned")
        throw new QlrError(
          "conflict",
          `attempt ${attempt.id} is running: its process is on record, so it did spawn`,
        );
      return { kind: "lost_failed", reason };
    default:
      throw new QlrError("conflict", `attempt ${attempt.id} is already ${attempt.status}`);
  }
}

/** Applies a loss as one change set: the attempt always becomes `lost`, so there is always one. */
export function applyLoss(
  scope: AttemptScope,
  decision: LossDecision,
  retry: RetryPolicy,
  nowMs: number,
): ChangeSet {
  const { run, step, attempt } = scope;
  // Only an attempt that still holds its step's epoch (or its ordinary run's latest claim) moves
  // the step or run: a stale attempt's loss moving them again would strand the current claim.
  const holds = holdsEpoch(scope);
  const change = new RunChange(run, nowMs);
  if (decision.kind === "lost_new_epoch") {
    change.setAttempt(
      attempt,
      "lost",
      { finishedAtMs: nowMs, error: decision.reason },
      { reason: decision.reason },
    );
    if (step !== null) {
      // An orphan of an epoch the step already left is only lost.
      if (step.version !== attempt.stepRunVersion) return change.build();
      // A new ready epoch: version and digest move, attempt count and ready time stay. A claim
      // (`claimed`/`starting`) leaves its step ready at its epoch's version: anything else
      // there is a store that disagrees with itself.
      if (change.step(step).status !== "ready")
        throw new QlrError(
          "integrity",
          `step ${step.id} of orphaned attempt ${attempt.id} is ${step.status}, not ready`,
        );
      change.setStep(
        step,
        "ready",
        {},
        { reason: "new ready epoch after orphaned claim", lostAttemptId: attempt.id },
      );
    } else if (holds && run.status === "dispatching") {
      // Only an ordinary run dispatches (a workflow run is created `running`): its claim is
      // lost and the run waits in the queue again.
      change.setRunStatus("queued", { reason: decision.reason });
    }
    return change.build();
  }
  // The running path keeps its running → lost (attempt) and running → failed (step) chain.
  // The attempt crossed the start barrier and its outcome is unknown: v1 has no step-level
  // deduplication, so it is never retried automatically, whatever the task declares
  // (ADR-0227 §6). Retries of idempotent tasks cover definite failures and timeouts only.
  const current = change.setAttempt(
    attempt,
    "lost",
    { finishedAtMs: nowMs, error: decision.reason },
    { reason: decision.reason },
  );
  if (!holds) return change.build();
  if (step !== null) {
    change.setStep(
      step,
      "failed",
      { finishedAtMs: nowMs },
      { reason: decision.reason, lostAttemptId: current.id },
    );
  } else {
    finishOrdinary(change, "lost", attempt.number, retry, nowMs);
  }
  return change.build();
}

/** The longest reason an operator may give when settling an attempt. */
export const MAX_RESOLVE_REASON_LENGTH = 500;

/**
 * An operator settles an attempt that failed closed: recovery or execution control could not
 * decide from trusted evidence (no persisted handle, a rejected receipt, an identity that
 * changed) and left it `starting` or `running`, reported. The operator has looked at the host
 * and says the process is gone: the attempt becomes `lost` exactly as trusted not-running
 * evidence would make it (the step `failed`, never retried; an ordinary run `lost`), with the
 * operator's reason in its event. Cancel and the frontier then converge the run. Only such an
 * attempt may be settled this way: a healthy live attempt has evidence to go by.
 */
export function resolveFailedClosed(
  scope: AttemptScope,
  reason: string,
  retry: RetryPolicy,
  nowMs: number,
): ChangeSet {
  const { attempt } = scope;
  if (attempt.status !== "starting" && attempt.status !== "running")
    throw new QlrError(
      "conflict",
      `attempt ${attempt.id} is ${attempt.status}: only a starting or running attempt that failed closed can be resolved`,
    );
  if (attempt.error === null)
    throw new QlrError(
      "conflict",
      `attempt ${attempt.id} has not failed closed: recovery and execution control still decide it from its evidence`,
    );
  return applyLoss(
    scope,
    {
      // applyLoss takes every kind but `lost_new_epoch` as a loss after the start barrier.
      // Stryker disable next-line StringLiteral: equivalent, as the line above says
      kind: "lost_failed",
      reason: `resolved as lost by an operator: ${reason}`,
    },
    retry,
    nowMs,
  );
}
