import { describe, expect, it, vi } from "vitest";
import { ORPHAN_SWEEP_EVERY_PURGES, type CoordinatorDeps } from "../../src/coordinator.ts";
import { isQlrError } from "../../src/errors.ts";
import { applyPackage, cancelRun, startRun } from "../../src/operations.ts";
import type { PurgedRun } from "../../src/ports.ts";
import type { ProfileName } from "../../src/profiles.ts";
import {
  decidePurge,
  DEFAULT_RETENTION,
  MAX_RETENTION_MS,
  COUNT_BOUNDARY_MAX_AGE_MS,
  countBoundaryMaxAgeMs,
  MAX_RETENTION_RUNS,
  parseRetentionPolicy,
  purgeRange,
  type PurgeCandidate,
  type RetentionPolicy,
} from "../../src/retention.ts";
import { SqlStoreTx } from "../../storage/sql-store/store-tx.ts";
import { diamondManifest, SequentialIds, task } from "../support/fixtures.ts";
import { T0 } from "./core-fixtures.ts";
import { storeRig } from "./store-rig.ts";

const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;

describe("retention settings", () => {
  it("defaults to 7 days and 10 000 runs", () => {
    expect(parseRetentionPolicy({})).toEqual({ horizonMs: 7 * DAY_MS, maxRuns: 10_000 });
    expect(parseRetentionPolicy({ horizon: "", maxRuns: "" })).toEqual(DEFAULT_RETENTION);
  });

  it.each([
    ["1m", "1", { horizonMs: MINUTE_MS, maxRuns: 1 }],
    ["36h", "250", { horizonMs: 36 * 3_600_000, maxRuns: 250 }],
    [
      "3650d",
      String(MAX_RETENTION_RUNS),
      { horizonMs: MAX_RETENTION_MS, maxRuns: MAX_RETENTION_RUNS },
    ],
  ])("accepts --retention %s --retention-runs %s", (horizon, maxRuns, expected) => {
    expect(parseRetentionPolicy({ horizon, maxRuns })).toEqual(expected);
  });

  it.each([
    ["59s", undefined, /retention must be from 1m to 3650d/],
    ["3651d", undefined, /retention must be from 1m to 3650d/],
    ["1.5d", undefined, /whole numbers/],
    ["7", undefined, /needs a unit/],
    ["-1d", undefined, /negative/],
    ["seven days", undefined, /must look like/],
    [undefined, "0", /retention-runs must be a whole number of runs from 1 to 10000000/],
    [undefined, "10000001", /retention-runs must be a whole number/],
    [undefined, "1e3", /retention-runs must be a whole number/],
    [undefined, "-5", /retention-runs must be a whole number/],
    [undefined, " 10", /retention-runs must be a whole number/],
  ])(
    "refuses --retention %s --retention-runs %s with a clear error",
    (horizon, maxRuns, message) => {
      let caught: unknown;
      try {
        parseRetentionPolicy({ horizon, maxRuns });
      } catch (error) {
        caught = error;
      }
      expect(isQlrError(caught, "invalid_request")).toBe(true);
      expect((caught as Error).message).toMatch(message);
      expect((caught as { details: { path: string }[] }).details[0]?.path).toBe(
        horizon !== undefined ? "retention" : "retention-runs",
      );
    },
  );

  it("names the setting as the caller spells it, and reports both problems at once", () => {
    expect(() =>
      parseRetentionPolicy(
        { horizon: "0m", maxRuns: "none" },
        { horizon: "QLR_RETENTION", maxRuns: "QLR_RETENTION_RUNS" },
      ),
    ).toThrow(/QLR_RETENTION must be from 1m.*QLR_RETENTION_RUNS must be a whole number/);
  });
});

