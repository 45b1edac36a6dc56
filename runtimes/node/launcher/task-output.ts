import {
  MAX_OUTPUT_BYTES,
  NO_OUTPUT,
  outputFromText,
  type OutputEvidence,
} from "../../../src/task-output.ts";
import { readSmallFile } from "./durable-file.ts";

/**
 * The file a task may leave its output in is read at most this large: canonical JSON of at
 * most MAX_OUTPUT_BYTES, with room for the indentation a pretty-printing tool adds.
 */
export const MAX_OUTPUT_FILE_BYTES = 4 * MAX_OUTPUT_BYTES;

/**
 * Reads the output a task left at its `QLR_OUTPUT` path, once, after the task's process group
 * is gone and before its completion is recorded (the supervisor calls it right before it signs
 * the receipt, so the output is authenticated with the exit code and recorded exactly as
 * often). No file is no output; a symbolic link, a directory, an oversize file or text that is
 * not JSON is a refused output with its reason.
 */
export async function readTaskOutput(path: string): Promise<OutputEvidence> {
  let file;
  try {
    file = await readSmallFile(path, MAX_OUTPUT_FILE_BYTES);
  } catch (error) {
    return {
      output: null,
      outputError: `the output file could not be read: ${error instanceof Error ? error.message : String(error)}`,
    };
  }
  if (file === null) return NO_OUTPUT;
  if (!file.ok) return { output: null, outputError: `the output file ${file.reason}` };
  return outputFromText(file.text);
}
