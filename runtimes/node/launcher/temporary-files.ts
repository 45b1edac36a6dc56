import { randomBytes } from "node:crypto";
import { lstat, opendir, unlink } from "node:fs/promises";
import { basename, join } from "node:path";
import { errorCode } from "../../../src/errors.ts";

/**
 * Temporary names of durable creates: the final name, the writer's pid, a random nonce drawn
 * once per process and a counter. Unique among this process's files by the counter and against
 * every other process, a later one with the same pid included, by the nonce; one random draw
 * per file was ≈ 2 % of a launch's CPU.
 */
const TMP_NONCE = randomBytes(6).toString("hex");
let tmpCounter = 0;

export function temporaryName(finalPath: string): string {
  tmpCounter += 1;
  return `${basename(finalPath)}.${process.pid}.${TMP_NONCE}-${tmpCounter}.tmp`;
}

/** `temporaryName`'s shape; the first group is the writer's pid. */
const TEMPORARY_NAME = /^.+\.([1-9][0-9]{0,9})\.[0-9a-f]{12}-[1-9][0-9]{0,15}\.tmp$/;

/**
 * How old a dead writer's temporary file must be before a sweep removes it. A durable create
 * holds its temporary name for milliseconds; the margin covers a writer in another pid
 * namespace (its pid means nothing here) that is between its write and its link right now.
 */
export const TEMPORARY_FILE_STALE_AFTER_MS = 60_000;

/** At most this many names are examined per sweep, so a start-up never walks without bound. */
export const TEMPORARY_SWEEP_MAX_ENTRIES = 100_000;

export interface TemporarySweep {
  /** Temporary files of dead writers, removed. */
  readonly removed: number;
  /** Names left: a live or recent writer's file, this process's own, or anything else. */
  readonly kept: number;
}

/** Whether a process with this pid exists (EPERM: it exists and belongs to someone else). */
export function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return errorCode(error) === "EPERM";
  }
}

/**
 * Removes the temporary files of durable creates that nothing will ever link: a writer killed
 * between its link and its unlink (or before its link) leaves its temporary file in `tmp/`,
 * a few per crash, never read. Over a year on a device those add up, so the runtime sweeps at
 * start-up. A file goes only when all of these hold: its name has `temporaryName`'s shape, it
 * is a regular file (never a link or a directory, never followed), its writer's pid is not this
 * process and names no live process, and it was last written at least
 * `TEMPORARY_FILE_STALE_AFTER_MS` ago. Removing a file whose writer still lived would only
 * make that writer's create fail (its link finds no source), never write a torn record.
 */
export async function sweepTemporaryFiles(
  tmpDir: string,
  nowMs: number,
  exists: (pid: number) => boolean = processExists,
): Promise<TemporarySweep> {
  let directory;
  try {
    directory = await opendir(tmpDir);
  } catch (error) {
    if (errorCode(error) === "ENOENT") return { removed: 0, kept: 0 };
    throw error;
  }
  let removed = 0;
  let kept = 0;
  let examined = 0;
  try {
    for await (const entry of directory) {
      examined += 1;
      if (examined > TEMPORARY_SWEEP_MAX_ENTRIES) break;
      const pid = Number(TEMPORARY_NAME.exec(entry.name)?.[1] ?? Number.NaN);
      if (!Number.isSafeInteger(pid) || pid === process.pid || exists(pid)) {
        kept += 1;
        continue;
      }
      const path = join(tmpDir, entry.name);
      const stats = await lstat(path).catch(() => null);
      if (
        stats === null ||
        !stats.isFile() ||
        nowMs - stats.mtimeMs < TEMPORARY_FILE_STALE_AFTER_MS
      ) {
        kept += 1;
        continue;
      }
      try {
        await unlink(path);
        removed += 1;
      } catch (error) {
        if (errorCode(error) !== "ENOENT") throw error;
      }
    }
  } finally {
    // Leaving the loop early closes the directory itself; a second close answers ERR_DIR_CLOSED.
    await directory.close().catch(() => undefined);
  }
  return { removed, kept };
}
