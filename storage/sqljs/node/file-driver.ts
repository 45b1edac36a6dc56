/**
 * The device store: a sql.js database that lives in memory and is made crash-consistent on
 * disk by a snapshot plus an append-only journal. Node-only. Files in the directory `path`:
 *
 * - `snapshot.sqlite`: a full sql.js `export()` with a trailer naming the journal sequence it
 *   includes (format in snapshot.ts);
 * - `journal.log`: one checksummed record per committed write transaction (format and the torn
 *   tail rule in journal.ts);
 * - `lock`: the advisory exclusive lock (lock.ts).
 *
 * Commit order. The transaction's statements run inside a sql.js transaction; then the record
 * is appended and `fdatasync`ed (the durable point); then sql.js commits; only then does the
 * caller see success. A failed append rolls back and answers `storage_unavailable`: nothing is
 * acknowledged, and the journal is cut back to its previous length (if even that fails, the
 * driver refuses further work until it is reopened).
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
 * Checkpoint, after a commit leaves the journal over `checkpointJournalBytes`, on
 * `checkpoint()` and on `close()`: export, write `snapshot.sqlite.tmp`, fsync it, rename it over
 * the snapshot, fsync the directory, then truncate the journal and fsync it. A crash between any
 * two steps opens correctly: before the rename the old snapshot and the full journal are
 * intact; after it, journal records up to the snapshot's included sequence are skipped.
 */
import { closeSync, existsSync, fdatasyncSync, fstatSync, fsyncSync, ftruncateSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeSync } from "node:fs";

/** The database holds every secret a manifest carries (env values): owner-only, like the state dir. */
const FILE_MODE = 0o600;
const DIRECTORY_MODE = 0o700;
import { join, resolve } from "node:path";
import type { SqlJsStatic } from "sql.js";
import { QlrError, errorMessage, isQlrError } from "../../../src/errors.ts";
import type { SqlDriver, SqlTx } from "../../driver.ts";
import { fsyncDirectorySync } from "../../node/fsync-directory.ts";
import { SerialQueue } from "../../serial-queue.ts";
import { SqlJsConnection, mapSqlJsError, runTransaction } from "../connection.ts";
import type { RecordedWrite, SqlJsConnectionOptions } from "../connection.ts";
import { SqlTextDictionary, corrupt, scanJournalFile } from "./journal.ts";
import type { JournalScan, ParsedRecord } from "./journal.ts";
import { acquireLock } from "./lock.ts";
import type { HeldLock } from "./lock.ts";
import { decodeSnapshot, encodeSnapshotTrailer } from "./snapshot.ts";

export const DEFAULT_CHECKPOINT_JOURNAL_BYTES = 1024 * 1024;
/** The journal never grows past this before a checkpoint, whatever the database size (open-time replay stays bounded). */
export const MAX_CHECKPOINT_JOURNAL_BYTES = 64 * 1024 * 1024;

const SNAPSHOT_FILE = "snapshot.sqlite";
const SNAPSHOT_TEMP_FILE = "snapshot.sqlite.tmp";
const JOURNAL_FILE = "journal.log";

/** The checkpoint's steps in order, each reported to `faultPoints.duringCheckpoint` once it is done. */
export const SQLJS_CHECKPOINT_STEPS = ["exported", "temp-synced", "renamed", "directory-synced", "journal-reset"] as const;
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
}

export interface SqlJsFileStats {
  /** Current length of journal.log. */
  readonly journalBytes: number;
  /** Journal and snapshot bytes written since open: the flash wear this driver causes. */
  readonly bytesWrittenTotal: number;
  /** Write transactions journaled since open (read-only transactions are not counted). */
  readonly commits: number;
  readonly checkpoints: number;
  /** The sequence number of the last committed write transaction. */
  readonly sequence: number;
}

export interface SqlJsFileDriver extends SqlDriver {
  readonly name: "sqljs-file";
  /** Folds the journal into the snapshot now (queued like a transaction). */
  checkpoint(): Promise<void>;
  stats(): SqlJsFileStats;
}

export async function openSqlJsFileDriver(SQL: SqlJsStatic, options: SqlJsFileDriverOptions): Promise<SqlJsFileDriver> {
  const directory = resolve(options.path);
  try {
    mkdirSync(directory, { recursive: true, mode: DIRECTORY_MODE });
  } catch (error) {
    throw new QlrError("storage_unavailable", `The database directory ${directory} could not be created.`, { cause: error });
  }
  const lock = await acquireLock(directory);
  try {
    return SqlJsFileStore.open(SQL, directory, lock, options);
  } catch (error) {
    lock.release();
    throw error;
  }
}

