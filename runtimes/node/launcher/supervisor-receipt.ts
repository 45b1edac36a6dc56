/**
 * The resident supervisor's receipt of an attempt that has ended (or failed to start), written
 * and retried until it lands. supervisor.ts holds the process, its socket and its tasks.
 */
import { existsSync } from "node:fs";
import { errorCode } from "../../../src/errors.ts";
import { NO_OUTPUT } from "../../../src/task-output.ts";
import { taskOutputPath } from "../task-env.ts";
import {
  OUTPUT_ERROR_MAX_LENGTH,
  signReceipt,
  writeReceiptExclusive,
  type CompletionReceipt,
} from "./receipt.ts";
import type { StateLayout } from "./state-layout.ts";
import { readStopReason } from "./stop-intent.ts";
import { describeError, noteSupervisorFailure } from "./supervisor-notes.ts";
import { reclaimAndReadOutput, type TaskFiles } from "./supervisor-output.ts";
import { readTaskOutput } from "./task-output.ts";

/** A receipt that cannot be written (a full disk) is tried again with this backoff, for as long as it takes. */
const RECEIPT_RETRY_MIN_MS = 50;
const RECEIPT_RETRY_MAX_MS = 2000;

const sleepMs = (milliseconds: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, milliseconds));

/**
 * Writes the receipt, retrying until it lands: a full disk delays the completion but never
 * loses it (the supervisor stays for as long as the receipt is pending). EEXIST ends it: a
 * receipt is never replaced.
 */
export async function writeReceiptUntilItLands(
  layout: StateLayout,
  key: Uint8Array,
  attemptId: string,
  startedAtMs: number,
  outcome: Pick<CompletionReceipt, "exitCode" | "signal" | "spawnError" | "finishedAtMs">,
  taskFiles: TaskFiles | null,
): Promise<boolean> {
  // Read once, after the task's group is gone and before the receipt: the output is signed
  // with the exit code, so it is recorded exactly as the completion is.
  const ran = outcome.spawnError === null;
  const { output, outputError } =
    taskFiles !== null
      ? await reclaimAndReadOutput(taskFiles, ran)
      : ran
        ? await readTaskOutput(taskOutputPath(layout.stateDir, attemptId))
        : NO_OUTPUT;
  const outputFields = {
    output,
    outputError: outputError?.slice(0, OUTPUT_ERROR_MAX_LENGTH) ?? null,
  };
  let backoffMs: number = RECEIPT_RETRY_MIN_MS;
  let noted = false;
  for (;;) {
    try {
      const stopReason = await readStopReason(layout, attemptId);
      await writeReceiptExclusive(
        layout,
        signReceipt(key, {
          attemptId,
          startedAtMs,
          stopReason,
          ...outcome,
          ...outputFields,
        }),
      );
      return true;
    } catch (error) {
      if (errorCode((error as { cause?: unknown }).cause) === "EEXIST") {
        noteSupervisorFailure(layout, attemptId, `receipt not written: ${describeError(error)}`);
        return false;
      }
      // A state directory that is gone (removed by hand) will never take the receipt: give
      // up instead of lingering forever. Anything else (a full disk) is waited out.
      if (!existsSync(layout.receiptsDir)) return false;
      if (!noted)
        noteSupervisorFailure(
          layout,
          attemptId,
          `receipt write failed, retrying until it lands: ${describeError(error)}`,
        );
      noted = true;
    }
    await sleepMs(backoffMs);
    backoffMs = Math.min(RECEIPT_RETRY_MAX_MS, backoffMs * 2);
  }
}
