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
import { type Served, startServe } from "../support/serve-child.ts";
import { attemptsOf, stepNamed } from "../support/api-client.ts";
import type { RunDetail } from "../support/api-views.ts";

const harness = useDeviceHarness();

/** Starts a one-step workflow under the fault and waits until its process runs with no persisted handle. */
async function startStuck(
  name: string,
  task: (dir: Scratch) => Record<string, unknown>,
): Promise<{ dir: Scratch; served: Served; runId: string; pid: number; attemptId: string }> {
  const dir = await harness.scratch(name);
  const { file } = await dir.manifest(
    "stuck",
    { ta: task(dir) },
    { pipeline: { steps: { a: { task: "ta" } } } },
  );
  const served = await startServe(harness.bundle, dir.stateDir, {
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

describe("an attempt left starting without a persisted handle, the runtime alive", () => {
  it(
    "is stopped by a cancel through the supervisor and converges to cancelled",
    { timeout: 90_000 },
    async () => {
      const stuck = await startStuck("cancel", (dir) => dir.task({ label: "a", then: "sleep 60" }));
      await stuck.served.api.cancel(stuck.runId);
      const detail = await stuck.served.api.waitTerminal(stuck.runId, 45_000);
      expect(detail.run.status).toBe("cancelled");
      expect(stepNamed(detail, "a").status).toBe("cancelled");
      expect(attemptsOf(detail, "a")[0]).toMatchObject({
        id: stuck.attemptId,
        status: "cancelled",
        stopReason: "cancel",
      });
      expect((await readReceipt(stuck.dir.stateDir, stuck.attemptId))?.stopReason).toBe("cancel");
      await expectConverged(stuck, detail);
    },
  );

  it(
    "is stopped at its 1 s deadline by the supervisor and converges to timed_out",
    { timeout: 90_000 },
    async () => {
      const stuck = await startStuck("deadline", (dir) =>
        dir.task({ label: "a", then: "sleep 60", timeout: "1s" }),
      );
      const detail = await stuck.served.api.waitTerminal(stuck.runId, 45_000);
      expect(detail.run.status).toBe("failed");
      expect(stepNamed(detail, "a").status).toBe("timed_out");
      expect(attemptsOf(detail, "a")[0]).toMatchObject({
        id: stuck.attemptId,
        status: "timed_out",
      });
      expect((await readReceipt(stuck.dir.stateDir, stuck.attemptId))?.stopReason).toBe("timeout");
      await expectConverged(stuck, detail);
    },
  );
});