interface PendingRecord {
  readonly sequence: number;
  readonly journalBytesBefore: number;
  readonly addedTexts: readonly string[];
}

class SqlJsFileStore implements SqlJsFileDriver {
  readonly dialect = "sqlite";
  readonly name = "sqljs-file";
  private readonly queue: SerialQueue;
  private readonly faults: SqlJsFileFaultPoints;
  private readonly checkpointJournalBytes: number;
  private lastSnapshotBytes = 0;
  private nextCheckpointJournalBytes: number;
  private bytesWrittenTotal = 0;
  private commits = 0;
  private checkpoints = 0;
  /** Set when the journal could not be restored after a failed write; the store refuses work until reopened. */
  private failure: unknown;

  private constructor(
    private readonly directory: string,
    private readonly lock: HeldLock,
    private readonly connection: SqlJsConnection,
    private readonly journalFd: number,
    private readonly dictionary: SqlTextDictionary,
    private journalBytes: number,
    private sequence: number,
    private snapshotSequence: number,
    options: SqlJsFileDriverOptions,
  ) {
    this.queue = new SerialQueue(`The sqljs-file driver for ${directory} is closed.`);
    this.faults = options.faultPoints ?? {};
    this.checkpointJournalBytes = Math.max(1, options.checkpointJournalBytes ?? DEFAULT_CHECKPOINT_JOURNAL_BYTES);
    this.nextCheckpointJournalBytes = this.checkpointJournalBytes;
  }

  /** Loads the snapshot, replays the journal and cuts a torn tail; the caller holds the lock. */
  static open(SQL: SqlJsStatic, directory: string, lock: HeldLock, options: SqlJsFileDriverOptions): SqlJsFileStore {
    const snapshotPath = join(directory, SNAPSHOT_FILE);
    const journalPath = join(directory, JOURNAL_FILE);
    let connection: SqlJsConnection | undefined;
    let journalFd: number | undefined;
    try {
      // A leftover temporary snapshot is a checkpoint that crashed before its rename: the old snapshot and the journal still hold everything.
      rmSync(join(directory, SNAPSHOT_TEMP_FILE), { force: true });
      const loaded = loadSnapshot(SQL, snapshotPath, options);
      connection = loaded.connection;
      const snapshotSequence = loaded.includedSequence;
      const journalExisted = existsSync(journalPath);
      journalFd = openSync(journalPath, "a", FILE_MODE);
      if (!journalExisted) fsyncDirectorySync(directory);

      const dictionary = new SqlTextDictionary();
      let sequence = snapshotSequence;
      let previousRecordSequence: number | undefined;
      let skippedRecords = 0;
      let appliedRecords = 0;
      const openConnection = connection;
      const scan = scanJournalAt(journalPath, journalExisted, (record) => {
        if (previousRecordSequence !== undefined && record.sequence !== previousRecordSequence + 1) {
          throw corrupt(record.offset, `its sequence ${record.sequence} does not follow the previous record's ${previousRecordSequence}`);
        }
        previousRecordSequence = record.sequence;
        // Decoding even skipped records keeps the statement-id numbering the same as the writer's.
        const statements = dictionary.decodeStatements(record.payload, record.offset);
        if (record.sequence <= snapshotSequence) {
          skippedRecords += 1;
          return;
        }
        if (record.sequence !== sequence + 1) {
          throw corrupt(record.offset, `its sequence ${record.sequence} leaves a gap after sequence ${sequence} of the snapshot`);
        }
        replayRecord(openConnection, record, statements);
        sequence = record.sequence;
        appliedRecords += 1;
      });
      let journalBytes = scan.validBytes;
      if (scan.tornTailBytes > 0) {
        ftruncateSync(journalFd, scan.validBytes);
        fsyncSync(journalFd);
      }
      if (skippedRecords > 0 && appliedRecords === 0) {
        // A checkpoint crashed after its rename and before emptying the journal: finish it.
        ftruncateSync(journalFd, 0);
        fsyncSync(journalFd);
        journalBytes = 0;
        dictionary.reset();
      }
      return new SqlJsFileStore(directory, lock, connection, journalFd, dictionary, journalBytes, sequence, snapshotSequence, options);
    } catch (error) {
      if (journalFd !== undefined) closeSync(journalFd);
      connection?.close();
      if (isQlrError(error)) throw error;
      throw new QlrError("storage_unavailable", `The database in ${directory} could not be opened.`, { cause: error });
    }
  }

  transaction<T>(fn: (tx: SqlTx) => Promise<T>): Promise<T> {
    return this.queue.run(() => this.runQueuedTransaction(fn));
  }

