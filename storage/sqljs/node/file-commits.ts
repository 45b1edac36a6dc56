/**
 * The sqljs-file store's state and its commit path: transactions through the serial queue,
 * their journal records, the group commit that makes them durable, and the reopen from the
 * files after a failure. The checkpoint (file-checkpoint.ts) builds on it; the driver
 * (file-driver.ts) is what callers see.
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
 */
import type { SqlJsStatic } from "sql.js";
import { QlrError, errorMessage } from "../../../src/errors.ts";
import type { SqlTx } from "../../driver.ts";
import type { DurableFileHandle, DurableFs } from "../../node/durable-fs.ts";
import type { HeldLock } from "../../node/lock.ts";
import { SerialQueue } from "../../serial-queue.ts";
import { runTransaction } from "../connection.ts";
import type { RecordedWrite, SqlJsConnection } from "../connection.ts";
import {
  DEFAULT_CHECKPOINT_JOURNAL_BYTES,
  MAX_CHECKPOINT_JOURNAL_BYTES,
  type SqlJsCheckpointIo,
  type SqlJsFileDriverOptions,
  type SqlJsFileFaultPoints,
} from "./file-api.ts";
import {
  synchronousCheckpointIo,
  synchronousJournalSync,
  threadPoolCheckpointIo,
  threadPoolJournalSync,
  type JournalSync,
} from "./file-io.ts";
import { closeQuietly } from "./file-layout.ts";
import { loadDurableState, type LoadedState } from "./file-recovery.ts";
import { SqlTextDictionary } from "./journal.ts";
import type { RecordAdoption } from "./journal.ts";

interface PendingRecord {
  readonly sequence: number;
  readonly journalBytesBefore: number;
  readonly adoption: RecordAdoption;
}

/** A checkpoint whose image is exported and whose snapshot is being written in the background. */
export interface CheckpointInFlight {
  readonly done: Promise<void>;
}

interface DurabilityWaiter {
  readonly sequence: number;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

export interface Usable {
  readonly connection: SqlJsConnection;
  readonly journal: DurableFileHandle;
}

/** The state every part of the store shares, and the commit path over it. */
export abstract class SqlJsFileCommits {
  protected readonly queue: SerialQueue;
  protected readonly faults: SqlJsFileFaultPoints;
  protected readonly checkpointIo: SqlJsCheckpointIo;
  private readonly journalSync: JournalSync;
  protected readonly checkpointJournalBytes: number;
  /** The database image the last snapshot holds (uncompressed): the next checkpoint threshold. */
  protected lastImageBytes = 0;
  protected nextCheckpointJournalBytes: number;
  /** The running counts since open that `stats()` reports. */
  protected readonly totals = {
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
  protected generation = 0;
  protected inFlight: CheckpointInFlight | undefined;
  /** Absent only while a reopen after a failure has not succeeded yet. */
  protected connection: SqlJsConnection | undefined;
  protected journal: DurableFileHandle | undefined;
  protected dictionary: SqlTextDictionary = new SqlTextDictionary();
  protected journalBytes = 0;
  /**
   * The journal prefix every acknowledged commit needs: its length after the last sync that
   * succeeded. A reopen after a failure cuts the journal back to it before reading anything, so
   * a record whose sync failed is never replayed, nor followed by new records.
   */
  protected neededJournalBytes = 0;
  protected sequence = 0;
  /** The last sequence whose record a sync covered (everything loaded at open counts). */
  protected syncedSequence = 0;
  /** The loop syncing the journal while records wait for it: at most one. Never rejects. */
  protected syncing: Promise<void> | undefined;
  /** Callers waiting for a sync to cover their sequence, in sequence order. */
  private readonly durabilityWaiters: DurabilityWaiter[] = [];
  /** A checkpoint is queued behind the sync of the commit that crossed the threshold. */
  protected checkpointQueued = false;
  protected snapshotSequence = 0;
  /** `journal.sealed.log` exists: a checkpoint that failed left it, and the next one retires it. */
  protected sealedPresent = false;
  /**
   * Set when the files may no longer match what the store believes is durable: a sync failed
   * (its data may be lost although a later sync would succeed), or a failed write could not be
   * cut back. The store refuses work until a reopen from what is durable succeeds; the next
   * transaction or checkpoint tries that first.
   */
  protected failure: unknown;

  constructor(
    private readonly SQL: SqlJsStatic,
    protected readonly fs: DurableFs,
    protected readonly directory: string,
    protected readonly lock: HeldLock,
    loaded: LoadedState,
    protected readonly options: SqlJsFileDriverOptions,
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
  protected async syncIdle(): Promise<void> {
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

  /** Starts a checkpoint after the commit that crossed the threshold (file-checkpoint.ts). */
  protected abstract checkpointAfterSync(usable: Usable): void;

  /**
   * The journal may grow to the size of the last snapshot's image (uncompressed) before the
   * next checkpoint: that bounds the replay at open to about one database's worth of
   * statements, and since the snapshot file is the image deflated (≈ 4× smaller), a snapshot
   * costs about a quarter of the journal bytes it retires however large the database grows.
   */
  protected thresholdAfterSnapshot(): number {
    return Math.min(
      MAX_CHECKPOINT_JOURNAL_BYTES,
      Math.max(this.checkpointJournalBytes, this.lastImageBytes),
    );
  }

  /**
   * The connection and journal, after reopening from what is durable if a failure asked for it:
   * the journal is cut back to the prefix acknowledged commits need and synced (a new sync of a
   * new change, not a retry of the failed one), then the snapshot is loaded and the journal
   * replayed as at open. If that fails too, the store stays refused and the next call tries again.
   */
  protected usable(): Usable {
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
}
