/**
 * The file operations whose order and durability a crash-consistent store depends on, behind
 * one small synchronous interface, so that the same code runs on the real file system
 * (`nodeDurableFs`, over node:fs) and on a simulated one that remembers what has not been
 * synced and loses, keeps or tears it at a simulated power cut (the power-loss tests), or
 * fails an operation with ENOSPC or EIO (the fault tests).
 *
 * What a caller may rely on, and nothing more (the contract the simulation enforces):
 * - data written to a file is durable only after `fsync`/`fdatasync` of that file returned;
 *   until then a power cut may keep it, drop it, or keep some of its pages and not others;
 * - a file's new length (after `append` or `truncate`) is durable only after its fsync;
 * - a directory entry (a create, `rename`, `link`, `unlink`) is durable only after
 *   `fsyncDirectory` of its directory returned; `rename` is atomic (either name state, never both);
 * - a failed fsync says nothing about the data it covered, and a later fsync that succeeds
 *   does not make it durable either (Linux marks the pages clean after a write-back error):
 *   a caller that saw an fsync fail must rebuild from what it knows was durable;
 * - errors are thrown as Node's are: an `Error` with the errno name in `code` (ENOENT, EEXIST,
 *   ENOSPC, EIO), so `errorCode()` reads them; an `append` that fails may have written a prefix.
 *
 * Synchronous on purpose: the sql.js file store does its I/O inside one queued task, and a
 * synchronous call keeps a commit's steps free of interleaving. The launcher's durable files
 * (journal before spawn, spawn records, receipts, stop intents) use it too
 * (runtimes/node/launcher/durable-file.ts): `link` and `fsyncDirectory` serve its
 * write-temp-then-link pattern, `readSmall` its reads that must not follow a planted link.
 */
import {
  closeSync,
  constants,
  existsSync,
  fdatasyncSync,
  fstatSync,
  fsyncSync,
  ftruncateSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  unlinkSync,
  writeSync,
  type Stats,
} from "node:fs";
import { errorCode } from "../../src/errors.ts";
import { fsyncDirectorySync } from "./fsync-directory.ts";

/** An open file; opaque to the caller. */
export type DurableFileHandle = number;

/**
 * - `read`: read only; the file must exist.
 * - `append`: writes go to the end; created when missing (the directory entry is not durable until `fsyncDirectory`).
 * - `truncate`: created when missing, emptied when present; writes go to the end.
 * - `exclusive`: created, or EEXIST when the name is taken; writes go to the end.
 */
export type DurableOpenMode = "read" | "append" | "truncate" | "exclusive";

export type SmallFileReading =
  | { readonly ok: true; readonly bytes: Uint8Array }
  | { readonly ok: false; readonly reason: string }
  | null;

export interface DurableFs {
  /** Creates the directory and its missing parents with `mode`; nothing when it exists. */
  mkdirp(path: string, mode: number): void;
  exists(path: string): boolean;
  open(path: string, mode: DurableOpenMode, fileMode?: number): DurableFileHandle;
  /** Writes every byte at the end of the file (a failure may leave a prefix written). */
  append(handle: DurableFileHandle, bytes: Uint8Array): void;
  /** Up to `length` bytes at `position`; fewer only where the file ends. */
  read(handle: DurableFileHandle, position: number, length: number): Uint8Array;
  sizeOf(handle: DurableFileHandle): number;
  truncate(handle: DurableFileHandle, length: number): void;
  /** Makes the file's data and length durable (see the contract above). */
  fsync(handle: DurableFileHandle): void;
  /** As `fsync`, without metadata the data does not need (times). */
  fdatasync(handle: DurableFileHandle): void;
  close(handle: DurableFileHandle): void;
  /** The whole file; ENOENT when missing. */
  readFile(path: string): Uint8Array;
  /**
   * A small regular file read without following a symbolic link (a planted link must not make
   * the caller read or trust another file): its bytes, null when it does not exist, or the
   * reason it was refused (a link, not a regular file, over `maxBytes`).
   */
  readSmall(path: string, maxBytes: number): SmallFileReading;
  /** Replaces `to` atomically (same directory). */
  rename(from: string, to: string): void;
  /** Gives the file a second name; EEXIST when `to` exists. */
  link(existing: string, to: string): void;
  /** ENOENT when missing. */
  unlink(path: string): void;
  /** Makes the directory's entries durable. */
  fsyncDirectory(path: string): void;
  /**
   * An identifier of this boot of the machine holding the files (Linux: the kernel's boot id),
   * undefined where it cannot tell. A lock file written before a power cut names another boot.
   */
  bootId(): string | undefined;
}

