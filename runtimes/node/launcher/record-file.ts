/**
 * The launcher's record files: one line of canonical JSON per record, written through the
 * durable creates of durable-file.ts (records created together may share a file), and read
 * back by attempt.
 */
import { canonicalJson } from "../../../src/canonical-json.ts";
import { QlrError } from "../../../src/errors.ts";
import type { DurableFs } from "../../../storage/node/durable-fs.ts";
import { createFileExclusiveDurable, launcherDurableFs, readSmallFile } from "./durable-file.ts";
import type { StateLayout } from "./state-layout.ts";

/**
 * Writes one record as a line of canonical JSON, exclusively and durably: the journal, the
 * spawn record, the receipt and the stop intent are all written this way (see
 * createFileExclusiveDurable). Records of one directory created together may share one file
 * under several names (`RecordSharing`); `maxFileBytes` is what their reader accepts.
 */
export function createRecordFile(
  path: string,
  tmpDir: string,
  record: object,
  maxFileBytes: number,
  fs: DurableFs = launcherDurableFs,
): Promise<void> {
  return createFileExclusiveDurable(path, tmpDir, `${canonicalJson({ ...record })}\n`, fs, {
    maxFileBytes,
  });
}

/** At most this many records in one file: far above what a reader limit lets a group hold. */
const RECORDS_PER_FILE_MAX = 4096;

/**
 * The text of `attemptId`'s record in a record file's text. A file of one line is that line,
 * whichever attempt it names (the caller checks, and says "names attempt …"). A file that
 * several records share (`RecordSharing`) holds one line per record: the one line that names
 * the attempt, or why there is none (a line that is not a JSON object, no line or two lines of
 * this attempt).
 */
export function recordTextOf(
  text: string,
  attemptId: string,
): { ok: true; text: string } | { ok: false; reason: string } {
  const end = text.endsWith("\n") ? text.length - 1 : text.length;
  if (text.lastIndexOf("\n", end - 1) === -1) return { ok: true, text };
  const lines = text.slice(0, end).split("\n");
  if (lines.length > RECORDS_PER_FILE_MAX)
    return { ok: false, reason: `holds ${lines.length} lines, more than ${RECORDS_PER_FILE_MAX}` };
  let found: string | null = null;
  for (const [index, line] of lines.entries()) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch {
      return { ok: false, reason: `has a line ${index + 1} that is not valid JSON` };
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
      return { ok: false, reason: `has a line ${index + 1} that is not a JSON object` };
    if ((parsed as { attemptId?: unknown }).attemptId !== attemptId) continue;
    if (found !== null) return { ok: false, reason: `holds two records of attempt ${attemptId}` };
    found = line;
  }
  return found === null
    ? { ok: false, reason: `holds ${lines.length} records, none of attempt ${attemptId}` }
    : { ok: true, text: found };
}

/**
 * Reads `attemptId`'s record from a file written by `createRecordFile`: null when there is
 * none, else its JSON object, or why the file is not one (too large, not a regular file, not
 * JSON, not an object, a shared file without it). Each reader checks the fields and says what
 * a bad record means for it.
 */
export async function readRecordFile(
  path: string,
  maxBytes: number,
  attemptId: string,
  fs: DurableFs = launcherDurableFs,
): Promise<{ ok: true; record: Record<string, unknown> } | { ok: false; reason: string } | null> {
  const file = await readSmallFile(path, maxBytes, fs);
  if (file === null || !file.ok) return file;
  const own = recordTextOf(file.text, attemptId);
  if (!own.ok) return own;
  let parsed: unknown;
  try {
    parsed = JSON.parse(own.text);
  } catch {
    return { ok: false, reason: "is not valid JSON" };
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    return { ok: false, reason: "is not a JSON object" };
  return { ok: true, record: parsed as Record<string, unknown> };
}

/** One kind of attempt record the launcher reads back and checks (the journal, the stop intent). */
export interface AttemptRecordKind<T> {
  /** How an error names the file: "journal", "stop intent". */
  readonly what: string;
  readonly path: (layout: StateLayout, attemptId: string) => string;
  readonly maxBytes: number;
  /** What is wrong with the record's fields, or null when they are sound. */
  readonly fieldProblem: (record: Record<string, unknown>) => string | null;
  /** What the reader answers for a sound record. */
  readonly value: (record: Record<string, unknown>) => T;
}

/**
 * The reader of one kind of attempt record: null when there is none; `storage_corrupt` naming
 * the file and what is wrong when one exists that is not a whole, well-formed record of this
 * attempt (malformed, a link, too large, another attempt's), because "no record" and "a record
 * we cannot trust" lead recovery to different decisions.
 */
export function attemptRecordReader<T>(
  kind: AttemptRecordKind<T>,
): (layout: StateLayout, attemptId: string, fs?: DurableFs) => Promise<T | null> {
  return async (layout, attemptId, fs = launcherDurableFs) => {
    const path = kind.path(layout, attemptId);
    const file = await readRecordFile(path, kind.maxBytes, attemptId, fs);
    if (file === null) return null;
    const damaged = (problem: string): QlrError =>
      new QlrError("storage_corrupt", `${kind.what} ${path} is damaged: ${problem}`);
    // Not JSON: most likely a write torn by a power cut on a file system without hard links.
    if (!file.ok) throw damaged(`it ${file.reason}`);
    const record = file.record;
    if (record.attemptId !== attemptId)
      throw damaged(`it names attempt ${JSON.stringify(record.attemptId)}`);
    const problem = kind.fieldProblem(record);
    if (problem !== null) throw damaged(problem);
    return kind.value(record);
  };
}
