/** Bounded waits: polling a probe, and racing a promise against a timeout. */
import { setTimeout as sleep } from "node:timers/promises";

/** The default polling interval of every wait (the device suites poll /proc and the API this often). */
export const POLL_MS = 50;

/** Polls every `intervalMs` until the probe returns a value (not null/undefined/false), or fails after the timeout. */
export async function waitFor<T>(
  description: string,
  probe: () => Promise<T | null | undefined | false> | T | null | undefined | false,
  timeoutMs = 20_000,
  intervalMs = POLL_MS,
): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  let lastError: unknown = null;
  for (;;) {
    try {
      const value = await probe();
      if (value !== null && value !== undefined && value !== false) return value;
    } catch (error) {
      lastError = error;
    }
    if (performance.now() > deadline) {
      const cause =
        lastError === null
          ? ""
          : ` (last error: ${lastError instanceof Error ? lastError.message : JSON.stringify(lastError)})`;
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${description}${cause}`);
    }
    await sleep(intervalMs);
  }
}

/** Resolves with the promise's value, or fails after the timeout. */
export async function within<T>(
  description: string,
  promise: Promise<T>,
  timeoutMs: number,
): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${description}`)),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
