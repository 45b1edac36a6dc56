/**
 * An exclusive directory lock: a lock file created with O_EXCL that holds the owner's pid and a
 * start marker. The file driver takes `lock` in its database directory; a runtime (`qlr serve`,
 * `qlr worker`) takes `runtime.lock` in its state dir. The lock is advisory: it keeps out other
 * processes that open the directory through this code, not a process that writes the files by
 * other means.
 *
 * A lock whose owner is gone is stale and taken over: the pid no longer exists
 * (`process.kill(pid, 0)` answers ESRCH), or it exists but belongs to another process (on
 * Linux the marker is the boot id plus the process start time from /proc, which tells a
 * reused pid, such as pid 1 in a restarted container, from the original owner). Two processes
 * taking over the same stale lock at the same instant can both succeed; the window is a few
 * system calls wide and only follows a crash.
 */
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { QlrError, errorCode } from "../../src/errors.ts";
import type { DurableFs } from "./durable-fs.ts";

/** A lock file can be seen empty between its creation and its write; its reader waits this long, this often. */
const UNREADABLE_LOCK_RETRY_MS = 50;
const UNREADABLE_LOCK_RETRIES = 3;
const ACQUIRE_ATTEMPTS = 3;

interface LockHolder {
  readonly pid: number;
  readonly startMarker: string | null;
  readonly token: string;
}

export interface HeldLock {
  readonly lockPath: string;
  /** Removes the lock file if it is still ours. Idempotent. */
  release(): void;
}

/** What a lock guards: its file's name, and the words that name the directory in an error. */
export interface LockSubject {
  readonly fileName: string;
  /** e.g. "The database at /var/lib/qlr/db". */
  readonly describe: (directory: string) => string;
}

export const DATABASE_LOCK: LockSubject = {
  fileName: "lock",
  describe: (directory) => `The database at ${directory}`,
};

/**
 * Lock files this process holds now. A lock file naming this process that is not in here was
 * left by one of its own attempts that failed half way (created, then a write or a sync
 * failed, and the removal too, as on a failing disk): it is stale like a dead holder's.
 */
const heldByThisProcess = new Set<string>();

/**
 * Takes the subject's lock file inside `directory`, or throws `storage_locked` naming the
 * holder.
 */
export async function acquireLock(
  directory: string,
  fs: DurableFs,
  subject: LockSubject,
): Promise<HeldLock> {
  const lockPath = join(directory, subject.fileName);
  const holder: LockHolder = {
    pid: process.pid,
    startMarker: processStartMarker(fs, process.pid) ?? null,
    token: randomUUID(),
  };
  for (let attempt = 0; attempt < ACQUIRE_ATTEMPTS; attempt += 1) {
    if (tryCreateLockFile(fs, lockPath, holder)) return heldLock(fs, lockPath, holder.token);
    const existing = await readHolder(fs, lockPath);
    if (existing === "missing") continue;
    if (
      existing !== "unreadable" &&
      holderIsAlive(fs, existing) &&
      !(existing.pid === process.pid && !heldByThisProcess.has(lockPath))
    ) {
      throw new QlrError(
        "storage_locked",
        `${subject.describe(directory)} is in use by process ${existing.pid} (lock file ${lockPath}). Stop that process, or remove the lock file if that process is not a qlr runtime.`,
      );
    }
    removeIfPresent(fs, lockPath);
  }
  throw new QlrError(
    "storage_locked",
    `The lock ${lockPath} kept changing hands; another process is opening the same directory.`,
  );
}

function tryCreateLockFile(fs: DurableFs, lockPath: string, holder: LockHolder): boolean {
  let fd: number;
  try {
    fd = fs.open(lockPath, "exclusive", 0o600);
  } catch (error) {
    if (errorCode(error) === "EEXIST") return false;
    throw new QlrError("storage_unavailable", `The lock file ${lockPath} could not be created.`, {
      cause: error,
    });
  }
  try {
    fs.append(fd, new TextEncoder().encode(`${JSON.stringify(holder)}\n`));
    // Synced so that a lock found after a power cut names its boot and is taken over at once,
    // instead of being read empty and waited for.
    fs.fsync(fd);
  } catch (error) {
    // An empty lock would make the next opener wait for it; a full disk is better reported now.
    fs.close(fd);
    removeIfPresent(fs, lockPath);
    throw new QlrError("storage_unavailable", `The lock file ${lockPath} could not be written.`, {
      cause: error,
    });
  }
  fs.close(fd);
  return true;
}

