/**
 * The open of the sqljs-file store, and its reopen after a failure: load the snapshot, replay
 * the sealed journal segment and then `journal.log` onto it, cut a torn tail, and finish a
 * checkpoint that stopped after its rename (the rules are in ../README.md, Open).
 */
import { join } from "node:path";
import type { SqlJsStatic } from "sql.js";
import { QlrError, errorMessage, isQlrError } from "../../../src/errors.ts";
import type { DurableFileHandle, DurableFs } from "../../node/durable-fs.ts";
import { SqlJsConnection, mapSqlJsError } from "../connection.ts";
import type { RecordedWrite } from "../connection.ts";
import type { SqlJsFileDriverOptions } from "./file-api.ts";
import {
  FILE_MODE,
  JOURNAL_FILE,
  SEALED_JOURNAL_FILE,
  SNAPSHOT_FILE,
  SNAPSHOT_TEMP_FILE,
  asBuffer,
  closeQuietly,
  removeIfPresent,
} from "./file-layout.ts";
import { SqlTextDictionary, corrupt, scanJournalFile } from "./journal.ts";
import type { JournalScan, ParsedRecord } from "./journal.ts";
import { decodeSnapshot } from "./snapshot.ts";
import type { DecodedSnapshot } from "./snapshot.ts";

/** What an open (or a reopen after a failed sync) rebuilt from the files. */
export interface LoadedState {
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

/**
 * Loads the snapshot, replays the journal and cuts a torn tail; the caller holds the lock. Used
 * by the open and by the reopen after a failure.
 */
export function loadDurableState(
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
        sqlJs: SQL,
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
