import { createHash, createHmac } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { admissionEventId, workflowAttemptId } from "../../src/admission.ts";
import { eventId } from "../../src/aggregate.ts";
import { canonicalJson, parseJsonText } from "../../src/canonical-json.ts";
import {
  DERIVED_ID_MEMO_GENERATION,
  derivedId,
  digestOf,
  hmacSha256Hex,
  isDigest,
  sha256Hex,
  timingSafeEqualText,
} from "../../src/digest.ts";
import { isQlrError } from "../../src/errors.ts";
import {
  assertPortableId,
  isPortableId,
  PACKAGE_NAME_PATTERN,
  PORTABLE_ID_MAX_LENGTH,
  RESOURCE_NAME_PATTERN,
} from "../../src/identity.ts";
import { ordinaryAttemptId } from "../../src/ordinary.ts";
import { stepRunId } from "../../src/runs.ts";

/**
 * Identities and digests (DESIGN.md §3, ADR-0229 §4). The reference values are computed here
 * with node:crypto, independently of @noble/hashes, so the core's synchronous hashing is
 * checked against a second implementation.
 */

function referenceSha256(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

function referenceDerivedId(prefix: string, parts: readonly (string | number)[]): string {
  return `${prefix}:${referenceSha256(JSON.stringify(parts)).slice(0, 32)}`;
}

const portableIdArbitrary = fc
  .tuple(
    fc.constantFrom(..."abcXYZ019"),
    fc.array(fc.constantFrom(..."aZ09._:-"), { maxLength: 35 }),
  )
  .map(([first, rest]) => first + rest.join(""));

describe("portable identities", () => {
  it("accept UUIDv7, wta:<32 hex> and any 36-byte id of the portable alphabet", () => {
    for (const id of [
      "0190f5c3-8b1e-7a3c-9f00-123456789abc",
      `wta:${"a".repeat(32)}`,
      "run-1",
      "A",
      "x".repeat(36),
      "a.b:c_d-e",
    ]) {
      expect(isPortableId(id)).toBe(true);
    }
  });

  it("reject empty, leading dot, slash, backslash, whitespace, NUL, non-ASCII and over-long ids, so no id can traverse a path", () => {
    for (const id of [
      "",
      ".hidden",
      "..",
      "../etc",
      "a/b",
      "a\\b",
      "a b",
      "a\tb",
      "a\nb",
      "a\u0000b",
      "é",
      "-lead",
      "_lead",
      ":lead",
      "x".repeat(37),
    ]) {
      expect(isPortableId(id)).toBe(false);
    }
    expect(isPortableId(42)).toBe(false);
    expect(isPortableId(null)).toBe(false);
    expect(PORTABLE_ID_MAX_LENGTH).toBe(36);
  });

  it("assertPortableId throws invalid_identity naming what was checked", () => {
    try {
      assertPortableId("../x", "runId");
      expect.unreachable("a path traversal must be refused");
    } catch (error) {
      expect(isQlrError(error, "invalid_identity")).toBe(true);
      expect(isQlrError(error) ? error.details[0]?.path : null).toBe("runId");
    }
    expect(assertPortableId("run-1", "runId")).toBe("run-1");
  });

  it("package names are lower-case portable names, resource names allow upper case and underscore", () => {
    expect(PACKAGE_NAME_PATTERN.test("demo-pkg")).toBe(true);
    expect(PACKAGE_NAME_PATTERN.test("Demo")).toBe(false);
    expect(PACKAGE_NAME_PATTERN.test("a".repeat(33))).toBe(false);
    expect(RESOURCE_NAME_PATTERN.test("Fetch_prices-2")).toBe(true);
    expect(RESOURCE_NAME_PATTERN.test("a:b")).toBe(false);
  });
});

describe("canonical JSON and digests", () => {
  it("canonical JSON sorts keys by UTF-16 code unit, omits undefined members and keeps no insignificant space", () => {
    expect(canonicalJson({ b: 1, a: [true, null, "x"], c: { z: undefined, y: -0 } })).toBe(
      '{"a":[true,null,"x"],"b":1,"c":{"y":0}}',
    );
    // Code-unit order, never locale order: upper case before lower case, "é" after "z".
    expect(canonicalJson({ é: 1, z: 2, Z: 3, a: 4 })).toBe('{"Z":3,"a":4,"z":2,"é":1}');
    expect(canonicalJson(Object.create(null) as object)).toBe("{}");
  });

  it("canonical JSON rejects what JSON cannot hold: non-finite numbers, class instances, functions, bigints and undefined array items", () => {
    for (const value of [
      Number.NaN,
      Number.POSITIVE_INFINITY,
      new Date(0),
      new Map(),
      () => 1,
      1n,
      [undefined],
      Symbol("s"),
    ]) {
      expect(() => canonicalJson(value)).toThrow();
      try {
        canonicalJson(value);
      } catch (error) {
        expect(isQlrError(error, "invalid_request")).toBe(true);
      }
    }
  });

  it("canonical JSON is its definition: sorted keys by UTF-16 code unit, JSON.stringify of every scalar", () => {
    // The definition written plainly (an object's integer-like keys would not keep a sorted
    // insertion order, so the text is built here rather than by JSON.stringify of a sorted copy).
    const definition = (value: unknown): string => {
      if (Array.isArray(value)) return `[${value.map(definition).join(",")}]`;
      if (value === null || typeof value !== "object") return JSON.stringify(value);
      const record = value as Record<string, unknown>;
      return `{${Object.keys(record)
        .filter((key) => record[key] !== undefined)
        .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
        .map((key) => `${JSON.stringify(key)}:${definition(record[key])}`)
        .join(",")}}`;
    };
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(canonicalJson(value)).toBe(definition(value));
      }),
      { numRuns: 500 },
    );
  });

  it("canonical JSON names where a value it cannot hold sits", () => {
    const refused = (value: unknown): string => {
      try {
        canonicalJson(value);
      } catch (error) {
        return (error as Error).message;
      }
      return "accepted";
    };
    expect(refused({ a: [1, { b: Number.NaN }] })).toMatch(/at \$\.a\[1\]\.b$/);
    expect(refused({ z: 1, a: { when: new Date(0) } })).toMatch(/not at \$\.a\.when$/);
    // A hole in an array reads as undefined and is refused like an undefined item.
    const holed = new Array<number>(3);
    holed[0] = 0;
    holed[2] = 2;
    expect(1 in holed).toBe(false);
    expect(refused(holed)).toMatch(/cannot hold a undefined at \$\[1\]$/);
    expect(refused(Number.POSITIVE_INFINITY)).toMatch(/at \$$/);
  });

  it("a JSON text parses to its value, or answers why not in one line, never throwing", () => {
    expect(parseJsonText('{"a":[1,"x",null]}')).toEqual({ ok: true, value: { a: [1, "x", null] } });
    for (const text of ["{", "", "[1,]", "nul"]) {
      const parsed = parseJsonText(text);
      expect(parsed.ok).toBe(false);
      if (parsed.ok) continue;
      expect(parsed.message).not.toBe("");
      expect(parsed.message).not.toContain("\n");
      expect(parsed.message).toMatch(/JSON|token|end/i);
    }
  });

  it("key order never changes a digest", () => {
    fc.assert(
      fc.property(
        fc.dictionary(
          fc.string({ maxLength: 6 }),
          fc.oneof(fc.integer(), fc.string({ maxLength: 6 }), fc.boolean()),
        ),
        (record) => {
          const reversed = Object.fromEntries(Object.entries(record).reverse());
          expect(digestOf(reversed)).toBe(digestOf(record));
        },
      ),
      { numRuns: 100 },
    );
  });

  it("a digest is sha256: and 64 lower-case hex over the canonical JSON", () => {
    const value = { b: [1, 2.5, "ü"], a: { d: null, c: false } };
    expect(digestOf(value)).toBe(`sha256:${referenceSha256(canonicalJson(value))}`);
    expect(isDigest(digestOf(value))).toBe(true);
    expect(isDigest(`sha256:${"A".repeat(64)}`)).toBe(false);
    expect(isDigest("sha256:abc")).toBe(false);
    expect(sha256Hex(new Uint8Array([1, 2, 3]))).toBe(
      createHash("sha256")
        .update(Buffer.from([1, 2, 3]))
        .digest("hex"),
    );
  });

  it("the HMAC is HMAC-SHA256 in hex, and the token comparison is exact", () => {
    const key = new Uint8Array(32).fill(7);
    expect(hmacSha256Hex(key, "receipt")).toBe(
      createHmac("sha256", Buffer.from(key)).update("receipt").digest("hex"),
    );
    expect(timingSafeEqualText("secret", "secret")).toBe(true);
    expect(timingSafeEqualText("secret", "secreT")).toBe(false);
    expect(timingSafeEqualText("secret", "secret-longer")).toBe(false);
    expect(timingSafeEqualText("", "")).toBe(true);
  });
});