async function readHolder(
  fs: DurableFs,
  lockPath: string,
): Promise<LockHolder | "missing" | "unreadable"> {
  for (let attempt = 0; attempt <= UNREADABLE_LOCK_RETRIES; attempt += 1) {
    let text: string;
    try {
      text = new TextDecoder().decode(fs.readFile(lockPath));
    } catch (error) {
      if (errorCode(error) === "ENOENT") return "missing";
      throw new QlrError("storage_unavailable", `The lock file ${lockPath} could not be read.`, {
        cause: error,
      });
    }
    const holder = parseHolder(text);
    if (holder !== undefined) return holder;
    if (attempt < UNREADABLE_LOCK_RETRIES) await sleep(UNREADABLE_LOCK_RETRY_MS);
  }
  // Still empty or garbled after the owner had ample time to write it: a crash between create and write.
  return "unreadable";
}

function parseHolder(text: string): LockHolder | undefined {
  try {
    const value = JSON.parse(text) as Partial<Record<keyof LockHolder, unknown>>;
    if (typeof value.pid !== "number" || !Number.isSafeInteger(value.pid) || value.pid <= 0)
      return undefined;
    if (typeof value.token !== "string") return undefined;
    return {
      pid: value.pid,
      startMarker: typeof value.startMarker === "string" ? value.startMarker : null,
      token: value.token,
    };
  } catch {
    return undefined;
  }
}

function holderIsAlive(fs: DurableFs, holder: LockHolder): boolean {
  try {
    process.kill(holder.pid, 0);
  } catch (error) {
    // EPERM means the process exists under another user: alive.
    if (errorCode(error) === "ESRCH") return false;
  }
  const currentMarker = processStartMarker(fs, holder.pid);
  if (
    holder.startMarker !== null &&
    currentMarker !== undefined &&
    currentMarker !== holder.startMarker
  )
    return false;
  return true;
}

/**
 * Linux only: "<boot id>/<start time in clock ticks>"; undefined where /proc cannot tell. The
 * boot id comes from the file system's machine (`DurableFs.bootId`), so a lock written before
 * a power cut, real or simulated, names another boot than the one reading it.
 */
function processStartMarker(fs: DurableFs, pid: number): string | undefined {
  try {
    const bootId = fs.bootId();
    if (bootId === undefined) return undefined;
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) may contain spaces and parentheses, so count from its closing one.
    const fieldsAfterName = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // Field 22 (start time) is the 20th after the name, which ends field 2.
    const startTime = fieldsAfterName[19];
    return startTime === undefined ? undefined : `${bootId}/${startTime}`;
  } catch {
    return undefined;
  }
}

function heldLock(fs: DurableFs, lockPath: string, token: string): HeldLock {
  let released = false;
  heldByThisProcess.add(lockPath);
  return {
    lockPath,
    release(): void {
      if (released) return;
      released = true;
      heldByThisProcess.delete(lockPath);
      let text: string;
      try {
        text = new TextDecoder().decode(fs.readFile(lockPath));
      } catch {
        return;
      }
      if (parseHolder(text)?.token !== token) return;
      try {
        removeIfPresent(fs, lockPath);
      } catch {
        // A lock file left behind names this process and boot; the next opener finds it stale.
      }
    },
  };
}

function removeIfPresent(fs: DurableFs, filePath: string): void {
  try {
    fs.unlink(filePath);
  } catch (error) {
    if (errorCode(error) !== "ENOENT")
      throw new QlrError("storage_unavailable", `The file ${filePath} could not be removed.`, {
        cause: error,
      });
  }
}
