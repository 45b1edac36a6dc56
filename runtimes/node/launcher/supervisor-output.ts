import { join } from "node:path";
import { NO_OUTPUT, type OutputEvidence } from "../../../src/task-output.ts";
import { describeError } from "./supervisor-notes.ts";
import type { SupervisorSpec } from "./supervisor-protocol.ts";
import { readTaskOutput } from "./task-output.ts";
import { reclaimTaskFiles, USER_TASK_OUTPUT_FILE } from "./user-task-files.ts";

/** A task run as another user: its needs/output folder and the uid its output must belong to. */
export interface TaskFiles {
  readonly dir: string;
  readonly ownerUid: number;
}

export function taskFilesOf(spec: SupervisorSpec): TaskFiles | null {
  return spec.taskFilesDir === undefined || spec.uid === null
    ? null
    : { dir: spec.taskFilesDir, ownerUid: spec.uid };
}

/**
 * The output of a task run as another user: its folder is taken back first (chowned to this
 * user, 0700: closed to every task user from now on, and nothing in it can change while it is
 * read), then the output is read only if the task's user made it (see readTaskOutput). For a
 * task that never ran, the folder is taken back and nothing is read.
 */
export async function reclaimAndReadOutput(
  files: TaskFiles,
  ran: boolean,
): Promise<OutputEvidence> {
  try {
    const present = await reclaimTaskFiles(files.dir);
    if (!ran) return NO_OUTPUT;
    // The launcher made the folder before the spawn: a task that ran without it lost whatever
    // it left there, so its output is unknown, never "none".
    if (!present)
      return {
        output: null,
        outputError: `the task files folder ${files.dir} was removed while the task ran (a cleaned temporary folder, or a private /tmp torn down by a service restart), so its output is unknown`,
      };
  } catch (error) {
    return ran
      ? {
          output: null,
          outputError: `the output folder could not be taken back: ${describeError(error)}`,
        }
      : NO_OUTPUT;
  }
  return readTaskOutput(join(files.dir, USER_TASK_OUTPUT_FILE), { ownerUid: files.ownerUid });
}
