/**
 * The files of the sqljs-file store's directory (file-driver.ts names what each holds), their
 * modes, and the small file calls the open, the commits and the checkpoint share.
 */
import { Buffer } from "node:buffer";
import { errorCode } from "../../../src/errors.ts";
import type { DurableFileHandle, DurableFs } from "../../node/durable-fs.ts";

/** The database holds every secret a manifest carries (env values): owner-only, like the state dir. */
export const FILE_MODE = 0o600;
export const DIRECTORY_MODE = 0o700;

export const SNAPSHOT_FILE = "snapshot.sqlite";
export const SNAPSHOT_TEMP_FILE = "snapshot.sqlite.tmp";
export const JOURNAL_FILE = "journal.log";
/** The journal segment a checkpoint in flight folds into its snapshot (at most one exists). */
export const SEALED_JOURNAL_FILE = "journal.sealed.log";

/** The same bytes as a Buffer, without copying them. */
export function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
}

export function removeIfPresent(fs: DurableFs, path: string): void {
  try {
    fs.unlink(path);
  } catch (error) {
    if (errorCode(error) !== "ENOENT") throw error;
  }
}

export function removeQuietly(fs: DurableFs, path: string): void {
  try {
    fs.unlink(path);
  } catch {
    // Best effort: the next open removes a leftover temporary snapshot.
  }
}

export function closeQuietly(fs: DurableFs, handle: DurableFileHandle): void {
  try {
    fs.close(handle);
  } catch {
    // Nothing was pending on the handle that a close could still save; every write was synced or given up.
  }
}
