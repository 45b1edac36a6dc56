/**
 * The device product vertical with real processes (ADR-0229 verification items 3 and 4):
 * `qlr serve` as a child process, real POSIX tasks through the launcher and supervisor, the
 * embedded SQLite file store, driven through the HTTP API.
 */
import { describe, expect, it } from "vitest";
import { Coordinator } from "../../src/coordinator.ts";
import { cancelRun, startRun } from "../../src/operations.ts";
import { PROFILES } from "../../src/profiles.ts";
import { applyFile } from "../../runtimes/node/device.ts";
import { systemClock, uuidv7, uuidv7Ids } from "../../runtimes/node/host.ts";
import { loadOrCreateReceiptKey, PosixLauncher } from "../../runtimes/node/launcher/index.ts";
import { LocalProcessExecutor } from "../../runtimes/node/local-executor.ts";
import { waitFor } from "../support/wait.ts";
import { isRunning, waitUntilGone } from "../support/proc.ts";
import { Scratch } from "../support/scratch.ts";
import {
  expectReceiptsHonoured,
  journalNames,
  readJournal,
  readReceipt,
} from "../support/state-files.ts";
import { attemptsOf, expectCancelledWhileFirstRan, stepNamed } from "../support/api-client.ts";
import { useDeviceHarness } from "../support/device-harness.ts";
import { openStateDirStore, readRunRecords } from "../support/offline-store.ts";
import { chain } from "../support/workflow-shapes.ts";
import { workflowStart } from "../support/fixtures.ts";

const device = useDeviceHarness();

/** Nothing of the run reached a process: no task spawned, no journal record written. */
async function expectNothingSpawnedOrJournaled(dir: Scratch): Promise<void> {
  expect(await dir.spawns()).toEqual([]);
  expect(await journalNames(dir.stateDir)).toEqual([]);
}

