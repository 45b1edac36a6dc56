/**
 * The device store: a sql.js database that lives in memory and is made crash-consistent on
 * disk by a snapshot plus an append-only journal. Node-only. Files in the directory `path`:
 *
 * - `snapshot.sqlite`: the sql.js `export()` image, deflated in frames, with a trailer naming the journal sequence it
 *   includes (format in snapshot.ts);
 * - `journal.log`: one checksummed record per committed write transaction (format and the torn
 *   tail rule in journal.ts);
 * - `journal.sealed.log`: while a checkpoint is in flight (or after one failed), the journal
 *   segment its snapshot folds in; the open replays it before `journal.log`;
 * - `lock`: the advisory exclusive lock (lock.ts).
 *
 * Commit order (group commit). The transaction's statements run inside a sql.js transaction;
 * then its record is appended to the journal and sql.js commits, and the next transaction may
 * begin; the record is made durable by an `fdatasync` that covers every record appended before
 * it started (one at a time, on libuv's thread pool, so the event loop never waits for the
 * disk), and only then does the caller see success. A transaction that only read waits the same
 * way for the records it could have seen: no caller ever learns of a write before it is
 * durable. A failed append rolls back and answers `storage_unavailable`: nothing is
 * acknowledged, and the journal is cut back to its previous length. A failed sync (or a failed
 * cut) is never retried: every transaction it covered, and every one after it, answers
 * `storage_unavailable`; the journal is cut back at once to what acknowledged commits need, and
 * the store refuses work until, before its next transaction, it reloads snapshot and journal
 * from the files (the fault model is in ../README.md). Every file operation goes through `DurableFs`
 * (../../node/durable-fs.ts), so the power-loss tests can run this code on a simulated machine.
 *
 * Which statements are journaled: those the connection judges to have written (the rule is on
 * `StatementKind` in ../connection.ts: reads never, INSERT/UPDATE/DELETE/REPLACE/WITH when
 * `total_changes()` moved, CREATE/DROP/ALTER when the schema version moved, the few others
 * always). A transaction that wrote nothing appends nothing. Journaled statements are replayed
 * verbatim at the next open, so they must be deterministic: pass time, ids and randomness as
 * parameters, never call `random()`, `datetime('now')` or similar in SQL. A statement that fails
 * after changing rows (an `OR FAIL` conflict clause) cannot be replayed faithfully; such a
 * transaction is refused.
 *
 * Checkpoint, after a commit leaves the journal over its threshold, on `checkpoint()` and on
 * `close()`, in two parts. In the commit queue, quickly: rename `journal.log` to
 * `journal.sealed.log`, sync the directory, open a new empty `journal.log`, sync the directory
 * again, and export the image. Then in the background, while commits go on into the new
 * journal: compress the image and write `snapshot.sqlite.tmp` (zlib and fsync on the thread
 * pool), then in one synchronous stretch rename it over the snapshot, sync the directory and
 * remove the sealed segment. A crash anywhere opens correctly: the snapshot names the sequence
 * it includes, the open replays the sealed segment and then `journal.log` and skips what the
 * snapshot holds. A checkpoint that fails leaves the sealed segment; the next one exports
 * without sealing again and retires it.
 */
import { Buffer } from "node:buffer";
import { fdatasync as fdatasyncOnThreadPool, fsync } from "node:fs";
import { join, resolve } from "node:path";
import type { SqlJsStatic } from "sql.js";
import { QlrError, errorCode, errorMessage, isQlrError } from "../../../src/errors.ts";
import type { SqlDriver, SqlTx } from "../../driver.ts";
import { nodeDurableFs } from "../../node/durable-fs.ts";
import type { DurableFileHandle, DurableFs } from "../../node/durable-fs.ts";
import { SerialQueue } from "../../serial-queue.ts";
import { SqlJsConnection, mapSqlJsError, runTransaction } from "../connection.ts";
import type { RecordedWrite, SqlJsConnectionOptions } from "../connection.ts";
import { SqlTextDictionary, corrupt, scanJournalFile } from "./journal.ts";
import type { JournalScan, ParsedRecord, RecordAdoption } from "./journal.ts";
import { acquireLock, DATABASE_LOCK } from "../../node/lock.ts";
import type { HeldLock } from "../../node/lock.ts";
import {
  SNAPSHOT_FRAME_IMAGE_BYTES,
  decodeSnapshot,
  deflateFrameOnThreadPool,
  deflateFrameSync,
  encodeSnapshotAsync,
} from "./snapshot.ts";
import type { DecodedSnapshot, SnapshotFrameDeflater } from "./snapshot.ts";

/** The database holds every secret a manifest carries (env values): owner-only, like the state dir. */
const FILE_MODE = 0o600;
const DIRECTORY_MODE = 0o700;

export const DEFAULT_CHECKPOINT_JOURNAL_BYTES = 1024 * 1024;
/** The journal never grows past this before a checkpoint, whatever the database size (open-time replay stays bounded). */
export const MAX_CHECKPOINT_JOURNAL_BYTES = 64 * 1024 * 1024;

const SNAPSHOT_FILE = "snapshot.sqlite";
const SNAPSHOT_TEMP_FILE = "snapshot.sqlite.tmp";
const JOURNAL_FILE = "journal.log";
/** The journal segment a checkpoint in flight folds into its snapshot (at most one exists). */
const SEALED_JOURNAL_FILE = "journal.sealed.log";

/**
 * The checkpoint's steps in order, each reported to `faultPoints.duringCheckpoint` once it is
 * done. `sealed` and `exported` run in the commit queue; the rest in the background while
 * commits go on (`sealed` is skipped when an earlier failed checkpoint left its sealed segment).
 */
