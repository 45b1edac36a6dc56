import { canonicalJson, parseJsonText, type JsonValue } from "./canonical-json.ts";
import { utf8ByteLength } from "./utf8.ts";

/**
 * Step outputs: a task may leave one small JSON result at the path the runtime names in
 * `QLR_OUTPUT`. It is recorded once with the attempt's completion and handed to the steps that
 * need it. These are the rules every runtime applies to it, whoever reads the file.
 */

/** The canonical JSON of one output: it is stored twice (attempt and step) and copied into every needing step's file. */
export const MAX_OUTPUT_BYTES = 64 * 1024;
/** Nesting depth of an output; deep enough for any real result, shallow enough for every parser's stack. */
export const MAX_OUTPUT_DEPTH = 32;

export type OutputEvidence = {
  readonly output: JsonValue | null;
  readonly outputError: string | null;
};

export const NO_OUTPUT: OutputEvidence = { output: null, outputError: null };

function depthOf(value: unknown): number {
  let deepest = 0;
  const pending: { value: unknown; depth: number }[] = [{ value, depth: 0 }];
  for (let item = pending.pop(); item !== undefined; item = pending.pop()) {
    deepest = Math.max(deepest, item.depth);
    if (deepest > MAX_OUTPUT_DEPTH) return deepest;
    if (typeof item.value === "object" && item.value !== null) {
      for (const member of Object.values(item.value as Record<string, unknown>))
        pending.push({ value: member, depth: item.depth + 1 });
    }
  }
  return deepest;
}

/**
 * The output a task's file text stands for. Empty text (or only white space) and JSON `null` are
 * no output; text that is not JSON, nests deeper than MAX_OUTPUT_DEPTH or exceeds
 * MAX_OUTPUT_BYTES as canonical JSON is refused with the reason (the attempt then fails).
 */
export function outputFromText(text: string): OutputEvidence {
  if (text.trim() === "") return NO_OUTPUT;
  const parsed = parseJsonText(text);
  if (!parsed.ok) return { output: null, outputError: `not valid JSON: ${parsed.message}` };
  return checkOutput(parsed.value);
}

/** Checks an already-parsed output (a remote worker's completion call carries one). */
export function checkOutput(value: unknown): OutputEvidence {
  if (value === null || value === undefined) return NO_OUTPUT;
  if (depthOf(value) > MAX_OUTPUT_DEPTH)
    return { output: null, outputError: `nests deeper than ${MAX_OUTPUT_DEPTH} levels` };
  let text: string;
  try {
    text = canonicalJson(value);
  } catch (error) {
    return { output: null, outputError: error instanceof Error ? error.message : String(error) };
  }
  const bytes = utf8ByteLength(text);
  if (bytes > MAX_OUTPUT_BYTES)
    return {
      output: null,
      outputError: `is ${bytes} bytes as canonical JSON, more than the ${MAX_OUTPUT_BYTES} allowed`,
    };
  return { output: JSON.parse(text) as JsonValue, outputError: null };
}
