import { findAttemptScope } from "./attempt-scope.ts";
import { complete, type CompletionFacts } from "./execution.ts";
import { advanceFrontier } from "./frontier.ts";
import { factsInStoreTime } from "./host-time.ts";
import { wholeRunChange, type FaultHook, type PageWrite } from "./stage-pages.ts";

/**
 * A completion proved by a receipt, written by execution control (src/execution-control.ts)
 * and, when a launched process has already ended by the time its launch is recorded, by the
 * dispatch stage (src/dispatch-stage.ts) in the launch's own transaction.
 */

/** What follows a committed completion: the cycle's follow-up, and the completion's fault points. */
export interface CompletionSignals {
  readonly fault: FaultHook;
  /** The cycle recorded an outcome the next cycle acts on (`TickReport.followUp`). */
  readonly followUp: () => void;
}

/**
 * A receipt's completion of a starting or running attempt, and then, in the same transaction,
 * the frontier of its workflow run (`advanceFrontier`, the rule the frontier stage applies):
 * the steps this one unblocks become ready, and a run whose last step this was is finalized
 * by the frontier in the completion's own commit, rather than one cycle and one commit
 * later. The completion itself still leaves the run `running` (ADR-0229 §2); only the
 * frontier rule summarizes it, and it freezes a run with a cancel intent as always. Its mark
 * is cleared, as the frontier stage clears it. Null when the attempt moved on.
 */
export function completeWrite(
  attemptId: string,
  facts: CompletionFacts,
): PageWrite<{ readonly frontierAdvanced: boolean } | null> {
  return async (tx, nowMs, hostOffsetMs) => {
    const scope = await findAttemptScope(tx, attemptId);
    if (
      scope === null ||
      (scope.attempt.status !== "running" && scope.attempt.status !== "starting")
    )
      return null;
    await tx.apply(
      complete(scope, factsInStoreTime(facts, hostOffsetMs), scope.definition.retry, nowMs),
    );
    if (scope.run.kind !== "workflow") return { frontierAdvanced: false };
    const frontier = await wholeRunChange(tx, scope.run.id, advanceFrontier, nowMs);
    if (frontier !== null) await tx.apply(frontier);
    await tx.clearFrontierMark(scope.run.id);
    return { frontierAdvanced: frontier !== null };
  };
}

/** What follows a committed completion (`completeWrite`); true when there was one. */
export async function afterComplete(
  signals: CompletionSignals,
  completed: { readonly frontierAdvanced: boolean } | null,
): Promise<boolean> {
  if (completed === null) return false;
  signals.followUp();
  await signals.fault("completion.after_commit");
  // The frontier's change committed with the completion: its own crash window follows.
  if (completed.frontierAdvanced) await signals.fault("frontier.after_commit");
  return true;
}