export const SQLJS_CHECKPOINT_STEPS = [
  "sealed",
  "exported",
  "temp-synced",
  "renamed",
  "directory-synced",
  "retired",
] as const;
export type SqlJsCheckpointStep = (typeof SQLJS_CHECKPOINT_STEPS)[number];

/**
 * Named points where crash tests stop the process (or throw to simulate an I/O failure). A
 * throw from a point before the in-memory COMMIT rolls the transaction back like a failed
 * write; a throw from `afterCommit` reaches the caller although the commit stands, like a lost
 * response; a throw from `duringCheckpoint` fails that checkpoint.
 */
export interface SqlJsFileFaultPoints {
  /** The transaction's statements ran; its record is encoded but not written. */
  beforeJournalWrite?(): void;
  /**
   * The record is written but not yet synced. A process killed here leaves the record in the
   * page cache, so the unacknowledged commit survives; only a power loss can drop or tear it.
   */
  beforeJournalSync?(): void;
  /** The record is durable; sql.js has not committed and the caller has no answer. */
  afterJournalSync?(): void;
  /** sql.js committed a write transaction; the caller has no answer yet. */
  afterCommit?(): void;
  duringCheckpoint?(step: SqlJsCheckpointStep): void;
}

export interface SqlJsFileDriverOptions extends SqlJsConnectionOptions {
  /** The database directory; created when missing. */
  readonly path: string;
  readonly checkpointJournalBytes?: number;
  readonly faultPoints?: SqlJsFileFaultPoints;
  /** The file operations; the real file system by default, a simulated one in the power-loss and fault tests. */
  readonly fs?: DurableFs;
  /** Image bytes per compressed snapshot frame (snapshot.ts); small values let tests cut inside a multi-frame write. */
  readonly snapshotFrameImageBytes?: number;
  /**
   * How a checkpoint compresses and syncs its snapshot in the background. By default zlib and
   * fsync on libuv's thread pool with the real file system, and synchronous calls through `fs`
   * with a given one (so simulated runs stay deterministic); tests pass their own to hold a
   * checkpoint in flight.
   */
  readonly checkpointIo?: SqlJsCheckpointIo;
  /**
   * How a group of commits is made durable: `fdatasync` on libuv's thread pool with the real
   * file system, the given `fs`'s synchronous one otherwise; tests pass their own to hold a sync
   * in flight (it must make every byte appended before the call durable, or reject).
   */
  readonly journalSync?: (handle: DurableFileHandle) => Promise<void>;
}

/** Makes the journal's appended records durable: the thread pool's `fdatasync` with the real file system, the given `fs`'s own (synchronous, so simulated runs stay deterministic) otherwise. */
type JournalSync = (handle: DurableFileHandle) => Promise<void>;

const threadPoolJournalSync: JournalSync = (handle) =>
  new Promise((resolvePromise, reject) => {
    fdatasyncOnThreadPool(handle, (error) => {
      if (error === null) resolvePromise();
      else reject(error);
    });
  });

function synchronousJournalSync(fs: DurableFs): JournalSync {
  return (handle) => settle(() => fs.fdatasync(handle));
}

export interface SqlJsCheckpointIo {
  readonly deflateFrame: SnapshotFrameDeflater;
  /** Makes the temporary snapshot file's data durable (a failure fails that checkpoint only). */
  syncSnapshotFile(handle: DurableFileHandle): Promise<void>;
}

/** zlib and fsync on libuv's thread pool: the event loop, and so the commits, never wait for them. */
const threadPoolCheckpointIo: SqlJsCheckpointIo = {
  deflateFrame: deflateFrameOnThreadPool,
  syncSnapshotFile: (handle) =>
    new Promise((resolvePromise, reject) => {
      fsync(handle, (error) => {
        if (error === null) resolvePromise();
        else reject(error);
      });
    }),
};

function synchronousCheckpointIo(fs: DurableFs): SqlJsCheckpointIo {
  return {
    deflateFrame: (piece) => Promise.resolve(deflateFrameSync(piece)),
    syncSnapshotFile: (handle) => {
      try {
        fs.fsync(handle);
        return Promise.resolve();
      } catch (error) {
        return Promise.reject(error instanceof Error ? error : new Error(String(error)));
      }
    },
  };
}

export interface SqlJsFileStats {
  /** Current length of journal.log. */
  readonly journalBytes: number;
  /** Journal and snapshot bytes written since open: the flash wear this driver causes. */
  readonly bytesWrittenTotal: number;
  /** The part of `bytesWrittenTotal` that snapshots took (the rest is journal records). */
  readonly snapshotBytesWrittenTotal: number;
  /** Write transactions journaled since open (read-only transactions are not counted). */
  readonly commits: number;
  /** Journal syncs since open that made commits durable: fewer than `commits` when commits shared one (group commit). */
  readonly journalSyncs: number;
  readonly checkpoints: number;
  /** True while a checkpoint writes its snapshot in the background. */
  readonly checkpointInFlight: boolean;
  /** The sequence number of the last committed write transaction. */
  readonly sequence: number;
  /** Reopens from what is durable after a failed sync (or a failed write that could not be cut back). */
  readonly reopens: number;
  /** True while the store refuses work after such a failure (the next call tries to reopen). */
  readonly failed: boolean;
}

export interface SqlJsFileDriver extends SqlDriver {
  readonly name: "sqljs-file";
  /**
   * Folds the journal into a snapshot now: waits for a checkpoint already in flight, then runs
   * one more (its seal and export queued like a transaction, its writing in the background).
   * Resolves once that snapshot is durable and its journal segment retired.
   */
  checkpoint(): Promise<void>;
  stats(): SqlJsFileStats;
}

