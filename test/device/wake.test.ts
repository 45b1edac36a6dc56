/**
 * The event-driven cadence: `qlr serve --tick-interval 24h` runs its cadence once at start-up and
 * then only when something wakes it. Every run below can reach its end only through wakes: a
 * run started or cancelled over HTTP, a supervisor exiting after its task, a cycle that recorded
 * a completion (`followUp`) or ran out of budget (`more`). Without them each run would sit for
 * a day, and the bounded waits fail.
 */
import { describe, expect, it } from "vitest";
import { waitUntilGone } from "../support/proc.ts";
import { waitFor } from "../support/wait.ts";
import { attemptsOf } from "../support/api-client.ts";
import { useDeviceHarness } from "../support/device-harness.ts";
import { chain, diamond } from "../support/workflow-shapes.ts";

const device = useDeviceHarness();

const NEVER_BY_INTERVAL = "24h";

describe("event-driven cadence (real processes)", { timeout: 60_000 }, () => {
  it("a diamond of four steps runs to success on wakes alone: start over HTTP, supervisor exits, follow-up cycles", async () => {
    const { dir, served } = await device.deploy("wake-diamond", {
      packageName: "wake",
      tasks: (dir) =>
        Object.fromEntries(["a", "b", "c", "d"].map((label) => [`t${label}`, dir.task({ label })])),
      workflows: { diamond: diamond({ a: "ta", b: "tb", c: "tc", d: "td" }) },
      serve: { tickInterval: NEVER_BY_INTERVAL },
    });
    const created = await served.api.startWorkflow("wake", "diamond");
    const detail = await served.api.waitTerminal(created.id, 30_000);
    expect(detail.run.status).toBe("succeeded");
    expect(detail.steps.map((step) => [step.name, step.status, step.attemptCount])).toEqual([
      ["a", "succeeded", 1],
      ["b", "succeeded", 1],
      ["c", "succeeded", 1],
      ["d", "succeeded", 1],
    ]);
    // Exactly one spawn per step: waking early never dispatches twice.
    const spawns = await dir.spawns();
    expect(spawns.map((spawn) => spawn.label).sort()).toEqual(["a", "b", "c", "d"]);
    // Every cycle of the cadence is counted, not only POST /tick: one count per finished cycle,
    // as many as the cancellation stage's (a stage every cycle runs), or one fewer while a
    // cycle is between its first stage and its end.
    const metrics = await served.api.call<string>("GET", "/metrics");
    const ticks = Number(/\nqlr_ticks_total (\d+)\n/.exec(metrics.body)?.[1] ?? "0");
    const cancellationCycles = Number(
      /\nqlr_tick_stage_duration_seconds_count\{stage="cancellation"\} (\d+)\n/.exec(
        metrics.body,
      )?.[1] ?? "-1",
    );
    expect(ticks).toBeGreaterThanOrEqual(4);
    expect(ticks).toBeLessThanOrEqual(cancellationCycles);
    expect(ticks).toBeGreaterThanOrEqual(cancellationCycles - 1);
    expect(await served.terminate()).toEqual({ code: 0, signal: null });
  });

  it("a cancel over HTTP stops a running step at once and the run ends cancelled, with no interval tick", async () => {
    const { dir, served } = await device.deploy("wake-cancel", {
      packageName: "wakecancel",
      tasks: (dir) => ({
        long: dir.task({ label: "long", then: "sleep 30" }),
        after: dir.task({ label: "after" }),
      }),
      workflows: { pipeline: chain({ long: "long", after: "after" }) },
      serve: { tickInterval: NEVER_BY_INTERVAL },
    });
    const created = await served.api.startWorkflow("wakecancel", "pipeline");
    const { attempt } = await served.api.waitStepRunning(created.id, "long");
    await served.api.cancel(created.id);
    const detail = await served.api.waitTerminal(created.id, 30_000);
    expect(detail.run.status).toBe("cancelled");
    expect(attemptsOf(detail, "long").map((item) => item.status)).toEqual(["cancelled"]);
    await waitUntilGone(attempt.pid);
    expect(await dir.spawnCount("after")).toBe(0);
    expect(await served.terminate()).toEqual({ code: 0, signal: null });
  });

  it("a long-poll of the run answers once the run ends, and a stopping runtime answers a waiting one as the run stands", async () => {
    const { served } = await device.deploy("wake-long-poll", {
      packageName: "wakepoll",
      tasks: (dir) => ({
        ta: dir.task({ label: "a" }),
        tb: dir.task({ label: "b" }),
        long: dir.task({ label: "long", then: "sleep 30" }),
      }),
      workflows: {
        pair: chain({ a: "ta", b: "tb" }),
        slow: chain({ long: "long" }),
      },
      serve: { tickInterval: NEVER_BY_INTERVAL },
    });
    const { client } = served.api;
    const created = await served.api.startWorkflow("wakepoll", "pair");
    // Bounded: each answer is the end of the run or a 10 s timeout, and the run ends in seconds.
    let detail = await client.waitRun(created.id, { wait: "terminal", timeoutMs: 10_000 });
    for (let round = 0; round < 5 && detail.run.status === "running"; round += 1)
      detail = await client.waitRun(created.id, { wait: "terminal", timeoutMs: 10_000 });
    expect(detail.run.status).toBe("succeeded");
    expect(detail.steps.map((step) => step.status)).toEqual(["succeeded", "succeeded"]);
    // A change wait past the last event of a finished run answers at once, terminal.
    const after = detail.run.eventSeq ?? 0;
    expect(after).toBeGreaterThan(0);
    const again = await client.waitRun(created.id, { wait: "change", after, timeoutMs: 10_000 });
    expect(again.run.status).toBe("succeeded");
    // A request waiting for a run that will not end soon is answered when the runtime stops.
    const slow = await served.api.startWorkflow("wakepoll", "slow");
    await served.api.waitStepRunning(slow.id, "long");
    const waiting = client.waitRun(slow.id, { wait: "terminal", timeoutMs: 30_000 });
    // Stopped only once the runtime counts the request as waiting (`qlr_run_waiters`).
    await waitFor("the long-poll to wait", async () => {
      const metrics = await served.api.call<string>("GET", "/metrics");
      return /\nqlr_run_waiters 1\n/.test(metrics.body) ? true : null;
    });
    const stopped = served.terminate();
    const answered = await waiting;
    expect(answered.run.id).toBe(slow.id);
    expect(answered.run.status).toBe("running");
    expect(await stopped).toEqual({ code: 0, signal: null });
  });
});
