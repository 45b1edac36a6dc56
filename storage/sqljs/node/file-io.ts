/**
 * How the sqljs-file store's syncs and snapshot compression reach the disk by default: on
 * libuv's thread pool with the real file system, so the event loop and the commits never wait
 * for them; through the given `DurableFs`'s synchronous calls otherwise, so simulated runs stay
 * deterministic.
 */
import { fdatasync as fdatasyncOnThreadPool, fsync } from "node:fs";
import type { DurableFileHandle, DurableFs } from "../../node/durable-fs.ts";
import type { SqlJsCheckpointIo } from "./file-api.ts";
import { deflateFrameOnThreadPool, deflateFrameSync } from "./snapshot.ts";

/** Makes the journal's appended records durable: the thread pool's `fdatasync` with the real file system, the given `fs`'s own (synchronous, so simulated runs stay deterministic) otherwise. */
export type JournalSync = (handle: DurableFileHandle) => Promise<void>;

export const threadPoolJournalSync: JournalSync = (handle) =>
  new Promise((resolvePromise, reject) => {
    fdatasyncOnThreadPool(handle, (error) => {
      if (error === null) resolvePromise();
      else reject(error);
    });
  });

export function synchronousJournalSync(fs: DurableFs): JournalSync {
  return (handle) => settle(() => fs.fdatasync(handle));
}

/** zlib and fsync on libuv's thread pool: the event loop, and so the commits, never wait for them. */
export const threadPoolCheckpointIo: SqlJsCheckpointIo = {
  deflateFrame: deflateFrameOnThreadPool,
  syncSnapshotFile: (handle) =>
    new Promise((resolvePromise, reject) => {
      fsync(handle, (error) => {
        if (error === null) resolvePromise();
        else reject(error);
      });
    }),
};

export function synchronousCheckpointIo(fs: DurableFs): SqlJsCheckpointIo {
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

/** Runs synchronous work as a task for the queue, turning a throw into a rejection. */
function settle<T>(work: () => T): Promise<T> {
  try {
    return Promise.resolve(work());
  } catch (error) {
    return Promise.reject(error instanceof Error ? error : new Error(String(error)));
  }
}
