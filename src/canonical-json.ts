import { errorMessage, QlrError } from "./errors.ts";

export type JsonValue =
  null | boolean | number | string | readonly JsonValue[] | { readonly [key: string]: JsonValue };

/**
 * Canonical JSON: object keys sorted by UTF-16 code unit order, no insignificant space,
 * `undefined` object members omitted, non-finite numbers and non-JSON values rejected.
 * Digests and deterministic ids are computed over this text, so it must never change shape.
 */
export function canonicalJson(value: unknown): string {
  return write(value, "$");
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