export async function openSqlJsFileDriver(
  SQL: SqlJsStatic,
  options: SqlJsFileDriverOptions,
): Promise<SqlJsFileDriver> {
  const fs = options.fs ?? nodeDurableFs;
  const directory = resolve(options.path);
  try {
    fs.mkdirp(directory, DIRECTORY_MODE);
  } catch (error) {
    throw new QlrError(
      "storage_unavailable",
      `The database directory ${directory} could not be created.`,
      { cause: error },
    );
  }
  const lock = await acquireLock(directory, fs, DATABASE_LOCK);
  try {
    return new SqlJsFileStore(
      SQL,
      fs,
      directory,
      lock,
      loadDurableState(SQL, fs, directory, options),
      options,
    );
  } catch (error) {
    lock.release();
    throw error;
  }
}

interface PendingRecord {
  readonly sequence: number;
  readonly journalBytesBefore: number;
  readonly adoption: RecordAdoption;
}

/** What an open (or a reopen after a failed sync) rebuilt from the files. */
interface LoadedState {
  readonly connection: SqlJsConnection;
  readonly journal: DurableFileHandle;
  readonly dictionary: SqlTextDictionary;
  readonly journalBytes: number;
  readonly sequence: number;
  readonly snapshotSequence: number;
  /** The image size of the snapshot loaded (0 without one). */
  readonly imageBytes: number;
  /** A sealed journal segment is still there (its checkpoint did not finish). */
  readonly sealedPresent: boolean;
}

/** A checkpoint whose image is exported and whose snapshot is being written in the background. */
interface CheckpointInFlight {
  readonly done: Promise<void>;
}

class SqlJsFileStore implements SqlJsFileDriver {
  readonly dialect = "sqlite";
  readonly name = "sqljs-file";
  private readonly queue: SerialQueue;
  private readonly faults: SqlJsFileFaultPoints;
  private readonly checkpointIo: SqlJsCheckpointIo;
  private readonly journalSync: JournalSync;
  private readonly checkpointJournalBytes: number;
  /** The database image the last snapshot holds (uncompressed): the next checkpoint threshold. */
  private lastImageBytes = 0;
  private nextCheckpointJournalBytes: number;
  /** The running counts since open that `stats()` reports. */
  private readonly totals = {
    bytesWrittenTotal: 0,
    snapshotBytesWrittenTotal: 0,
    commits: 0,
    journalSyncs: 0,
    checkpoints: 0,
    reopens: 0,
  };
  /**
   * Transactions that succeeded since open, read-only ones included, and reopens (they reload
   * the rows from the files): nothing but this driver writes the files while it holds the lock
   * (see `SqlDriver.soleWriterTransactions`).
   */
  private succeededTransactions = 0;
  /** Counts reopens: a checkpoint started before one does not install its snapshot after it. */
  private generation = 0;
  private inFlight: CheckpointInFlight | undefined;
  /** Absent only while a reopen after a failure has not succeeded yet. */
  private connection: SqlJsConnection | undefined;
  private journal: DurableFileHandle | undefined;
  private dictionary: SqlTextDictionary = new SqlTextDictionary();
  private journalBytes = 0;
  /**
   * The journal prefix every acknowledged commit needs: its length after the last sync that
   * succeeded. A reopen after a failure cuts the journal back to it before reading anything, so
   * a record whose sync failed is never replayed, nor followed by new records.
   */
  private neededJournalBytes = 0;
  private sequence = 0;
  /** The last sequence whose record a sync covered (everything loaded at open counts). */
  private syncedSequence = 0;
  /** The loop syncing the journal while records wait for it: at most one. Never rejects. */
  private syncing: Promise<void> | undefined;
  /** Callers waiting for a sync to cover their sequence, in sequence order. */
  private readonly durabilityWaiters: DurabilityWaiter[] = [];
  /** A checkpoint is queued behind the sync of the commit that crossed the threshold. */
  private checkpointQueued = false;
  private snapshotSequence = 0;
  /** `journal.sealed.log` exists: a checkpoint that failed left it, and the next one retires it. */
  private sealedPresent = false;
  /**
   * Set when the files may no longer match what the store believes is durable: a sync failed
   * (its data may be lost although a later sync would succeed), or a failed write could not be
   * cut back. The store refuses work until a reopen from what is durable succeeds; the next
   * transaction or checkpoint tries that first.
   */
  private failure: unknown;

  constructor(
    private readonly SQL: SqlJsStatic,
    private readonly fs: DurableFs,
    private readonly directory: string,
    private readonly lock: HeldLock,
    loaded: LoadedState,
    private readonly options: SqlJsFileDriverOptions,
  ) {
    this.queue = new SerialQueue(`The sqljs-file driver for ${directory} is closed.`);
    this.faults = options.faultPoints ?? {};
    this.checkpointIo =
      options.checkpointIo ??
      (options.fs === undefined ? threadPoolCheckpointIo : synchronousCheckpointIo(fs));
    this.journalSync =
      options.journalSync ??
      (options.fs === undefined ? threadPoolJournalSync : synchronousJournalSync(fs));
    this.checkpointJournalBytes = Math.max(
      1,
      options.checkpointJournalBytes ?? DEFAULT_CHECKPOINT_JOURNAL_BYTES,
    );
    // A reopened large database amortises its next snapshot over as much journal as the last one.
    this.lastImageBytes = loaded.imageBytes;
    this.nextCheckpointJournalBytes = this.thresholdAfterSnapshot();
    this.adoptLoaded(loaded);
  }

  async transaction<T>(fn: (tx: SqlTx) => Promise<T>): Promise<T> {
    const { result, sequence } = await this.queue.run(() => this.runQueuedTransaction(fn));
    if (sequence > this.syncedSequence) await this.durable(sequence);
    return result;
  }

