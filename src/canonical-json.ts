import { errorMessage, QlrError } from "./errors.ts";

export type JsonValue =
  null | boolean | number | string | readonly JsonValue[] | { readonly [key: string]: JsonValue };

/**
 * Canonical JSON: object keys sorted by UTF-16 code unit order, no insignificant space,
 * `undefined` object members omitted, non-finite numbers and non-JSON values rejected.
 * Digests and deterministic ids are computed over this text, so it must never change shape.
 */
export function canonicalJson(value: unknown): string {
  return write(value, []);
}

/**
 * `path` holds the keys and indexes down to `value`, pushed and popped around each member: a
 * digest of a step's inputs writes every member, so the path's text is built only for an error.
 */
function write(value: unknown, path: (string | number)[]): string {
  if (value === null) return "null";
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isFinite(value))
        throw new QlrError(
          "invalid_request",
          `canonical JSON cannot hold ${String(value)} at ${pathText(path)}`,
        );
      return JSON.stringify(value);
    case "string":
      return JSON.stringify(value);
    case "object": {
      if (Array.isArray(value)) {
        let text = "[";
        for (let index = 0; index < value.length; index += 1) {
          if (index > 0) text += ",";
          path.push(index);
          // A hole reads as undefined and is refused like an undefined item.
          text += write(value[index], path);
          path.pop();
        }
        return `${text}]`;
      }
      const proto = Object.getPrototypeOf(value) as unknown;
      if (proto !== Object.prototype && proto !== null)
        throw new QlrError(
          "invalid_request",
          `canonical JSON holds only plain objects, not at ${pathText(path)}`,
        );
      const record = value as Record<string, unknown>;
      // The default sort compares strings by UTF-16 code unit: the canonical order.
      const keys = Object.keys(record).sort();
      let text = "{";
      for (const key of keys) {
        const member = record[key];
        if (member === undefined) continue;
        if (text.length > 1) text += ",";
        path.push(key);
        text += `${JSON.stringify(key)}:${write(member, path)}`;
        path.pop();
      }
      return `${text}}`;
    }
    default:
      throw new QlrError(
        "invalid_request",
        `canonical JSON cannot hold a ${typeof value} at ${pathText(path)}`,
      );
  }
}

function pathText(path: readonly (string | number)[]): string {
  return `$${path.map((part) => (typeof part === "number" ? `[${part}]` : `.${part}`)).join("")}`;
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
