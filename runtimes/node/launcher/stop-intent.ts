import { canonicalJson } from "../../../src/canonical-json.ts";
import { errorCode } from "../../../src/errors.ts";
import { createFileExclusiveDurable, readSmallFile } from "./durable-file.ts";
import { isStopReason, type StopReason } from "./receipt.ts";
import { stopIntentPath, type StateLayout } from "./state-layout.ts";

/**
 * A stop intent is written durably before the first signal, so whatever the signal causes, the
 * supervisor finds the reason when it writes the receipt, even if the runtime dies right
 * after signalling. The first recorded reason wins: a later "shutdown" does not relabel a
 * "cancel" already in flight.
 */
export async function recordStopIntent(
  layout: StateLayout,
  attemptId: string,
  reason: StopReason,
  requestedAtMs: number,
): Promise<StopReason> {
  const path = stopIntentPath(layout, attemptId);
  try {
    await createFileExclusiveDurable(
      path,
      layout.tmpDir,
      `${canonicalJson({ attemptId, reason, requestedAtMs })}\n`,
    );
    return reason;
  } catch (error) {
    if (errorCode(error) !== "EEXIST") throw error;
    return (await readStopReason(layout, attemptId)) ?? reason;
  }
}

/** The recorded stop reason, or null when there is none or it cannot be read as one. */
export async function readStopReason(
  layout: StateLayout,
  attemptId: string,
): Promise<StopReason | null> {
  const file = await readSmallFile(stopIntentPath(layout, attemptId), 4096);
  if (file === null || !file.ok) return null;
  try {
    const parsed = JSON.parse(file.text) as { attemptId?: unknown; reason?: unknown };
    return parsed.attemptId === attemptId && isStopReason(parsed.reason) ? parsed.reason : null;
  } catch {
    return null;
  }
}