  get soleWriterTransactions(): number {
    return this.succeededTransactions;
  }

  async checkpoint(): Promise<void> {
    await this.inFlight?.done.catch(() => undefined);
    const started = await this.queue.run(async () => {
      await this.syncIdle();
      const usable = this.usable();
      // Another checkpoint may have started (after a commit) while this one waited.
      return this.inFlight ?? this.startCheckpoint(usable);
    });
    await started?.done;
  }

  stats(): SqlJsFileStats {
    return {
      journalBytes: this.journalBytes,
      ...this.totals,
      checkpointInFlight: this.inFlight !== undefined,
      sequence: this.sequence,
      failed: this.failure !== undefined,
    };
  }

  close(): Promise<void> {
    return this.queue.close(() => this.shutdown());
  }

  private adoptLoaded(loaded: LoadedState): void {
    this.connection = loaded.connection;
    this.journal = loaded.journal;
    this.dictionary = loaded.dictionary;
    this.journalBytes = loaded.journalBytes;
    this.neededJournalBytes = loaded.journalBytes;
    this.sequence = loaded.sequence;
    this.syncedSequence = loaded.sequence;
    this.snapshotSequence = loaded.snapshotSequence;
    this.sealedPresent = loaded.sealedPresent;
  }

  private async runQueuedTransaction<T>(
    fn: (tx: SqlTx) => Promise<T>,
  ): Promise<{ readonly result: T; readonly sequence: number }> {
    // A reopen closes the journal: never under a sync still running on it.
    if (this.failure !== undefined) await this.syncing;
    const usable = this.usable();
    const connection = usable.connection;
    const state: { pending?: PendingRecord } = {};
    const result = await runTransaction(connection, fn, {
      beforeCommit: () => {
        state.pending = this.appendRecord(usable);
      },
      commitFailed: () => {
        if (state.pending !== undefined)
          this.cutJournalBack(usable.journal, state.pending.journalBytesBefore);
      },
    });
    // Committed (its record appended, not yet synced): counted before the queue lets the next
    // one begin. Its caller hears of it only once a sync covers `sequence` (see `transaction`);
    // a read-only one waits for what it could have read.
    this.succeededTransactions += 1;
    const pending = state.pending;
    if (pending === undefined) return { result, sequence: this.sequence };
    this.dictionary.adopt(pending.adoption);
    this.sequence = pending.sequence;
    this.totals.commits += 1;
    this.startSync();
    this.faults.afterCommit?.();
    if (this.inFlight === undefined && this.journalBytes >= this.nextCheckpointJournalBytes)
      this.checkpointAfterSync(usable);
    return { result, sequence: pending.sequence };
  }

  /** Resolves once a sync covered `sequence`; rejects when the sync that should have failed. */
  private durable(sequence: number): Promise<void> {
    if (sequence <= this.syncedSequence) return Promise.resolve();
    if (this.failure !== undefined) return Promise.reject(this.unsyncedError(this.failure));
    return new Promise<void>((resolvePromise, reject) => {
      this.durabilityWaiters.push({ sequence, resolve: resolvePromise, reject });
      this.startSync();
    });
  }

  private startSync(): void {
    if (this.syncing !== undefined || this.failure !== undefined) return;
    this.syncing = this.syncJournal().finally(() => {
      this.syncing = undefined;
    });
  }

  /**
   * Syncs the journal until a sync covers the last committed record. Each pass covers every
   * record appended before it began (group commit: the commits that arrive during one sync share
   * the next). Nothing else closes or replaces the journal meanwhile: the seal of a checkpoint
   * and a reopen wait for this loop (`syncIdle`). A failed sync is never retried (fsyncgate):
   * the store fails, cuts the journal back to what acknowledged commits need, and refuses every
   * waiter.
   */
  private async syncJournal(): Promise<void> {
    while (this.failure === undefined && this.syncedSequence < this.sequence) {
      const journal = this.journal;
      if (journal === undefined) return;
      const target = this.sequence;
      const journalBytes = this.journalBytes;
      try {
        await this.journalSync(journal);
        this.faults.afterJournalSync?.();
      } catch (error) {
        this.failSync(journal, error);
        return;
      }
      this.syncedSequence = target;
      this.neededJournalBytes = journalBytes;
      this.totals.journalSyncs += 1;
      while (this.durabilityWaiters.length > 0) {
        const waiter = this.durabilityWaiters[0];
        if (waiter === undefined || waiter.sequence > target) break;
        this.durabilityWaiters.shift();
        waiter.resolve();
      }
    }
    // Another failure (a cut-back that failed) stopped the loop with records no sync covered:
    // the reopen drops them, so their callers hear now that they failed rather than never.
    if (this.failure !== undefined)
      for (const waiter of this.durabilityWaiters.splice(0))
        waiter.reject(this.unsyncedError(this.failure));
  }

  private failSync(journal: DurableFileHandle, error: unknown): void {
    this.failure = error;
    // At once, not only at the reopen: no acknowledged commit needs what follows, and a crash
    // from here on must not find a record whose caller heard it failed. A new sync of a new
    // change (the cut), not a retry of the failed one.
    try {
      if (this.fs.sizeOf(journal) > this.neededJournalBytes) {
        this.fs.truncate(journal, this.neededJournalBytes);
        this.fs.fdatasync(journal);
      }
      this.journalBytes = this.neededJournalBytes;
    } catch {
      // The reopen tries the cut again before reading anything.
    }
    const refused = this.unsyncedError(error);
    for (const waiter of this.durabilityWaiters.splice(0)) waiter.reject(refused);
  }

