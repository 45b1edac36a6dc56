import { constants, fsync, open } from "node:fs";
import { dirname, join } from "node:path";
import { errorCode } from "../../../src/errors.ts";
import { nodeDurableFs } from "../../../storage/node/durable-fs.ts";
import type { DurableFileHandle, DurableFs } from "../../../storage/node/durable-fs.ts";
import {
  fsyncDirectory as fsyncDirectoryStrict,
  fsyncDirectoryStrictSync,
} from "../../../storage/node/fsync-directory.ts";
import { temporaryName } from "./temporary-files.ts";

/**
 * The launcher's durable files (journal before spawn, spawn records, receipts, stop intents,
 * the receipt key) go through `DurableFs`, the one small file interface the sql.js file store
 * uses, so the power-loss tests can run these very functions on a simulated machine
 * (test/launcher/launcher-power-cut.test.ts). Production uses the real file system, with a
 * directory fsync that throws on every error: the journal's directory entry must be durable
 * before the task is spawned, and an attempt that cannot promise that fails to start rather
 * than run unrecorded (the store's own directory sync tolerates platforms without the step).
 *
 * The interface is synchronous, the store's; the exclusive creates gather into groups whose
 * temporary files are opened, then fsynced together, on the thread pool
 * (`DurableCreateGroup`), so they do not block the event loop and a burst of records costs
 * about one flush.
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
 * and an existing file is never overwritten. The directory is fsynced before the promise
 * resolves, so the caller may act on the file's existence (for the journal: spawn). Rejects
 * with the file system error unchanged (EEXIST when the name is taken); callers map it.
 *
 * Creates that overlap in time share their fsyncs (group commit, `DurableCreateGroup`): each
 * file is still fsynced before its link and its directory after it, but the files' fsyncs run
 * together and each directory is fsynced once for the whole group. That is what lets a burst
 * of launches or exits cost one disk flush instead of two per file.
 */
export function createFileExclusiveDurable(
  finalPath: string,
  tmpDir: string,
  content: string,
  fs: DurableFs = launcherDurableFs,
  sharing: RecordSharing | null = null,
): Promise<void> {
  let group = createGroups.get(fs);
  if (group === undefined) {
    group = new DurableCreateGroup(fs, fs === launcherDurableFs ? threadPoolSync : inlineSync(fs));
    createGroups.set(fs, group);
  }
  return group.create(finalPath, tmpDir, content, sharing);
}

/**
 * A create whose content is one record line that may share its file with the records of other
 * attempts created in the same group and directory: one temporary file holds every line and is
 * hard-linked to each record's name, so a group of N records costs one file's write and fsync
 * and N links instead of N of each (≈ 0.25 ms of CPU less per record on the test VM, in groups
 * of three). Each reader picks its own attempt's line (`recordOf`).
 */
export interface RecordSharing {
  /** The most a shared file may hold: what the record's reader accepts. */
  readonly maxFileBytes: number;
}

/**
 * The file work of a group that may leave the event loop: its temporary files' creation and
 * their two flushes. Each answers per item, so one failure fails only its own file.
 */
export interface GroupSync {
  /**
   * Creates `path` exclusively (0600) and writes `bytes` into it, not yet synced; rejects with
   * the file system's error, the file closed (the caller removes what is left of it).
   */
  createTemporary(path: string, bytes: Uint8Array): Promise<DurableFileHandle>;
  /** fsyncs every handle, concurrently where the platform can; the error of each, or null. */
  fsyncEach(handles: readonly DurableFileHandle[]): Promise<unknown[]>;
  /** fsyncs one directory; rejects with any error. */
  fsyncDirectory(path: string): Promise<void>;
}

/**
 * The real file system: the fsyncs go to libuv's thread pool at once, where the kernel joins
 * concurrent fsyncs of one file system into one journal commit (ext4's jbd2, xfs's log force),
 * so a group of files costs about one flush.
 */
const threadPoolSync: GroupSync = {
  // The open on the thread pool: an O_CREAT|O_EXCL open waits while ext4 commits its journal
  // (the fsyncs of this process and of others), ≈ 0.35 ms per launch of the runtime's event loop
  // at 200 launches a second. The write of a few hundred bytes into the page cache stays here.
  createTemporary: (path, bytes) =>
    new Promise<DurableFileHandle>((resolve, reject) => {
      open(
        path,
        constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_APPEND,
        0o600,
        (openError, handle) => {
          if (openError !== null) reject(openError);
          else settled(() => appendOrClose(launcherDurableFs, handle, bytes)).then(resolve, reject);
        },
      );
    }),
  fsyncEach: (handles) =>
    Promise.all(
      handles.map(
        (handle) =>
          new Promise<unknown>((resolve) => fsync(handle, (error) => resolve(error ?? null))),
      ),
    ),
  fsyncDirectory: (path) => fsyncDirectoryStrict(path),
};

