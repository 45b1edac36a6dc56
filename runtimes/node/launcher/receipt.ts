import { createHmac, randomBytes } from "node:crypto";
import { stat } from "node:fs/promises";
import { canonicalJson } from "../../../src/canonical-json.ts";
import { timingSafeEqualText } from "../../../src/digest.ts";
import { isPortableId } from "../../../src/identity.ts";
import type { CompletionFacts } from "../../../src/execution.ts";
import { MAX_OUTPUT_BYTES } from "../../../src/task-output.ts";
import { QlrError, errorCode } from "../../../src/errors.ts";
import type { DurableFs } from "../../../storage/node/durable-fs.ts";
import {
  createFileExclusiveDurable,
  ensureDurableDirectories,
  launcherDurableFs,
  readSmallFile,
} from "./durable-file.ts";
import { createRecordFile, recordOf } from "./record-file.ts";
import { receiptPath, stateLayout, type StateLayout } from "./state-layout.ts";

export const STOP_REASONS = ["cancel", "timeout", "shutdown"] as const;
export type StopReason = (typeof STOP_REASONS)[number];

export function isStopReason(value: unknown): value is StopReason {
  return typeof value === "string" && (STOP_REASONS as readonly string[]).includes(value);
}

/**
 * What the supervisor writes once when the task's process ends. `startedAtMs` is copied from
 * the journal (the launcher's pre-spawn handle fact, ADR-0229 §5); `finishedAtMs` is the
 * supervisor's clock. `stopReason` says a stop was requested before the receipt was written;
 * `exitCode` and `signal` say how the process actually ended. Apart from the attempt it names
 * and its MAC, a receipt is exactly the completion facts the core settles an attempt from.
 */
export interface CompletionReceipt extends Omit<CompletionFacts, "handle"> {
  readonly attemptId: string;
  /**
   * `output` and `outputError` (the task's `QLR_OUTPUT`, read once after its process group
   * ended, and why it was refused) are authenticated with the exit code, so an output is
   * recorded exactly as its completion is. Receipts written before outputs existed have neither
   * field.
   */
  readonly mac: string;
}

export type UnsignedReceipt = Omit<CompletionReceipt, "mac">;

const RECEIPT_KEYS = [
  "attemptId",
  "exitCode",
  "finishedAtMs",
  "mac",
  "signal",
  "spawnError",
  "startedAtMs",
  "stopReason",
];
const RECEIPT_KEYS_WITH_OUTPUT = [
  "attemptId",
  "exitCode",
  "finishedAtMs",
  "mac",
  "output",
  "outputError",
  "signal",
  "spawnError",
  "startedAtMs",
  "stopReason",
];
/** Room for the largest output (MAX_OUTPUT_BYTES of canonical JSON) besides the receipt's own fields. */
export const RECEIPT_MAX_BYTES = 16 * 1024 + MAX_OUTPUT_BYTES;
/** Output refusal reasons are clipped like spawn errors. */
export const OUTPUT_ERROR_MAX_LENGTH = 1024;
/** Spawn error texts are clipped so a receipt stays far below RECEIPT_MAX_BYTES. */
export const SPAWN_ERROR_MAX_LENGTH = 1024;
const MAC_PATTERN = /^[0-9a-f]{64}$/;

/**
 * What a receipt's MAC covers. The fields are picked one by one so an object carrying extra
 * members (a whole receipt, say) can never change what is authenticated. The output fields
 * are authenticated only when they say something, so a receipt without an output keeps the
 * MAC it always had.
 */
function authenticatedFields(fields: UnsignedReceipt): UnsignedReceipt {
  const { attemptId, startedAtMs, finishedAtMs, exitCode, signal, stopReason, spawnError } = fields;
  const output = fields.output ?? null;
  const outputError = fields.outputError ?? null;
  const withOutput = output === null && outputError === null ? {} : { output, outputError };
  return {
    attemptId,
    startedAtMs,
    finishedAtMs,
    exitCode,
    signal,
    stopReason,
    spawnError,
    ...withOutput,
  };
}

/**
 * MAC = HMAC-SHA256(key, canonical JSON of every receipt field except `mac`), the bytes the
 * core's portable `hmacSha256Hex` gives (a test holds them equal). Node's own HMAC: the
 * supervisor runs without the optimizing compiler, where the portable one took ≈ 0.3 ms of a
 * launch's CPU.
 */
export function receiptMac(key: Uint8Array, fields: UnsignedReceipt): string {
  return createHmac("sha256", key)
    .update(canonicalJson({ ...authenticatedFields(fields) }), "utf8")
    .digest("hex");
}

export function signReceipt(key: Uint8Array, fields: UnsignedReceipt): CompletionReceipt {
  return {
    ...authenticatedFields(fields),
    output: fields.output ?? null,
    outputError: fields.outputError ?? null,
    mac: receiptMac(key, fields),
  };
}

