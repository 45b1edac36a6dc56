import { isQlrError } from "./errors.ts";
import {
  claimForDelivery,
  deliveryRequest,
  expireStaleClaim,
  recordDelivery,
  type DeliveryOutcome,
  type NotificationSender,
} from "./notifications.ts";
import type { Clock, Store } from "./ports.ts";
import type { StageBudget } from "./profiles.ts";

export type { NotificationSender };

/** What the stage reports into the cycle's report (the coordinator's stage context). */
export interface NotificationStageContext {
  processed: number;
  more: boolean;
  errors: { code: string; message: string; subject: string | null }[];
}

export interface NotificationStageDeps {
  readonly store: Store;
  readonly clock: Clock;
  readonly sender: NotificationSender | null;
  readonly fault: (point: "notification.after_send") => Promise<void>;
}

/**
 * The notifications stage of the cadence: at most `pageSize × pages` due outbox entries per
 * cycle. Each goes through three steps, in this order so that a crash anywhere loses nothing:
 * (1) one short transaction claims the entry (one more attempt; due again only after
 * `DELIVERY_CLAIM_MS`), (2) the sender delivers it outside any transaction, (3) one short
 * transaction records the outcome under the claim's version. A crash after (1) or (2) leaves
 * the claim to expire and the entry is sent again with the same idempotency key; a claim that
 * another coordinator took first fails its CAS and this one skips the entry. `processed`
 * counts entries whose outcome was recorded.
 */
export async function drainNotifications(
  deps: NotificationStageDeps,
  budget: StageBudget,
  context: NotificationStageContext,
): Promise<void> {
  if (deps.sender === null) return;
  for (let page = 0; page < budget.pages; page += 1) {
    const due = await deps.store.read(async (tx) =>
      tx.listDueNotifications(await tx.observe(deps.clock.nowMs()), budget.pageSize),
    );
    for (const listed of due) {
      try {
        if (await deliverOne(deps, deps.sender, listed.id)) context.processed += 1;
      } catch (error) {
        context.errors.push({
          code: isQlrError(error) ? error.code : "internal",
          message: error instanceof Error ? error.message : String(error),
          subject: listed.id,
        });
      }
    }
    if (due.length < budget.pageSize) return;
    if (page === budget.pages - 1) context.more = true;
  }
}

async function deliverOne(
  deps: NotificationStageDeps,
  sender: NotificationSender,
  id: string,
): Promise<boolean> {
  const claimed = await deps.store.transaction(async (tx) => {
    const nowMs = await tx.observe(deps.clock.nowMs());
    const entry = await tx.getNotification(id);
    if (entry === null) return null;
    const expired = expireStaleClaim(entry, nowMs);
    if (expired !== null) {
      await tx.updateNotification(expired, entry.version);
      return null;
    }
    const claim = claimForDelivery(entry, nowMs);
    if (claim === null) return null;
    await tx.updateNotification(claim, entry.version);
    return claim;
  });
  if (claimed === null) return false;
  let outcome: DeliveryOutcome;
  try {
    outcome = await sender.send(deliveryRequest(claimed));
  } catch (error) {
    // A sender reports failures as outcomes; a throw is a failure it did not foresee, worth a retry.
    outcome = {
      ok: false,
      error: error instanceof Error ? error.message : String(error),
      retryable: true,
    };
  }
  await deps.fault("notification.after_send");
  await deps.store.transaction(async (tx) => {
    const nowMs = await tx.observe(deps.clock.nowMs());
    await tx.updateNotification(recordDelivery(claimed, outcome, nowMs), claimed.version);
  });
  return true;
}
