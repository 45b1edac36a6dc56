import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { computeGoldenValues } from "../fixtures/golden/golden-values.ts";

/**
 * Golden fixtures pin canonical forms, digests and deterministic identities across versions
 * (STYLE.md: "Golden fixtures pin ids and digests across versions"). Stored receipts, ledgers
 * and journals are compared against recomputed values, so any change of a canonical form
 * would orphan every durable row written before it. The fixture was generated once from these
 * functions and is committed; it is never rewritten by a test run. A failure here means a
 * canonical form changed: that needs a versioned migration, not a new fixture.
 */

const fixturePath = join(import.meta.dirname, "..", "fixtures", "golden", "core.json");
const pinned = JSON.parse(readFileSync(fixturePath, "utf8")) as Record<string, string>;
const current = computeGoldenValues();

describe("golden fixtures", () => {
  it("pins exactly the values it computes, no more and no fewer", () => {
    expect(Object.keys(current).sort()).toEqual(Object.keys(pinned).sort());
  });

  for (const key of Object.keys(pinned)) {
    it(`${key} is unchanged across versions`, () => {
      expect(current[key]).toBe(pinned[key]);
    });
  }

  it("the pinned values agree with each other: the admission's attempt id is the derived wta id of its epoch", () => {
    const receipt = JSON.parse(pinned.admissionReceiptCanonicalJson ?? "{}") as Record<
      string,
      unknown
    >;
    expect(pinned.admittedAttemptId).toBe(pinned.workflowAttemptId);
    expect(receipt.attemptId).toBe(pinned.workflowAttemptId);
    expect(receipt.eventId).toBe(pinned.admissionEventId);
    expect(receipt.digest).toBe(pinned.admissionReceiptDigest);
    expect(receipt.stepRunId).toBe(pinned.stepRunId);
    expect(receipt.stepRunDigest).toBe(pinned.readyStepDigest);
    expect(receipt.planDigest).toBe(pinned.planDigest);
    expect(receipt.reconciliationDigest).toBe(pinned.reconciliationReceiptDigest);
    expect(receipt.executionDigest).toBe(pinned.diamondExecutionDigest);
    expect(receipt.runtimeTaskRevision).toBe(pinned.taskDefinitionRevision);
    expect(pinned.taskDefinitionRevision).toBe(`qltd:v1:1:${pinned.taskDefinitionDigest ?? ""}`);
    expect(pinned.manifestDigest).toBe(pinned.diamondDigestOf);
  });

  it("every pinned identity is portable and every pinned digest is sha256 over 64 hex", () => {
    for (const [key, value] of Object.entries(pinned)) {
      if (/Digest$|DigestOf$/.test(key)) expect(value, key).toMatch(/^sha256:[0-9a-f]{64}$/);
      if (/(Id|AttemptId)$/.test(key)) expect(value, key).toMatch(/^[a-z]{3}:[0-9a-f]{32}$/);
    }
  });
});