/** Any other `DurableFs` (the simulated machines of the power-loss tests): the same steps, one at a time. */
function inlineSync(fs: DurableFs): GroupSync {
  return {
    createTemporary: (path, bytes) =>
      settled(() => appendOrClose(fs, fs.open(path, "exclusive", 0o600), bytes)),
    fsyncEach: (handles) =>
      Promise.resolve(
        handles.map((handle) => {
          try {
            fs.fsync(handle);
            return null;
          } catch (error) {
            return error;
          }
        }),
      ),
    fsyncDirectory: (path) => settled(() => fs.fsyncDirectory(path)),
  };
}

/** Writes `bytes` into a new temporary file; on failure closes it and rethrows (the caller removes it). */
function appendOrClose(
  fs: DurableFs,
  handle: DurableFileHandle,
  bytes: Uint8Array,
): DurableFileHandle {
  try {
    fs.append(handle, bytes);
  } catch (error) {
    try {
      fs.close(handle);
    } catch {
      // Unusable already; the write's own error says what happened.
    }
    throw error;
  }
  return handle;
}

const createGroups = new WeakMap<DurableFs, DurableCreateGroup>();

interface PendingCreate {
  readonly finalPath: string;
  readonly tmpDir: string;
  readonly content: string;
  readonly sharing: RecordSharing | null;
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
}

/** One temporary file of a group and the creates it becomes (one, or several shared records). */
interface CreateUnit {
  readonly items: PendingCreate[];
  bytes: number;
  maxBytes: number;
}

/**
 * Splits a group into temporary files: a create that does not share gets its own; records
 * bound for one directory (one kind of record per directory) fill shared files in their
 * order, each file kept within the smallest reader limit of the records it holds.
 */
function unitsOf(batch: readonly PendingCreate[]): CreateUnit[] {
  const units: CreateUnit[] = [];
  const filling = new Map<string, CreateUnit>();
  for (const item of batch) {
    const bytes = Buffer.byteLength(item.content, "utf8");
    if (item.sharing === null) {
      units.push({ items: [item], bytes, maxBytes: bytes });
      continue;
    }
    const key = `${item.tmpDir}\0${dirname(item.finalPath)}`;
    const open = filling.get(key);
    const maxBytes = Math.min(open?.maxBytes ?? Infinity, item.sharing.maxFileBytes);
    if (open !== undefined && open.bytes + bytes <= maxBytes) {
      open.items.push(item);
      open.bytes += bytes;
      open.maxBytes = maxBytes;
      continue;
    }
    const unit: CreateUnit = { items: [item], bytes, maxBytes: item.sharing.maxFileBytes };
    units.push(unit);
    filling.set(key, unit);
  }
  return units;
}

/**
 * Group commit of exclusive durable creates. A create that arrives while no group is being
 * written starts one on the next turn of the event loop (so creates issued together, e.g. the
 * launches of one dispatch page, travel together); creates that arrive while a group is being
 * written wait for it and form the next group. No timer, no added wait for a lone create.
 * Per file the order is the single create's: temporary file written and fsynced → link (EEXIST
 * refuses that file alone) → its directory fsynced → acknowledged.
 */
export class DurableCreateGroup {
  private queue: PendingCreate[] = [];
  private scheduled = false;

  constructor(
    private readonly fs: DurableFs,
    private readonly sync: GroupSync,
  ) {}