  private unsyncedError(cause: unknown): QlrError {
    return new QlrError(
      "storage_unavailable",
      `The journal in ${this.directory} could not be synced (${errorMessage(cause)}); the transaction was rolled back and the store reopens from what is durable before its next write.`,
      { cause },
    );
  }

  /** Waits until no sync runs and every committed record is covered (or the store failed). */
  private async syncIdle(): Promise<void> {
    for (;;) {
      if (this.syncing === undefined) {
        if (this.failure !== undefined || this.syncedSequence >= this.sequence) return;
        this.startSync();
      }
      await this.syncing;
    }
  }

  /** Appends the current transaction's record (the sync follows the commit); undefined when it wrote nothing. */
  private appendRecord(usable: Usable): PendingRecord | undefined {
    const unjournaled = usable.connection.unjournaledChangeBy();
    if (unjournaled !== undefined) {
      throw new QlrError(
        "internal",
        `A statement failed after changing rows (an OR FAIL conflict clause?); the journal cannot replay that, so the transaction was rolled back (in: ${unjournaled}).`,
      );
    }
    const writes: readonly RecordedWrite[] = usable.connection.recordedWrites();
    if (writes.length === 0) return undefined;
    const sequence = this.sequence + 1;
    const { bytes, adoption } = this.dictionary.encodeRecord(sequence, writes);
    const journalBytesBefore = this.journalBytes;
    try {
      this.faults.beforeJournalWrite?.();
      // Counted before the write: a failed append may still have written (and worn) a prefix.
      this.totals.bytesWrittenTotal += bytes.length;
      this.fs.append(usable.journal, bytes);
      this.journalBytes = journalBytesBefore + bytes.length;
      this.faults.beforeJournalSync?.();
    } catch (error) {
      this.cutJournalBack(usable.journal, journalBytesBefore);
      throw new QlrError(
        "storage_unavailable",
        `The journal in ${this.directory} could not be written (${errorMessage(error)}); the transaction was rolled back.`,
        { cause: error },
      );
    }
    return { sequence, journalBytesBefore, adoption };
  }

  /** Removes a record that will not be committed, so that no later record follows it. */
  private cutJournalBack(journal: DurableFileHandle, journalBytes: number): void {
    try {
      this.fs.truncate(journal, journalBytes);
      this.fs.fdatasync(journal);
      this.journalBytes = journalBytes;
    } catch (error) {
      // The journal may now end in a record sql.js rolled back; appending after it would make it
      // a mid-journal record, so the store stops here and reopens from what is durable.
      this.failure = error;
    }
  }

  /**
   * The commit is already durable, so a failed automatic checkpoint must not fail it: the journal
   * keeps growing and the next attempt waits until it has grown by another threshold, so a full
   * disk does not cost a snapshot write per commit. The snapshot is written in the background.
   */
  private checkpointAfterSync(usable: Usable): void {
    // The seal closes the journal and must find every record synced: with the sync on the
    // thread pool that is after the commit, so the checkpoint queues behind it.
    if (this.syncing === undefined && this.syncedSequence >= this.sequence) {
      this.checkpointAfterCommit(usable);
      return;
    }
    if (this.checkpointQueued) return;
    this.checkpointQueued = true;
    void this.queue
      .run(async () => {
        await this.syncIdle();
        this.checkpointQueued = false;
        if (this.failure !== undefined || this.inFlight !== undefined) return;
        if (this.journalBytes < this.nextCheckpointJournalBytes) return;
        this.checkpointAfterCommit(this.usable());
      })
      .catch(() => {
        this.checkpointQueued = false;
      });
  }

  private checkpointAfterCommit(usable: Usable): void {
    try {
      const started = this.startCheckpoint(usable);
      // Its failure is handled inside (the threshold moves on); nobody else waits for it here.
      void started?.done.catch(() => undefined);
    } catch {
      this.nextCheckpointJournalBytes = this.journalBytes + this.checkpointJournalBytes;
    }
  }

  /**
   * The journal may grow to the size of the last snapshot's image (uncompressed) before the
   * next checkpoint: that bounds the replay at open to about one database's worth of
   * statements, and since the snapshot file is the image deflated (≈ 4× smaller), a snapshot
   * costs about a quarter of the journal bytes it retires however large the database grows.
   */
  private thresholdAfterSnapshot(): number {
    return Math.min(
      MAX_CHECKPOINT_JOURNAL_BYTES,
      Math.max(this.checkpointJournalBytes, this.lastImageBytes),
    );
  }

  /**
   * The part of a checkpoint that runs in the commit queue, quickly: seal the journal (rename
   * it to `journal.sealed.log` and start an empty `journal.log`, so new commits never share a
   * file with the records the snapshot retires) and export the image. Then the snapshot is
   * compressed, written and synced in the background while commits go on; undefined when there
   * is nothing to fold. Only one checkpoint is in flight at a time.
   */
  private startCheckpoint(usable: Usable): CheckpointInFlight | undefined {
    if (this.journalBytes === 0 && this.sequence === this.snapshotSequence && !this.sealedPresent)
      return undefined;
    const { connection } = usable;
    // After a failed checkpoint the sealed segment stays, and `journal.log` keeps the records that
    // followed it: this snapshot includes both, and the open skips what it already holds.
    if (!this.sealedPresent && this.journalBytes > 0) {
      this.sealJournal(usable.journal);
      this.faults.duringCheckpoint?.("sealed");
    }
    const journalBytesAtExport = this.journalBytes;
    // sql.js 1.17 exports through SQLite's backup API and keeps statements alive, but earlier
    // versions closed and reopened the database inside export(); freeing the statements and
    // reapplying the pragmas costs little at checkpoint frequency and holds for both.
    connection.clearStatements();
    let image: Uint8Array;
    try {
      image = connection.db.export();
    } catch (error) {
      throw new QlrError(
        "storage_unavailable",
        "sql.js could not export the database for a checkpoint.",
        { cause: error },
      );
    } finally {
      connection.applyPragmas();
    }
    this.faults.duringCheckpoint?.("exported");
    const includedSequence = this.sequence;
    const generation = this.generation;
    this.nextCheckpointJournalBytes = Number.POSITIVE_INFINITY;
    const inFlight: { done: Promise<void> } = {
      done: this.writeSnapshot(image, includedSequence, generation).then(
        () => {
          this.inFlight = undefined;
          this.nextCheckpointJournalBytes = journalBytesAtExport + this.thresholdAfterSnapshot();
        },
        (error: unknown) => {
          this.inFlight = undefined;
          this.nextCheckpointJournalBytes = this.journalBytes + this.checkpointJournalBytes;
          throw error;
        },
      ),
    };
    this.inFlight = inFlight;
    return inFlight;
  }

