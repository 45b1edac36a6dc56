/**
 * UUIDv7 run ids for every runtime: time-ordered, 36 bytes, inside the portable identity
 * pattern. Web Crypto's `getRandomValues` exists in Node (20 and later), workerd and browsers,
 * so the device and the Worker draw their ids from this one function.
 */
import type { IdSource } from "../../src/ports.ts";

/** Two hex digits per byte value. */
const HEX_OF_BYTE = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, "0"));
/** Ids drawn from one call to `getRandomValues`: one call per id was ≈ 0.6 % of serve's CPU per run. */
const IDS_PER_DRAW = 256;
let randomPool = new Uint8Array(0);
let randomOffset = 0;

function sixteenRandomBytes(): Uint8Array {
  if (randomOffset + 16 > randomPool.length) {
    randomPool = crypto.getRandomValues(new Uint8Array(16 * IDS_PER_DRAW));
    randomOffset = 0;
  }
  // Each slice is handed out once, so writing the time into it touches no other id.
  const bytes = randomPool.subarray(randomOffset, randomOffset + 16);
  randomOffset += 16;
  return bytes;
}

export function uuidv7(nowMs: number = Date.now()): string {
  const bytes = sixteenRandomBytes();
  let time = nowMs;
  // The first 48 bits are the time in milliseconds, big-endian.
  for (let index = 5; index >= 0; index -= 1) {
    bytes[index] = time % 256;
    time = Math.floor(time / 256);
  }
  bytes[6] = ((bytes[6] ?? 0) & 0x0f) | 0x70;
  bytes[8] = ((bytes[8] ?? 0) & 0x3f) | 0x80;
  let hex = "";
  for (const byte of bytes) hex += HEX_OF_BYTE[byte] ?? "";
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export const uuidv7Ids: IdSource = { runId: () => uuidv7() };
