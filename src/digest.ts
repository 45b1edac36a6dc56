import { sha256 } from "@noble/hashes/sha2.js";
import { hmac } from "@noble/hashes/hmac.js";
import { bytesToHex, utf8ToBytes } from "@noble/hashes/utils.js";
import { canonicalJson } from "./canonical-json.ts";

/** A content digest: `sha256:` and 64 lower-case hex digits over canonical JSON. */
export type Digest = `sha256:${string}`;
export const DIGEST_PATTERN = /^sha256:[0-9a-f]{64}$/;

export function sha256Hex(text: string | Uint8Array): string {
  return bytesToHex(sha256(typeof text === "string" ? utf8ToBytes(text) : text));
}

export function digestOf(value: unknown): Digest {
  return `sha256:${sha256Hex(canonicalJson(value))}`;
}

export function isDigest(value: unknown): value is Digest {
  return typeof value === "string" && DIGEST_PATTERN.test(value);
}

export function hmacSha256Hex(key: Uint8Array, message: string): string {
  return bytesToHex(hmac(sha256, key, utf8ToBytes(message)));
}

/** Constant-time comparison of two strings of hex or tokens (length is not secret). */
export function timingSafeEqualText(a: string, b: string): boolean {
  const left = utf8ToBytes(a);
  const right = utf8ToBytes(b);
  let difference = left.length ^ right.length;
  const length = Math.max(left.length, right.length);
  for (let index = 0; index < length; index += 1)
    difference |= (left[index] ?? 0) ^ (right[index] ?? 0);
  return difference === 0;
}

/**
 * A deterministic identity derived from its parts: `<prefix>:` and the first 32 hex digits of
 * sha256(canonical JSON array of the parts). Recomputable by anyone holding the parts, so a
 * lost COMMIT response is answered by recomputing the id and reading the durable row.
 */
export function derivedId(prefix: string, parts: readonly (string | number)[]): string {
  return `${prefix}:${sha256Hex(canonicalJson(parts)).slice(0, 32)}`;
}
