import { QlrError } from "./errors.ts";

/**
 * The portable identity: at most 36 bytes, starts with an alphanumeric, then only
 * `A-Za-z0-9._:-`. Every stored identity that can reach a file name or a URL obeys it, so
 * no identity can traverse a path (no slash, backslash, whitespace, NUL, leading dot).
 * UUIDv7 and `wta:<32 hex>` both fit.
 */
export const PORTABLE_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,35}$/;
export const PORTABLE_ID_MAX_LENGTH = 36;

export function isPortableId(value: unknown): value is string {
  return typeof value === "string" && PORTABLE_ID_PATTERN.test(value);
}

/** How much of a rejected identity an error message quotes: enough to recognise it, never an unbounded echo. */
const SHOWN_ID_CHARS = 64;

export function assertPortableId(value: unknown, what: string): string {
  if (!isPortableId(value)) {
    const shown =
      typeof value === "string" ? JSON.stringify(value.slice(0, SHOWN_ID_CHARS)) : typeof value;
    throw new QlrError(
      "invalid_identity",
      `${what} must match ${PORTABLE_ID_PATTERN.source}, got ${shown}`,
      {
        details: [{ path: what, message: "not a portable identity" }],
      },
    );
  }
  return value;
}

/** Package names are lower-case portable names: they appear in task ids `pkg:<package>:<task>`. */
export const PACKAGE_NAME_PATTERN = /^[a-z0-9][a-z0-9-]{0,31}$/;
/** Task, workflow, step and schedule names inside a package. */
export const RESOURCE_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$/;
