import type { NotificationSender } from "../../src/notifications.ts";
import { sendWebhook } from "../shared/webhook-sender.ts";

/**
 * The Worker's sender: webhooks through fetch. A Worker cannot run commands; applying a
 * manifest with a command notifier is refused there, so one only reaches this sender from a
 * package applied elsewhere to the same store, and it fails for good with the reason.
 */
export const workerNotificationSender: NotificationSender = {
  send(request) {
    if (request.kind === "webhook") return sendWebhook(request);
    return Promise.resolve({
      ok: false,
      error:
        "a command notifier runs only on a device (qlr serve); this runtime is a Cloudflare Worker",
      retryable: false,
    });
  },
};
