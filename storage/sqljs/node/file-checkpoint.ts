/**
 * The sqljs-file store's checkpoint: when it runs, the seal of the journal and the export in
 * the commit queue, and the snapshot written in the background.
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
import { join } from "node:path";
import { QlrError, errorMessage, isQlrError } from "../../../src/errors.ts";
import type { DurableFileHandle } from "../../node/durable-fs.ts";
import { SqlJsFileCommits, type CheckpointInFlight, type Usable } from "./file-commits.ts";
import {
  FILE_MODE,
  JOURNAL_FILE,
  SEALED_JOURNAL_FILE,
  SNAPSHOT_FILE,
  SNAPSHOT_TEMP_FILE,
  closeQuietly,
  removeIfPresent,
  removeQuietly,
} from "./file-layout.ts";
import { SqlTextDictionary } from "./journal.ts";
import { SNAPSHOT_FRAME_IMAGE_BYTES, encodeSnapshotAsync } from "./snapshot.ts";

/** The checkpoint over the commit path's state; the driver (file-driver.ts) adds what callers call. */
export abstract class SqlJsFileCheckpoints extends SqlJsFileCommits {
  /**
   * The commit is already durable, so a failed automatic checkpoint must not fail it: the journal
   * keeps growing and the next attempt waits until it has grown by another threshold, so a full
   * disk does not cost a snapshot write per commit. The snapshot is written in the background.
   */
  protected override checkpointAfterSync(usable: Usable): void {
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
   * The part of a checkpoint that runs in the commit queue, quickly: seal the journal (rename
   * it to `journal.sealed.log` and start an empty `journal.log`, so new commits never share a
   * file with the records the snapshot retires) and export the image. Then the snapshot is
   * compressed, written and synced in the background while commits go on; undefined when there
   * is nothing to fold. Only one checkpoint is in flight at a time.
   */
  protected startCheckpoint(usable: Usable): CheckpointInFlight | undefined {
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
}
