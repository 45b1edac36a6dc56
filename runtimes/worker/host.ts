import type { Clock, IdSource, SecretSource } from "../../src/ports.ts";

/**
 * The Worker's host ports. `Date.now()` in workerd is the wall clock as of the start of the
 * current event and only advances across I/O (a Spectre mitigation); the store's persisted
 * clock observation keeps what the core sees monotonic either way.
 */
export const workerClock: Clock = { nowMs: () => Date.now() };

/** UUIDv7 run ids from Web Crypto: time-ordered, 36 bytes, inside the portable identity pattern. */
export function uuidv7(nowMs: number = Date.now()): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  let time = nowMs;
  for (let index = 5; index >= 0; index -= 1) {
    bytes[index] = time % 256;
    time = Math.floor(time / 256);
  }
  bytes[6] = ((bytes[6] ?? 0) & 0x0f) | 0x70;
  bytes[8] = ((bytes[8] ?? 0) & 0x3f) | 0x80;
  const hex = Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export const uuidv7Ids: IdSource = { runId: () => uuidv7() };

/** 256 random bits from Web Crypto as 64 hex digits. */
export const randomSecrets: SecretSource = {
  leaseSecret: () => Array.from(crypto.getRandomValues(new Uint8Array(32)), (byte) => byte.toString(16).padStart(2, "0")).join(""),
};
