import { describe, expect, it } from "vitest";
import { isQlrError } from "../../src/errors.ts";
import type { ScheduleSpec } from "../../src/manifest/types.ts";
import {
  decideSchedule,
  initialScheduleState,
  MISSED_FIRES,
  nextFireAfter,
  type ScheduleState,
} from "../../src/schedules.ts";

/**
 * Cron schedules (DESIGN.md §3): evaluated with a time zone and optional seconds, purely from
 * the reference time passed in; missed fires after downtime are bounded and explicit.
 */

const HOUR = 3_600_000;
/** 2027-01-15T00:00:00Z, a Friday far from any daylight-saving change. */
const JAN_15 = Date.UTC(2027, 0, 15);

function spec(overrides: Partial<ScheduleSpec> = {}): ScheduleSpec {
  return {
    name: "nightly",
    cron: "0 * * * *",
    timezone: "UTC",
    target: { kind: "workflow", name: "pipeline" },
    overlap: "skip",
    missed: "skip",
    enabled: true,
    ...overrides,
  };
}

function state(
  overrides: Partial<ScheduleState> = {},
  specOverrides: Partial<ScheduleSpec> = {},
): ScheduleState {
  return {
    package: "demo",
    name: "nightly",
    generation: 1,
    spec: spec(specOverrides),
    nextFireAtMs: JAN_15 + HOUR,
    lastFireAtMs: null,
    lastRunId: null,
    missedFires: 0,
    skippedOverlaps: 0,
    version: 1,
    ...overrides,
  };
}

describe("cron evaluation", () => {
  it("cron with seconds and a time zone", () => {
    expect(
      nextFireAfter({ cron: "*/15 * * * * *", timezone: "Europe/Berlin" }, JAN_15 + 1_000),
    ).toBe(JAN_15 + 15_000);
    expect(nextFireAfter({ cron: "30 0 3 * * *", timezone: "Asia/Shanghai" }, JAN_15)).toBe(
      JAN_15 + 19 * HOUR + 30_000,
    );
  });

  it("a daily cron fires at the zone's local time, not UTC", () => {
    // 03:00 in Shanghai (UTC+8) is 19:00 UTC of the previous day; in New York (UTC−5 in January) 08:00 UTC.
    expect(nextFireAfter({ cron: "0 3 * * *", timezone: "Asia/Shanghai" }, JAN_15)).toBe(
      JAN_15 + 19 * HOUR,
    );
    expect(nextFireAfter({ cron: "0 3 * * *", timezone: "America/New_York" }, JAN_15)).toBe(
      JAN_15 + 8 * HOUR,
    );
    expect(nextFireAfter({ cron: "0 3 * * *", timezone: "UTC" }, JAN_15)).toBe(JAN_15 + 3 * HOUR);
  });

  it("the next fire is strictly after the reference time", () => {
    expect(nextFireAfter({ cron: "0 * * * *", timezone: "UTC" }, JAN_15 + HOUR)).toBe(
      JAN_15 + 2 * HOUR,
    );
  });

  it("an expression croner cannot evaluate is an invalid manifest", () => {
    try {
      nextFireAfter({ cron: "not a cron", timezone: "UTC" }, JAN_15);
      expect.unreachable("an invalid cron must be refused");
    } catch (error) {
      expect(isQlrError(error, "invalid_manifest")).toBe(true);
    }
  });
});

