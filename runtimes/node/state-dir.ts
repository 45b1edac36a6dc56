import { chmod, lstat, mkdir } from "node:fs/promises";
import { QlrError } from "../../src/errors.ts";
import { nodeDurableFs } from "../../storage/node/durable-fs.ts";
import { acquireLock } from "../../storage/node/lock.ts";
import type { HeldLock, LockSubject } from "../../storage/node/lock.ts";

/**
 * The state dir holds the token, the receipt key, the database, journals, receipts and logs:
 * only the runtime's user may enter it. At start-up:
 * - missing: created 0700;
 * - not a directory, or a symbolic link: refused (a planted link could move the state anywhere);
 * - owned by another user: refused (that user could swap the key or read every secret);
 * - group or other bits set: tightened to 0700, and the caller reports it. Tightening rather
 *   than refusing keeps an upgrade from an older version (which left 0755 directories behind)
 *   working, and the directory's owner is the runtime's user, so nothing is taken from anyone
 *   who was entitled to it.
 * Files and directories created inside are 0600 and 0700 by their writers.
 */
export async function secureStateDir(
  stateDir: string,
): Promise<{ tightenedFromMode: number | null }> {
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  const stats = await lstat(stateDir);
  if (stats.isSymbolicLink())
    throw new QlrError(
      "invalid_request",
      `state dir ${stateDir} is a symbolic link; give the directory itself`,
    );
  if (!stats.isDirectory())
    throw new QlrError("invalid_request", `state dir ${stateDir} is not a directory`);
  const uid = process.getuid?.() ?? stats.uid;
  if (stats.uid !== uid)
    throw new QlrError(
      "invalid_request",
      `state dir ${stateDir} belongs to uid ${stats.uid}, not to this runtime's uid ${uid}; another user could read or replace its secrets`,
    );
  const mode = stats.mode & 0o777;
  if ((mode & 0o077) === 0) return { tightenedFromMode: null };
  await chmod(stateDir, 0o700);
  return { tightenedFromMode: mode };
}

export function describeTightened(stateDir: string, mode: number): string {
  return `state dir ${stateDir} had mode ${mode.toString(8)}; tightened to 700 (it holds the token, the receipt key and every log)`;
}

const STATE_DIR_LOCK: LockSubject = {
  fileName: "runtime.lock",
  describe: (directory) => `The state dir ${directory}`,
};

/**
 * One runtime process per state dir, `qlr serve` or `qlr worker`: the launcher's journals,
 * spawn records and receipts, a worker's lease files and the supervisor's socket all assume
 * one owner. A worker judges a lease with no journal as never spawned because its own launches
 * and its own look at the journal never overlap; a second worker launching into the same
 * directory would make that judgement false and a task could run twice. The lock is taken
 * after the directory is secured and released at stop; a SIGKILLed owner's lock is stale and
 * taken over (storage/node/lock.ts).
 */
export function lockStateDir(stateDir: string): Promise<HeldLock> {
  return acquireLock(stateDir, nodeDurableFs, STATE_DIR_LOCK);
}
