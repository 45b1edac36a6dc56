import { errorMessage, QlrError } from "./errors.ts";

export type JsonValue =
  null | boolean | number | string | readonly JsonValue[] | { readonly [key: string]: JsonValue };

/**
 * Canonical JSON: object keys sorted by UTF-16 code unit order, no insignificant space,
 * `undefined` object members omitted, non-finite numbers and non-JSON values rejected.
 * Digests and deterministic ids are computed over this text, so it must never change shape.
 */
export function canonicalJson(value: unknown): string {
  try {
    return writeFast(value);
  } catch (error) {
    // Only the tracked writer names where a value is not JSON: it throws that error here.
    if (error === UNWRITABLE) return write(value, "$");
    throw error;
  }
}

/** What `writeFast` throws where `write` would throw an error naming the value's path. */
const UNWRITABLE = new Error("not canonical JSON");

/**
 * `write` without the path of each member: the same text, and it throws (`UNWRITABLE`) on
 * exactly the values `write` refuses. Digests and derived ids write the same small values again
 * and again, and building a path string for every member of every value cost more than the
 * writing; the path is built only when there is an error to name.
 */
function writeFast(value: unknown): string {
  if (value === null) return "null";
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isFinite(value)) throw UNWRITABLE;
      return JSON.stringify(value);
    case "string":
      return JSON.stringify(value);
    case "object": {
      // `map` as `write` has it, so that an array with holes writes the same text.
      if (Array.isArray(value)) return `[${value.map((item) => writeFast(item)).join(",")}]`;
      const proto = Object.getPrototypeOf(value) as unknown;
      if (proto !== Object.prototype && proto !== null) throw UNWRITABLE;
      const record = value as Record<string, unknown>;
      // The default sort compares UTF-16 code units, as `write`'s comparison does.
      const keys = Object.keys(record).sort();
      let text = "{";
      for (const key of keys) {
        const member = record[key];
        if (member === undefined) continue;
        if (text.length > 1) text += ",";
        text += `${JSON.stringify(key)}:${writeFast(member)}`;
      }
      return `${text}}`;
    }
    default:
      throw UNWRITABLE;
  }
}

function write(value: unknown, path: string): string {
  if (value === null) return "null";
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isFinite(value))
        throw new QlrError(
          "invalid_request",
          `canonical JSON cannot hold ${String(value)} at ${path}`,
        );
      return JSON.stringify(value);
    case "string":
      return JSON.stringify(value);
    case "object": {
      if (Array.isArray(value))
        return `[${value.map((item, index) => write(item, `${path}[${index}]`)).join(",")}]`;
      const proto = Object.getPrototypeOf(value) as unknown;
      if (proto !== Object.prototype && proto !== null)
        throw new QlrError(
          "invalid_request",
          `canonical JSON holds only plain objects, not at ${path}`,
        );
      const entries = Object.entries(value as Record<string, unknown>)
        .filter(([, member]) => member !== undefined)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      return `{${entries.map(([key, member]) => `${JSON.stringify(key)}:${write(member, `${path}.${key}`)}`).join(",")}}`;
    }
    default:
      throw new QlrError(
        "invalid_request",
        `canonical JSON cannot hold a ${typeof value} at ${path}`,
      );
  }
}

/** A parsed JSON text, or why it is not one. */
export type ParsedJson =
  { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly message: string };

/**
 * JSON.parse that answers instead of throwing. The message is the engine's first line only:
 * engines differ in what follows, and a report quotes one line.
 */
export function parseJsonText(text: string): ParsedJson {
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch (error) {
    return { ok: false, message: errorMessage(error).split("\n")[0] ?? "" };
  }
}
