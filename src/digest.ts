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