/** Checks the exact shape of a parsed receipt; returns the reason it is not one, or null. */
function receiptShapeProblem(value: unknown): string | null {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    return "not a JSON object";
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record).sort();
  const expected = keys.includes("output") ? RECEIPT_KEYS_WITH_OUTPUT : RECEIPT_KEYS;
  if (keys.length !== expected.length || keys.some((key, index) => key !== expected[index]))
    return `fields are [${keys.join(",")}], expected [${expected.join(",")}]`;
  if (
    record.outputError !== undefined &&
    record.outputError !== null &&
    typeof record.outputError !== "string"
  )
    return "outputError is neither text nor null";
  if (!isPortableId(record.attemptId)) return "attemptId is not a portable identity";
  if (!Number.isSafeInteger(record.startedAtMs) || !Number.isSafeInteger(record.finishedAtMs))
    return "times are not integers";
  if (record.exitCode !== null && !Number.isSafeInteger(record.exitCode))
    return "exitCode is neither an integer nor null";
  if (
    record.signal !== null &&
    (typeof record.signal !== "string" || !/^SIG[A-Z0-9]+$/.test(record.signal))
  )
    return "signal is neither a signal name nor null";
  if (record.stopReason !== null && !isStopReason(record.stopReason))
    return "stopReason is not cancel, timeout, shutdown or null";
  if (record.spawnError !== null && typeof record.spawnError !== "string")
    return "spawnError is neither text nor null";
  if (typeof record.mac !== "string" || !MAC_PATTERN.test(record.mac))
    return "mac is not 64 lower-case hex digits";
  return null;
}

export type ReceiptCheck =
  | { readonly ok: true; readonly receipt: CompletionReceipt }
  | { readonly ok: false; readonly reason: string };

/**
 * Parses and authenticates a receipt file's text (its own line of a file that several
 * receipts share, `recordOf`): exact shape, then a constant-time MAC comparison, then the
 * binding to the attempt id the file is named after (a valid receipt copied to
 * another attempt's name is rejected).
 */
export function checkReceiptText(
  key: Uint8Array,
  text: string,
  expectedAttemptId: string,
): ReceiptCheck {
  const own = recordOf(text, expectedAttemptId);
  if (!own.ok) return { ok: false, reason: `receipt ${own.reason}` };
  const problem = receiptShapeProblem(own.record);
  if (problem !== null) return { ok: false, reason: `receipt shape: ${problem}` };
  const receipt = own.record as unknown as CompletionReceipt;
  const { mac, ...fields } = receipt;
  if (!timingSafeEqualText(receiptMac(key, fields), mac))
    return { ok: false, reason: "receipt MAC does not verify" };
  if (receipt.attemptId !== expectedAttemptId)
    return {
      ok: false,
      reason: `receipt names attempt ${JSON.stringify(receipt.attemptId)}, its file names ${JSON.stringify(expectedAttemptId)}`,
    };
  return { ok: true, receipt };
}

/**
 * Writes the receipt exactly once (temporary file, fsync, link to the final name, fsync of the
 * directory). A second write for the same attempt fails with a QlrError `conflict` whose
 * cause has code EEXIST, and the first receipt stays as it was.
 */
export async function writeReceiptExclusive(
  layout: StateLayout,
  receipt: CompletionReceipt,
  fs: DurableFs = launcherDurableFs,
): Promise<void> {
  const path = receiptPath(layout, receipt.attemptId);
  try {
    await createRecordFile(path, layout.tmpDir, receipt, RECEIPT_MAX_BYTES, fs);
  } catch (error) {
    if (errorCode(error) === "EEXIST")
      throw new QlrError(
        "conflict",
        `a receipt for ${receipt.attemptId} already exists; receipts are never overwritten`,
        { cause: error },
      );
    throw error;
  }
}

export const RECEIPT_KEY_BYTES = 32;

/** Reads the receipt key file: 64 hex digits, owner-only permissions. */
export async function readReceiptKey(keyPath: string): Promise<Uint8Array | null> {
  const file = await readSmallFile(keyPath, 256);
  if (file === null) return null;
  if (!file.ok) throw new QlrError("integrity", `receipt key ${keyPath} ${file.reason}`);
  const mode = (await stat(keyPath)).mode & 0o777;
  if ((mode & 0o077) !== 0)
    throw new QlrError(
      "integrity",
      `receipt key ${keyPath} has mode ${mode.toString(8)}; it must be readable by its owner only (chmod 600)`,
    );
  const hex = file.text.trim();
  if (!new RegExp(`^[0-9a-f]{${RECEIPT_KEY_BYTES * 2}}$`).test(hex))
    throw new QlrError(
      "integrity",
      `receipt key ${keyPath} is not ${RECEIPT_KEY_BYTES * 2} lower-case hex digits`,
    );
  return Uint8Array.from(Buffer.from(hex, "hex"));
}

/**
 * Returns the state directory's receipt key, creating it (32 random bytes as hex, mode 0600)
 * on first use. The key authenticates receipts, so it lives only in this file: the supervisor
 * reads it from the path, never from its command line or environment (both are visible to
 * other local users through /proc).
 */
export async function loadOrCreateReceiptKey(stateDir: string): Promise<Uint8Array> {
  const layout = stateLayout(stateDir);
  const existing = await readReceiptKey(layout.receiptKeyPath);
  if (existing !== null) return existing;
  await ensureDurableDirectories(layout.stateDir, [layout.tmpDir]);
  try {
    await createFileExclusiveDurable(
      layout.receiptKeyPath,
      layout.tmpDir,
      `${randomBytes(RECEIPT_KEY_BYTES).toString("hex")}\n`,
    );
  } catch (error) {
    // Another process created it first: both must use that one key.
    if (errorCode(error) !== "EEXIST") throw error;
  }
  const created = await readReceiptKey(layout.receiptKeyPath);
  if (created === null)
    throw new QlrError(
      "storage_unavailable",
      `receipt key ${layout.receiptKeyPath} vanished right after it was created`,
    );
  return created;
}
