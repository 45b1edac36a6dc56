import { closeSync, existsSync, readdirSync, readFileSync, writeSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { noteStateDir } from "./supervisor-notes.ts";
import {
  SUPERVISOR_MESSAGE_MAX_BYTES,
  SUPERVISOR_STARTUP_FD,
  type StartupReport,
} from "./supervisor-protocol.ts";
import {
  NativeTaskStarter,
  NodeTaskStarter,
  SPAWNER_FILE_NAME,
  type TaskStarter,
} from "./task-starter.ts";
import type { StateLayout } from "./state-layout.ts";

/** O_CLOEXEC as /proc/<pid>/fdinfo shows it (octal `flags:`), on every Linux architecture Node runs on. */
const O_CLOEXEC_FLAG = 0o2000000;

/**
 * Closes every descriptor above 2 that would survive exec. Node opens all of its own with
 * close-on-exec, and at start-up marks the low inherited ones too, but a descriptor inherited
 * above a gap (fd 40 from a service manager, a shell's `exec 9>file`, a leaked socket) stays
 * inheritable and would reach every task, which could then read or write whatever it names.
 * Run once at start-up: every descriptor the supervisor opens later is close-on-exec.
 */
export function closeInheritableDescriptors(keep: number): void {
  let entries: string[];
  try {
    entries = readdirSync("/proc/self/fd");
  } catch {
    return;
  }
  for (const entry of entries) {
    const fd = Number(entry);
    if (!Number.isInteger(fd) || fd <= 2 || fd === keep) continue;
    let flags: number;
    try {
      const match = /^flags:\s+([0-7]+)$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, "utf8"));
      if (match?.[1] === undefined) continue;
      flags = Number.parseInt(match[1], 8);
    } catch {
      continue;
    }
    if ((flags & O_CLOEXEC_FLAG) !== 0) continue;
    try {
      closeSync(fd);
    } catch {
      // Already closed.
    }
  }
}

/**
 * The native spawner beside this bundle when it is there, safe, and starts; otherwise Node's
 * spawn. A missing binary is the normal no-compiler build and is not noted; one that exists but
 * is refused or fails to start is noted in the state directory.
 */
export async function chooseTaskStarter(
  layout: StateLayout,
  onSpawnerDeath: (reason: string) => void,
): Promise<TaskStarter> {
  const path = fileURLToPath(new URL(`./${SPAWNER_FILE_NAME}`, import.meta.url));
  if (!existsSync(path)) return new NodeTaskStarter();
  const native = await NativeTaskStarter.launch(path, SUPERVISOR_MESSAGE_MAX_BYTES, onSpawnerDeath);
  if (typeof native !== "string") return native;
  noteStateDir(layout, `using Node's spawn: ${native}`);
  return new NodeTaskStarter();
}

export function sendStartupReport(report: StartupReport): void {
  try {
    writeSync(SUPERVISOR_STARTUP_FD, `${JSON.stringify(report)}\n`);
  } catch {
    // Started by hand, or the starter is gone: the socket is the way in either way.
  }
  try {
    closeSync(SUPERVISOR_STARTUP_FD);
  } catch {
    // Never open.
  }
}
