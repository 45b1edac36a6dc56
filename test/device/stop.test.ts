/**
 * Graceful stop (ADR-0229 §6): freeze admission (scheduler stopAndDrain), then execution
 * control stopAndDrain (durable shutdown intent, exact stops, step-scoped terminal outcome),
 * then close the store. Concurrent stops share one promise.
 */
import { describe, expect, it, vi } from "vitest";
import { DeviceRuntime } from "../../runtimes/node/device.ts";
import { within } from "../support/wait.ts";
import { isRunning } from "../support/proc.ts";
import { expectReceiptsHonoured } from "../support/state-files.ts";
import { Api, attemptsOf, stepNamed } from "../support/api-client.ts";
import { useDeviceHarness } from "../support/device-harness.ts";
import { readRunOffline } from "../support/offline-store.ts";
import { chain, parallel } from "../support/workflow-shapes.ts";

const runtimes: DeviceRuntime[] = [];

const device = useDeviceHarness({
  beforeCleanup: async () => {
    for (const runtime of runtimes.splice(0)) await runtime.stop().catch(() => undefined);
  },
});

describe("graceful stop", () => {
  it(
    "SIGTERM with two steps running: exit 0, both processes gone, attempts stopped for shutdown, steps settled before the store closed; the idempotent step re-runs after restart",
    { timeout: 90_000 },
    async () => {
      // q's task is idempotent with one retry: its second run finds its first marker line and exits 0.
      const { dir, served: first } = await device.deploy("sigterm", {
        packageName: "stop",
        tasks: (dir) => ({
          tp: dir.task({ label: "p", then: "sleep 30" }),
          tq: dir.task({
            label: "q",
            then: `if [ "$(grep -c '^q ' "$MARKER")" -ge 2 ]; then exit 0; fi\nsleep 30`,
            retry: { max: 1, idempotent: true },
          }),
        }),
        workflows: { pipeline: parallel({ p: "tp", q: "tq" }) },
        applyAt: "start-up",
      });
      const runId = (await first.api.startWorkflow("stop", "pipeline")).id;
      const p = await first.api.waitStepRunning(runId, "p");
      const q = await first.api.waitStepRunning(runId, "q");
      expect(await isRunning(p.attempt.pid)).toBe(true);
      expect(await isRunning(q.attempt.pid)).toBe(true);

      // Bounded: the tasks end at SIGTERM; the launcher's grace (5 s) and its SIGKILL escalation bound the rest.
      expect(await first.terminate()).toEqual({ code: 0, signal: null });
      expect(first.stdout).toContain("SIGTERM: stopping");
      expect(await isRunning(p.attempt.pid)).toBe(false);
      expect(await isRunning(q.attempt.pid)).toBe(false);

      // The store closed cleanly. The shutdown intents were persisted before the signals, and the
      // step-scoped outcome was recorded before the store closed: p (not idempotent) failed, never
      // silently re-run; q (idempotent) got a new ready epoch. The runtime waits a bounded time for
      // the receipts; one that lands after that bound is recorded by recovery at the next start
      // instead (checked below), so that case is accepted here without asserting any speed.
      const offline = await readRunOffline(dir.stateDir, runId);
      expect(offline.run?.status).toBe("running");
      const byId = new Map(offline.steps.map((step) => [step.id, step]));
      const lateReceipts = new Set<string>();
      for (const [handle, settledStep] of [
        [p, "failed"],
        [q, "ready"],
      ] as const) {
        const stored = offline.attempts.find((attempt) => attempt.id === handle.attempt.id);
        expect(stored?.stopReason).toBe("shutdown");
        if (stored?.status === "running") {
          lateReceipts.add(handle.attempt.id);
          expect(byId.get(handle.step.id)?.status).toBe("running");
        } else {
          expect(stored?.status).toBe("cancelled");
          expect(byId.get(handle.step.id)?.status).toBe(settledStep);
        }
      }
      expect(
        offline.events
          .filter((event) => event.type === "attempt.stop_requested")
          .map((event) => event.data.reason),
      ).toEqual(["shutdown", "shutdown"]);
      // Admission was frozen: no attempt was admitted for q's new epoch before the store closed.
      expect(offline.attempts).toHaveLength(2);

      const second = await device.serve(dir);
      expect(await second.api.recovery()).toEqual(
        [...lateReceipts].map((attemptId) => ({ attemptId, decision: "complete", reason: null })),
      );
      const detail = await second.api.waitTerminal(runId);
      expect(detail.run.status).toBe("failed");
      expect(stepNamed(detail, "p")).toMatchObject({ status: "failed", attemptCount: 1 });
      expect(stepNamed(detail, "q")).toMatchObject({ status: "succeeded", attemptCount: 2 });
      expect(
        attemptsOf(detail, "p").map((attempt) => [attempt.status, attempt.stopReason]),
      ).toEqual([["cancelled", "shutdown"]]);
      expect(
        attemptsOf(detail, "q").map((attempt) => [
          attempt.status,
          attempt.stopReason,
          attempt.exitCode,
        ]),
      ).toEqual([
        ["cancelled", "shutdown", null],
        ["succeeded", null, 0],
      ]);
      await expectReceiptsHonoured(dir.stateDir, detail);
      expect(await dir.spawnCount("p")).toBe(1);
      expect(await dir.spawnCount("q")).toBe(2);
      expect(await second.terminate()).toEqual({ code: 0, signal: null });
    },
  );

  it(
    "DeviceRuntime.stop(): concurrent calls share one promise, one shutdown round, and the store closes once",
    { timeout: 60_000 },
    async () => {
      const dir = await device.scratch("stop-twice");
      const { file } = await dir.manifest(
        "twice",
        { slow: dir.task({ label: "a", then: "sleep 30" }) },
        { pipeline: chain({ a: "slow" }) },
      );
      const token = "device-test-token-0123456789";
      const logs: string[] = [];
      const runtime = await DeviceRuntime.start({
        stateDir: dir.stateDir,
        host: "127.0.0.1",
        port: 0,
        token,
        profile: "standalone",
        store: "sqlite",
        databaseUrl: null,
        applyFiles: [file],
        supervisorPath: device.bundle.supervisor,
        log: (line) => logs.push(line),
      });
      runtimes.push(runtime);
      const api = new Api(runtime.url, token);
      const runId = (await api.startWorkflow("twice", "pipeline")).id;
      const { attempt } = await api.waitStepRunning(runId, "a");

      const { parts } = runtime as unknown as { parts: { store: { close(): Promise<void> } } };
      const close = vi.spyOn(parts.store, "close");
      const firstStop = runtime.stop();
      const secondStop = runtime.stop();
      expect(secondStop).toBe(firstStop);
      await within("DeviceRuntime.stop()", firstStop, 30_000);
      expect(runtime.stop()).toBe(firstStop);
      await runtime.stop();
      expect(close).toHaveBeenCalledTimes(1);
      expect(await isRunning(attempt.pid)).toBe(false);
      await expect(
        fetch(`${runtime.url}/healthz`, { signal: AbortSignal.timeout(5_000) }),
      ).rejects.toThrow();

      const offline = await readRunOffline(dir.stateDir, runId);
      // Settled before the store closed (or, if its receipt landed after the runtime's bounded
      // wait, still running with its durable shutdown intent for recovery to complete).
      expect(offline.attempts).toEqual([
        expect.objectContaining({ id: attempt.id, stopReason: "shutdown" }),
      ]);
      const settled = offline.attempts[0]?.status === "cancelled";
      expect(offline.steps.map((step) => step.status)).toEqual([settled ? "failed" : "running"]);
      expect(
        offline.events.filter((event) => event.type === "attempt.stop_requested"),
      ).toHaveLength(1);
      expect(
        offline.events.filter((event) => event.type === "workflow.task_attempt_admitted"),
      ).toHaveLength(1);
      expect(await dir.spawns()).toHaveLength(1);
      expect(logs.filter((line) => /failed/.test(line))).toEqual([]);
    },
  );
});