  /**
   * Renames the live journal to the sealed name and opens a new empty one. The directory is
   * synced after the rename and again after the create: a power cut may keep directory entries
   * in any order, and a new `journal.log` surviving without the rename would hide the old one.
   * No commit is acknowledged in the new file before its entry is durable.
   */
  private sealJournal(journal: DurableFileHandle): void {
    const journalPath = join(this.directory, JOURNAL_FILE);
    try {
      this.fs.rename(journalPath, join(this.directory, SEALED_JOURNAL_FILE));
    } catch (error) {
      throw new QlrError(
        "storage_unavailable",
        `The journal in ${this.directory} could not be sealed for a checkpoint (${errorMessage(error)}).`,
        { cause: error },
      );
    }
    this.sealedPresent = true;
    try {
      this.fs.fsyncDirectory(this.directory);
      const next = this.fs.open(journalPath, "append", FILE_MODE);
      this.journal = next;
      this.journalBytes = 0;
      this.neededJournalBytes = 0;
      this.dictionary = new SqlTextDictionary();
      closeQuietly(this.fs, journal);
      this.fs.fsyncDirectory(this.directory);
    } catch (error) {
      // The files are consistent (the open reads the sealed segment, then `journal.log`), but
      // which handle to append to is not settled: reopen from the files.
      this.failure = error;
      throw new QlrError(
        "storage_unavailable",
        `The journal in ${this.directory} could not be started after sealing it (${errorMessage(error)}).`,
        { cause: error },
      );
    }
  }

  /**
   * The background part: compress and write `snapshot.sqlite.tmp` frame by frame and sync it,
   * each step off the event loop; then, in one synchronous stretch no commit can enter, rename
   * it over the snapshot, sync the directory and remove the sealed segment.
   */
  private async writeSnapshot(
    image: Uint8Array,
    includedSequence: number,
    generation: number,
  ): Promise<void> {
    const snapshotPath = join(this.directory, SNAPSHOT_FILE);
    const tempPath = join(this.directory, SNAPSHOT_TEMP_FILE);
    let renamed = false;
    try {
      const fd = this.fs.open(tempPath, "truncate", FILE_MODE);
      try {
        // One compressed frame at a time: never a second image-sized buffer.
        for await (const part of encodeSnapshotAsync(
          image,
          includedSequence,
          this.options.snapshotFrameImageBytes ?? SNAPSHOT_FRAME_IMAGE_BYTES,
          this.checkpointIo.deflateFrame,
        )) {
          this.totals.bytesWrittenTotal += part.length;
          this.totals.snapshotBytesWrittenTotal += part.length;
          this.fs.append(fd, part);
        }
        // A failed sync here costs nothing but this attempt: the temporary file is never read,
        // and the next checkpoint writes a new one from the start.
        await this.checkpointIo.syncSnapshotFile(fd);
      } finally {
        this.fs.close(fd);
      }
      this.faults.duringCheckpoint?.("temp-synced");
      if (generation !== this.generation)
        throw new Error("the store reopened from its files while the snapshot was written");
      this.fs.rename(tempPath, snapshotPath);
      renamed = true;
      this.faults.duringCheckpoint?.("renamed");
      this.fs.fsyncDirectory(this.directory);
      this.faults.duringCheckpoint?.("directory-synced");
    } catch (error) {
      // A half-written temporary file holds space a full disk needs back (the open removes it too).
      if (!renamed) removeQuietly(this.fs, tempPath);
      if (isQlrError(error)) throw error;
      throw new QlrError(
        "storage_unavailable",
        `The snapshot in ${this.directory} could not be written (${errorMessage(error)}).`,
        { cause: error },
      );
    }
    this.lastImageBytes = image.length;
    this.snapshotSequence = Math.max(this.snapshotSequence, includedSequence);
    this.totals.checkpoints += 1;
    // Every record of the sealed segment is in a durable snapshot now. Its removal need not be
    // durable: an open that finds it again skips all of it and removes it.
    try {
      removeIfPresent(this.fs, join(this.directory, SEALED_JOURNAL_FILE));
      this.sealedPresent = false;
    } catch (error) {
      throw new QlrError(
        "storage_unavailable",
        `The sealed journal in ${this.directory} could not be removed after a checkpoint (${errorMessage(error)}); the next checkpoint retires it.`,
        { cause: error },
      );
    }
    this.faults.duringCheckpoint?.("retired");
  }

