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

/** A record file's record, or why it is not one. */
export type RecordReading =
  | { readonly ok: true; readonly record: Record<string, unknown> }
  | { readonly ok: false; readonly reason: string };

/**
 * `attemptId`'s record in a record file's text. A file of one line is that line's record,
 * whichever attempt it names (the caller checks, and says "names attempt …"). A file that
 * several records share (`RecordSharing`) holds one line per record: the one that names the
 * attempt, or why there is none (a line that is not a JSON object, no line or two lines of
 * this attempt). The reader's byte limit bounds the lines.
 */
export function recordOf(text: string, attemptId: string): RecordReading {
  const lines = (text.endsWith("\n") ? text.slice(0, -1) : text).split("\n");
  if (lines.length === 1) return recordOfLine(lines[0] ?? "", "is");
  let found: RecordReading | null = null;
  for (const [index, line] of lines.entries()) {
    const reading = recordOfLine(line, `has a line ${index + 1} that is`);
    if (!reading.ok) return reading;
    if (reading.record.attemptId !== attemptId) continue;
    if (found !== null) return { ok: false, reason: `holds two records of attempt ${attemptId}` };
    found = reading;
  }
  return (
    found ?? { ok: false, reason: `holds ${lines.length} records, none of attempt ${attemptId}` }
  );
}

function recordOfLine(line: string, subject: string): RecordReading {
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch {
    return { ok: false, reason: `${subject} not valid JSON` };
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    return { ok: false, reason: `${subject} not a JSON object` };
  return { ok: true, record: parsed as Record<string, unknown> };
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
): Promise<RecordReading | null> {
  const file = await readSmallFile(path, maxBytes, fs);
  if (file === null || !file.ok) return file;
  return recordOf(file.text, attemptId);
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