describe("schedule decisions", () => {
  it("nothing is due before nextFireAtMs, and a disabled schedule is idle", () => {
    expect(decideSchedule(state(), JAN_15 + HOUR - 1, false)).toEqual({ kind: "idle" });
    expect(decideSchedule(state({}, { enabled: false }), JAN_15 + 5 * HOUR, false)).toEqual({
      kind: "idle",
    });
    expect(decideSchedule(state({ nextFireAtMs: null }), JAN_15 + 5 * HOUR, false)).toEqual({
      kind: "idle",
    });
  });

  it("an on-time fire fires once, records its due time and moves nextFireAtMs past now under a new version", () => {
    const decision = decideSchedule(state(), JAN_15 + HOUR + 500, false);
    expect(decision).toMatchObject({ kind: "fire", dueAtMs: JAN_15 + HOUR, missed: 0 });
    if (decision.kind !== "fire") throw new Error("expected a fire");
    expect(decision.next).toMatchObject({
      nextFireAtMs: JAN_15 + 2 * HOUR,
      lastFireAtMs: JAN_15 + HOUR,
      version: 2,
      missedFires: 0,
    });
  });

  it("missed fires after downtime are bounded: skip fires nothing, fire_once fires exactly once", () => {
    // Down from 01:00 to 10:30: ten hourly fires (01:00 … 10:00) came due, the latest 30 minutes late.
    const nowMs = JAN_15 + 10 * HOUR + 30 * 60_000;
    const skip = decideSchedule(state(), nowMs, false);
    expect(skip).toMatchObject({ kind: "skip", reason: "missed", missed: 10 });
    if (skip.kind !== "skip") throw new Error("expected a skip");
    expect(skip.next).toMatchObject({
      nextFireAtMs: JAN_15 + 11 * HOUR,
      missedFires: 10,
      lastFireAtMs: null,
    });

    const once = decideSchedule(state({}, { missed: "fire_once" }), nowMs, false);
    expect(once).toMatchObject({ kind: "fire", dueAtMs: JAN_15 + 10 * HOUR, missed: 10 });
    if (once.kind !== "fire") throw new Error("expected one fire");
    // The state moves past now, so the next cycle fires nothing more for the downtime.
    expect(decideSchedule(once.next, nowMs, false)).toEqual({ kind: "idle" });
  });

  it("when the latest fire is on time, only the earlier ones count as missed and the latest fires", () => {
    const nowMs = JAN_15 + 3 * HOUR + MISSED_FIRES.defaultGraceMs;
    expect(decideSchedule(state(), nowMs, false)).toMatchObject({
      kind: "fire",
      dueAtMs: JAN_15 + 3 * HOUR,
      missed: 2,
    });
  });

  it("counting missed fires stops at MISSED_FIRES.maxCount", () => {
    const decision = decideSchedule(
      state({ nextFireAtMs: JAN_15 + 1_000 }, { cron: "* * * * * *" }),
      JAN_15 + 2 * HOUR,
      false,
    );
    expect(decision.kind).toBe("skip");
    expect(decision.kind === "skip" && decision.missed).toBe(MISSED_FIRES.maxCount);
    expect(decision.kind === "skip" && decision.next.nextFireAtMs).toBe(JAN_15 + 2 * HOUR + 1_000);
  });

  it("overlap skip does not fire while the previous run is live", () => {
    const decision = decideSchedule(state({ skippedOverlaps: 4 }), JAN_15 + HOUR, true);
    expect(decision).toMatchObject({ kind: "skip", reason: "overlap" });
    expect(decision.kind === "skip" && decision.next.skippedOverlaps).toBe(5);
    expect(decision.kind === "skip" && decision.next.nextFireAtMs).toBe(JAN_15 + 2 * HOUR);
    expect(decideSchedule(state(), JAN_15 + HOUR, false).kind).toBe("fire");
  });

  it("overlap allow fires while the previous run is live", () => {
    expect(decideSchedule(state({}, { overlap: "allow" }), JAN_15 + HOUR, true).kind).toBe("fire");
  });

  it("a new schedule's first fire is the next after the apply time; re-applying keeps its history", () => {
    const fresh = initialScheduleState("demo", 1, spec(), JAN_15 + 10, null);
    expect(fresh).toMatchObject({
      generation: 1,
      nextFireAtMs: JAN_15 + HOUR,
      lastFireAtMs: null,
      missedFires: 0,
      version: 1,
    });
    const previous = state({
      lastFireAtMs: JAN_15,
      lastRunId: "run-9",
      missedFires: 3,
      skippedOverlaps: 2,
      version: 7,
    });
    const reapplied = initialScheduleState(
      "demo",
      2,
      spec({ cron: "0 0 * * *" }),
      JAN_15 + 10,
      previous,
    );
    expect(reapplied).toMatchObject({
      generation: 2,
      nextFireAtMs: JAN_15 + 24 * HOUR,
      lastFireAtMs: JAN_15,
      lastRunId: "run-9",
      missedFires: 3,
      skippedOverlaps: 2,
      version: 8,
    });
    expect(
      initialScheduleState("demo", 1, spec({ enabled: false }), JAN_15, null).nextFireAtMs,
    ).toBeNull();
  });
});

describe("fires due exactly now", () => {
  it("a fire time equal to now counts as come due: the latest due fire is now, the earlier one missed", () => {
    const decision = decideSchedule(
      state({ nextFireAtMs: JAN_15 + HOUR }),
      JAN_15 + 2 * HOUR,
      false,
    );
    expect(decision).toMatchObject({ kind: "fire", dueAtMs: JAN_15 + 2 * HOUR, missed: 1 });
    expect(decision.kind === "idle" ? null : decision.next.nextFireAtMs).toBe(JAN_15 + 3 * HOUR);
  });
});