  /**
   * The connection and journal, after reopening from what is durable if a failure asked for it:
   * the journal is cut back to the prefix acknowledged commits need and synced (a new sync of a
   * new change, not a retry of the failed one), then the snapshot is loaded and the journal
   * replayed as at open. If that fails too, the store stays refused and the next call tries again.
   */
  private usable(): Usable {
    if (this.failure === undefined && this.connection !== undefined && this.journal !== undefined)
      return { connection: this.connection, journal: this.journal };
    try {
      if (this.journal !== undefined) {
        const journal = this.journal;
        if (this.fs.sizeOf(journal) > this.neededJournalBytes)
          this.fs.truncate(journal, this.neededJournalBytes);
        this.fs.fsync(journal);
        this.journal = undefined;
        closeQuietly(this.fs, journal);
      }
      // Closed before loading: the old image and the new one are never in memory together.
      this.connection?.close();
      this.connection = undefined;
      this.generation += 1;
      this.succeededTransactions += 1;
      const loaded = loadDurableState(this.SQL, this.fs, this.directory, this.options);
      this.adoptLoaded(loaded);
      this.failure = undefined;
      this.totals.reopens += 1;
      return { connection: loaded.connection, journal: loaded.journal };
    } catch (error) {
      const cause = this.failure ?? error;
      this.failure = cause;
      throw new QlrError(
        "storage_unavailable",
        `The store in ${this.directory} stopped after a failed write or sync and could not yet be reopened from what is durable (${errorMessage(error)}).`,
        { cause: error },
      );
    }
  }

  private async shutdown(): Promise<void> {
    try {
      // Every commit's caller hears its outcome before the journal closes.
      await this.syncIdle();
      // The background part never waits for the queue, so waiting for it here cannot deadlock.
      await this.inFlight?.done.catch(() => undefined);
      if (this.failure === undefined && this.connection !== undefined && this.journal !== undefined)
        await this.startCheckpoint({ connection: this.connection, journal: this.journal })?.done;
    } catch {
      // The journal segments still hold every commit, so a failed final checkpoint loses nothing.
    } finally {
      try {
        if (this.journal !== undefined) closeQuietly(this.fs, this.journal);
      } finally {
        this.connection?.close();
        this.lock.release();
      }
    }
  }
}

interface DurabilityWaiter {
  readonly sequence: number;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

interface Usable {
  readonly connection: SqlJsConnection;
  readonly journal: DurableFileHandle;
}

/**
 * Loads the snapshot, replays the journal and cuts a torn tail; the caller holds the lock. Used
 * by the open and by the reopen after a failure.
 */
function loadDurableState(
  SQL: SqlJsStatic,
  fs: DurableFs,
  directory: string,
  options: SqlJsFileDriverOptions,
): LoadedState {
  const snapshotPath = join(directory, SNAPSHOT_FILE);
  const journalPath = join(directory, JOURNAL_FILE);
  const sealedPath = join(directory, SEALED_JOURNAL_FILE);
  let connection: SqlJsConnection | undefined;
  let journal: DurableFileHandle | undefined;
  try {
    // A leftover temporary snapshot is a checkpoint that crashed before its rename: the old snapshot and the journal still hold everything.
    removeIfPresent(fs, join(directory, SNAPSHOT_TEMP_FILE));
    const loaded = loadSnapshot(SQL, fs, snapshotPath, options);
    connection = loaded.connection;
    const snapshotSequence = loaded.includedSequence;
    const sealedExisted = fs.exists(sealedPath);
    const journalExisted = fs.exists(journalPath);
    journal = fs.open(journalPath, "append", FILE_MODE);
    if (!journalExisted) fs.fsyncDirectory(directory);

    // The sealed segment (a checkpoint's, not finished) comes first, then `journal.log`: one
    // sequence runs through both, each with its own statement ids and compression window.
    const replay = new JournalReplay(connection, snapshotSequence);
    const sealed = sealedExisted
      ? replay.segment(fs, sealedPath, SEALED_JOURNAL_FILE)
      : { scan: { validBytes: 0, tornTailBytes: 0 }, skipped: 0, applied: 0 };
    const live = replay.segment(fs, journalPath, JOURNAL_FILE, journalExisted);
    if (sealed.scan.tornTailBytes > 0 && live.skipped + live.applied > 0) {
      // Sealing happens only once every record of the segment is synced, so only damage tears it.
      throw new QlrError(
        "storage_corrupt",
        `The sqljs-file journal segment ${sealedPath} is damaged at byte offset ${sealed.scan.validBytes}, yet ${JOURNAL_FILE} holds records after it.`,
      );
    }
    let journalBytes = live.scan.validBytes;
    if (live.scan.tornTailBytes > 0) {
      fs.truncate(journal, live.scan.validBytes);
      fs.fsync(journal);
    }
    let dictionary = live.dictionary;
    let sealedPresent = sealedExisted;
    const snapshotHoldsSealed = sealedExisted && sealed.applied === 0;
    const snapshotHoldsLive = live.skipped > 0 && live.applied === 0;
    if (snapshotHoldsSealed || snapshotHoldsLive) {
      // A checkpoint stopped after its rename and before retiring the journal it folded: finish
      // it. The rename may not be durable yet (the process that made it may have died before
      // syncing the directory), and dropping journal records is only safe once it is.
      fs.fsyncDirectory(directory);
    }
    if (snapshotHoldsSealed) {
      fs.unlink(sealedPath);
      sealedPresent = false;
    } else if (sealed.scan.tornTailBytes > 0) {
      const handle = fs.open(sealedPath, "append", FILE_MODE);
      try {
        fs.truncate(handle, sealed.scan.validBytes);
        fs.fsync(handle);
      } finally {
        fs.close(handle);
      }
    }
    if (snapshotHoldsLive) {
      fs.truncate(journal, 0);
      fs.fsync(journal);
      journalBytes = 0;
      dictionary = new SqlTextDictionary();
    }
    return {
      connection,
      journal,
      dictionary,
      journalBytes,
      sequence: replay.sequence,
      snapshotSequence,
      imageBytes: loaded.imageBytes,
      sealedPresent,
    };
  } catch (error) {
    if (journal !== undefined) closeQuietly(fs, journal);
    connection?.close();
    if (isQlrError(error)) throw error;
    throw new QlrError(
      "storage_unavailable",
      `The database in ${directory} could not be opened (${errorMessage(error)}).`,
      { cause: error },
    );
  }
}

/** What the replay of one journal segment found. */
interface SegmentReplay {
  readonly scan: JournalScan;
  /** Records the snapshot already held. */
  readonly skipped: number;
  readonly applied: number;
  /** The segment's statement ids and compression window after its last record. */
  readonly dictionary: SqlTextDictionary;
}

/** Replays journal segments in order onto the snapshot, checking that one sequence runs through them. */
class JournalReplay {
  /** The last sequence applied (the snapshot's at first). */
  sequence: number;
  private previousRecordSequence: number | undefined;