describe("device lifecycle (real processes)", { timeout: 60_000 }, () => {
  it("product vertical: a → b both succeed, one attempt, one spawn and one admission per step, startedAtMs is the launcher's handle fact", async () => {
    const { dir, served, api } = await device.deploy("vertical", {
      tasks: (dir) => ({
        ta: dir.task({ label: "a", then: "sleep 0.3" }),
        tb: dir.task({ label: "b", then: "sleep 0.3" }),
      }),
      workflows: { pipeline: chain({ a: "ta", b: "tb" }) },
    });
    const created = await api.startWorkflow("vertical", "pipeline");
    const detail = await api.waitTerminal(created.id);

    expect(detail.run.status).toBe("succeeded");
    expect(detail.steps.map((step) => [step.name, step.status, step.attemptCount])).toEqual([
      ["a", "succeeded", 1],
      ["b", "succeeded", 1],
    ]);
    expect(detail.attempts).toHaveLength(2);
    for (const name of ["a", "b"]) {
      const [attempt] = attemptsOf(detail, name);
      expect(attempt?.id).toMatch(/^wta:[0-9a-f]{32}$/);
      expect(attempt?.status).toBe("succeeded");
      expect(attempt?.exitCode).toBe(0);
    }

    // Exactly one spawn per step, and the spawned shell is the attempt's recorded process.
    const spawns = await dir.spawns();
    expect(spawns.map((spawn) => spawn.label)).toEqual(["a", "b"]);
    expect(spawns.map((spawn) => spawn.pid)).toEqual([
      attemptsOf(detail, "a")[0]?.pid,
      attemptsOf(detail, "b")[0]?.pid,
    ]);

    // Exactly two admissions (ADR-0227 ledger: one winner per ready epoch).
    const events = await api.events(created.id);
    expect(events.filter((event) => event.type === "workflow.task_attempt_admitted")).toHaveLength(
      2,
    );

    // ADR-0229 §5: attempt and step startedAtMs are the pre-spawn journal fact the receipt repeats.
    for (const attempt of detail.attempts) {
      const journal = await readJournal(dir.stateDir, attempt.id);
      const receipt = await readReceipt(dir.stateDir, attempt.id);
      expect(journal).not.toBeNull();
      expect(receipt).not.toBeNull();
      expect(attempt.startedAtMs).toBe(journal?.startedAtMs);
      expect(attempt.startedAtMs).toBe(receipt?.startedAtMs);
      expect(detail.steps.find((step) => step.id === attempt.stepRunId)?.startedAtMs).toBe(
        journal?.startedAtMs,
      );
    }
    await expectReceiptsHonoured(dir.stateDir, detail);
    served.child.kill("SIGTERM");
    expect(await served.exited).toEqual({ code: 0, signal: null });
  });

  /**
   * Cancel before start, deterministically. Racing a POST /runs against POST /cancel on a live
   * runtime could let a cycle admit the first step in between, so the test instead records the
   * run and the user's cancel intent while NO cadence exists: the manifest is applied, the run
   * created and cancelled through the same store code the runtime uses, with the runtime not
   * started. Then the first cycle that ever sees the run is the first cycle of the runtime.
   *
   * Part 1 drives that first cycle by hand (a Coordinator over the real launcher, exactly as
   * DeviceRuntime wires it) so "the first cycle" is exact: recovery scans nothing, and one
   * tick converges the run to cancelled with no attempt admitted or dispatched.
   * Part 2 does the same through `qlr serve`: the run ends cancelled, nothing was admitted,
   * journaled or spawned, and recovery reports nothing.
   */
  async function prepareCancelledRun(dir: Scratch, packageName: string): Promise<string> {
    const { file } = await dir.manifest(
      packageName,
      { ta: dir.task({ label: "a" }), tb: dir.task({ label: "b" }) },
      { pipeline: chain({ a: "ta", b: "tb" }) },
    );
    const store = await openStateDirStore(dir.stateDir);
    try {
      await applyFile(store, file);
      const runId = uuidv7();
      await store.transaction(async (tx) =>
        startRun(tx, workflowStart(packageName, "pipeline", runId), await tx.observe(Date.now())),
      );
      await store.transaction(async (tx) => cancelRun(tx, runId, await tx.observe(Date.now())));
      return runId;
    } finally {
      await store.close();
    }
  }

  it("cancel before start (ADR-0229 verification 4): the first cycle converges the run to cancelled, no attempt is admitted", async () => {
    const dir = await device.scratch("cancel-first-cycle");
    const runId = await prepareCancelledRun(dir, "early");

    const store = await openStateDirStore(dir.stateDir);
    try {
      const hmacKey = await loadOrCreateReceiptKey(dir.stateDir);
      const launcher = new PosixLauncher({
        stateDir: dir.stateDir,
        hmacKey,
        nowMs: () => Date.now(),
        supervisorPath: device.bundle.supervisor,
      });
      const executor = new LocalProcessExecutor(launcher, {
        logMaxBytes: 1 << 20,
        onStopError: () => undefined,
      });
      const coordinator = new Coordinator({
        store,
        clock: systemClock,
        ids: uuidv7Ids,
        profile: PROFILES.standalone,
        executors: { local_process: executor },
      });
      expect(await coordinator.recover()).toEqual([]);
      const report = await coordinator.tick();
      const stage = (name: string) => report.stages.find((item) => item.name === name);
      expect(stage("cancellation")?.processed).toBe(1);
      expect(stage("admission")?.processed).toBe(0);
      expect(stage("dispatch")?.processed).toBe(0);
      expect(report.stages.flatMap((item) => item.errors)).toEqual([]);
      const after = await readRunRecords(store, runId);
      expect(after.run?.status).toBe("cancelled");
      expect(after.steps.map((step) => step.status)).toEqual(["cancelled", "cancelled"]);
      expect(after.attempts).toEqual([]);
      expect(after.events.some((event) => event.type === "workflow.task_attempt_admitted")).toBe(
        false,
      );
    } finally {
      await store.close();
    }
    await expectNothingSpawnedOrJournaled(dir);
  });

  it("cancel before start through qlr serve: cancelled atomically, nothing admitted, journaled or spawned, recovery scanned nothing", async () => {
    const dir = await device.scratch("cancel-serve");
    const runId = await prepareCancelledRun(dir, "early");
    const served = await device.serve(dir);
    const api = served.api;
    const detail = await api.waitTerminal(runId);
    expect(detail.run.status).toBe("cancelled");
    expect(detail.steps.map((step) => step.status)).toEqual(["cancelled", "cancelled"]);
    expect(detail.attempts).toEqual([]);
    expect(await api.recovery()).toEqual([]);
    const events = await api.events(runId);
    expect(events.some((event) => event.type === "workflow.task_attempt_admitted")).toBe(false);
    // The convergence is one transaction: both steps and the run move together, right after the intent.
    const intent = events.findIndex((event) => event.type === "run.cancel_requested");
    const converged = events.slice(intent + 1);
    expect(converged.map((event) => [event.type, event.data.to])).toEqual([
      ["step.status_changed", "cancelled"],
      ["step.status_changed", "cancelled"],
      ["run.status_changed", "cancelled"],
    ]);
    expect(new Set(converged.map((event) => event.atMs)).size).toBe(1);
    // A few more cycles change nothing.
    await api.tick();
    await api.tick();
    expect((await api.events(runId)).length).toBe(events.length);
    await expectNothingSpawnedOrJournaled(dir);
  });

  it("cancel in flight: the real process is stopped first, then attempt, every step and the run converge to cancelled", async () => {
    const { dir, api } = await device.deploy("flight", {
      tasks: (dir) => ({
        slow: dir.task({ label: "a", then: "sleep 30" }),
        tb: dir.task({ label: "b" }),
      }),
      workflows: { pipeline: chain({ a: "slow", b: "tb" }) },
    });
    const created = await api.startWorkflow("flight", "pipeline");
    const { attempt } = await api.waitStepRunning(created.id, "a");
    expect(await isRunning(attempt.pid)).toBe(true);

    const cancelled = await api.cancel(created.id);
    expect(cancelled.run.cancelRequestedAtMs).not.toBeNull();
    await waitUntilGone(attempt.pid);
    const detail = await api.waitTerminal(created.id);

    expectCancelledWhileFirstRan(detail, { id: attempt.id, pid: attempt.pid });
    // The process was stopped by signal (SIGTERM to its group), and the receipt says so.
    const receipt = await readReceipt(dir.stateDir, attempt.id);
    expect(receipt?.stopReason).toBe("cancel");
    expect(receipt?.signal).toBe("SIGTERM");
    await expectReceiptsHonoured(dir.stateDir, detail);
    // The stop came before the convergence: the attempt ended before the run did.
    expect(detail.attempts[0]?.finishedAtMs ?? Infinity).toBeLessThanOrEqual(
      detail.run.finishedAtMs ?? -Infinity,
    );
    expect(await dir.spawns()).toEqual([{ label: "a", pid: attempt.pid }]);
  });

  it("step deadline: only the overrunning step's process is killed (timed_out), downstream skipped, a parallel step still succeeds, run failed", async () => {
    const { dir, api } = await device.deploy("deadline", {
      tasks: (dir) => ({
        slow: dir.task({ label: "slow", then: "sleep 30", timeout: "1s" }),
        after: dir.task({ label: "after" }),
        side: dir.task({ label: "side", then: Scratch.waitForGate(dir.gate("parallel")) }),
      }),
      workflows: {
        pipeline: {
          steps: {
            slow: { task: "slow" },
            after: { task: "after", needs: ["slow"] },
            side: { task: "side" },
          },
        },
      },
    });
    const parallelGate = dir.gate("parallel");
    const created = await api.startWorkflow("deadline", "pipeline");
    const slow = await api.waitStepRunning(created.id, "slow");
    const side = await api.waitStepRunning(created.id, "side");

    // The deadline passes; execution control stops exactly the slow step's process group.
    await waitUntilGone(slow.attempt.pid);
    const timedOut = await waitFor("slow to be timed_out", async () => {
      const detail = await api.run(created.id);
      return stepNamed(detail, "slow").status === "timed_out" ? detail : null;
    });
    expect(attemptsOf(timedOut, "slow")[0]).toMatchObject({
      status: "timed_out",
      stopReason: "timeout",
    });
    // The parallel step was not touched: still running, same process.
    expect(await isRunning(side.attempt.pid)).toBe(true);
    expect(stepNamed(timedOut, "side").status).toBe("running");
    expect(timedOut.run.status).toBe("running");

    await dir.open(parallelGate);
    const detail = await api.waitTerminal(created.id);
    expect(detail.run.status).toBe("failed");
    expect(detail.steps.map((step) => [step.name, step.status])).toEqual(
      expect.arrayContaining([
        ["slow", "timed_out"],
        ["after", "skipped"],
        ["side", "succeeded"],
      ]),
    );
    expect(attemptsOf(detail, "side")[0]).toMatchObject({
      status: "succeeded",
      exitCode: 0,
      pid: side.attempt.pid,
    });
    expect(attemptsOf(detail, "after")).toEqual([]);
    const receipt = await readReceipt(dir.stateDir, slow.attempt.id);
    expect(receipt?.stopReason).toBe("timeout");
    await expectReceiptsHonoured(dir.stateDir, detail);
    expect((await dir.spawns()).map((spawn) => spawn.label).sort()).toEqual(["side", "slow"]);
  });
});