  checkpoint(): Promise<void> {
    return this.queue.run(() =>
      settle(() => {
        this.assertUsable();
        this.checkpointNow();
      }),
    );
  }

  stats(): SqlJsFileStats {
    return {
      journalBytes: this.journalBytes,
      bytesWrittenTotal: this.bytesWrittenTotal,
      commits: this.commits,
      checkpoints: this.checkpoints,
      sequence: this.sequence,
    };
  }

  close(): Promise<void> {
    return this.queue.close(() => this.shutdown());
  }

  private async runQueuedTransaction<T>(fn: (tx: SqlTx) => Promise<T>): Promise<T> {
    this.assertUsable();
    const state: { pending?: PendingRecord } = {};
    const result = await runTransaction(this.connection, fn, {
      beforeCommit: () => {
        state.pending = this.appendRecord();
      },
      commitFailed: () => {
        if (state.pending !== undefined) this.cutJournalBack(state.pending.journalBytesBefore);
      },
    });
    const pending = state.pending;
    if (pending === undefined) return result;
    this.dictionary.adopt(pending.addedTexts);
    this.sequence = pending.sequence;
    this.commits += 1;
    this.faults.afterCommit?.();
    if (this.journalBytes >= this.nextCheckpointJournalBytes) this.checkpointAfterCommit();
    return result;
  }

  /** Appends and syncs the current transaction's record; undefined when it wrote nothing. */
  private appendRecord(): PendingRecord | undefined {
    const unjournaled = this.connection.unjournaledChangeBy();
    if (unjournaled !== undefined) {
      throw new QlrError("internal", `A statement failed after changing rows (an OR FAIL conflict clause?); the journal cannot replay that, so the transaction was rolled back (in: ${unjournaled}).`);
    }
    const writes: readonly RecordedWrite[] = this.connection.recordedWrites();
    if (writes.length === 0) return undefined;
    const sequence = this.sequence + 1;
    const { bytes, addedTexts } = this.dictionary.encodeRecord(sequence, writes);
    const journalBytesBefore = this.journalBytes;
    try {
      this.faults.beforeJournalWrite?.();
      this.bytesWrittenTotal += writeAll(this.journalFd, bytes);
      this.journalBytes = journalBytesBefore + bytes.length;
      this.faults.beforeJournalSync?.();
      fdatasyncSync(this.journalFd);
      this.faults.afterJournalSync?.();
    } catch (error) {
      this.cutJournalBack(journalBytesBefore);
      throw new QlrError("storage_unavailable", `The journal in ${this.directory} could not be written; the transaction was rolled back.`, { cause: error });
    }
    return { sequence, journalBytesBefore, addedTexts };
  }

  /** Removes a record that will not be committed, so that no later record follows it. */
  private cutJournalBack(journalBytes: number): void {
    try {
      ftruncateSync(this.journalFd, journalBytes);
      fdatasyncSync(this.journalFd);
      this.journalBytes = journalBytes;
    } catch (error) {
      // The journal may now end in a record sql.js rolled back; appending after it would make it
      // a mid-journal record, so the store stops here and the next open decides (torn tail or replay).
      this.failure = error;
    }
  }

  /**
   * The commit is already durable, so a failed automatic checkpoint must not fail it: the journal
   * keeps growing and the next attempt waits until it has grown by another threshold, so a full
   * disk does not cost a snapshot write per commit.
   */
  private checkpointAfterCommit(): void {
    try {
      this.checkpointNow();
      // The journal may grow to the size of the snapshot before the next one is written, so a
      // snapshot's bytes are amortised over at least as many journal bytes: flash writes per
      // commit stay bounded by about twice the journal record, however large the database grows.
      this.nextCheckpointJournalBytes = Math.min(MAX_CHECKPOINT_JOURNAL_BYTES, Math.max(this.checkpointJournalBytes, this.lastSnapshotBytes));
    } catch {
      this.nextCheckpointJournalBytes = this.journalBytes + this.checkpointJournalBytes;
    }
  }

