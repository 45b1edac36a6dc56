/**
 * What the launcher bench reads of the processes it measures, from /proc: which process is the
 * state directory's supervisor and which its native spawner, the CPU each has used, its private
 * memory, and the load average.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { round } from "./common.ts";

const KIB = 1024;

/** The resident supervisor's pid, from any spawn record of the state dir. */
export function supervisorPid(stateDir: string): number | null {
  const spawns = join(stateDir, "spawns");
  if (!existsSync(spawns)) return null;
  for (const name of readdirSync(spawns)) {
    // Records created together share one file, a line each.
    const [line] = readFileSync(join(spawns, name), "utf8").split("\n");
    const parsed = JSON.parse(line ?? "") as { supervisorPid?: number };
    if (typeof parsed.supervisorPid === "number") return parsed.supervisorPid;
  }
  return null;
}

export function childrenOf(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(fields[1]) === pid) children.push(Number(entry));
    } catch {
      // Gone.
    }
  }
  return children;
}

/**
 * The supervisor's native task spawner (qlr-spawner, its child), or null when the supervisor
 * starts tasks with Node's spawn. With it, the tasks are the spawner's children, reaped by it.
 */
export function spawnerPidOf(supervisor: number): number | null {
  for (const child of childrenOf(supervisor)) {
    try {
      if (readFileSync(`/proc/${child}/comm`, "utf8").trim() === "qlr-spawner") return child;
    } catch {
      // Gone.
    }
  }
  return null;
}

/** Clock ticks per second of /proc/<pid>/stat's times (USER_HZ: 100 on every Linux Node runs on). */
const CLOCK_TICKS_PER_SECOND = 100;

/**
 * CPU time of a process from /proc/<pid>/stat, ms: its own (utime + stime, every thread) and
 * that of its children it has reaped (cutime + cstime: the supervisor's tasks). Zeros when the
 * process is gone.
 */
export function cpuOf(pid: number): { ownMs: number; reapedChildrenMs: number } {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // After the command name: field 3 (state) is index 0, so utime (14) is index 11.
    const ticks = (index: number): number => Number(fields[index] ?? 0);
    const toMs = (value: number): number => (value * 1000) / CLOCK_TICKS_PER_SECOND;
    return {
      ownMs: toMs(ticks(11) + ticks(12)),
      reapedChildrenMs: toMs(ticks(13) + ticks(14)),
    };
  } catch {
    return { ownMs: 0, reapedChildrenMs: 0 };
  }
}

/** CPU ms per unit of work, by process, between two readings. */
export function cpuPerUnit(
  units: number,
  parts: Record<string, { before: number; after: number }>,
): Record<string, number> {
  const result: Record<string, number> = {};
  let total = 0;
  for (const [name, { before, after }] of Object.entries(parts)) {
    result[name] = round((after - before) / units, 2);
    total += after - before;
  }
  result.total = round(total / units, 2);
  return result;
}

export function loadAverage1m(): number {
  return Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]);
}

/** Private_Clean + Private_Dirty and Pss of a process, bytes. */
export function privateBytes(pid: number): {
  privateBytes: number;
  pssBytes: number;
  rssBytes: number;
} {
  const text = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
  const field = (name: string): number =>
    Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? Number.NaN) * KIB;
  return {
    privateBytes: field("Private_Clean") + field("Private_Dirty"),
    pssBytes: field("Pss"),
    rssBytes: field("Rss"),
  };
}