describe("the purge decision", () => {
  const policy: RetentionPolicy = { horizonMs: DAY_MS, maxRuns: 3 };
  const nowMs = T0 + 10 * DAY_MS;
  const old = nowMs - 2 * DAY_MS;
  const recent = nowMs - 1_000;
  const base: PurgeCandidate = {
    runId: "r-1",
    status: "succeeded",
    finishedAtMs: old,
    idempotencyKey: null,
    liveAttempts: 0,
    scheduleLastRun: false,
    frontierDue: false,
  };
  // The third-newest terminal run finished at `recent` with id r-5: older ones are over the count.
  const range = purgeRange(policy, nowMs, { finishedAtMs: recent, runId: "r-5" });
  const rangeWithoutCount = purgeRange(policy, nowMs, null);

  it("the range ends at the later of the time horizon and the oldest of the newest N", () => {
    expect(rangeWithoutCount.end).toEqual({ finishedAtMs: nowMs - DAY_MS, runId: "" });
    expect(range.end).toEqual({ finishedAtMs: recent, runId: "r-5" });
    expect(purgeRange(policy, nowMs, { finishedAtMs: old, runId: "r-9" }).end).toEqual({
      finishedAtMs: nowMs - DAY_MS,
      runId: "",
    });
  });

  it.each<[string, Partial<PurgeCandidate>, ReturnType<typeof decidePurge>]>([
    ["an expired terminal run", {}, { purge: true, reason: "expired" }],
    ["every terminal status alike", { status: "lost" }, { purge: true, reason: "expired" }],
    ["a run that is not terminal", { status: "running" }, { purge: false, reason: "not_terminal" }],
    ["a queued run", { status: "queued" }, { purge: false, reason: "not_terminal" }],
    [
      "a terminal run without a finish time",
      { finishedAtMs: null },
      { purge: false, reason: "not_finished" },
    ],
    [
      "a run with an attempt that may be live",
      { liveAttempts: 1 },
      { purge: false, reason: "live_attempt" },
    ],
    [
      "a schedule's last run",
      { scheduleLastRun: true },
      { purge: false, reason: "schedule_last_run" },
    ],
    [
      "a run the frontier still has to see",
      { frontierDue: true },
      { purge: false, reason: "frontier_due" },
    ],
    [
      "an expired keyed run: the window is over",
      { idempotencyKey: "k" },
      { purge: true, reason: "expired" },
    ],
    [
      "a recent run beyond the newest N",
      { finishedAtMs: recent, runId: "r-4" },
      { purge: true, reason: "over_count" },
    ],
    [
      "a recent keyed run beyond the newest N: inside the idempotency window",
      { finishedAtMs: recent, runId: "r-4", idempotencyKey: "k" },
      { purge: false, reason: "idempotency_window" },
    ],
    [
      "the oldest of the newest N itself",
      { finishedAtMs: recent, runId: "r-5" },
      { purge: false, reason: "retained" },
    ],
    [
      "a run finished exactly at the horizon",
      { finishedAtMs: nowMs - DAY_MS, runId: "r-0" },
      { purge: true, reason: "over_count" },
    ],
  ])("%s", (_name, patch, expected) => {
    expect(decidePurge({ ...base, ...patch }, range)).toEqual(expected);
  });

  it("without enough terminal runs, only the horizon counts; a run finished exactly at it stays", () => {
    expect(decidePurge({ ...base, finishedAtMs: nowMs - DAY_MS }, rangeWithoutCount)).toEqual({
      purge: false,
      reason: "retained",
    });
    expect(decidePurge({ ...base, finishedAtMs: nowMs - DAY_MS - 1 }, rangeWithoutCount)).toEqual({
      purge: true,
      reason: "expired",
    });
  });
});

/**
 * The purge stage through the coordinator over a real sql.js store and the simulated
 * executor (which keeps a journal per attempt, like the launcher's files).
 */
