/**
 * The pg driver's turn breaker (storage/postgres/turn-breaker.ts), on an injected clock: after a
 * wait for a turn ran out, the driver's transactions stop asking for a pause that doubles with
 * each probe that waits in vain, up to a cap, and the first turn granted closes it. The driver's
 * use of it on a real server is in test/storage/transaction-modes.test.ts.
 */
import { describe, expect, it } from "vitest";
import { isQlrError } from "../../src/errors.ts";
import { TurnBreaker, type TurnRequest } from "../../storage/postgres/turn-breaker.ts";

const POLICY = { firstPauseMs: 4_000, maxPauseMs: 20_000 };

function breaker(): { readonly breaker: TurnBreaker; readonly advance: (byMs: number) => void } {
  let nowMs = 1_000;
  return {
    breaker: new TurnBreaker(POLICY, () => nowMs),
    advance: (byMs) => {
      nowMs += byMs;
    },
  };
}

describe("the turn breaker", () => {
  it("asks while closed and opens at the first wait that ran out", () => {
    const { breaker: turns } = breaker();
    expect(turns.request()).toBe("ask");
    turns.granted("ask");
    expect(turns.request()).toBe("ask");
    turns.ranOut("ask");
    expect(turns.request()).toBe("skip");
    expect(turns.turns).toEqual({ granted: 1, waitsRunOut: 1, skipped: 1 });
  });

  it("skips for the pause, then lets one probe ask while the others skip", () => {
    const { breaker: turns, advance } = breaker();
    turns.ranOut(turns.request());
    advance(POLICY.firstPauseMs - 1);
    expect(turns.request()).toBe("skip");
    advance(1);
    expect(turns.request()).toBe("probe");
    // While the probe waits, the others do not join it.
    expect(turns.request()).toBe("skip");
    expect(turns.request()).toBe("skip");
    turns.granted("probe");
    expect(turns.request()).toBe("ask");
    expect(turns.turns).toEqual({ granted: 1, waitsRunOut: 1, skipped: 3 });
  });

  it("doubles the pause with each probe that waits in vain, up to the cap", () => {
    const { breaker: turns, advance } = breaker();
    turns.ranOut(turns.request());
    const pauses: number[] = [];
    for (let probe = 0; probe < 5; probe += 1) {
      // Bounded: each pause is at most the cap, so at most maxPauseMs / 1 000 steps.
      let waitedMs = 0;
      let request: TurnRequest = turns.request();
      while (request === "skip") {
        advance(1_000);
        waitedMs += 1_000;
        request = turns.request();
        expect(waitedMs).toBeLessThanOrEqual(POLICY.maxPauseMs);
      }
      expect(request).toBe("probe");
      pauses.push(waitedMs);
      turns.ranOut(request);
    }
    expect(pauses).toEqual([4_000, 8_000, 16_000, 20_000, 20_000]);
  });

  it("is reset by the first turn granted, even one asked for before the breaker opened", () => {
    const { breaker: turns, advance } = breaker();
    const early = turns.request();
    const late = turns.request();
    turns.ranOut(late);
    // Waits that began before it opened are the same stopped holder: no doubling.
    turns.ranOut("ask");
    advance(POLICY.firstPauseMs);
    const probe = turns.request();
    expect(probe).toBe("probe");
    turns.ranOut(probe);
    // The next pause is 8 s (doubled once), not 16.
    advance(8_000);
    expect(turns.request()).toBe("probe");
    // A request from before the pause is granted: the holder let go.
    turns.granted(early);
    expect(turns.request()).toBe("ask");
    turns.granted("probe");
    // The pause starts again from the first.
    turns.ranOut("ask");
    advance(POLICY.firstPauseMs);
    expect(turns.request()).toBe("probe");
  });

  it("lets the next transaction probe when a probe's connection failed", () => {
    const { breaker: turns, advance } = breaker();
    turns.ranOut(turns.request());
    advance(POLICY.firstPauseMs);
    turns.abandoned(turns.request());
    expect(turns.request()).toBe("probe");
    expect(turns.turns.waitsRunOut).toBe(1);
  });

  it("refuses a policy without a positive first pause or with a cap below it", () => {
    for (const policy of [
      { firstPauseMs: 0, maxPauseMs: 10 },
      { firstPauseMs: Number.NaN, maxPauseMs: 10 },
      { firstPauseMs: 10, maxPauseMs: 5 },
      { firstPauseMs: 10, maxPauseMs: Number.POSITIVE_INFINITY },
    ]) {
      const error = (() => {
        try {
          new TurnBreaker(policy, () => 0);
          return null;
        } catch (caught) {
          return caught;
        }
      })();
      expect(isQlrError(error, "invalid_request"), JSON.stringify(policy)).toBe(true);
    }
  });
});
