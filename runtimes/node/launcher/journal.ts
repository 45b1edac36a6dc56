import { canonicalJson } from "../../../src/canonical-json.ts";
import { isDigest, type Digest } from "../../../src/digest.ts";
import { isPortableId } from "../../../src/identity.ts";
import type { DurableFs } from "../../../storage/node/durable-fs.ts";
import { launcherDurableFs } from "./durable-file.ts";
import { attemptRecordReader, createRecordFile } from "./record-file.ts";
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
  return createRecordFile(
    journalPath(layout, record.attemptId),
    layout.tmpDir,
    record,
    JOURNAL_MAX_BYTES,
    fs,
  );
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

/** Reads and checks one journal record: null when there is none (see `attemptRecordReader`). */
export const readJournalRecord = attemptRecordReader<JournalRecord>({
  what: "journal",
  path: journalPath,
  maxBytes: JOURNAL_MAX_BYTES,
  fieldProblem: journalShapeProblem,
  value: (record) => record as unknown as JournalRecord,
});
