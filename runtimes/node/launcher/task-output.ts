import { readSmallNoFollow } from "../../../storage/node/durable-fs.ts";
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

type FileReading = { ok: true; text: string } | { ok: false; reason: string } | null;

/**
 * Reads a file another user made, as root, without trusting anything that user could plant:
 * no link is followed (O_NOFOLLOW), a FIFO cannot block the read (O_NONBLOCK), and only a
 * regular file with one name owned by `ownerUid` is read. A hard link the task made to a file
 * of the runtime's (where the kernel allows one) is owned by the runtime, or has two names.
 */
function readFileOwnedBy(path: string, ownerUid: number, maxBytes: number): FileReading {
  const reading = readSmallNoFollow(path, maxBytes, {
    nonBlocking: true,
    refuse: (stats) =>
      stats.uid !== ownerUid
        ? `belongs to uid ${stats.uid}, not to the task's uid ${ownerUid}`
        : stats.nlink !== 1
          ? `has ${stats.nlink} names, not one`
          : null,
  });
  if (reading === null || !reading.ok) return reading;
  const { bytes } = reading;
  return {
    ok: true,
    text: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString("utf8"),
  };
}

/**
 * Reads the output a task left at its `QLR_OUTPUT` path, once, after the task's process group
 * is gone and before its completion is recorded (the supervisor calls it right before it signs
 * the receipt, so the output is authenticated with the exit code and recorded exactly as
 * often). No file is no output; a symbolic link, a directory, an oversize file or text that is
 * not JSON is a refused output with its reason. With `ownerUid` (a task run as another user)
 * the file must also be that user's and have one name (see `readFileOwnedBy`).
 */
export async function readTaskOutput(
  path: string,
  options: { readonly ownerUid?: number } = {},
): Promise<OutputEvidence> {
  let file: FileReading;
  try {
    const { ownerUid } = options;
    file =
      ownerUid === undefined
        ? await readSmallFile(path, MAX_OUTPUT_FILE_BYTES)
        : readFileOwnedBy(path, ownerUid, MAX_OUTPUT_FILE_BYTES);
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
