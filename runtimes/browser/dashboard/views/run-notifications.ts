/// <reference lib="dom" />
import { isUnauthorized, type QlrClient } from "../../../http/client.ts";
import type { NotificationView } from "../../../http/contract.ts";
import { card, dataTable, h, type Child } from "../../shared/dom.ts";
import { formatTime } from "../../shared/format.ts";

/** The alerts the run page lists: a run has one per notifier and event, so one page holds them. */
const RUN_NOTIFICATIONS = 50;

/** A run's alerts (`GET /notifications?run=`); null when they could not be read (the section says so). */
export async function loadRunNotifications(
  client: QlrClient,
  runId: string,
): Promise<readonly NotificationView[] | null> {
  try {
    return (await client.notifications({ run: runId, limit: RUN_NOTIFICATIONS })).notifications;
  } catch (error) {
    if (isUnauthorized(error)) throw error;
    return null;
  }
}

function target(entry: NotificationView): string {
  return entry.notifier.kind === "webhook" ? entry.notifier.url : entry.notifier.argv.join(" ");
}

/** The run page's alerts section: nothing for a run that alerted nobody. */
export function renderRunNotifications(entries: readonly NotificationView[] | null): Child {
  if (entries !== null && entries.length === 0) return null;
  return card(
    "Notifications",
    "notifications-title",
    entries === null
      ? h("p", { class: "empty" }, "Could not read this run's notifications.")
      : dataTable(
          { id: "notifications-table" },
          ["Event", "Step", "Notifier", "State", "Attempts", "When", "Last error"],
          h(
            "tbody",
            {},
            entries.map((entry) =>
              h(
                "tr",
                { "data-notification": entry.id, "data-state": entry.state },
                h("td", { class: "mono" }, entry.event),
                h("td", {}, entry.step ?? "—"),
                h("td", { class: "mono" }, target(entry)),
                h("td", {}, entry.state),
                h("td", { class: "num" }, String(entry.attempts)),
                h(
                  "td",
                  { class: "num" },
                  entry.state === "delivered"
                    ? `sent ${formatTime(entry.deliveredAtMs)}`
                    : entry.state === "pending"
                      ? `next try ${formatTime(entry.nextAttemptAtMs)}`
                      : "gave up",
                ),
                h("td", { class: "error" }, entry.lastError ?? ""),
              ),
            ),
          ),
        ),
  );
}
