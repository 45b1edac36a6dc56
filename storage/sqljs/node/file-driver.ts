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
 * Which statements are journaled: those the connection judges to have written (the rule is on
 * `StatementKind` in ../connection.ts: reads never, INSERT/UPDATE/DELETE/REPLACE/WITH when
 * `total_changes()` moved, CREATE/DROP/ALTER when the schema version moved, the few others
 * always). A transaction that wrote nothing appends nothing. Journaled statements are replayed
 * verbatim at the next open, so they must be deterministic: pass time, ids and randomness as
 * parameters, never call `random()`, `datetime('now')` or similar in SQL. A statement that fails
 * after changing rows (an `OR FAIL` conflict clause) cannot be replayed faithfully; such a
 * transaction is refused.
 *
 * The parts: file-commits.ts (the commit path, group commit and the reopen after a failure),
 * file-checkpoint.ts (the checkpoint), file-recovery.ts (the open: snapshot, replay, torn
 * tail), file-io.ts (the thread pool or synchronous syncs), file-layout.ts (the files),
 * file-api.ts (the options, fault points and statistics handed on below).
 */
import { resolve } from "node:path";
import type { SqlJsStatic } from "sql.js";
import { QlrError } from "../../../src/errors.ts";
import { nodeDurableFs } from "../../node/durable-fs.ts";
import { acquireLock, DATABASE_LOCK } from "../../node/lock.ts";
import type { SqlJsFileDriver, SqlJsFileDriverOptions, SqlJsFileStats } from "./file-api.ts";
import { SqlJsFileCheckpoints } from "./file-checkpoint.ts";
import { DIRECTORY_MODE, closeQuietly } from "./file-layout.ts";
import { loadDurableState } from "./file-recovery.ts";

export {
  DEFAULT_CHECKPOINT_JOURNAL_BYTES,
  MAX_CHECKPOINT_JOURNAL_BYTES,
  SQLJS_CHECKPOINT_STEPS,
  type SqlJsCheckpointIo,
  type SqlJsCheckpointStep,
  type SqlJsFileDriver,
  type SqlJsFileDriverOptions,
  type SqlJsFileFaultPoints,
  type SqlJsFileStats,
} from "./file-api.ts";

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

class SqlJsFileStore extends SqlJsFileCheckpoints implements SqlJsFileDriver {
  readonly dialect = "sqlite";
  readonly name = "sqljs-file";

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