describe("deterministic identities", () => {
  it("derived ids are <prefix>: and the first 32 hex of sha256 over the canonical JSON array of their parts", () => {
    expect(derivedId("evt", ["run-1", 3])).toBe(referenceDerivedId("evt", ["run-1", 3]));
  });

  it("attempt ids are wta:<32 hex> derived from (runId, stepRunId, stepRunVersion)", () => {
    const id = workflowAttemptId("run-1", "stp:abc", 2);
    expect(id).toMatch(/^wta:[0-9a-f]{32}$/);
    expect(id).toBe(referenceDerivedId("wta", ["run-1", "stp:abc", 2]));
    // A new ready epoch is a new attempt identity; the same epoch always recomputes the same one.
    expect(workflowAttemptId("run-1", "stp:abc", 3)).not.toBe(id);
    expect(workflowAttemptId("run-1", "stp:abc", 2)).toBe(id);
  });

  it("the admission event id is derived from the same triple with its own prefix", () => {
    const id = admissionEventId("run-1", "stp:abc", 2);
    expect(id).toBe(referenceDerivedId("wte", ["run-1", "stp:abc", 2]));
    // Only the prefix is its own: the hash covers the parts, so both ids recompute from one triple.
    expect(id).toMatch(/^wte:[0-9a-f]{32}$/);
    expect(id).not.toBe(workflowAttemptId("run-1", "stp:abc", 2));
    expect(id.slice(4)).toBe(workflowAttemptId("run-1", "stp:abc", 2).slice(4));
  });

  it("step run ids come from (runId, step name), event ids from (runId, seq), ordinary attempt ids from (runId, number)", () => {
    expect(stepRunId("run-1", "a")).toBe(referenceDerivedId("stp", ["run-1", "a"]));
    expect(eventId("run-1", 1)).toBe(referenceDerivedId("evt", ["run-1", 1]));
    expect(ordinaryAttemptId("run-1", 1)).toBe(referenceDerivedId("ora", ["run-1", 1]));
  });

  it("every derived id is a portable identity of exactly 36 bytes, whatever portable run id it derives from", () => {
    fc.assert(
      fc.property(
        portableIdArbitrary,
        fc.string({ maxLength: 32 }),
        fc.integer({ min: 1, max: 1_000_000 }),
        (runId, name, version) => {
          const ids = [
            workflowAttemptId(runId, stepRunId(runId, name), version),
            admissionEventId(runId, name, version),
            stepRunId(runId, name),
            eventId(runId, version),
            ordinaryAttemptId(runId, version),
          ];
          for (const id of ids) {
            expect(isPortableId(id)).toBe(true);
            expect(id).toHaveLength(36);
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  it("the memo of derived ids answers exactly what the hash does, per prefix, across and after its generations", () => {
    // The same parts under two prefixes, then enough other ids to push both out of the memo.
    const parts = ["run-memo", "stp:memo", 7] as const;
    expect(derivedId("wta", parts)).toBe(referenceDerivedId("wta", parts));
    expect(derivedId("wte", parts)).toBe(referenceDerivedId("wte", parts));
    expect(derivedId("wta", parts)).toBe(referenceDerivedId("wta", parts));
    const many = 3 * DERIVED_ID_MEMO_GENERATION;
    for (let seq = 1; seq <= many; seq += 1)
      expect(derivedId("evt", ["run-memo", seq])).toBe(
        referenceDerivedId("evt", ["run-memo", seq]),
      );
    // Again, some from the memo (recent) and some derived anew (forgotten), each one right.
    for (const seq of [1, 2, many - DERIVED_ID_MEMO_GENERATION, many - 1, many])
      expect(derivedId("evt", ["run-memo", seq])).toBe(
        referenceDerivedId("evt", ["run-memo", seq]),
      );
    expect(derivedId("wte", parts)).toBe(referenceDerivedId("wte", parts));
    expect(derivedId("evt", ["run-memo", "1"])).toBe(referenceDerivedId("evt", ["run-memo", "1"]));
  });

  it("the parts of a derived id cannot collide by concatenation", () => {
    // The canonical array keeps the boundary: ("ab", "c") and ("a", "bc") are different ids.
    expect(derivedId("stp", ["ab", "c"])).not.toBe(derivedId("stp", ["a", "bc"]));
    expect(derivedId("evt", ["r", 1])).not.toBe(derivedId("evt", ["r", "1"]));
  });
});
