import { createHash } from "node:crypto";
import { chmod, lchown, lstat, mkdir, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { errorCode } from "../../../src/errors.ts";
import { assertPortableId } from "../../../src/identity.ts";

/**
 * The `$QLR_NEEDS` and `$QLR_OUTPUT` files of a task run as another user (`user:`).
 *
 * A task run as the runtime's own user finds them under the state dir (`<stateDir>/outputs/`),
 * which is 0700: another user can reach nothing there, and the state dir must stay closed to
 * it (key, token, database, other tasks' logs). So these files live in a folder of their own
 * outside it, under the system's temporary folder, which every user can reach:
 *
 * ```
 * <tmp>/qlr-task-files-<sha256(stateDir) prefix>/   runtime's user, 0711: reachable, not listable
 * └─ <attemptId>/                                   the task's user while it runs, 0700
 *    ├─ needs.json                                  written by the runtime before the chown
 *    └─ output.json                                 written by the task
 * ```
 *
 * - The root is the runtime's: it is created 0711 and checked at every use (a directory, not a
 *   link, owned by the runtime's user, writable by nobody else), so no other user can plant an
 *   entry in it; a folder squatted by another user fails the launch with a spawn error naming
 *   it. Its parent must be sticky or closed to others (so the root cannot be renamed away).
 * - An attempt's folder is created, its needs file written, and only then is it chowned to the
 *   task's uid and gid: the runtime never writes into a folder the task user owns.
 * - When the task has ended (or failed to spawn), the supervisor takes the folder back
 *   (`reclaimTaskFiles`: chowned to the runtime's user, 0700) before it reads the output, so a
 *   finished attempt's needs and output are closed to every task user, and nothing the task
 *   left behind can change while it is read or removed. The output is opened without
 *   following a link and accepted only when it is a regular file with one name, owned by the
 *   task's uid (`readTaskOutput` with `ownerUid`): a link or hard link to a root file is never
 *   read.
 * - The name is derived from the state dir, so a restarted runtime finds the same folders;
 *   retention removes an attempt's folder with its other files (`removeTaskFiles`).
 *
 * Tasks of one user are not separated from each other while they run (one uid can signal and
 * trace another process of the same uid and read its environment): run tasks that must not see
 * each other under different users.
 */
export interface UserTaskFiles {
  /** `userTaskFilesDir(root, attemptId)`: the launcher refuses any other folder. */
  readonly dir: string;
  /** The `$QLR_NEEDS` file's whole text. */
  readonly needsText: string;
}

export const USER_TASK_NEEDS_FILE = "needs.json";
export const USER_TASK_OUTPUT_FILE = "output.json";
/** The root folder's mode: others may pass through it to their own folder, never list it. */
const ROOT_MODE = 0o711;

/** The root of a state dir's user-task folders, in the system's temporary folder by default. */
export function userTaskFilesRoot(stateDir: string, temporaryDir: string = tmpdir()): string {
  const digest = createHash("sha256").update(resolve(stateDir), "utf8").digest("hex");
  return join(temporaryDir, `qlr-task-files-${digest.slice(0, 24)}`);
}

export function userTaskFilesDir(root: string, attemptId: string): string {
  return join(root, assertPortableId(attemptId, "attemptId"));
}

function ownIds(): { uid: number; gid: number } {
  return { uid: process.getuid?.() ?? -1, gid: process.getgid?.() ?? -1 };
}

/**
 * Creates the root when missing and checks it and its parent; the reason it may not be used,
 * or null. Run at every use: a temporary folder may be cleaned while the runtime runs.
 */
async function ensureRoot(root: string): Promise<string | null> {
  // Followed if a link (a system's /tmp may be one): only its owner could replace it.
  const parent = await stat(dirname(root));
  const ownUid = ownIds().uid;
  if (!parent.isDirectory()) return `${dirname(root)} is not a directory`;
  if ((parent.mode & 0o022) !== 0 && (parent.mode & 0o1000) === 0)
    return `${dirname(root)} is writable by group or others and not sticky: the task files folder could be replaced`;
  try {
    await mkdir(root, { mode: ROOT_MODE });
  } catch (error) {
    if (errorCode(error) !== "EEXIST") throw error;
  }
  const stats = await lstat(root);
  if (!stats.isDirectory()) return `${root} is not a directory`;
  if (stats.uid !== ownUid)
    return `${root} belongs to uid ${stats.uid}, not to the runtime's uid ${ownUid}`;
  if ((stats.mode & 0o022) !== 0)
    return `${root} is writable by group or others (mode ${(stats.mode & 0o777).toString(8)})`;
  // The umask may have taken the execute bits that let the task user pass through.
  if ((stats.mode & 0o7777) !== ROOT_MODE) await chmod(root, ROOT_MODE);
  return null;
}

/**
 * Why the task's user cannot pass through `directory` and every folder above it (the task would
 * only meet "permission denied" at its first read of `$QLR_NEEDS`), or null when it can.
 */
async function unreachableBy(
  directory: string,
  account: { readonly uid: number; readonly gid: number },
): Promise<string | null> {
  for (let path = directory; ; path = dirname(path)) {
    const { mode, uid, gid } = await stat(path);
    const searchBit = account.uid === uid ? 0o100 : account.gid === gid ? 0o010 : 0o001;
    if ((mode & searchBit) === 0)
      return `${path} (mode ${(mode & 0o777).toString(8)}) cannot be passed through by uid ${account.uid}`;
    if (dirname(path) === path) return null;
  }
}

/**
 * Makes the attempt's folder in `root`, writes its needs file, then gives the folder to the
 * task's user. Called after the journal: the reason it failed (a spawn failure of the attempt),
 * or null. A folder that exists already is refused: only a launch makes one, after its journal.
 */
export async function placeTaskFiles(
  root: string,
  files: UserTaskFiles,
  account: { readonly uid: number; readonly gid: number },
): Promise<string | null> {
  try {
    const unusable = (await ensureRoot(root)) ?? (await unreachableBy(root, account));
    if (unusable !== null) return `the task files folder ${unusable}`;
    await mkdir(files.dir, { mode: 0o700 });
    await chmod(files.dir, 0o700);
    // Readable through the folder only, which is the task user's alone: the file stays the
    // runtime's, so the task cannot make the runtime read it back as anything else.
    await writeFile(join(files.dir, USER_TASK_NEEDS_FILE), files.needsText, {
      mode: 0o644,
      flag: "wx",
    });
    await lchown(files.dir, account.uid, account.gid);
    return null;
  } catch (error) {
    return `the task files folder ${files.dir} could not be prepared: ${errorCode(error) ?? String(error)}`;
  }
}

/**
 * Takes an attempt's folder back from the task's user: chowned to the runtime's user and 0700,
 * so nothing of the attempt stays readable to any task user and nothing in it can change while
 * it is read or removed. The folder's own name cannot be replaced (the root is the runtime's),
 * so the chown reaches exactly that folder. False when there is no folder.
 */
export async function reclaimTaskFiles(dir: string): Promise<boolean> {
  let stats;
  try {
    stats = await lstat(dir);
  } catch (error) {
    if (errorCode(error) === "ENOENT") return false;
    throw error;
  }
  if (!stats.isDirectory()) throw new Error(`${dir} is not a directory`);
  const { uid, gid } = ownIds();
  if (stats.uid !== uid || stats.gid !== gid) await lchown(dir, uid, gid);
  if ((stats.mode & 0o777) !== 0o700) await chmod(dir, 0o700);
  return true;
}

/** Retention: the attempt's folder and whatever the task left in it (links removed, never followed). */
export async function removeTaskFiles(dir: string): Promise<void> {
  if (await reclaimTaskFiles(dir)) await rm(dir, { recursive: true, force: true });
}