  constructor(
    private readonly connection: SqlJsConnection,
    private readonly snapshotSequence: number,
  ) {
    this.sequence = snapshotSequence;
  }

  segment(fs: DurableFs, path: string, name: string, exists = true): SegmentReplay {
    const dictionary = new SqlTextDictionary();
    let skipped = 0;
    let applied = 0;
    try {
      const scan = scanJournalAt(fs, path, exists, (record) => {
        if (
          this.previousRecordSequence !== undefined &&
          record.sequence !== this.previousRecordSequence + 1
        ) {
          throw corrupt(
            record.offset,
            `its sequence ${record.sequence} does not follow the previous record's ${this.previousRecordSequence}`,
          );
        }
        this.previousRecordSequence = record.sequence;
        // Decoding even skipped records keeps the statement-id numbering the same as the writer's.
        const statements = dictionary.decodeStatements(record.payload, record.offset);
        if (record.sequence <= this.snapshotSequence) {
          skipped += 1;
          return;
        }
        if (record.sequence !== this.sequence + 1) {
          throw corrupt(
            record.offset,
            `its sequence ${record.sequence} leaves a gap after sequence ${this.sequence} of the snapshot`,
          );
        }
        replayRecord(this.connection, record, statements);
        this.sequence = record.sequence;
        applied += 1;
      });
      return { scan, skipped, applied, dictionary };
    } catch (error) {
      if (name === JOURNAL_FILE || !isQlrError(error, "storage_corrupt")) throw error;
      throw new QlrError("storage_corrupt", `In ${name}: ${errorMessage(error)}`, {
        cause: error,
      });
    }
  }
}

/**
 * Opens the snapshot as a sql.js database. The file's bytes live only in this function's frame:
 * sql.js copies them into its own in-memory file, and once this returns nothing refers to them,
 * so the next large allocation (the journal, read next) can reclaim them and the open does not
 * hold the image twice over while it replays.
 */
function loadSnapshot(
  SQL: SqlJsStatic,
  fs: DurableFs,
  snapshotPath: string,
  options: SqlJsFileDriverOptions,
): { connection: SqlJsConnection; includedSequence: number; imageBytes: number } {
  const snapshot: DecodedSnapshot | undefined = fs.exists(snapshotPath)
    ? decodeSnapshot(asBuffer(fs.readFile(snapshotPath)), snapshotPath)
    : undefined;
  try {
    return {
      connection: new SqlJsConnection(new SQL.Database(snapshot?.image ?? null), {
        ...options,
        trackWrites: true,
      }),
      includedSequence: snapshot?.includedSequence ?? 0,
      imageBytes: snapshot?.image.length ?? 0,
    };
  } catch (error) {
    throw mapSqlJsError(error, "open snapshot");
  }
}

/** Scans the journal file record by record (journal.ts), through its own read-only handle. */
function scanJournalAt(
  fs: DurableFs,
  journalPath: string,
  exists: boolean,
  onRecord: (record: ParsedRecord) => void,
): JournalScan {
  if (!exists) return { validBytes: 0, tornTailBytes: 0 };
  const handle = fs.open(journalPath, "read");
  try {
    return scanJournalFile(
      (position, length) => asBuffer(fs.read(handle, position, length)),
      fs.sizeOf(handle),
      onRecord,
    );
  } finally {
    fs.close(handle);
  }
}

function replayRecord(
  connection: SqlJsConnection,
  record: ParsedRecord,
  statements: readonly RecordedWrite[],
): void {
  try {
    connection.begin();
    for (const statement of statements) connection.query(statement.sql, statement.params);
    connection.commit();
  } catch (error) {
    connection.rollbackQuietly();
    const reason = errorMessage(error);
    throw corrupt(
      record.offset,
      `record ${record.sequence} does not replay on the snapshot (${reason})`,
      error,
    );
  }
}

/** The same bytes as a Buffer, without copying them. */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
}

function removeIfPresent(fs: DurableFs, path: string): void {
  try {
    fs.unlink(path);
  } catch (error) {
    if (errorCode(error) !== "ENOENT") throw error;
  }
}

function removeQuietly(fs: DurableFs, path: string): void {
  try {
    fs.unlink(path);
  } catch {
    // Best effort: the next open removes a leftover temporary snapshot.
  }
}

function closeQuietly(fs: DurableFs, handle: DurableFileHandle): void {
  try {
    fs.close(handle);
  } catch {
    // Nothing was pending on the handle that a close could still save; every write was synced or given up.
  }
}

/** Runs synchronous work as a task for the queue, turning a throw into a rejection. */
function settle<T>(work: () => T): Promise<T> {
  try {
    return Promise.resolve(work());
  } catch (error) {
    return Promise.reject(error instanceof Error ? error : new Error(String(error)));
  }
}
