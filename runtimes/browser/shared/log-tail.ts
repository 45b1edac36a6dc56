/**
 * The live log's bounded tail, without the page around it (unit-tested): what one stream keeps
 * and how the streams are shown together, as the runtime's whole log answer shows them.
 */

/** One stream of the live log: where the next read starts and the tail the page keeps. */
export interface LogTail {
  /** Byte offset of the next read in the attempt's log file. */
  offset: number;
  text: string;
  /** Characters cut from the front to keep the tail bounded. */
  trimmedChars: number;
  /** The attempt ended and the stream was read to its end. */
  finished: boolean;
}

/** What the page keeps of each stream: a long-running step cannot grow the tab's memory. */
export const LOG_TAIL_CHARS = 256 * 1024;
/** What the whole log answer puts between the streams (runtimes/node/read-log.ts). */
const STDERR_SEPARATOR = "--- stderr ---\n";

export function emptyTail(): LogTail {
  return { offset: 0, text: "", trimmedChars: 0, finished: false };
}

/** Appends a chunk and cuts the front so at most `LOG_TAIL_CHARS` remain, at a line start where one is near. */
export function appendToTail(tail: LogTail, text: string): void {
  const joined = tail.text + text;
  if (joined.length <= LOG_TAIL_CHARS) {
    tail.text = joined;
    return;
  }
  let cut = joined.length - LOG_TAIL_CHARS;
  const lineEnd = joined.indexOf("\n", cut);
  if (lineEnd !== -1 && lineEnd - cut < 1024) cut = lineEnd + 1;
  tail.text = joined.slice(cut);
  tail.trimmedChars += cut;
}

/** The text as the whole log answer shows it: stdout, then (when not empty) a separator and stderr. */
export function logText(log: { readonly stdout: LogTail; readonly stderr: LogTail }): string {
  const { stdout, stderr } = log;
  if (stderr.text === "" && stderr.trimmedChars === 0) return stdout.text;
  const newline = stdout.text !== "" && !stdout.text.endsWith("\n") ? "\n" : "";
  return `${stdout.text}${newline}${STDERR_SEPARATOR}${stderr.text}`;
}
