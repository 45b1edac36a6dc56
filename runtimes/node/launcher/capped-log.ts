import { closeSync, fsync, fsyncSync, openSync, writeSync } from "node:fs";
import { errorCode, errorMessage } from "../../../src/errors.ts";

/** Logs, like every file the supervisor makes, are its user's alone. */
export const LOG_FILE_MODE = 0o600;

/**
 * A log file that keeps at most `maxBytes` of the stream, then one marker line, then nothing.
 * The file is created by the first byte the task writes, not before the spawn: most tasks of a
 * busy device say nothing on one stream or both, and two file creations (and two removals at
 * retention) per attempt were a large part of a launch's cost. A reader treats a missing log as
 * an empty one.
 */
export class CappedLog {
  private fd: number | null = null;
  private writtenBytes = 0;
  /** Every byte in the file, the marker line included. */
  private bytesWritten = 0;
  private truncated = false;
  private endsWithNewline = true;
  /** The first error creating or writing the file (a full disk): the log stops there, the task is still supervised. */
  writeError: string | null = null;

  constructor(
    private readonly path: string,
    private readonly maxBytes: number,
  ) {}

  write(chunk: Buffer): void {
    // Past the cap (or after a write error) the chunk is dropped, but the caller keeps reading
    // so the task never blocks on a full pipe.
    if (this.truncated || this.writeError !== null) return;
    const roomBytes = this.maxBytes - this.writtenBytes;
    if (chunk.length <= roomBytes) {
      this.writeAll(chunk);
      return;
    }
    if (roomBytes > 0) this.writeAll(chunk.subarray(0, roomBytes));
    this.writeAll(
      Buffer.from(
        `${this.endsWithNewline ? "" : "\n"}[qlr: log truncated at ${this.maxBytes} bytes]\n`,
        "utf8",
      ),
      false,
    );
    this.truncated = true;
  }

  private writeAll(bytes: Buffer, counts = true): void {
    if (bytes.length === 0 || this.writeError !== null) return;
    let offset = 0;
    try {
      // Exclusive: an attempt's log is only ever written by its one supervised spawn.
      this.fd ??= openSync(this.path, "wx", LOG_FILE_MODE);
      while (offset < bytes.length) offset += writeSync(this.fd, bytes, offset);
    } catch (error) {
      this.writeError = errorCode(error) ?? errorMessage(error);
      return;
    }
    this.bytesWritten += bytes.length;
    if (counts) this.writtenBytes += bytes.length;
    this.endsWithNewline = bytes[bytes.length - 1] === 0x0a;
  }

  /**
   * The logs are made durable before the receipt, so a receipt implies its logs are as complete
   * as the disk allowed. The fsync runs on the thread pool, so the logs of tasks that end
   * together share a flush and the supervisor keeps serving launches meanwhile; a log nothing
   * was written to does not exist and has nothing to make durable.
   */
  async closeDurably(): Promise<void> {
    const fd = this.fd;
    if (fd === null) return;
    this.fd = null;
    const error = await new Promise<unknown>((resolve) =>
      fsync(fd, (failure) => resolve(failure ?? null)),
    );
    if (error !== null) this.writeError ??= errorCode(error) ?? errorMessage(error);
    closeQuietly(fd);
  }

  /** Closes at once (the spawn failed; the spawn error receipt follows). */
  close(): void {
    const fd = this.fd;
    if (fd === null) return;
    this.fd = null;
    try {
      fsyncSync(fd);
    } catch (error) {
      this.writeError ??= errorCode(error) ?? errorMessage(error);
    } finally {
      closeQuietly(fd);
    }
  }
}

export function closeQuietly(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // Closed already.
  }
}
