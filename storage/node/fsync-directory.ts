/**
 * Making a directory entry (a create, a rename, a link, an unlink) survive power loss: open
 * the directory and fsync it. Node-only. Two callers, two answers to a file system that
 * cannot do it, both deliberate:
 *
 * - `fsyncDirectorySync`, for the sql.js file store (synchronous, inside its queued work):
 *   a platform with no such step (Windows answers EISDIR or EPERM on opening a directory, some
 *   file systems EINVAL on syncing one) has nothing more to do, so it returns;
 * - `fsyncDirectoryStrictSync`, for the launcher's journal records and receipts: every error is thrown,
 *   because the journal's directory entry must be durable before the task is spawned, and an
 *   attempt that cannot promise that fails to start rather than run unrecorded.
 */
import { closeSync, constants, fsync, fsyncSync, openSync } from "node:fs";
import { errorCode } from "../../src/errors.ts";

/** Makes a rename or a file creation in `directory` durable where the platform can; see above. */
export function fsyncDirectorySync(directory: string): void {
  let fd: number;
  try {
    fd = openSync(directory, "r");
  } catch (error) {
    // Windows cannot open a directory for syncing (EISDIR/EPERM); it has no such step to take.
    if (errorCode(error) === "EISDIR" || errorCode(error) === "EPERM") return;
    throw error;
  }
  try {
    fsyncSync(fd);
  } catch (error) {
    // Some file systems do not support syncing a directory and answer EINVAL; there is nothing more to do there.
    if (errorCode(error) !== "EINVAL") throw error;
  } finally {
    closeSync(fd);
  }
}

/** Makes a directory entry (a create, a link, an unlink) survive power loss, or throws. */
export function fsyncDirectoryStrictSync(directory: string): void {
  const fd = openSync(directory, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * The same, with only the flush on the thread pool: the launcher's journal records and receipts
 * (each group of them waits for it before it is acknowledged), its startup and cleanup. Opening
 * and closing a directory touch no disk, so they run inline: done through the thread pool too,
 * they were two more round trips per record, each one letting the runtime's event loop serve
 * whatever else waits (requests, other stages) before the record could be acknowledged.
 */
export function fsyncDirectory(directory: string): Promise<void> {
  let fd: number;
  try {
    fd = openSync(directory, constants.O_RDONLY | constants.O_DIRECTORY);
  } catch (error) {
    return Promise.reject(asError(error));
  }
  return new Promise<void>((resolve, reject) => {
    fsync(fd, (syncError) => {
      let failure: unknown = syncError;
      try {
        closeSync(fd);
      } catch (closeError) {
        failure ??= closeError;
      }
      if (failure === null || failure === undefined) resolve();
      else reject(asError(failure));
    });
  });
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}
