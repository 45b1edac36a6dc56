/**
 * The device store: a sql.js database that lives in memory and is made crash-consistent on
 * disk by a snapshot plus an append-only journal. Node-only. Files in the directory `path`:
 *
 * - `snapshot.sqlite`: the sql.js `export()` image, deflated in frames, with a trailer naming the journal sequence it
 *   includes (format in snapshot.ts);
 * - `journal.log`: one checksummed record per committed write transaction (format and the torn
 *   tail rule in journal.ts);
 * - `lock`: the advisory exclusive lock (lock.ts).
 *
 * Commit order. The transaction's statements run inside a sql.js transaction; then the record
 * is appended and `fdatasync`ed (the durable point); then sql.js commits; only then does the
 * caller see success. A failed append rolls back and answers `storage_unavailable`: nothing is
 * acknowledged, and the journal is cut back to its previous length. A failed sync (or a failed
 * cut) is never retried: the store refuses work and, before its next transaction, cuts the
 * journal back to what acknowledged commits need and reloads snapshot and journal from the
 * files (the fault model is in ../README.md). Every file operation goes through `DurableFs`
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
 * Checkpoint, after a commit leaves the journal over `checkpointJournalBytes`, on
 * `checkpoint()` and on `close()`: export, write `snapshot.sqlite.tmp`, fsync it, rename it over
 * the snapshot, fsync the directory, then truncate the journal and fsync it. A crash between any
 * two steps opens correctly: before the rename the old snapshot and the full journal are
 * intact; after it, journal records up to the snapshot's included sequence are skipped.
 */
import { Buffer } from "node:buffer";
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
import { acquireLock } from "./lock.ts";
import type { HeldLock } from "./lock.ts";
import { SNAPSHOT_FRAME_IMAGE_BYTES, decodeSnapshot, encodeSnapshot } from "./snapshot.ts";
import type { DecodedSnapshot } from "./snapshot.ts";

/** The database holds every secret a manifest carries (env values): owner-only, like the state dir. */
const FILE_MODE = 0o600;
const DIRECTORY_MODE = 0o700;

export const DEFAULT_CHECKPOINT_JOURNAL_BYTES = 1024 * 1024;
/** The journal never grows past this before a checkpoint, whatever the database size (open-time replay stays bounded). */
export const MAX_CHECKPOINT_JOURNAL_BYTES = 64 * 1024 * 1024;

const SNAPSHOT_FILE = "snapshot.sqlite";
const SNAPSHOT_TEMP_FILE = "snapshot.sqlite.tmp";
const JOURNAL_FILE = "journal.log";

/** The checkpoint's steps in order, each reported to `faultPoints.duringCheckpoint` once it is done. */
export const SQLJS_CHECKPOINT_STEPS = [
  "exported",
  "temp-synced",
  "renamed",
  "directory-synced",
  "journal-reset",
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
  /** Reopens from what is durable after a failed sync (or a failed write that could not be cut back). */
  readonly reopens: number;
  /** True while the store refuses work after such a failure (the next call tries to reopen). */
  readonly failed: boolean;
}

export interface SqlJsFileDriver extends SqlDriver {
  readonly name: "sqljs-file";
  /** Folds the journal into the snapshot now (queued like a transaction). */
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
  const lock = await acquireLock(directory, fs);
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
}