  create(
    finalPath: string,
    tmpDir: string,
    content: string,
    sharing: RecordSharing | null = null,
  ): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ finalPath, tmpDir, content, sharing, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => void this.flushAll());
      }
    });
  }

  /** Writes groups until the queue is empty; only one runs at a time. */
  private async flushAll(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0);
        // flush settles every item itself; should it throw, no create may wait forever (a
        // settled promise ignores the second answer).
        await this.flush(batch).catch((error: unknown) => {
          for (const item of batch)
            item.reject(error instanceof Error ? error : new Error(String(error)));
        });
      }
    } finally {
      this.scheduled = false;
      if (this.queue.length > 0) {
        this.scheduled = true;
        setImmediate(() => void this.flushAll());
      }
    }
  }

  private async flush(batch: readonly PendingCreate[]): Promise<void> {
    const fail = (item: PendingCreate, error: unknown): void =>
      item.reject(error instanceof Error ? error : new Error(String(error)));
    // 1. Every temporary file written, not yet synced (one per unit: a lone file, or the
    // shared file of several records).
    const created = await Promise.all(
      unitsOf(batch).map(async (unit) => {
        const first = unit.items[0] as PendingCreate;
        const tmpPath = join(first.tmpDir, temporaryName(first.finalPath));
        const content = unit.items.map((item) => item.content).join("");
        try {
          const handle = await this.sync.createTemporary(tmpPath, Buffer.from(content, "utf8"));
          return { unit, tmpPath, handle };
        } catch (error) {
          this.unlinkQuietly(tmpPath);
          for (const item of unit.items) fail(item, error);
          return null;
        }
      }),
    );
    const written = created.filter((entry) => entry !== null);
    // 2. Their data durable, together.
    const syncErrors = await this.sync.fsyncEach(written.map(({ handle }) => handle));
    // 3. Linked to their final names; a taken name refuses that record alone.
    const linked: { item: PendingCreate; file: LinkedFile | null }[] = [];
    written.forEach(({ unit, tmpPath, handle }, index) => {
      this.closeQuietly(handle);
      const syncError = syncErrors[index] ?? null;
      if (syncError !== null) {
        this.unlinkQuietly(tmpPath);
        for (const item of unit.items) fail(item, syncError);
        return;
      }
      const file: LinkedFile = { tmpPath, removed: false, failed: null };
      const unlinked: PendingCreate[] = [];
      let anyLinked = false;
      for (const item of unit.items) {
        try {
          this.fs.link(tmpPath, item.finalPath);
          linked.push({ item, file });
          anyLinked = true;
        } catch (error) {
          if (!LINK_UNSUPPORTED_CODES.has(errorCode(error) ?? "")) fail(item, error);
          else unlinked.push(item);
        }
      }
      if (unlinked.length === 0) {
        if (!anyLinked) this.unlinkQuietly(tmpPath);
        return;
      }
      // Not quiet: the file's fate must follow every failure before its fallback writes.
      try {
        this.fs.unlink(tmpPath);
        file.removed = true;
      } catch (unlinkError) {
        file.failed = unlinkError;
        for (const item of unlinked) fail(item, unlinkError);
        return;
      }
      // No hard links here (vfat, exfat): the exclusive create of each final name itself.
      for (const item of unlinked) {
        try {
          writeAndSync(this.fs, item.finalPath, item.content);
          linked.push({ item, file: null });
        } catch (fallbackError) {
          fail(item, fallbackError);
        }
      }
    });
    // 4. Each directory's new entries durable, once per directory.
    const directories = [...new Set(linked.map(({ item }) => dirname(item.finalPath)))];
    const directoryErrors = new Map<string, unknown>();
    await Promise.all(
      directories.map((directory) =>
        this.sync.fsyncDirectory(directory).catch((error: unknown) => {
          directoryErrors.set(directory, error);
        }),
      ),
    );
    // 5. Acknowledged. A temporary name is garbage once its links are durable; a crash before
    // its removal leaves a stray file in tmp/, never a second journal or receipt.
    for (const { item, file } of linked) {
      const directoryError = directoryErrors.get(dirname(item.finalPath));
      if (directoryError !== undefined) {
        fail(item, directoryError);
        continue;
      }
      if (file !== null && !file.removed && file.failed === null) {
        try {
          this.fs.unlink(file.tmpPath);
          file.removed = true;
        } catch (error) {
          file.failed = error;
        }
      }
      if (file !== null && file.failed !== null) {
        fail(item, file.failed);
        continue;
      }
      item.resolve();
    }
  }

  private closeQuietly(handle: DurableFileHandle): void {
    try {
      this.fs.close(handle);
    } catch {
      // Already unusable; the item's own error says what happened.
    }
  }

  private unlinkQuietly(path: string): void {
    try {
      this.fs.unlink(path);
    } catch {
      // Never linked anywhere else: a stray temporary file at worst.
    }
  }
}

/** A unit's temporary file once linked: removed once, after its links are durable. */
interface LinkedFile {
  readonly tmpPath: string;
  removed: boolean;
  failed: unknown;
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
