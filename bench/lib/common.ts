/**
 * Shared helpers for the bench children: the configuration handed over by the orchestrator,
 * the result file, percentiles, /proc readings, the manifests and the simulated world. Bench
 * code only measures: it never asserts, and it changes nothing in src/ or storage/.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { performance } from "node:perf_hooks";

export type StoreKind = "sqljs-memory" | "sqljs-file" | "pglite" | "pg";
export const STORE_KINDS: readonly StoreKind[] = ["sqljs-memory", "sqljs-file", "pglite", "pg"];

export function isStoreKind(value: unknown): value is StoreKind {
  return typeof value === "string" && (STORE_KINDS as readonly string[]).includes(value);
}

/** The virtual epoch every bench starts at (2027-01-15), far from any real clock. */
export const BENCH_START_MS = 1_800_000_000_000;

/** Reads the JSON configuration the orchestrator passes in `QLR_BENCH_CONFIG`. */
export function readConfig<T>(): T {
  const text = process.env.QLR_BENCH_CONFIG;
  if (text === undefined || text === "")
    throw new Error("QLR_BENCH_CONFIG is not set: run the benches through bench/run.mjs");
  return JSON.parse(text) as T;
}

/** Writes the child's result where the orchestrator reads it (`QLR_BENCH_OUT`), or prints it. */
export function writeResult(result: unknown): void {
  const text = `${JSON.stringify(result, null, 2)}\n`;
  const out = process.env.QLR_BENCH_OUT;
  if (out === undefined || out === "") process.stdout.write(text);
  else writeFileSync(out, text);
}

export function log(message: string): void {
  process.stderr.write(`  ${message}\n`);
}

export interface LatencySummary {
  readonly count: number;
  readonly p50Ms: number;
  readonly p95Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  readonly meanMs: number;
  readonly minMs: number;
}

/** Nearest-rank percentile over an ascending array. */
export function percentile(sorted: readonly number[], fraction: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.max(1, Math.ceil(fraction * sorted.length));
  return sorted[Math.min(sorted.length, rank) - 1] ?? Number.NaN;
}

export function summarize(samples: readonly number[]): LatencySummary {
  const sorted = [...samples].sort((a, b) => a - b);
  const total = sorted.reduce((sum, value) => sum + value, 0);
  return {
    count: sorted.length,
    p50Ms: round(percentile(sorted, 0.5)),
    p95Ms: round(percentile(sorted, 0.95)),
    p99Ms: round(percentile(sorted, 0.99)),
    maxMs: round(sorted[sorted.length - 1] ?? Number.NaN),
    minMs: round(sorted[0] ?? Number.NaN),
    meanMs: round(sorted.length === 0 ? Number.NaN : total / sorted.length),
  };
}

export function round(value: number, digits = 4): number {
  if (!Number.isFinite(value)) return value;
  const factor = 10 ** digits;
  return Math.round(value * factor) / factor;
}

export const now = (): number => performance.now();

/** `value / units`, rounded; null when there is no value or no unit of work. */
export function perUnit(
  value: number | null | undefined,
  units: number,
  digits = 1,
): number | null {
  if (value === null || value === undefined || units === 0) return null;
  return round(value / units, digits);
}

/** `/proc/self/io`: syscall-level (`wchar`) and block-layer (`write_bytes`, page granular) counters. */
interface ProcIo {
  readonly rchar: number;
  readonly wchar: number;
  readonly syscw: number;
  readonly readBytes: number;
  readonly writeBytes: number;
  readonly cancelledWriteBytes: number;
}

function readProcIo(): ProcIo | null {
  let text: string;
  try {
    text = readFileSync("/proc/self/io", "utf8");
  } catch {
    return null;
  }
  const values = new Map<string, number>();
  for (const line of text.split("\n")) {
    const [key, value] = line.split(":");
    if (key !== undefined && value !== undefined) values.set(key.trim(), Number(value.trim()));
  }
  return {
    rchar: values.get("rchar") ?? 0,
    wchar: values.get("wchar") ?? 0,
    syscw: values.get("syscw") ?? 0,
    readBytes: values.get("read_bytes") ?? 0,
    writeBytes: values.get("write_bytes") ?? 0,
    cancelledWriteBytes: values.get("cancelled_write_bytes") ?? 0,
  };
}

function ioDelta(before: ProcIo | null, after: ProcIo | null): ProcIo | null {
  if (before === null || after === null) return null;
  return {
    rchar: after.rchar - before.rchar,
    wchar: after.wchar - before.wchar,
    syscw: after.syscw - before.syscw,
    readBytes: after.readBytes - before.readBytes,
    writeBytes: after.writeBytes - before.writeBytes,
    cancelledWriteBytes: after.cancelledWriteBytes - before.cancelledWriteBytes,
  };
}

/** What the process wrote per unit of work (null where `/proc/self/io` cannot be read). */
export interface ProcIoPerUnit {
  readonly wchar: number | null;
  readonly writeBytes: number | null;
  readonly syscw: number | null;
}

/**
 * Reads `/proc/self/io` now; `writtenPer(units)` reads it again and gives what the process
 * wrote in between, per unit of the work done in between.
 */
export function startProcIoMeter(): { writtenPer(units: number): ProcIoPerUnit } {
  const before = readProcIo();
  return {
    writtenPer: (units) => {
      const io = ioDelta(before, readProcIo());
      return {
        wchar: perUnit(io?.wchar, units),
        writeBytes: perUnit(io?.writeBytes, units),
        syscw: perUnit(io?.syscw, units, 2),
      };
    },
  };
}

/** `/proc/self/status` memory lines in bytes: VmHWM (peak RSS) and VmRSS. */
export function readProcStatus(): { vmHwmBytes: number; vmRssBytes: number } | null {
  let text: string;
  try {
    text = readFileSync("/proc/self/status", "utf8");
  } catch {
    return null;
  }
  const field = (name: string): number => {
    const match = new RegExp(`^${name}:\\s+(\\d+)\\s+kB`, "m").exec(text);
    return match?.[1] === undefined ? Number.NaN : Number(match[1]) * 1024;
  };
  return { vmHwmBytes: field("VmHWM"), vmRssBytes: field("VmRSS") };
}

/** The benches run the tests' manifests, so a bench and a test speak of the same workflow. */
export { diamondManifest, task, wideManifest } from "../../test/support/fixtures.ts";

/** Portable, sortable run ids (`^[A-Za-z0-9][A-Za-z0-9._:-]{0,35}$`). */
export class BenchIds {
  private next = 0;
  constructor(private readonly prefix: string) {}
  runId(): string {
    this.next += 1;
    return `${this.prefix}-${String(this.next).padStart(7, "0")}`;
  }
}