  private checkpointNow(): void {
    if (this.journalBytes === 0 && this.sequence === this.snapshotSequence) return;
    const snapshotPath = join(this.directory, SNAPSHOT_FILE);
    const tempPath = join(this.directory, SNAPSHOT_TEMP_FILE);
    // sql.js 1.17 exports through SQLite's backup API and keeps statements alive, but earlier
    // versions closed and reopened the database inside export(); freeing the statements and
    // reapplying the pragmas costs little at checkpoint frequency and holds for both.
    this.connection.clearStatements();
    let image: Uint8Array;
    try {
      image = this.connection.db.export();
    } catch (error) {
      throw new QlrError("storage_unavailable", "sql.js could not export the database for a checkpoint.", { cause: error });
    } finally {
      this.connection.applyPragmas();
    }
    this.lastSnapshotBytes = image.length;
    this.faults.duringCheckpoint?.("exported");
    try {
      const trailer = encodeSnapshotTrailer(image, this.sequence);
      const fd = openSync(tempPath, "w", FILE_MODE);
      try {
        this.bytesWrittenTotal += writeAll(fd, image);
        this.bytesWrittenTotal += writeAll(fd, trailer);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      this.faults.duringCheckpoint?.("temp-synced");
      renameSync(tempPath, snapshotPath);
      this.faults.duringCheckpoint?.("renamed");
      fsyncDirectorySync(this.directory);
      this.faults.duringCheckpoint?.("directory-synced");
    } catch (error) {
      if (isQlrError(error)) throw error;
      throw new QlrError("storage_unavailable", `The snapshot in ${this.directory} could not be written.`, { cause: error });
    }
    this.snapshotSequence = this.sequence;
    try {
      ftruncateSync(this.journalFd, 0);
      this.journalBytes = 0;
      this.dictionary.reset();
      fsyncSync(this.journalFd);
    } catch (error) {
      this.failure = error;
      throw new QlrError("storage_unavailable", `The journal in ${this.directory} could not be reset after a checkpoint.`, { cause: error });
    }
    this.checkpoints += 1;
    this.faults.duringCheckpoint?.("journal-reset");
  }

  private shutdown(): void {
    try {
      if (this.failure === undefined) this.checkpointNow();
    } catch {
      // The journal still holds every commit, so a failed final checkpoint loses nothing.
    } finally {
      try {
        closeSync(this.journalFd);
      } finally {
        this.connection.close();
        this.lock.release();
      }
    }
  }

  private assertUsable(): void {
    if (this.failure !== undefined) {
      throw new QlrError("storage_unavailable", `The journal in ${this.directory} failed and could not be restored; reopen the database.`, { cause: this.failure });
    }
  }
}

/**
 * Opens the snapshot as a sql.js database. The file's bytes live only in this function's frame:
 * sql.js copies them into its own in-memory file, and once this returns nothing refers to them,
 * so the next large allocation (the journal, read next) can reclaim them and the open does not
 * hold the image twice over while it replays.
 */
function loadSnapshot(SQL: SqlJsStatic, snapshotPath: string, options: SqlJsFileDriverOptions): { connection: SqlJsConnection; includedSequence: number } {
  const snapshot = existsSync(snapshotPath) ? decodeSnapshot(readFileSync(snapshotPath), snapshotPath) : undefined;
  try {
    return { connection: new SqlJsConnection(new SQL.Database(snapshot?.image ?? null), { ...options, trackWrites: true }), includedSequence: snapshot?.includedSequence ?? 0 };
  } catch (error) {
    throw mapSqlJsError(error, "open snapshot");
  }
}

/** Scans the journal file record by record (journal.ts), through its own read-only descriptor. */
function scanJournalAt(journalPath: string, exists: boolean, onRecord: (record: ParsedRecord) => void): JournalScan {
  if (!exists) return { validBytes: 0, tornTailBytes: 0 };
  const fd = openSync(journalPath, "r");
  try {
    return scanJournalFile(fd, fstatSync(fd).size, onRecord);
  } finally {
    closeSync(fd);
  }
}

function replayRecord(connection: SqlJsConnection, record: ParsedRecord, statements: readonly RecordedWrite[]): void {
  try {
    connection.begin();
    for (const statement of statements) connection.query(statement.sql, statement.params);
    connection.commit();
  } catch (error) {
    connection.rollbackQuietly();
    const reason = errorMessage(error);
    throw corrupt(record.offset, `record ${record.sequence} does not replay on the snapshot (${reason})`, error);
  }
}

/** Writes every byte at the file's position (the end, for an append descriptor); returns the count. */
function writeAll(fd: number, bytes: Uint8Array): number {
  let written = 0;
  // Bounded: every iteration writes at least one byte or throws.
  while (written < bytes.length) {
    const count = writeSync(fd, bytes, written, bytes.length - written);
    if (count <= 0) throw new Error(`write made no progress at byte ${written} of ${bytes.length}`);
    written += count;
  }
  return written;
}

/** Runs synchronous work as a task for the queue, turning a throw into a rejection. */
function settle(work: () => void): Promise<void> {
  try {
    work();
    return Promise.resolve();
  } catch (error) {
    return Promise.reject(error instanceof Error ? error : new Error(String(error)));
  }
}