/**
 * `DurableFs.readSmall` on the real file system, with what a caller that trusts the file's
 * author even less may add: `nonBlocking` (a FIFO planted at the path cannot block the read)
 * and `refuse`, which looks at the open file's status before anything is read and names why
 * it is refused (another owner, a second name), or returns null to accept it.
 */
export function readSmallNoFollow(
  path: string,
  maxBytes: number,
  options: {
    readonly nonBlocking?: boolean;
    readonly refuse?: (stats: Stats) => string | null;
  } = {},
): SmallFileReading {
  // Most reads of a name that is not there (no stop intent, no task output, no receipt yet)
  // end here without an exception: a failed open builds an Error with its stack, several
  // times the cost of this lstat. A name that appears right after is read as absent, as an
  // open at this instant would have; a link or anything else goes on to the checks below.
  if (lstatSync(path, { throwIfNoEntry: false }) === undefined) return null;
  let handle: number;
  try {
    handle = openSync(
      path,
      constants.O_RDONLY |
        constants.O_NOFOLLOW |
        (options.nonBlocking === true ? constants.O_NONBLOCK : 0),
    );
  } catch (error) {
    const code = errorCode(error);
    if (code === "ENOENT") return null;
    if (code === "ELOOP") return { ok: false, reason: "is a symbolic link" };
    throw error;
  }
  try {
    const stats = fstatSync(handle);
    if (!stats.isFile()) return { ok: false, reason: "is not a regular file" };
    const refused = options.refuse?.(stats) ?? null;
    if (refused !== null) return { ok: false, reason: refused };
    if (stats.size > maxBytes)
      return { ok: false, reason: `is ${stats.size} bytes, more than the ${maxBytes} allowed` };
    const bytes = nodeDurableFs.read(handle, 0, maxBytes + 1);
    if (bytes.length > maxBytes)
      return { ok: false, reason: `grew past the ${maxBytes} bytes allowed` };
    return { ok: true, bytes };
  } finally {
    closeSync(handle);
  }
}

export const nodeDurableFs: DurableFs = {
  mkdirp(path, mode) {
    mkdirSync(path, { recursive: true, mode });
  },
  exists(path) {
    return existsSync(path);
  },
  open(path, mode, fileMode = 0o600) {
    switch (mode) {
      case "read":
        return openSync(path, "r");
      case "append":
        return openSync(path, "a", fileMode);
      case "truncate":
        return openSync(
          path,
          constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_APPEND,
          fileMode,
        );
      case "exclusive":
        return openSync(
          path,
          constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_APPEND,
          fileMode,
        );
    }
  },
  append(handle, bytes) {
    let written = 0;
    // Bounded: every iteration writes at least one byte or throws.
    while (written < bytes.length) {
      const count = writeSync(handle, bytes, written, bytes.length - written);
      if (count <= 0)
        throw Object.assign(
          new Error(`write made no progress at byte ${written} of ${bytes.length}`),
          { code: "EIO" },
        );
      written += count;
    }
  },
  read(handle, position, length) {
    const buffer = new Uint8Array(length);
    let filled = 0;
    // Bounded by `length`: every iteration reads at least one byte or stops at the end of the file.
    while (filled < length) {
      const count = readSync(handle, buffer, filled, length - filled, position + filled);
      if (count === 0) break;
      filled += count;
    }
    return buffer.subarray(0, filled);
  },
  sizeOf(handle) {
    return fstatSync(handle).size;
  },
  truncate(handle, length) {
    ftruncateSync(handle, length);
  },
  fsync(handle) {
    fsyncSync(handle);
  },
  fdatasync(handle) {
    fdatasyncSync(handle);
  },
  close(handle) {
    closeSync(handle);
  },
  readFile(path) {
    return readFileSync(path);
  },
  readSmall(path, maxBytes) {
    return readSmallNoFollow(path, maxBytes);
  },
  rename(from, to) {
    renameSync(from, to);
  },
  link(existing, to) {
    linkSync(existing, to);
  },
  unlink(path) {
    unlinkSync(path);
  },
  fsyncDirectory(path) {
    fsyncDirectorySync(path);
  },
  bootId() {
    try {
      return readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
    } catch {
      return undefined;
    }
  },
};
