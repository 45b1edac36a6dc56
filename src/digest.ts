import { sha256 } from "@noble/hashes/sha2.js";
import { hmac } from "@noble/hashes/hmac.js";
import { bytesToHex, utf8ToBytes } from "@noble/hashes/utils.js";
import { canonicalJson } from "./canonical-json.ts";
import { errorMessage, QlrError } from "./errors.ts";

/** A content digest: `sha256:` and 64 lower-case hex digits over canonical JSON. */
export type Digest = `sha256:${string}`;
export const DIGEST_PATTERN = /^sha256:[0-9a-f]{64}$/;

/** sha256 as lower-case hex, of a text's UTF-8 bytes or of bytes. */
export type Sha256Hex = (text: string | Uint8Array) => string;

/** The portable sha256 (pure JavaScript): the same in Node, workerd and browsers. */
export const portableSha256Hex: Sha256Hex = (text) =>
  bytesToHex(sha256(typeof text === "string" ? utf8ToBytes(text) : text));

let sha256HexOf: Sha256Hex = portableSha256Hex;

export function sha256Hex(text: string | Uint8Array): string {
  return sha256HexOf(text);
}

/** Inputs a host's sha256 must hash exactly as the portable one before it may replace it. */
const SHA256_PROBES: readonly (string | Uint8Array)[] = [
  "",
  "abc",
  '["run:0190abcd-ef01-7abc-8def-0123456789ab",7]',
  "é€𝄞 and a NUL \u0000 inside",
  "x".repeat(1_000),
  Uint8Array.from({ length: 256 }, (_, index) => index),
];

/**
 * Hashes with a host's native sha256 from now on (Node's `crypto.hash`: ≈ 7× faster than the
 * portable one on the short texts of derived ids, where it was ≈ 2 % of serve's CPU per run).
 * Every digest and derived id must be the same on every runtime, so the host's function is
 * first compared with the portable one on known inputs, and one that differs anywhere is
 * refused and changes nothing. The core never reaches for the host itself: the runtime hands
 * it over.
 */
export function useNativeSha256(native: Sha256Hex): void {
  for (const probe of SHA256_PROBES) {
    const expected = portableSha256Hex(probe);
    let actual: unknown;
    try {
      actual = native(probe);
    } catch (error) {
      throw new QlrError("internal", `the native sha256 failed on a probe: ${errorMessage(error)}`);
    }
    if (actual !== expected)
      throw new QlrError(
        "internal",
        `the native sha256 differs from the portable one (${String(actual)} for ${expected}); not used`,
      );
  }
  sha256HexOf = native;
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
 *
 * The same ids are derived again and again: a step's event ids when its events are emitted and
 * again when the store decides which of them to leave out of the row, its attempt and admission
 * event ids whenever its receipt is read back. Without the memo that was 43 % of the sha256
 * calls of a workflow step (docs/PERFORMANCE.md, "Hot spots now"). The memo maps the exact
 * input (the prefix and the canonical text of the parts) to the exact output, so it can only
 * save work, never change an answer.
 */
export function derivedId(prefix: string, parts: readonly (string | number)[]): string {
  const text = canonicalJson(parts);
  // Prefixes are short constants without a NUL character, so no two inputs share a key.
  const key = `${prefix}\u0000${text}`;
  const known = derivedIds.recall(key);
  if (known !== undefined) return known;
  const id = `${prefix}:${sha256Hex(text).slice(0, 32)}`;
  derivedIds.remember(key, id);
  return id;
}

/**
 * The most derived ids a generation of the memo holds. Two generations are kept (the current
 * and the one before it), so the memo holds between this many and twice this many of the most
 * recent ids: about 200 bytes each, at most ≈ 0.4 MiB, and more than a cluster tick of 200
 * diamond runs derives between two reads of the same id.
 */
export const DERIVED_ID_MEMO_GENERATION = 1_024;

/** A bounded memo that forgets by generations: a full generation becomes the old one, and the one before it is dropped. */
class GenerationalMemo {
  private current = new Map<string, string>();
  private previous = new Map<string, string>();

  constructor(private readonly generationSize: number) {}

  recall(key: string): string | undefined {
    const found = this.current.get(key);
    if (found !== undefined) return found;
    const older = this.previous.get(key);
    if (older !== undefined) this.remember(key, older);
    return older;
  }

  remember(key: string, value: string): void {
    if (this.current.size >= this.generationSize) {
      this.previous = this.current;
      this.current = new Map();
    }
    this.current.set(key, value);
  }
}

const derivedIds = new GenerationalMemo(DERIVED_ID_MEMO_GENERATION);
