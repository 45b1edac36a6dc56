import { errorCode, isQlrError } from "../../../src/errors.ts";
import type { DurableFs } from "../../../storage/node/durable-fs.ts";
import { launcherDurableFs } from "./durable-file.ts";
import { attemptRecordReader, createRecordFile } from "./record-file.ts";
import { isStopReason, type StopReason } from "./receipt.ts";
import { stopIntentPath, type StateLayout } from "./state-layout.ts";

const STOP_INTENT_MAX_BYTES = 4096;

/**
 * A stop intent is written durably before the first signal, so whatever the signal causes, the
 * supervisor finds the reason when it writes the receipt, even if the runtime dies right
 * after signalling. The first recorded reason wins: a later "shutdown" does not relabel a
 * "cancel" already in flight. An existing intent that cannot be read as one (torn by a power
 * cut on a file system without hard links, where the write is not atomic) is refused with
 * `storage_corrupt` naming the file, never silently replaced.
 */
export async function recordStopIntent(
  layout: StateLayout,
  attemptId: string,
  reason: StopReason,
  requestedAtMs: number,
  fs: DurableFs = launcherDurableFs,
): Promise<StopReason> {
  const path = stopIntentPath(layout, attemptId);
  try {
    await createRecordFile(
      path,
      layout.tmpDir,
      { attemptId, reason, requestedAtMs },
      STOP_INTENT_MAX_BYTES,
      fs,
    );
    return reason;
  } catch (error) {
    if (errorCode(error) !== "EEXIST") throw error;
    return (await readStopIntent(layout, attemptId, fs))?.reason ?? reason;
  }
}

export interface StopIntent {
  readonly reason: StopReason;
  readonly requestedAtMs: number;
}

/**
 * The recorded intent, null when there is none; `storage_corrupt` naming the file and what is
 * wrong when one exists that is not a whole, well-formed intent for this attempt.
 */
export const readStopIntent = attemptRecordReader<StopIntent>({
  what: "stop intent",
  path: stopIntentPath,
  maxBytes: STOP_INTENT_MAX_BYTES,
  fieldProblem: (intent) => {
    if (!isStopReason(intent.reason)) return "its reason is not cancel, timeout or shutdown";
    if (!Number.isSafeInteger(intent.requestedAtMs)) return "its requestedAtMs is not an integer";
    return null;
  },
  value: (intent) => ({
    reason: intent.reason as StopReason,
    requestedAtMs: intent.requestedAtMs as number,
  }),
});

/**
 * The recorded stop reason, or null when there is none or it cannot be read as one: the
 * supervisor labels a receipt with it, and a damaged intent must not keep the receipt from
 * being written (the completion itself is what must not be lost).
 */
export async function readStopReason(
  layout: StateLayout,
  attemptId: string,
  fs: DurableFs = launcherDurableFs,
): Promise<StopReason | null> {
  try {
    return (await readStopIntent(layout, attemptId, fs))?.reason ?? null;
  } catch (error) {
    if (isQlrError(error, "storage_corrupt")) return null;
    throw error;
  }
}