class SqlJsFileStore implements SqlJsFileDriver {
  readonly dialect = "sqlite";
  readonly name = "sqljs-file";
  private readonly queue: SerialQueue;
  private readonly faults: SqlJsFileFaultPoints;
  private readonly checkpointJournalBytes: number;
  /** The database image the last snapshot holds (uncompressed): the next checkpoint threshold. */
  private lastImageBytes = 0;
  private nextCheckpointJournalBytes: number;
  private bytesWrittenTotal = 0;
  private commits = 0;
  private checkpoints = 0;
  private reopens = 0;
  /** Absent only while a reopen after a failure has not succeeded yet. */
  private connection: SqlJsConnection | undefined;
  private journal: DurableFileHandle | undefined;
  private dictionary: SqlTextDictionary;
  private journalBytes: number;
  /**
   * The journal prefix every acknowledged commit needs: its length after the last sync that
   * succeeded, or 0 once a durable snapshot holds every record. A reopen after a failure cuts
   * the journal back to it before reading anything, so a record whose sync failed is never
   * replayed, nor followed by new records.
   */
  private neededJournalBytes: number;
  private sequence: number;
  private snapshotSequence: number;
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
    this.checkpointJournalBytes = Math.max(
      1,
      options.checkpointJournalBytes ?? DEFAULT_CHECKPOINT_JOURNAL_BYTES,
    );
    // A reopened large database amortises its next snapshot over as much journal as the last one.
    this.lastImageBytes = loaded.imageBytes;
    this.nextCheckpointJournalBytes = this.thresholdAfterSnapshot();
    this.connection = loaded.connection;
    this.journal = loaded.journal;
    this.dictionary = loaded.dictionary;
    this.journalBytes = loaded.journalBytes;
    this.neededJournalBytes = loaded.journalBytes;
    this.sequence = loaded.sequence;
    this.snapshotSequence = loaded.snapshotSequence;
  }

  transaction<T>(fn: (tx: SqlTx) => Promise<T>): Promise<T> {
    return this.queue.run(() => this.runQueuedTransaction(fn));
  }

  checkpoint(): Promise<void> {
    return this.queue.run(() =>
      settle(() => {
        this.checkpointNow(this.usable());
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
      reopens: this.reopens,
      failed: this.failure !== undefined,
    };
  }

  close(): Promise<void> {
    return this.queue.close(() => this.shutdown());
  }

  private async runQueuedTransaction<T>(fn: (tx: SqlTx) => Promise<T>): Promise<T> {
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
    const pending = state.pending;
    if (pending === undefined) return result;
    this.dictionary.adopt(pending.adoption);
    this.neededJournalBytes = this.journalBytes;
    this.sequence = pending.sequence;
    this.commits += 1;
    this.faults.afterCommit?.();
    if (this.journalBytes >= this.nextCheckpointJournalBytes) this.checkpointAfterCommit(usable);
    return result;
  }

  /** Appends and syncs the current transaction's record; undefined when it wrote nothing. */
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
      this.bytesWrittenTotal += bytes.length;
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
    try {
      this.fs.fdatasync(usable.journal);
    } catch (error) {
      // Never retried: after a failed sync the kernel may have dropped the record's pages and
      // marked them clean, so a second sync would succeed without making them durable.
      this.failure = error;
      throw new QlrError(
        "storage_unavailable",
        `The journal in ${this.directory} could not be synced (${errorMessage(error)}); the transaction was rolled back and the store reopens from what is durable before its next write.`,
        { cause: error },
      );
    }
    try {
      this.faults.afterJournalSync?.();
    } catch (error) {
      this.cutJournalBack(usable.journal, journalBytesBefore);
      throw new QlrError(
        "storage_unavailable",
        `The transaction in ${this.directory} failed after its journal record was synced; it was rolled back.`,
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
   * disk does not cost a snapshot write per commit.
   */
  private checkpointAfterCommit(usable: Usable): void {
    try {
      this.checkpointNow(usable);
      this.nextCheckpointJournalBytes = this.thresholdAfterSnapshot();
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

  private checkpointNow(usable: Usable): void {
    if (this.journalBytes === 0 && this.sequence === this.snapshotSequence) return;
    const { connection, journal } = usable;
    const snapshotPath = join(this.directory, SNAPSHOT_FILE);
    const tempPath = join(this.directory, SNAPSHOT_TEMP_FILE);
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
    let renamed = false;
    try {
      const fd = this.fs.open(tempPath, "truncate", FILE_MODE);
      try {
        // One compressed frame at a time: never a second image-sized buffer.
        for (const part of encodeSnapshot(
          image,
          this.sequence,
          this.options.snapshotFrameImageBytes ?? SNAPSHOT_FRAME_IMAGE_BYTES,
        )) {
          this.bytesWrittenTotal += part.length;
          this.fs.append(fd, part);
        }
        // A failed sync here costs nothing but this attempt: the temporary file is never read,
        // and the next checkpoint writes a new one from the start.
        this.fs.fsync(fd);
      } finally {
        this.fs.close(fd);
      }
      this.faults.duringCheckpoint?.("temp-synced");
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
    this.snapshotSequence = this.sequence;
    // Every journal record is in a durable snapshot now: none is needed to reopen.
    this.neededJournalBytes = 0;
    try {
      this.fs.truncate(journal, 0);
      this.journalBytes = 0;
      this.dictionary.reset();
      this.fs.fsync(journal);
    } catch (error) {
      this.failure = error;
      throw new QlrError(
        "storage_unavailable",
        `The journal in ${this.directory} could not be reset after a checkpoint.`,
        { cause: error },
      );
    }
    this.checkpoints += 1;
    this.faults.duringCheckpoint?.("journal-reset");
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
      const loaded = loadDurableState(this.SQL, this.fs, this.directory, this.options);
      this.connection = loaded.connection;
      this.journal = loaded.journal;
      this.dictionary = loaded.dictionary;
      this.journalBytes = loaded.journalBytes;
      this.neededJournalBytes = loaded.journalBytes;
      this.sequence = loaded.sequence;
      this.snapshotSequence = loaded.snapshotSequence;
      this.failure = undefined;
      this.reopens += 1;
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

  private shutdown(): void {
    try {
      if (this.failure === undefined && this.connection !== undefined && this.journal !== undefined)
        this.checkpointNow({ connection: this.connection, journal: this.journal });
    } catch {
      // The journal still holds every commit, so a failed final checkpoint loses nothing.
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
  let connection: SqlJsConnection | undefined;
  let journal: DurableFileHandle | undefined;
  try {
    // A leftover temporary snapshot is a checkpoint that crashed before its rename: the old snapshot and the journal still hold everything.
    removeIfPresent(fs, join(directory, SNAPSHOT_TEMP_FILE));
    const loaded = loadSnapshot(SQL, fs, snapshotPath, options);
    connection = loaded.connection;
    const snapshotSequence = loaded.includedSequence;
    const journalExisted = fs.exists(journalPath);
    journal = fs.open(journalPath, "append", FILE_MODE);
    if (!journalExisted) fs.fsyncDirectory(directory);

    const dictionary = new SqlTextDictionary();
    let sequence = snapshotSequence;
    let previousRecordSequence: number | undefined;
    let skippedRecords = 0;
    let appliedRecords = 0;
    const openConnection = connection;
    const scan = scanJournalAt(fs, journalPath, journalExisted, (record) => {
      if (previousRecordSequence !== undefined && record.sequence !== previousRecordSequence + 1) {
        throw corrupt(
          record.offset,
          `its sequence ${record.sequence} does not follow the previous record's ${previousRecordSequence}`,
        );
      }
      previousRecordSequence = record.sequence;
      // Decoding even skipped records keeps the statement-id numbering the same as the writer's.
      const statements = dictionary.decodeStatements(record.payload, record.offset);
      if (record.sequence <= snapshotSequence) {
        skippedRecords += 1;
        return;
      }
      if (record.sequence !== sequence + 1) {
        throw corrupt(
          record.offset,
          `its sequence ${record.sequence} leaves a gap after sequence ${sequence} of the snapshot`,
        );
      }
      replayRecord(openConnection, record, statements);
      sequence = record.sequence;
      appliedRecords += 1;
    });
    let journalBytes = scan.validBytes;
    if (scan.tornTailBytes > 0) {
      fs.truncate(journal, scan.validBytes);
      fs.fsync(journal);
    }
    if (skippedRecords > 0 && appliedRecords === 0) {
      // A checkpoint stopped after its rename and before emptying the journal: finish it. The
      // rename may not be durable yet (the process that made it may have died before syncing
      // the directory), and emptying the journal is only safe once it is.
      fs.fsyncDirectory(directory);
      fs.truncate(journal, 0);
      fs.fsync(journal);
      journalBytes = 0;
      dictionary.reset();
    }
    return {
      connection,
      journal,
      dictionary,
      journalBytes,
      sequence,
      snapshotSequence,
      imageBytes: loaded.imageBytes,
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
function settle(work: () => void): Promise<void> {
  try {
    work();
    return Promise.resolve();
  } catch (error) {
    return Promise.reject(error instanceof Error ? error : new Error(String(error)));
  }
}