describe("the purge stage", () => {
  async function rig(policy: RetentionPolicy | null) {
    const base = await storeRig(3);
    const { clock, store, ids, executor } = base;
    const purged: PurgedRun[] = [];
    const coordinator = base.coordinator("standalone", {
      retention: policy,
      onPurge: (run) => purged.push(run),
    });
    /** A coordinator that purges everything past a minute, with its own ids (a restart, another replica). */
    const purging = (idPrefix: string, profile: ProfileName, deps: Partial<CoordinatorDeps> = {}) =>
      base.coordinator(profile, {
        ids: new SequentialIds(idPrefix),
        retention: { horizonMs: MINUTE_MS, maxRuns: 100 },
        ...deps,
      });
    await store.transaction(async (tx) =>
      applyPackage(
        tx,
        diamondManifest("ret", {
          tasks: [task("work", ["true"], { retry: { max: 0, backoffMs: 0, idempotent: false } })],
        }),
        await tx.observe(clock.nowMs()),
      ),
    );
    const start = (idempotencyKey: string | null = null) =>
      store.transaction(
        async (tx) =>
          (
            await startRun(
              tx,
              {
                package: "ret",
                target: { kind: "workflow", name: "diamond" },
                idempotencyKey,
                scheduleName: null,
                runId: ids.runId(),
              },
              await tx.observe(clock.nowMs()),
            )
          ).run.id,
      );
    /** Ticks with the clock moving until the run is terminal (bounded). */
    const finish = async (runId: string): Promise<void> => {
      for (let round = 0; round < 40; round += 1) {
        const run = await store.transaction(async (tx) => tx.getRun(runId));
        if (run !== null && run.finishedAtMs !== null) return;
        clock.advance(150);
        await coordinator.tick();
      }
      throw new Error(`run ${runId} did not finish`);
    };
    const rowCounts = (runId: string) =>
      store.driver.transaction(async (tx) => {
        const count = async (sql: string) =>
          Number((await tx.query<{ n: number }>(sql, [runId]))[0]?.n ?? 0);
        return {
          runs: await count("SELECT COUNT(*) AS n FROM runs WHERE id = ?"),
          steps: await count("SELECT COUNT(*) AS n FROM step_runs WHERE run_id = ?"),
          attempts: await count("SELECT COUNT(*) AS n FROM run_attempts WHERE run_id = ?"),
          admissions: await count("SELECT COUNT(*) AS n FROM admission_receipts WHERE run_id = ?"),
          events: await count("SELECT COUNT(*) AS n FROM run_events WHERE run_id = ?"),
          mutations: await count("SELECT COUNT(*) AS n FROM step_mutations WHERE run_id = ?"),
        };
      });
    const attemptIds = (runId: string) =>
      store.transaction(async (tx) => (await tx.getAttempts(runId)).map((attempt) => attempt.id));
    /** Moves the clock on by `ms`, runs one cycle and counts what is left of run `runId` (0 or 1). */
    const runRowsAfter = async (runId: string, ms: number): Promise<number> => {
      clock.advance(ms);
      await coordinator.tick();
      return (await rowCounts(runId)).runs;
    };
    /** Starts a run and lets it finish; its id and its attempts' ids. */
    const finishedRun = async (): Promise<{ runId: string; attemptIds: string[] }> => {
      const runId = await start();
      await finish(runId);
      return { runId, attemptIds: await attemptIds(runId) };
    };
    return {
      clock,
      store,
      executor,
      coordinator,
      purging,
      start,
      finish,
      finishedRun,
      rowCounts,
      runRowsAfter,
      attemptIds,
      purged,
    };
  }

  it("purges a run past the horizon with every row and journal it owns, and keeps the newer one", async () => {
    const r = await rig({ horizonMs: DAY_MS, maxRuns: 100 });
    const { runId: oldRun, attemptIds: oldAttempts } = await r.finishedRun();
    expect(oldAttempts).toHaveLength(4);
    for (const attemptId of oldAttempts) expect(r.executor.journal.has(attemptId)).toBe(true);
    r.clock.advance(DAY_MS - 10_000);
    const { runId: newRun, attemptIds: newAttempts } = await r.finishedRun();
    r.clock.advance(20_000);
    const report = await r.coordinator.tick();
    expect(report.stages.find((stage) => stage.name === "purge")).toMatchObject({
      processed: 1,
      errors: [],
    });
    expect(await r.rowCounts(oldRun)).toEqual({
      runs: 0,
      steps: 0,
      attempts: 0,
      admissions: 0,
      events: 0,
      mutations: 0,
    });
    for (const attemptId of oldAttempts) expect(r.executor.journal.has(attemptId)).toBe(false);
    const kept = await r.rowCounts(newRun);
    expect(kept.runs).toBe(1);
    expect(kept.attempts).toBe(4);
    expect(kept.admissions).toBe(4);
    for (const attemptId of newAttempts) expect(r.executor.journal.has(attemptId)).toBe(true);
    expect(r.purged.map((purged) => purged.runId)).toEqual([oldRun]);
  });

  it("keeps the newest N terminal runs, but never a keyed run inside the horizon", async () => {
    const r = await rig({ horizonMs: DAY_MS, maxRuns: 2 });
    const runs: string[] = [];
    for (const key of [null, "nightly-1", null, null, null]) {
      const runId = await r.start(key);
      await r.finish(runId);
      runs.push(runId);
    }
    await r.coordinator.tick();
    const remaining = await r.store.transaction(async (tx) =>
      (await tx.listRuns({ status: null, cursor: null, limit: 50 })).map((run) => run.id).sort(),
    );
    // The two newest stay, the keyed one stays for its window, the other two go.
    expect(remaining).toEqual([runs[1], runs[3], runs[4]].sort());
    // A repeated start with the key inside the window answers the same run.
    expect(await r.start("nightly-1")).toBe(runs[1]);
    // After the horizon the keyed run goes, and the key starts a new run.
    r.clock.advance(DAY_MS + 1);
    await r.coordinator.tick();
    expect(await r.store.transaction(async (tx) => tx.getRun(runs[1]!))).toBeNull();
    const again = await r.start("nightly-1");
    expect(again).not.toBe(runs[1]);
  });

  it("finds the count boundary by rank once per its age limit, not every cycle", async () => {
    const policy = { horizonMs: DAY_MS, maxRuns: 10_000 };
    expect(countBoundaryMaxAgeMs(policy)).toBe(10_000);
    expect(countBoundaryMaxAgeMs({ horizonMs: DAY_MS, maxRuns: 2 })).toBe(2);
    expect(countBoundaryMaxAgeMs({ horizonMs: DAY_MS, maxRuns: MAX_RETENTION_RUNS })).toBe(
      COUNT_BOUNDARY_MAX_AGE_MS,
    );
    const r = await rig(policy);
    await r.finishedRun();
    const rank = vi.spyOn(SqlStoreTx.prototype, "terminalRunAtRank");
    try {
      // 40 cycles over 8 s of store time: the boundary found while the run finished still
      // serves (at most one walk, if that one was found just short of 10 s before the last).
      for (let cycle = 0; cycle < 40; cycle += 1) {
        r.clock.advance(200);
        await r.coordinator.tick();
      }
      const walks = rank.mock.calls.length;
      expect(walks).toBeLessThanOrEqual(1);
      r.clock.advance(10_000);
      await r.coordinator.tick();
      expect(rank.mock.calls.length).toBe(walks + 1);
      expect(rank.mock.calls.every(([asked]) => asked === policy.maxRuns)).toBe(true);
    } finally {
      rank.mockRestore();
    }
  });

  it("with a small count finds the boundary every cycle, so the newest N hold exactly", async () => {
    const r = await rig({ horizonMs: DAY_MS, maxRuns: 2 });
    const first = await r.finishedRun();
    const second = await r.finishedRun();
    const third = await r.finishedRun();
    // The cycle right after the third run's end purges the first: no boundary is left over.
    expect(await r.runRowsAfter(first.runId, 150)).toBe(0);
    expect((await r.rowCounts(second.runId)).runs).toBe(1);
    expect((await r.rowCounts(third.runId)).runs).toBe(1);
  });

  it("never purges a run that is not terminal, however old", async () => {
    const r = await rig({ horizonMs: MINUTE_MS, maxRuns: 1 });
    const stuck = await r.start();
    // A month later the run is still running (its first step is only now admitted and started).
    r.clock.advance(30 * DAY_MS);
    const report = await r.coordinator.tick();
    expect(report.stages.find((stage) => stage.name === "purge")?.processed).toBe(0);
    expect((await r.rowCounts(stuck)).runs).toBe(1);
    await r.store.transaction(async (tx) =>
      cancelRun(tx, stuck, await tx.observe(r.clock.nowMs())),
    );
    await r.finish(stuck);
    expect(await r.runRowsAfter(stuck, 2 * MINUTE_MS)).toBe(0);
  });

  it("without a policy nothing is purged", async () => {
    const r = await rig(null);
    const { runId } = await r.finishedRun();
    expect(await r.runRowsAfter(runId, 3_650 * DAY_MS)).toBe(1);
  });

  it("a purge interrupted after its commit leaves journals that the next coordinator's sweep removes, and only those", async () => {
    // The rig's own coordinator keeps everything; only the two below purge.
    const r = await rig(null);
    const doomed = await r.finishedRun();
    r.clock.advance(2 * MINUTE_MS);
    const kept = await r.finishedRun();
    // The first coordinator dies right after the purge's commit: rows gone, journals left.
    const crashing = r.purging("x", "standalone", {
      fault: (point) => {
        if (point === "purge.after_commit") throw new Error("crash at purge.after_commit");
      },
    });
    await crashing.tick();
    expect((await r.rowCounts(doomed.runId)).runs).toBe(0);
    for (const attemptId of doomed.attemptIds) expect(r.executor.journal.has(attemptId)).toBe(true);
    // A fresh coordinator (a restart) sweeps on its first cycle.
    const restarted = r.purging("y", "edge");
    // One cycle walks a journal of fewer than ORPHAN_SWEEP_PAGE names.
    await restarted.tick();
    for (const attemptId of doomed.attemptIds)
      expect(r.executor.journal.has(attemptId)).toBe(false);
    for (const attemptId of kept.attemptIds) expect(r.executor.journal.has(attemptId)).toBe(true);
  });

  it("walks the journal again every ORPHAN_SWEEP_EVERY_PURGES cycles, for files another replica's purge left", async () => {
    const r = await rig({ horizonMs: DAY_MS, maxRuns: 100 });
    await r.coordinator.tick();
    // A journal record whose attempt this store never had appears after the start-up sweep.
    r.executor.journal.add("ora:left-by-another-replica");
    for (let cycle = 1; cycle < ORPHAN_SWEEP_EVERY_PURGES - 1; cycle += 1)
      await r.coordinator.tick();
    expect(r.executor.journal.has("ora:left-by-another-replica")).toBe(true);
    await r.coordinator.tick();
    expect(r.executor.journal.has("ora:left-by-another-replica")).toBe(false);
  }, 60_000);
});
