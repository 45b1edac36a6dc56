import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import type { Clock, IdSource, SecretSource } from "../../src/ports.ts";
import { sqlJsWasmMemoryBytes } from "../../storage/sqljs/node/wasm-memory.ts";

/** The host's wall clock, the only place the Node runtime reads it for the core. */
export const systemClock: Clock = { nowMs: () => Date.now() };

/** UUIDv7 run ids: time-ordered, 36 bytes, inside the portable identity pattern. */
export function uuidv7(nowMs: number = Date.now()): string {
  const bytes = randomBytes(16);
  const time = BigInt(nowMs);
  for (let index = 0; index < 6; index += 1) bytes[index] = Number((time >> BigInt(8 * (5 - index))) & 0xffn);
  bytes[6] = ((bytes[6] ?? 0) & 0x0f) | 0x70;
  bytes[8] = ((bytes[8] ?? 0) & 0x3f) | 0x80;
  const hex = bytes.toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export const uuidv7Ids: IdSource = { runId: () => uuidv7() };

/** 256 random bits as 43 base64url characters. */
export const randomSecrets: SecretSource = { leaseSecret: () => randomBytes(32).toString("base64url") };

/**
 * The process's memory by kind, in bytes, for `GET /metrics`: `rss` and `peak_rss` (VmHWM,
 * Linux only) from the kernel, V8's heap and external memory, and sql.js's WebAssembly memory
 * when that store is loaded. Read only when metrics are scraped.
 */
export function processMemory(): Record<string, number | null> {
  const usage = process.memoryUsage();
  let peakRss: number | null = null;
  try {
    const match = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync("/proc/self/status", "utf8"));
    if (match?.[1] !== undefined) peakRss = Number(match[1]) * 1024;
  } catch {
    // Not Linux: no peak from the kernel.
  }
  return { rss: usage.rss, peak_rss: peakRss, heap_used: usage.heapUsed, heap_total: usage.heapTotal, external: usage.external, array_buffers: usage.arrayBuffers, wasm: sqlJsWasmMemoryBytes() };
}
