import { fsync } from "node:fs";
import { dirname, join } from "node:path";
import { canonicalJson } from "../../../src/canonical-json.ts";
import { QlrError, errorCode } from "../../../src/errors.ts";
import { nodeDurableFs } from "../../../storage/node/durable-fs.ts";
import type { DurableFileHandle, DurableFs } from "../../../storage/node/durable-fs.ts";
import {
  fsyncDirectory as fsyncDirectoryStrict,
  fsyncDirectoryStrictSync,
} from "../../../storage/node/fsync-directory.ts";
import type { StateLayout } from "./state-layout.ts";
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
 * fsyncs run together on the thread pool (`DurableCreateGroup`), so they do not block the event
 * loop and a burst of records costs about one flush.
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
): Promise<void> {
  let group = createGroups.get(fs);
  if (group === undefined) {
    group = new DurableCreateGroup(fs, fs === launcherDurableFs ? threadPoolSync : inlineSync(fs));
    createGroups.set(fs, group);
  }
  return group.create(finalPath, tmpDir, content);
}

/** The two flushes a group needs; each answers per item, so one failure fails only its own file. */
export interface GroupSync {
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

const createGroups = new WeakMap<DurableFs, DurableCreateGroup>();

interface PendingCreate {
  readonly finalPath: string;
  readonly tmpDir: string;
  readonly content: string;
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
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

  create(finalPath: string, tmpDir: string, content: string): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ finalPath, tmpDir, content, resolve, reject });
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
    // 1. Every temporary file written, not yet synced.
    const written: { item: PendingCreate; tmpPath: string; handle: DurableFileHandle }[] = [];
    for (const item of batch) {
      const tmpPath = join(item.tmpDir, temporaryName(item.finalPath));
      let handle: DurableFileHandle | null = null;
      try {
        handle = this.fs.open(tmpPath, "exclusive", 0o600);
        this.fs.append(handle, Buffer.from(item.content, "utf8"));
        written.push({ item, tmpPath, handle });
      } catch (error) {
        if (handle !== null) this.closeQuietly(handle);
        this.unlinkQuietly(tmpPath);
        fail(item, error);
      }
    }
    // 2. Their data durable, together.
    const syncErrors = await this.sync.fsyncEach(written.map(({ handle }) => handle));
    // 3. Linked to their final names; a taken name refuses that file alone.
    const linked: { item: PendingCreate; tmpPath: string | null }[] = [];
    written.forEach(({ item, tmpPath, handle }, index) => {
      this.closeQuietly(handle);
      const syncError = syncErrors[index] ?? null;
      if (syncError !== null) {
        this.unlinkQuietly(tmpPath);
        fail(item, syncError);
        return;
      }
      try {
        this.fs.link(tmpPath, item.finalPath);
        linked.push({ item, tmpPath });
      } catch (error) {
        if (!LINK_UNSUPPORTED_CODES.has(errorCode(error) ?? "")) {
          this.unlinkQuietly(tmpPath);
          fail(item, error);
          return;
        }
        // Not quiet: the file's fate must follow every failure before its fallback write.
        try {
          this.fs.unlink(tmpPath);
        } catch (unlinkError) {
          fail(item, unlinkError);
          return;
        }
        // No hard links here (vfat, exfat): the exclusive create of the final name itself.
        try {
          writeAndSync(this.fs, item.finalPath, item.content);
          linked.push({ item, tmpPath: null });
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
    // 5. Acknowledged. The temporary name is garbage once the link is durable; a crash before
    // its removal leaves a stray file in tmp/, never a second journal or receipt.
    for (const { item, tmpPath } of linked) {
      const directoryError = directoryErrors.get(dirname(item.finalPath));
      if (directoryError !== undefined) {
        fail(item, directoryError);
        continue;
      }
      if (tmpPath !== null) {
        try {
          this.fs.unlink(tmpPath);
        } catch (error) {
          fail(item, error);
          continue;
        }
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

/**
 * Writes one record as a line of canonical JSON, exclusively and durably: the journal, the
 * spawn record and the stop intent are all written this way (see createFileExclusiveDurable).
 */
export function createRecordFile(
  path: string,
  tmpDir: string,
  record: object,
  fs: DurableFs = launcherDurableFs,
): Promise<void> {
  return createFileExclusiveDurable(path, tmpDir, `${canonicalJson({ ...record })}\n`, fs);
}

/**
 * Reads one record written by `createRecordFile`: null when there is none, else its JSON
 * object, or why the file is not one (too large, not a regular file, not JSON, not an object).
 * Each reader checks the fields and says what a bad record means for it.
 */
export async function readRecordFile(
  path: string,
  maxBytes: number,
  fs: DurableFs = launcherDurableFs,
): Promise<{ ok: true; record: Record<string, unknown> } | { ok: false; reason: string } | null> {
  const file = await readSmallFile(path, maxBytes, fs);
  if (file === null || !file.ok) return file;
  let parsed: unknown;
  try {
    parsed = JSON.parse(file.text);
  } catch {
    return { ok: false, reason: "is not valid JSON" };
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    return { ok: false, reason: "is not a JSON object" };
  return { ok: true, record: parsed as Record<string, unknown> };
}

/** One kind of attempt record the launcher reads back and checks (the journal, the stop intent). */
export interface AttemptRecordKind<T> {
  /** How an error names the file: "journal", "stop intent". */
  readonly what: string;
  readonly path: (layout: StateLayout, attemptId: string) => string;
  readonly maxBytes: number;
  /** What is wrong with the record's fields, or null when they are sound. */
  readonly fieldProblem: (record: Record<string, unknown>) => string | null;
  /** What the reader answers for a sound record. */
  readonly value: (record: Record<string, unknown>) => T;
}

/**
 * The reader of one kind of attempt record: null when there is none; `storage_corrupt` naming
 * the file and what is wrong when one exists that is not a whole, well-formed record of this
 * attempt (malformed, a link, too large, another attempt's), because "no record" and "a record
 * we cannot trust" lead recovery to different decisions.
 */
export function attemptRecordReader<T>(
  kind: AttemptRecordKind<T>,
): (layout: StateLayout, attemptId: string, fs?: DurableFs) => Promise<T | null> {
  return async (layout, attemptId, fs = launcherDurableFs) => {
    const path = kind.path(layout, attemptId);
    const file = await readRecordFile(path, kind.maxBytes, fs);
    if (file === null) return null;
    const damaged = (problem: string): QlrError =>
      new QlrError("storage_corrupt", `${kind.what} ${path} is damaged: ${problem}`);
    // Not JSON: most likely a write torn by a power cut on a file system without hard links.
    if (!file.ok) throw damaged(`it ${file.reason}`);
    const record = file.record;
    if (record.attemptId !== attemptId)
      throw damaged(`it names attempt ${JSON.stringify(record.attemptId)}`);
    const problem = kind.fieldProblem(record);
    if (problem !== null) throw damaged(problem);
    return kind.value(record);
  };
}
