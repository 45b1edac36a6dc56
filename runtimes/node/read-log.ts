import { open } from "node:fs/promises";

/**
 * The log one API call returns: stdout, then (when not empty) a separator and stderr, at most
 * `maxBytes` in all. A stream that does not fit its share keeps its head and ends with a marker
 * line, so a reader always sees that something was cut; the marker and the separator count
 * toward the cap.
 */

export const STDERR_SEPARATOR = "--- stderr ---\n";

/** The line that ends a stream cut for the answer (the supervisor's own cap marker says "log truncated at"). */
export function answerCutMarker(keptBytes: number, fileBytes: number): string {
  return `[qlr: log truncated at ${keptBytes} of ${fileBytes} bytes for this answer]\n`;
}

/** Room reserved for a cut marker: the longest one for sizes below 10^15 bytes. */
const MARKER_RESERVE_BYTES = Buffer.byteLength(answerCutMarker(1e15, 1e15)) + 1;

interface StreamFile {
  readonly head: Buffer;
  readonly sizeBytes: number;
}

/** What one bounded read of a file found: its bytes from `start`, and the file's size then. */
interface FileRange {
  readonly bytes: Buffer;
  readonly start: number;
  readonly sizeBytes: number;
}

/**
 * Reads at most `maxBytes` from `offset` (or from the end, when the file is shorter): bounded
 * memory whatever the file's size. Null when there is no file.
 */
async function readRange(
  path: string,
  offset: number,
  maxBytes: number,
): Promise<FileRange | null> {
  let handle;
  try {
    handle = await open(path, "r");
  } catch {
    return null;
  }
  try {
    const { size } = await handle.stat();
    const start = Math.min(offset, size);
    const buffer = Buffer.alloc(Math.max(0, Math.min(maxBytes, size - start)));
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, start);
    return { bytes: buffer.subarray(0, bytesRead), start, sizeBytes: size };
  } finally {
    await handle.close();
  }
}

/** Reads at most `maxBytes` from the start of the file, and its size; null when there is no file. */
async function readHead(path: string, maxBytes: number): Promise<StreamFile | null> {
  const range = await readRange(path, 0, maxBytes);
  return range === null ? null : { head: range.bytes, sizeBytes: range.sizeBytes };
}

/** The longest prefix of at most `maxBytes` that does not split a UTF-8 character. */
function utf8Prefix(bytes: Buffer, maxBytes: number): Buffer {
  if (bytes.length <= maxBytes) return bytes;
  let end = Math.max(0, maxBytes);
  // Back up over continuation bytes (10xxxxxx) to the start of the character that was split.
  while (end > 0 && ((bytes[end] ?? 0) & 0xc0) === 0x80) end -= 1;
  return bytes.subarray(0, end);
}

/** The stream within `shareBytes`: whole, or its head and a cut marker. */
function fitStream(stream: StreamFile, shareBytes: number): Buffer {
  if (stream.sizeBytes <= shareBytes && stream.head.length === stream.sizeBytes) return stream.head;
  const kept = utf8Prefix(stream.head, Math.max(0, shareBytes - MARKER_RESERVE_BYTES));
  const newline = kept.length > 0 && kept[kept.length - 1] !== 0x0a ? "\n" : "";
  return Buffer.concat([
    kept,
    Buffer.from(`${newline}${answerCutMarker(kept.length, stream.sizeBytes)}`, "utf8"),
  ]);
}

export async function readAttemptLog(
  stdoutPath: string,
  stderrPath: string,
  maxBytes: number,
): Promise<string | null> {
  const stdout = await readHead(stdoutPath, maxBytes);
  const stderr = await readHead(stderrPath, maxBytes);
  if (stdout === null && stderr === null) return null;
  const out = stdout ?? { head: Buffer.alloc(0), sizeBytes: 0 };
  if (stderr === null || stderr.sizeBytes === 0) return fitStream(out, maxBytes).toString("utf8");
  // The separator starts on its own line; one byte is kept for the newline that may precede it.
  const budgetBytes = maxBytes - Buffer.byteLength(STDERR_SEPARATOR) - 1;
  const half = Math.floor(budgetBytes / 2);
  // Each stream gets half; what one does not need goes to the other.
  const stdoutShare =
    out.sizeBytes <= half
      ? out.sizeBytes
      : stderr.sizeBytes <= half
        ? budgetBytes - stderr.sizeBytes
        : half;
  const stderrShare = budgetBytes - stdoutShare;
  const outPart = fitStream(out, stdoutShare);
  const errPart = fitStream(stderr, stderrShare);
  const newline = outPart.length > 0 && outPart[outPart.length - 1] !== 0x0a ? "\n" : "";
  return Buffer.concat([
    outPart,
    Buffer.from(`${newline}${STDERR_SEPARATOR}`, "utf8"),
    errPart,
  ]).toString("utf8");
}

/** One piece of one stream of an attempt's log, for a reader that follows it by byte offset. */
export interface LogChunk {
  /** Whole UTF-8 characters from `offset`; a character cut by the limit is left for the next read. */
  readonly text: string;
  /** Where the next read starts: `offset` plus the bytes of `text`. */
  readonly nextOffset: number;
  /** The file's size when it was read. */
  readonly sizeBytes: number;
}

/** The longest prefix of `bytes` that does not end inside a UTF-8 character. */
function wholeCharacters(bytes: Buffer): Buffer {
  if (bytes.length === 0) return bytes;
  // A lead byte's length: 0xxxxxxx 1, 110xxxxx 2, 1110xxxx 3, 11110xxx 4. Look back at most 3 bytes.
  for (let back = 1; back <= Math.min(4, bytes.length); back += 1) {
    const byte = bytes[bytes.length - back] ?? 0;
    if ((byte & 0xc0) === 0x80) continue;
    const length = byte < 0x80 ? 1 : byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    return length > back ? bytes.subarray(0, bytes.length - back) : bytes;
  }
  return bytes;
}

/**
 * Reads at most `limitBytes` of a log file from `offset`: bounded memory whatever the file's
 * size. A character the writer has not finished is held back for the next read, unless the
 * file is `complete` (its attempt ended): then every byte is given, so a reader always reaches
 * the end. Null when the file does not exist (yet).
 */
export async function readLogChunk(
  path: string,
  offset: number,
  limitBytes: number,
  complete: boolean,
): Promise<LogChunk | null> {
  const range = await readRange(path, offset, limitBytes);
  if (range === null) return null;
  const { bytes, start, sizeBytes } = range;
  const kept = complete && start + bytes.length >= sizeBytes ? bytes : wholeCharacters(bytes);
  return { text: kept.toString("utf8"), nextOffset: start + kept.length, sizeBytes };
}
