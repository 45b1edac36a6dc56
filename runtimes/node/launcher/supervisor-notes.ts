import { appendFileSync } from "node:fs";
import { join } from "node:path";
import { errorMessage } from "../../../src/errors.ts";
import { LOG_FILE_MODE } from "./capped-log.ts";
import { SPAWN_ERROR_MAX_LENGTH } from "./receipt.ts";
import type { StateLayout } from "./state-layout.ts";

export function describeError(error: unknown): string {
  return errorMessage(error).slice(0, SPAWN_ERROR_MAX_LENGTH);
}

/** Best-effort note for failures that leave no receipt (yet); an operator finds it next to the logs. */
export function noteSupervisorFailure(
  layout: StateLayout,
  attemptId: string,
  message: string,
): void {
  try {
    appendFileSync(
      join(layout.logsDir, `${attemptId}.supervisor.log`),
      `[qlr supervisor] ${message}\n`,
      { mode: LOG_FILE_MODE },
    );
  } catch {
    // The disk is full or the state directory unusable; there is nowhere left to say it.
  }
}

/** Best-effort note about the supervisor itself (not one attempt), in the state directory. */
export function noteStateDir(layout: StateLayout, message: string): void {
  try {
    appendFileSync(join(layout.stateDir, "supervisor.log"), `[qlr supervisor] ${message}\n`, {
      mode: LOG_FILE_MODE,
    });
  } catch {
    // Nowhere left to say it.
  }
}
