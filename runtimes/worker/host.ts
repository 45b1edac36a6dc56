import type { Clock, SecretSource } from "../../src/ports.ts";

/**
 * The Worker's host ports. `Date.now()` in workerd is the wall clock as of the start of the
 * current event and only advances across I/O (a Spectre mitigation); the store's persisted
 * clock observation keeps what the core sees monotonic either way.
 */
export const workerClock: Clock = { nowMs: () => Date.now() };

/** Run ids: UUIDv7, the one implementation every runtime shares. */
export { uuidv7, uuidv7Ids } from "../shared/uuidv7.ts";

/** 256 random bits from Web Crypto as 64 hex digits. */
export const randomSecrets: SecretSource = {
  leaseSecret: () =>
    Array.from(crypto.getRandomValues(new Uint8Array(32)), (byte) =>
      byte.toString(16).padStart(2, "0"),
    ).join(""),
};
