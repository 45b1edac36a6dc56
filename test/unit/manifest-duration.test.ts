import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { isQlrError } from "../../src/errors.ts";
import { formatDurationMs, parseDurationMs, tryParseDurationMs } from "../../src/manifest/index.ts";

function reasonFor(value: unknown): string {
  const result = tryParseDurationMs(value);
  if (result.ok)
    throw new Error(`expected ${JSON.stringify(value)} to be rejected, got ${result.ms}`);
  return result.reason;
}

describe("durations", () => {
  it("a number is whole milliseconds", () => {
    expect(parseDurationMs(0)).toBe(0);
    expect(parseDurationMs(1500)).toBe(1500);
  });

  it("each unit string parses: 500ms, 30s, 5m, 2h, 1d", () => {
    expect(parseDurationMs("500ms")).toBe(500);
    expect(parseDurationMs("30s")).toBe(30_000);
    expect(parseDurationMs("5m")).toBe(300_000);
    expect(parseDurationMs("2h")).toBe(7_200_000);
    expect(parseDurationMs("1d")).toBe(86_400_000);
  });

  it("compound durations add their components: 1m30s, 1d2h3m4s5ms", () => {
    expect(parseDurationMs("1m30s")).toBe(90_000);
    expect(parseDurationMs("1d2h3m4s5ms")).toBe(86_400_000 + 7_200_000 + 180_000 + 4000 + 5);
    expect(parseDurationMs("1s500ms")).toBe(1500);
  });

  it("negative durations are rejected", () => {
    expect(reasonFor(-1)).toMatch(/negative/);
    expect(reasonFor("-5s")).toMatch(/negative/);
  });

  it("fractions are rejected, in numbers and in strings", () => {
    expect(reasonFor(1.5)).toMatch(/fraction/);
    expect(reasonFor("1.5s")).toMatch(/whole numbers/);
  });

  it("empty, unit-less and garbage strings are rejected", () => {
    expect(reasonFor("")).toMatch(/empty/);
    expect(reasonFor("500")).toMatch(/unit/);
    for (const garbage of [
      " 5s",
      "5s ",
      "5 s",
      "5S",
      "5x",
      "s",
      "ms",
      "5m5",
      "1h1h",
      "30s1m",
      "5ms5s",
      "1e3ms",
      "PT5S",
    ]) {
      expect(tryParseDurationMs(garbage).ok, garbage).toBe(false);
    }
  });

  it("non-finite, oversized and non-numeric values are rejected", () => {
    expect(tryParseDurationMs(Number.POSITIVE_INFINITY).ok).toBe(false);
    expect(tryParseDurationMs(Number.NaN).ok).toBe(false);
    expect(tryParseDurationMs(2 ** 60).ok).toBe(false);
    expect(tryParseDurationMs("999999999999999d").ok).toBe(false);
    expect(tryParseDurationMs(null).ok).toBe(false);
    expect(tryParseDurationMs(true).ok).toBe(false);
  });

  it("parseDurationMs throws invalid_request naming the value", () => {
    let thrown: unknown;
    try {
      parseDurationMs("soon");
    } catch (error) {
      thrown = error;
    }
    expect(isQlrError(thrown, "invalid_request")).toBe(true);
    expect((thrown as Error).message).toContain('"soon"');
  });

  it("formatDurationMs writes the shortest spelling and parses back to the same value", () => {
    expect(formatDurationMs(0)).toBe("0ms");
    expect(formatDurationMs(90_000)).toBe("1m30s");
    expect(formatDurationMs(604_800_000)).toBe("7d");
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 1_000 * 86_400_000 }), (ms) => {
        expect(parseDurationMs(formatDurationMs(ms))).toBe(ms);
      }),
    );
  });
});
