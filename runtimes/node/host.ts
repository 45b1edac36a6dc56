import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import type { Clock, SecretSource } from "../../src/ports.ts";
import { sqlJsWasmMemoryBytes } from "../../storage/sqljs/node/wasm-memory.ts";

/** The host's wall clock, the only place the Node runtime reads it for the core. */
export const systemClock: Clock = { nowMs: () => Date.now() };

/** Run ids: UUIDv7, the one implementation every runtime shares. */
export { uuidv7, uuidv7Ids } from "../shared/uuidv7.ts";

/** 256 random bits as 43 base64url characters. */
export const randomSecrets: SecretSource = {
  leaseSecret: () => randomBytes(32).toString("base64url"),
};

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
  return {
    rss: usage.rss,
    peak_rss: peakRss,
    heap_used: usage.heapUsed,
    heap_total: usage.heapTotal,
    external: usage.external,
    array_buffers: usage.arrayBuffers,
    wasm: sqlJsWasmMemoryBytes(),
  };
}
