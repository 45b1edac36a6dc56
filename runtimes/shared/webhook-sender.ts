import { errorMessage } from "../../src/errors.ts";
import type { DeliveryOutcome, DeliveryRequest } from "../../src/notifications.ts";

/** A webhook's answer is awaited this long before the attempt counts as failed. */
export const WEBHOOK_TIMEOUT_MS = 10_000;

/**
 * A webhook answer that says "try later" (a timeout, too many requests, a server error) is
 * retried; any other refusal (400, 401, 404…) would be refused again and is final.
 */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 425 || status === 429 || status >= 500;
}

/** POSTs one alert (every runtime with fetch: the device and the Cloudflare Worker). */
export async function sendWebhook(
  request: Extract<DeliveryRequest, { kind: "webhook" }>,
  timeoutMs = WEBHOOK_TIMEOUT_MS,
): Promise<DeliveryOutcome> {
  let response: Response;
  try {
    // Redirects are not followed: a signed alert goes to the URL the manifest names, nowhere else.
    response = await fetch(request.url, {
      method: "POST",
      headers: request.headers,
      body: request.body,
      redirect: "manual",
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (error) {
    return {
      ok: false,
      error: `POST ${request.url} failed: ${errorMessage(error)}`,
      retryable: true,
    };
  }
  // The body is not needed; dropping it frees the connection.
  await response.body?.cancel().catch(() => undefined);
  if (response.status >= 200 && response.status < 300) return { ok: true };
  return {
    ok: false,
    error: `POST ${request.url} answered ${response.status}`,
    retryable: isRetryableStatus(response.status),
  };
}
