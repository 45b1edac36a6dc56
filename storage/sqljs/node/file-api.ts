/**
 * What the sqljs-file driver shows its callers (file-driver.ts hands these on): its options,
 * fault points and checkpoint steps, its statistics and its interface.
 */
import type { SqlDriver } from "../../driver.ts";
import type { DurableFileHandle, DurableFs } from "../../node/durable-fs.ts";
import type { SqlJsConnectionOptions } from "../connection.ts";
import type { SnapshotFrameDeflater } from "./snapshot.ts";

export const DEFAULT_CHECKPOINT_JOURNAL_BYTES = 1024 * 1024;
/** The journal never grows past this before a checkpoint, whatever the database size (open-time replay stays bounded). */
export const MAX_CHECKPOINT_JOURNAL_BYTES = 64 * 1024 * 1024;

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

export interface SqlJsCheckpointIo {
  readonly deflateFrame: SnapshotFrameDeflater;
  /** Makes the temporary snapshot file's data durable (a failure fails that checkpoint only). */
  syncSnapshotFile(handle: DurableFileHandle): Promise<void>;
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
