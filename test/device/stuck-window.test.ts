/**
 * No stuck windows: the launch handles of one dispatch are lost after the spawn and before the
 * `running` commit (the fault point fails that cycle, the runtime lives on), so the attempt is
 * `starting` with a journal, a spawn record, a live process and no persisted handle. Without a
 * restart, a cancel and a 1 s deadline still reach the exact process through the resident
 * supervisor, and the run converges in bounded cycles.
 */
import { describe, expect, it } from "vitest";
import { useDeviceHarness } from "../support/device-harness.ts";
import { waitFor } from "../support/wait.ts";
import { isRunning, waitUntilGone } from "../support/proc.ts";
import type { Scratch } from "../support/scratch.ts";
import { expectReceiptsHonoured, readReceipt } from "../support/state-files.ts";
import type { Served } from "../support/serve-child.ts";
import { attemptsOf, stepNamed } from "../support/api-client.ts";
import type { RunDetail } from "../support/api-views.ts";
import { chain } from "../support/workflow-shapes.ts";

const harness = useDeviceHarness();

/** Starts a one-step workflow under the fault and waits until its process runs with no persisted handle. */
async function startStuck(
  name: string,
  task: (dir: Scratch) => Record<string, unknown>,
): Promise<{ dir: Scratch; served: Served; runId: string; pid: number; attemptId: string }> {
  const dir = await harness.scratch(name);
  const { file } = await dir.manifest("stuck", { ta: task(dir) }, { pipeline: chain({ a: "ta" }) });
  const served = await harness.serve(dir, {
    fault: "dispatch.after_spawn",
    faultAction: "throw",
    apply: [file],
  });
  const runId = (await served.api.startWorkflow("stuck", "pipeline")).id;
  const spawn = await waitFor("step a's process to run", async () =>
    (await dir.spawns()).find((entry) => entry.label === "a"),
  );
  // Cycles pass; the attempt stays `starting` without a handle while its process runs.
  await served.api.tick();
  await served.api.tick();
  const detail = await served.api.run(runId);
  const [attempt] = attemptsOf(detail, "a");
  expect(attempt).toMatchObject({ status: "starting", pid: null });
  expect(await isRunning(spawn.pid)).toBe(true);
  return { dir, served, runId, pid: spawn.pid, attemptId: attempt?.id ?? "" };
}

async function expectConverged(
  stuck: { dir: Scratch; served: Served; runId: string; pid: number; attemptId: string },
  detail: RunDetail,
): Promise<void> {
  await waitUntilGone(stuck.pid);
  await expectReceiptsHonoured(stuck.dir.stateDir, detail);
  // One spawn, one attempt, and the same runtime process all along.
  expect((await stuck.dir.spawns()).map((spawn) => spawn.label)).toEqual(["a"]);
  expect(detail.attempts).toHaveLength(1);
  expect(stuck.served.child.exitCode).toBeNull();
}

interface StuckCase {
  readonly title: string;
  readonly name: string;
  readonly task: (dir: Scratch) => Record<string, unknown>;
  /** What reaches the stuck attempt; nothing for the deadline, which the supervisor keeps. */
  readonly act: (stuck: { served: Served; runId: string }) => Promise<unknown>;
  readonly runStatus: string;
  /** The step's and the attempt's status. */
  readonly attemptStatus: string;
  readonly stopReason: string;
}

const STUCK_CASES: readonly StuckCase[] = [
  {
    title: "is stopped by a cancel through the supervisor and converges to cancelled",
    name: "cancel",
    task: (dir) => dir.task({ label: "a", then: "sleep 60" }),
    act: (stuck) => stuck.served.api.cancel(stuck.runId),
    runStatus: "cancelled",
    attemptStatus: "cancelled",
    stopReason: "cancel",
  },
  {
    title: "is stopped at its 1 s deadline by the supervisor and converges to timed_out",
    name: "deadline",
    task: (dir) => dir.task({ label: "a", then: "sleep 60", timeout: "1s" }),
    act: () => Promise.resolve(),
    runStatus: "failed",
    attemptStatus: "timed_out",
    stopReason: "timeout",
  },
];

describe("an attempt left starting without a persisted handle, the runtime alive", () => {
  for (const stuckCase of STUCK_CASES) {
    it(stuckCase.title, { timeout: 90_000 }, async () => {
      const stuck = await startStuck(stuckCase.name, stuckCase.task);
      await stuckCase.act(stuck);
      const detail = await stuck.served.api.waitTerminal(stuck.runId, 45_000);
      expect(detail.run.status).toBe(stuckCase.runStatus);
      expect(stepNamed(detail, "a").status).toBe(stuckCase.attemptStatus);
      expect(attemptsOf(detail, "a")[0]).toMatchObject({
        id: stuck.attemptId,
        status: stuckCase.attemptStatus,
        stopReason: stuckCase.stopReason,
      });
      expect((await readReceipt(stuck.dir.stateDir, stuck.attemptId))?.stopReason).toBe(
        stuckCase.stopReason,
      );
      await expectConverged(stuck, detail);
    });
  }
});
