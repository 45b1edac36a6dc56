import { describe, expect, it } from "vitest";
import {
  derivedId,
  digestOf,
  portableSha256Hex,
  sha256Hex,
  useNativeSha256,
} from "../../src/digest.ts";
import { nodeSha256Hex } from "../../runtimes/node/native-sha256.ts";
import { uuidv7 } from "../../runtimes/shared/uuidv7.ts";

/** A small deterministic generator (xorshift32): the same texts on every run. */
function texts(seed: number, count: number): string[] {
  let state = seed;
  const next = (): number => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return state >>> 0;
  };
  const alphabet = ["a", "Z", "0", " ", '"', "\\", "é", "€", "𝄞", "\u0000", "\n", "["];
  return Array.from({ length: count }, () =>
    Array.from({ length: next() % 300 }, () => alphabet[next() % alphabet.length]).join(""),
  );
}

describe("the native sha256", () => {
  it("hashes every text and byte string exactly as the portable one", () => {
    for (const text of texts(0x5eed, 2_000)) {
      expect(nodeSha256Hex(text)).toBe(portableSha256Hex(text));
      const bytes = new TextEncoder().encode(text);
      expect(nodeSha256Hex(bytes)).toBe(portableSha256Hex(bytes));
    }
  });

  it("is used once installed, and digests and derived ids do not change", () => {
    const values = [{ b: 1, a: ["x", 2] }, "é", 0, []];
    const before = values.map((value) => digestOf(value));
    const idsBefore = texts(7, 50).map((text) => derivedId("evt", [text, 3]));
    let calls = 0;
    useNativeSha256((text) => {
      calls += 1;
      return nodeSha256Hex(text);
    });
    const probes = calls;
    expect(values.map((value) => digestOf(value))).toEqual(before);
    expect(calls).toBeGreaterThan(probes);
    // Fresh texts (the derived-id memo holds the ones above): the same ids by the native hash.
    expect(texts(7, 50).map((text) => derivedId("evt", [text, 3]))).toEqual(idsBefore);
    useNativeSha256(portableSha256Hex);
  });

  it("refuses a host sha256 that differs on any probe, or throws, and keeps the one in use", () => {
    const inUse = sha256Hex("abc");
    const wrongOnBytes = (text: string | Uint8Array): string =>
      typeof text === "string" ? nodeSha256Hex(text) : nodeSha256Hex(text.subarray(1));
    expect(() => useNativeSha256(wrongOnBytes)).toThrow(/differs from the portable one/);
    const wrongOnLong = (text: string | Uint8Array): string =>
      typeof text === "string" && text.length > 500 ? "0".repeat(64) : nodeSha256Hex(text);
    expect(() => useNativeSha256(wrongOnLong)).toThrow(/differs/);
    expect(() =>
      useNativeSha256(() => {
        throw new Error("no digest here");
      }),
    ).toThrow(/failed on a probe: no digest here/);
    expect(sha256Hex("abc")).toBe(inUse);
    expect(sha256Hex("abc")).toBe(portableSha256Hex("abc"));
  });
});

describe("uuidv7 ids drawn from a pool of random bytes", () => {
  it("are distinct, well-formed, carry their time and never share random bits across a refill", () => {
    const nowMs = 1_764_720_000_123;
    const ids = Array.from({ length: 2_000 }, (_, index) => uuidv7(nowMs + index));
    expect(new Set(ids).size).toBe(ids.length);
    const randomTails = new Set<string>();
    for (const [index, id] of ids.entries()) {
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(Number.parseInt(id.replace(/-/g, "").slice(0, 12), 16)).toBe(nowMs + index);
      randomTails.add(id.slice(19));
    }
    expect(randomTails.size).toBe(ids.length);
    // Time-ordered: sorting by text keeps the order of creation.
    expect([...ids].sort()).toEqual(ids);
  });
});
