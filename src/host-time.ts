import type { CompletionFacts } from "./execution.ts";
import type { ProcessHandleFacts } from "./model.ts";
import type { ReceiptEvidence } from "./recovery.ts";

/**
 * A launcher stamps its facts (a handle's start, a receipt's start and finish) with its host's
 * clock. Where store time is the database server's, the coordinator moves them onto store time
 * by the offset it measured in the same transaction (store time minus the host reading it gave
 * `observe`), so deadlines and durations compare times of one clock whatever the host's skew.
 * On a store with the host clock the offset is 0 and nothing changes.
 */
export function handleInStoreTime(
  handle: ProcessHandleFacts,
  offsetMs: number,
): ProcessHandleFacts {
  return offsetMs === 0 ? handle : { ...handle, startedAtMs: handle.startedAtMs + offsetMs };
}

export function factsInStoreTime(facts: CompletionFacts, offsetMs: number): CompletionFacts {
  if (offsetMs === 0) return facts;
  return {
    ...facts,
    startedAtMs: facts.startedAtMs + offsetMs,
    finishedAtMs: facts.finishedAtMs + offsetMs,
    ...(facts.handle === undefined ? {} : { handle: handleInStoreTime(facts.handle, offsetMs) }),
  };
}

export function receiptInStoreTime(receipt: ReceiptEvidence, offsetMs: number): ReceiptEvidence {
  return receipt.status === "valid"
    ? { status: "valid", facts: factsInStoreTime(receipt.facts, offsetMs) }
    : receipt;
}
