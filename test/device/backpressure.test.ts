/**
 * Backpressure through a real `qlr serve` and real processes: every task appends `start RUN`
 * and `end RUN` to one file (appends of a line are atomic), so the file is the real order of
 * starts and ends. The limits are read from that record, never from timing.
 */
import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { runCli } from "../support/cli-runner.ts";
import { useDeviceHarness } from "../support/device-harness.ts";
import { Scratch } from "../support/scratch.ts";
import { chain } from "../support/workflow-shapes.ts";
import { waitFor } from "../support/wait.ts";

const device = useDeviceHarness();

/** The file every task of a test appends its `start RUN` and `end RUN` lines to. */
function intervalsOf(dir: Scratch): string {
  return dir.path("intervals.log");
}

function recorded(intervals: string, then: string): string {
  return `echo "start $QLR_RUN_ID" >> '${intervals}'\n${then}\necho "end $QLR_RUN_ID" >> '${intervals}'\n`;
}

interface IntervalRecord {
  readonly maxLive: number;
  readonly started: string[];
  readonly ended: string[];
  /** For each start: the runs that had ended before it. */
  readonly endedBefore: Map<string, Set<string>>;
}

/** The most tasks live at once by the record, the runs in the order they started, and the runs that ended. */
async function replay(intervals: string): Promise<IntervalRecord> {
  const text = await readFile(intervals, "utf8").catch(() => "");
  const live = new Set<string>();
  const started: string[] = [];
  const ended: string[] = [];
  const endedBefore = new Map<string, Set<string>>();
  let maxLive = 0;
  for (const line of text.split("\n").filter((item) => item.length > 0)) {
    const [kind, runId = ""] = line.split(" ");
    if (kind === "start") {
      live.add(runId);
      started.push(runId);
      endedBefore.set(runId, new Set(ended));
      maxLive = Math.max(maxLive, live.size);
    } else {
      live.delete(runId);
      ended.push(runId);
    }
  }
  return { maxLive, started, ended, endedBefore };
}

/**
 * Oldest first under a limit of `limit`: the runs are admitted in run id order, so when the
 * k-th run starts every older run was admitted before it, and all but `limit - 1` of them had
 * already ended (their `end` line precedes its `start` line). The processes of one wave may
 * write their `start` lines in any order, so the start order itself proves nothing.
 */
function expectOldestFirst(record: IntervalRecord, runIds: readonly string[], limit: number): void {
  const ordered = [...runIds].sort();
  for (const [index, runId] of ordered.entries()) {
    const before = record.endedBefore.get(runId);
    expect(before, `run ${index} started`).toBeDefined();
    const olderEnded = ordered.slice(0, index).filter((older) => before?.has(older)).length;
    expect(olderEnded, `older runs ended before run ${index} started`).toBeGreaterThanOrEqual(
      index - (limit - 1),
    );
  }
}

describe("backpressure (real processes)", { timeout: 120_000 }, () => {
  it("concurrency: 2 runs six runs two at a time, in order, and says why the others wait", async () => {
    const { dir, served } = await device.deploy("bp-task", {
      packageName: "bp",
      tasks: (dir) => ({
        fetch: {
          shell: recorded(intervalsOf(dir), Scratch.untilGate(dir.gate("open"))),
          concurrency: 2,
        },
      }),
      workflows: { one: chain({ fetch: "fetch" }) },
    });
    const intervals = intervalsOf(dir);
    const gate = dir.gate("open");
    const runIds: string[] = [];
    for (let index = 0; index < 6; index += 1)
      runIds.push((await served.api.startWorkflow("bp", "one")).id);
    // Two start and hold; the newest run's step waits and says why.
    const waiting = 'waiting: task "fetch" at its concurrency limit (2 of 2 running)';
    const newest = [...runIds].sort().at(-1) ?? "";
    await waitFor(
      "two running and the sixth waiting",
      async () => {
        const detail = await served.api.run(newest);
        return (await replay(intervals)).started.length === 2 &&
          detail.steps[0]?.waiting === waiting
          ? true
          : null;
      },
      30_000,
    );
    const status = await runCli(device.bundle, [
      "status",
      newest,
      "--state-dir",
      dir.stateDir,
      "--url",
      served.url,
    ]);
    expect(status.code).toBe(0);
    expect(status.stdout).toContain(waiting);
    expect([...(await replay(intervals)).started].sort()).toEqual([...runIds].sort().slice(0, 2));
    await dir.open(gate);
    for (const runId of runIds)
      expect((await served.api.waitTerminal(runId, 60_000)).run.status).toBe("succeeded");
    const record = await replay(intervals);
    expect(record.maxLive).toBe(2);
    expectOldestFirst(record, runIds, 2);
    expect([...record.ended].sort()).toEqual([...runIds].sort());
    const done = await served.api.run(newest);
    expect(done.steps[0]?.waiting).toBeNull();
  });

  it("--max-running 1 runs one local task at a time across tasks, in order", async () => {
    const { dir, served } = await device.deploy("bp-runtime", {
      packageName: "bpr",
      tasks: (dir) => ({
        a: { shell: recorded(intervalsOf(dir), "sleep 0.2") },
        b: { shell: recorded(intervalsOf(dir), "sleep 0.2") },
      }),
      workflows: { wa: chain({ a: "a" }), wb: chain({ b: "b" }) },
      serve: { maxRunning: "1" },
    });
    const intervals = intervalsOf(dir);
    const runIds: string[] = [];
    for (let index = 0; index < 4; index += 1)
      runIds.push((await served.api.startWorkflow("bpr", index % 2 === 0 ? "wa" : "wb")).id);
    for (const runId of runIds)
      expect((await served.api.waitTerminal(runId, 60_000)).run.status).toBe("succeeded");
    const record = await replay(intervals);
    expect(record.maxLive).toBe(1);
    expect(record.started).toEqual([...runIds].sort());
    expectOldestFirst(record, runIds, 1);
  });
});
