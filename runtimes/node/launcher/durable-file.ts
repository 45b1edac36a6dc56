import { randomBytes } from "node:crypto";
import { basename, dirname, join } from "node:path";
import { errorCode } from "../../../src/errors.ts";
import { nodeDurableFs } from "../../../storage/node/durable-fs.ts";
import type { DurableFs } from "../../../storage/node/durable-fs.ts";
import { fsyncDirectoryStrictSync } from "../../../storage/node/fsync-directory.ts";

/**
 * The launcher's durable files (journal before spawn, spawn records, receipts, stop intents,
 * the receipt key) go through `DurableFs`, the one small file interface the sql.js file store
 * uses, so the power-loss tests can run these very functions on a simulated machine
 * (test/launcher/launcher-power-cut.test.ts). Production uses the real file system, with a
 * directory fsync that throws on every error: the journal's directory entry must be durable
 * before the task is spawned, and an attempt that cannot promise that fails to start rather
 * than run unrecorded (the store's own directory sync tolerates platforms without the step).
 *
 * The calls are synchronous (one file of a few hundred bytes, one fsync of it and one of its
 * directory): the same interface as the store's, at the cost of blocking the event loop for
 * those fsyncs, as every store commit already does.
 */
export const launcherDurableFs: DurableFs = {
  ...nodeDurableFs,
  fsyncDirectory: fsyncDirectoryStrictSync,
};

/**
 * File systems that cannot hard-link (vfat and exfat on the USB disks routers often use, some
 * FUSE mounts) answer link(2) with one of these; there the write falls back to an exclusive
 * create of the final name, which keeps "never overwrite" but may leave a torn file after a
 * power loss (a reader then reports it invalid, and recovery fails closed).
 */
const LINK_UNSUPPORTED_CODES = new Set(["EPERM", "ENOTSUP", "EOPNOTSUPP", "ENOSYS", "EXDEV"]);

/**
 * Creates `finalPath` with `content` exactly once and durably. The bytes are written and
 * fsynced in a temporary file first, then hard-linked to the final name: link(2) is atomic and
 * fails with EEXIST instead of replacing, so a reader sees either no file or the whole file,
 * and an existing file is never overwritten. The directory is fsynced before returning, so
 * the caller may act on the file's existence (for the journal: spawn). Throws the file system
 * error unchanged (EEXIST when the name is taken); callers map it.
 */
export function createFileExclusiveDurable(
  finalPath: string,
  tmpDir: string,
  content: string,
  fs: DurableFs = launcherDurableFs,
): Promise<void> {
  return settled(() => createFileExclusiveDurableSync(finalPath, tmpDir, content, fs));
}

function createFileExclusiveDurableSync(
  finalPath: string,
  tmpDir: string,
  content: string,
  fs: DurableFs,
): void {
  const tmpPath = join(
    tmpDir,
    `${basename(finalPath)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`,
  );
  writeAndSync(fs, tmpPath, content);
  try {
    fs.link(tmpPath, finalPath);
  } catch (error) {
    fs.unlink(tmpPath);
    if (!LINK_UNSUPPORTED_CODES.has(errorCode(error) ?? "")) throw error;
    writeAndSync(fs, finalPath, content);
    fs.fsyncDirectory(dirname(finalPath));
    return;
  }
  fs.fsyncDirectory(dirname(finalPath));
  // The temporary name is garbage once the link is durable; a crash right here leaves a stray
  // file in tmp/, never a second journal or receipt.
  fs.unlink(tmpPath);
}

function writeAndSync(fs: DurableFs, path: string, content: string): void {
  const handle = fs.open(path, "exclusive", 0o600);
  try {
    fs.append(handle, Buffer.from(content, "utf8"));
    fs.fsync(handle);
  } finally {
    fs.close(handle);
  }
}

/** Creates the directories (owner-only: logs and stop intents may name secrets) and makes them durable. */
export function ensureDurableDirectories(
  parent: string,
  children: readonly string[],
  fs: DurableFs = launcherDurableFs,
): Promise<void> {
  return settled(() => ensureDurableDirectoriesSync(parent, children, fs));
}

function ensureDurableDirectoriesSync(
  parent: string,
  children: readonly string[],
  fs: DurableFs,
): void {
  // The highest directory the mkdir will create: its parent's entry must be synced too.
  let highestMissing: string | undefined;
  // Bounded by the path's depth.
  for (let path = parent; !fs.exists(path) && dirname(path) !== path; path = dirname(path))
    highestMissing = path;
  fs.mkdirp(parent, 0o700);
  for (const child of children) fs.mkdirp(child, 0o700);
  fs.fsyncDirectory(parent);
  if (highestMissing !== undefined) fs.fsyncDirectory(dirname(highestMissing));
}

/**
 * Reads a small regular file without following a symbolic link (a planted link must not make
 * the runtime read or trust another file) and refuses anything above `maxBytes`. Returns null
 * when the file does not exist.
 */
export function readSmallFile(
  path: string,
  maxBytes: number,
  fs: DurableFs = launcherDurableFs,
): Promise<{ ok: true; text: string } | { ok: false; reason: string } | null> {
  return settled(() => {
    const reading = fs.readSmall(path, maxBytes);
    if (reading === null || !reading.ok) return reading;
    const { bytes } = reading;
    return {
      ok: true,
      text: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString("utf8"),
    };
  });
}

/** Runs synchronous file work as a promise, turning a throw into a rejection (callers await it). */
function settled<T>(work: () => T): Promise<T> {
  try {
    return Promise.resolve(work());
  } catch (error) {
    return Promise.reject(error instanceof Error ? error : new Error(String(error)));
  }
}
