import { readFileSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { errorCode } from "../../../src/errors.ts";

/**
 * Linux /proc helpers. A process is identified by pid + start time (field 22 of
 * /proc/<pid>/stat, in clock ticks since boot) + boot id: a pid alone is recycled, and start
 * ticks restart at every boot.
 */

export const DEFAULT_PROC_ROOT = "/proc";

export interface ProcStat {
  /** Field 3: R, S, D, Z (zombie: exited, not yet reaped), X, T, … */
  readonly state: string;
  readonly parentPid: number;
  readonly processGroupId: number;
  /** Field 22, kept as decimal text: it is compared, never computed with. */
  readonly startTicks: string;
}

/**
 * Parses /proc/<pid>/stat. Field 2 is the command name in parentheses and may itself hold
 * spaces and parentheses ("a) b (c"), so the fixed fields are read after the LAST ')'.
 */
export function parseProcStat(text: string): ProcStat | null {
  const commandEnd = text.lastIndexOf(")");
  if (commandEnd < 0) return null;
  // After ") " the fields start at field 3; field N is at index N - 3.
  const fields = text
    .slice(commandEnd + 1)
    .trim()
    .split(/\s+/);
  const state = fields[0];
  const parentPid = Number(fields[1]);
  const processGroupId = Number(fields[2]);
  const startTicks = fields[22 - 3];
  if (state === undefined || !/^[A-Za-z]$/.test(state)) return null;
  if (!Number.isSafeInteger(parentPid) || !Number.isSafeInteger(processGroupId)) return null;
  if (startTicks === undefined || !/^[0-9]+$/.test(startTicks)) return null;
  return { state, parentPid, processGroupId, startTicks };
}

export type ProcStatReading =
  | { readonly kind: "present"; readonly stat: ProcStat }
  | { readonly kind: "absent" }
  | { readonly kind: "unreadable"; readonly reason: string };

function statPath(procRoot: string, pid: number): string {
  return `${procRoot}/${pid}/stat`;
}

function classifyStat(text: string): ProcStatReading {
  const stat = parseProcStat(text);
  return stat === null
    ? { kind: "unreadable", reason: "unparseable /proc stat line" }
    : { kind: "present", stat };
}

function classifyError(error: unknown): ProcStatReading {
  const code = errorCode(error);
  // ESRCH shows up when the process exits between open and read.
  if (code === "ENOENT" || code === "ESRCH") return { kind: "absent" };
  return { kind: "unreadable", reason: `reading /proc failed: ${code ?? String(error)}` };
}

export async function readProcStat(
  pid: number,
  procRoot: string = DEFAULT_PROC_ROOT,
): Promise<ProcStatReading> {
  try {
    return classifyStat(await readFile(statPath(procRoot, pid), "utf8"));
  } catch (error) {
    return classifyError(error);
  }
}

/**
 * The synchronous reading: the supervisor's right after spawn (it runs before the event loop can
 * reap the child, so even a task that exits at once still has its /proc entry), and the
 * launcher's identity checks (a /proc read is answered from kernel memory in microseconds; the
 * asynchronous one costs four thread-pool round trips, between which the runtime's event loop
 * serves whatever else waits, once per running attempt in every cycle of execution control).
 */
export function readProcStatSync(
  pid: number,
  procRoot: string = DEFAULT_PROC_ROOT,
): ProcStatReading {
  try {
    return classifyStat(readFileSync(statPath(procRoot, pid), "utf8"));
  } catch (error) {
    return classifyError(error);
  }
}

const BOOT_ID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * The boot id as a launcher reads it: once. A process cannot outlive its boot (a reboot ends
 * it), so the first reading that finds an id holds for the process's life and every later launch
 * and identity check answers from memory; a reading that finds none is tried again next time.
 */
export function bootIdOnce(procRoot: string = DEFAULT_PROC_ROOT): () => Promise<string | null> {
  let known: string | null = null;
  return async () => (known ??= await readBootId(procRoot));
}

/** The kernel's random boot id; null when /proc is missing or does not hold one (not Linux). */
export async function readBootId(procRoot: string = DEFAULT_PROC_ROOT): Promise<string | null> {
  try {
    const text = (await readFile(`${procRoot}/sys/kernel/random/boot_id`, "utf8")).trim();
    return BOOT_ID_PATTERN.test(text) ? text : null;
  } catch {
    return null;
  }
}

/** True when the exact process (pid and start ticks) exists and has not exited. */
export async function isAlive(
  pid: number,
  startTicks: string,
  procRoot: string = DEFAULT_PROC_ROOT,
): Promise<boolean> {
  const reading = await readProcStat(pid, procRoot);
  return (
    reading.kind === "present" &&
    reading.stat.startTicks === startTicks &&
    !isExitedState(reading.stat.state)
  );
}

/** Z is a zombie (exited, waiting for its parent to reap it); X is dead. Neither runs code again. */
export function isExitedState(state: string): boolean {
  return state === "Z" || state === "X";
}

/**
 * The live members of a process group, found by scanning /proc. Used by diagnostics and tests;
 * the scan is bounded by the number of processes on the machine.
 */
export async function listProcessGroupMembers(
  processGroupId: number,
  procRoot: string = DEFAULT_PROC_ROOT,
): Promise<number[]> {
  const members: number[] = [];
  for (const entry of await readdir(procRoot)) {
    if (!/^[0-9]+$/.test(entry)) continue;
    const pid = Number(entry);
    const reading = await readProcStat(pid, procRoot);
    if (
      reading.kind === "present" &&
      reading.stat.processGroupId === processGroupId &&
      !isExitedState(reading.stat.state)
    )
      members.push(pid);
  }
  return members;
}
