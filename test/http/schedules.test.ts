/**
 * Schedules through the HTTP API on a fixed virtual clock, on sql.js and on PGlite: on-time
 * fires, bounded missed fires after downtime (`skip` and `fire_once`), and the overlap
 * policy. A fire is on time when it is noticed within 60 s of its slot
 * (`MISSED_FIRES.defaultGraceMs`); missed slots are counted in `missedFires`, never fired one by
 * one.
 */
import { describe, expect, it } from "vitest";
import { MISSED_FIRES } from "../../src/schedules.ts";
import {
  harnessForBlock,
  STORE_FACTORIES,
  TICK_STEP_MS,
  yamlManifest,
  type RunView,
  type ScheduleView,
  type Harness,
} from "./support.ts";

const HOUR_MS = 3_600_000;
const MINUTE_MS = 60_000;
/** A task whose simulated run takes 100 ms and succeeds. */
const QUICK_TASK = 'tasks:\n  quick: { run: [sim, ok, "100"] }\n';

describe.each(STORE_FACTORIES)("schedules over HTTP on $name", (factory) => {
  let h: Harness;
  harnessForBlock(factory, (opened) => {
    h = opened;
  });

  async function schedulesOf(name: string): Promise<Record<string, ScheduleView>> {
    return Object.fromEntries(
      (await h.packageDetail(name)).schedules.map((schedule) => [schedule.name, schedule]),
    );
  }

  /** Ticks every TICK_STEP_MS from now through `untilMs` inclusive; the clock ends at `untilMs`. */
  async function tickThrough(untilMs: number): Promise<void> {
    for (let guard = 0; guard < 10_000; guard += 1) {
      await h.tick();
      if (h.clock.nowMs() >= untilMs) return;
      h.clock.advance(Math.min(TICK_STEP_MS, untilMs - h.clock.nowMs()));
    }
    throw new Error("tickThrough did not reach its end");
  }

  /**
   * Aligns the clock on the hour, then applies `tasks` with `schedules`. Returns when it applied,
   * and how to re-apply the package without schedules, so later ticks in this file stay quiet.
   */
  async function applyScheduled(
    name: string,
    schedules: string,
    tasks = QUICK_TASK,
  ): Promise<{ appliedAtMs: number; removeSchedules: () => Promise<void> }> {
    const appliedAtMs = h.alignClock(HOUR_MS);
    const applied = await h.applyYaml(yamlManifest(name, `${tasks}schedules:\n${schedules}`));
    expect(applied.status).toBe(201);
    const removeSchedules = async (): Promise<void> => {
      expect((await h.applyYaml(yamlManifest(name, tasks))).status).toBe(201);
      expect((await h.packageDetail(name)).schedules).toEqual([]);
    };
    return { appliedAtMs, removeSchedules };
  }

  /**
   * Two schedules of the quick task on one cron, applied as `applyScheduled` does, then one
   * tick: `skipper` skips missed slots, `catcher` fires once.
   */
  async function applySkipperAndCatcher(
    name: string,
    cron: string,
  ): ReturnType<typeof applyScheduled> {
    const scheduled = await applyScheduled(
      name,
      `  skipper: { cron: "${cron}", task: quick, missed: skip }
  catcher: { cron: "${cron}", task: quick, missed: fire_once }
`,
    );
    await h.tick();
    return scheduled;
  }

  it("a */10 seconds schedule fires exactly on its slots", async () => {
    const name = "every-ten";
    const { appliedAtMs, removeSchedules } = await applyScheduled(
      name,
      '  tick10: { cron: "*/10 * * * * *", task: quick }\n',
    );
    expect((await schedulesOf(name)).tick10).toEqual({
      name: "tick10",
      cron: "*/10 * * * * *",
      timezone: "UTC",
      target: { kind: "task", name: "quick" },
      overlap: "skip",
      nextFireAtMs: appliedAtMs + 10_000,
      lastFireAtMs: null,
      missedFires: 0,
      skippedOverlaps: 0,
    });

    await tickThrough(appliedAtMs + 9_500);
    expect(await h.runsOf(name)).toEqual([]);

    await tickThrough(appliedAtMs + 30_000);
    const runs = await h.runsOf(name);
    expect(runs.map((run) => run.createdAtMs).sort()).toEqual([
      appliedAtMs + 10_000,
      appliedAtMs + 20_000,
      appliedAtMs + 30_000,
    ]);
    for (const run of runs)
      expect(run).toMatchObject({ kind: "ordinary", target: "quick", scheduleName: "tick10" });
    expect(
      runs
        .filter((run) => run.createdAtMs < appliedAtMs + 30_000)
        .every((run) => run.status === "succeeded"),
    ).toBe(true);
    expect((await schedulesOf(name)).tick10).toMatchObject({
      nextFireAtMs: appliedAtMs + 40_000,
      lastFireAtMs: appliedAtMs + 30_000,
      missedFires: 0,
      skippedOverlaps: 0,
    });

    await removeSchedules();
  });

  it("after an hour of downtime a */10 seconds schedule fires once for the current slot, whatever its missed policy; the 359 missed slots fire nothing", async () => {
    const name = "downtime-ten";
    const { appliedAtMs, removeSchedules } = await applySkipperAndCatcher(name, "*/10 * * * * *");

    // Down for an hour: no ticks. The slot at +1 h is 5 s old when the runtime is back: on time.
    h.clock.set(appliedAtMs + HOUR_MS + 5_000);
    await h.tick();
    const runs = await h.runsOf(name);
    expect(runs.map((run) => [run.scheduleName, run.createdAtMs]).sort()).toEqual([
      ["catcher", appliedAtMs + HOUR_MS + 5_000],
      ["skipper", appliedAtMs + HOUR_MS + 5_000],
    ]);
    const after = await schedulesOf(name);
    for (const schedule of [after.skipper, after.catcher]) {
      // 360 slots came due (+10 s … +3600 s): the latest fired, the other 359 are counted.
      expect(schedule).toMatchObject({
        missedFires: 359,
        lastFireAtMs: appliedAtMs + HOUR_MS,
        nextFireAtMs: appliedAtMs + HOUR_MS + 10_000,
        skippedOverlaps: 0,
      });
    }

    // No storm afterwards: the next fire is the next slot.
    await tickThrough(appliedAtMs + HOUR_MS + 9_500);
    expect(await h.runsOf(name)).toHaveLength(2);
    await removeSchedules();
  });

  it("after an hour of downtime past the grace, missed: skip fires nothing and missed: fire_once fires exactly once", async () => {
    const name = "downtime-ten-min";
    const { appliedAtMs, removeSchedules } = await applySkipperAndCatcher(name, "*/10 * * * *");
    expect((await schedulesOf(name)).skipper?.nextFireAtMs).toBe(appliedAtMs + 10 * MINUTE_MS);

    // Down for an hour and five minutes: six slots (+10 … +60 min), the latest five minutes old.
    const backAtMs = appliedAtMs + HOUR_MS + 5 * MINUTE_MS;
    expect(backAtMs - (appliedAtMs + HOUR_MS)).toBeGreaterThan(MISSED_FIRES.defaultGraceMs);
    h.clock.set(backAtMs);
    await h.tick();
    const runs = await h.runsOf(name);
    expect(runs.map((run) => [run.scheduleName, run.createdAtMs])).toEqual([["catcher", backAtMs]]);
    const after = await schedulesOf(name);
    expect(after.skipper).toMatchObject({
      missedFires: 6,
      lastFireAtMs: null,
      nextFireAtMs: appliedAtMs + HOUR_MS + 10 * MINUTE_MS,
    });
    expect(after.catcher).toMatchObject({
      missedFires: 6,
      lastFireAtMs: appliedAtMs + HOUR_MS,
      nextFireAtMs: appliedAtMs + HOUR_MS + 10 * MINUTE_MS,
    });

    // Ticking on fires nothing more until the next slot, where both fire on time again.
    await tickThrough(backAtMs + 30_000);
    expect(await h.runsOf(name)).toHaveLength(1);
    h.clock.set(appliedAtMs + HOUR_MS + 10 * MINUTE_MS);
    await h.tick();
    const resumed = await h.runsOf(name);
    expect(resumed.map((run) => run.scheduleName).sort()).toEqual([
      "catcher",
      "catcher",
      "skipper",
    ]);
    const final = await schedulesOf(name);
    expect(final.skipper).toMatchObject({
      missedFires: 6,
      lastFireAtMs: appliedAtMs + HOUR_MS + 10 * MINUTE_MS,
    });
    expect(final.catcher).toMatchObject({
      missedFires: 6,
      lastFireAtMs: appliedAtMs + HOUR_MS + 10 * MINUTE_MS,
    });
    await removeSchedules();
  });

  it("overlap: skip starts no second run while the previous one is live, and counts the skips", async () => {
    const name = "overlap";
    const { appliedAtMs, removeSchedules } = await applyScheduled(
      name,
      '  busy: { cron: "*/10 * * * * *", task: long, overlap: skip }\n',
      'tasks:\n  long: { run: [sim, ok, "25000"] }\n',
    );

    await tickThrough(appliedAtMs + 10_000);
    const [first] = await h.runsOf(name);
    expect(first).toMatchObject({
      status: "running",
      createdAtMs: appliedAtMs + 10_000,
      scheduleName: "busy",
    });

    // The slots at +20 s and +30 s come while the first run (25 s long) still works.
    await tickThrough(appliedAtMs + 30_000);
    expect(await h.runsOf(name)).toHaveLength(1);
    expect((await schedulesOf(name)).busy).toMatchObject({
      skippedOverlaps: 2,
      missedFires: 0,
      lastFireAtMs: appliedAtMs + 10_000,
      nextFireAtMs: appliedAtMs + 40_000,
    });

    // It finishes at +35 s; the +40 s slot fires again.
    await tickThrough(appliedAtMs + 40_000);
    const runs: RunView[] = await h.runsOf(name);
    expect(runs.map((run) => [run.createdAtMs, run.status]).sort()).toEqual([
      [appliedAtMs + 10_000, "succeeded"],
      [appliedAtMs + 40_000, "running"],
    ]);
    expect((await schedulesOf(name)).busy).toMatchObject({
      skippedOverlaps: 2,
      lastFireAtMs: appliedAtMs + 40_000,
      nextFireAtMs: appliedAtMs + 50_000,
    });
    await removeSchedules();
  });
});
