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

/** Reads at most `maxBytes` from the start of the file, and its size; null when there is no file. */
async function readHead(path: string, maxBytes: number): Promise<StreamFile | null> {
  let handle;
  try {
    handle = await open(path, "r");
  } catch {
    return null;
  }
  try {
    const { size } = await handle.stat();
    const buffer = Buffer.alloc(Math.min(size, maxBytes));
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    return { head: buffer.subarray(0, bytesRead), sizeBytes: Math.max(size, bytesRead) };
  } finally {
    await handle.close();
  }
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
  return Buffer.concat([kept, Buffer.from(`${newline}${answerCutMarker(kept.length, stream.sizeBytes)}`, "utf8")]);
}

export async function readAttemptLog(stdoutPath: string, stderrPath: string, maxBytes: number): Promise<string | null> {
  const stdout = await readHead(stdoutPath, maxBytes);
  const stderr = await readHead(stderrPath, maxBytes);
  if (stdout === null && stderr === null) return null;
  const out = stdout ?? { head: Buffer.alloc(0), sizeBytes: 0 };
  if (stderr === null || stderr.sizeBytes === 0) return fitStream(out, maxBytes).toString("utf8");
  // The separator starts on its own line; one byte is kept for the newline that may precede it.
  const budgetBytes = maxBytes - Buffer.byteLength(STDERR_SEPARATOR) - 1;
  const half = Math.floor(budgetBytes / 2);
  // Each stream gets half; what one does not need goes to the other.
  const stdoutShare = out.sizeBytes <= half ? out.sizeBytes : stderr.sizeBytes <= half ? budgetBytes - stderr.sizeBytes : half;
  const stderrShare = budgetBytes - stdoutShare;
  const outPart = fitStream(out, stdoutShare);
  const errPart = fitStream(stderr, stderrShare);
  const newline = outPart.length > 0 && outPart[outPart.length - 1] !== 0x0a ? "\n" : "";
  return Buffer.concat([outPart, Buffer.from(`${newline}${STDERR_SEPARATOR}`, "utf8"), errPart]).toString("utf8");
}
