import { canonicalJson } from "../../../src/canonical-json.ts";
import { isDigest, type Digest } from "../../../src/digest.ts";
import { QlrError } from "../../../src/errors.ts";
import { isPortableId } from "../../../src/identity.ts";
import type { DurableFs } from "../../../storage/node/durable-fs.ts";
import { createRecordFile, launcherDurableFs, readRecordFile } from "./durable-file.ts";
import { journalPath, type StateLayout } from "./state-layout.ts";

/**
 * The launch journal record, written durably before the spawn. It holds no argv or env text
 * (either may carry secrets), only their digest, plus the facts recovery needs: the pre-spawn
 * `startedAtMs` every receipt must repeat, and the boot id, so a journal from an earlier boot
 * without a receipt is trusted evidence that the process is gone even when the runtime died
 * before it could persist the process handle.
 */
export interface JournalRecord {
  readonly version: 1;
  readonly attemptId: string;
  readonly startedAtMs: number;
  readonly bootId: string;
  /** Digest of the canonical JSON of argv. */
  readonly argvDigest: Digest;
  readonly cwd: string | null;
  readonly logMaxBytes: number;
}

export const JOURNAL_MAX_BYTES = 16 * 1024;
const JOURNAL_KEYS = [
  "argvDigest",
  "attemptId",
  "bootId",
  "cwd",
  "logMaxBytes",
  "startedAtMs",
  "version",
];

/** The record's bytes on disk, as `createRecordFile` writes them. */
export function journalText(record: JournalRecord): string {
  return `${canonicalJson({ ...record })}\n`;
}

/**
 * Writes the record durably, exactly once: when this returns, a power cut cannot lose it, so
 * the caller may spawn. EEXIST (unchanged) when the attempt is already journaled.
 */
export function writeJournalRecord(
  layout: StateLayout,
  record: JournalRecord,
  fs: DurableFs = launcherDurableFs,
): Promise<void> {
  return createRecordFile(journalPath(layout, record.attemptId), layout.tmpDir, record, fs);
}

function journalShapeProblem(record: Record<string, unknown>): string | null {
  const keys = Object.keys(record).sort();
  if (keys.length !== JOURNAL_KEYS.length || keys.some((key, index) => key !== JOURNAL_KEYS[index]))
    return `fields are [${keys.join(",")}]`;
  if (record.version !== 1) return "version is not 1";
  if (!isPortableId(record.attemptId)) return "attemptId is not a portable identity";
  if (!Number.isSafeInteger(record.startedAtMs)) return "startedAtMs is not an integer";
  if (typeof record.bootId !== "string" || record.bootId.length === 0) return "bootId is missing";
  if (!isDigest(record.argvDigest)) return "argvDigest is not a digest";
  if (record.cwd !== null && typeof record.cwd !== "string") return "cwd is neither text nor null";
  if (!Number.isSafeInteger(record.logMaxBytes)) return "logMaxBytes is not an integer";
  return null;
}

/**
 * Reads and checks one journal record. Null when there is none; a record that exists but is
 * malformed, a link, or names another attempt throws `storage_corrupt`, because "no journal"
 * and "a journal we cannot trust" lead recovery to different decisions.
 */
export async function readJournalRecord(
  layout: StateLayout,
  attemptId: string,
  fs: DurableFs = launcherDurableFs,
): Promise<JournalRecord | null> {
  const path = journalPath(layout, attemptId);
  const file = await readRecordFile(path, JOURNAL_MAX_BYTES, fs);
  if (file === null) return null;
  if (!file.ok) throw new QlrError("storage_corrupt", `journal ${path} ${file.reason}`);
  const problem = journalShapeProblem(file.record);
  if (problem !== null) throw new QlrError("storage_corrupt", `journal ${path}: ${problem}`);
  const record = file.record as unknown as JournalRecord;
  if (record.attemptId !== attemptId)
    throw new QlrError(
      "storage_corrupt",
      `journal ${path} names attempt ${JSON.stringify(record.attemptId)}`,
    );
  return record;
}
