/**
 * The SIGKILL crash matrix (ADR-0229 §2, §3, §5; verification item 7's "SIGKILL → reopen →
 * exact replay"). For every named fault point of the coordinator, `qlr serve` runs with
 * QLR_FAULT_POINT set and kills itself with SIGKILL exactly there while driving a two-step
 * workflow a → b; then the same state dir is served again without the fault point and the
 * run must replay exactly:
 *
 * - the run ends (succeeded, or cancelled for the cancellation points);
 * - no step spawned twice (the marker file has one line per spawn; no task here is idempotent);
 * - no lost completion: every attempt that crossed the journal barrier ends with exactly its
 *   authenticated receipt's exit code, signal and times, and its startedAtMs is the journal's;
 * - steps that kept running through the crash are re-adopted by their exact identity (the
 *   marker's pid is the attempt's pid, and recovery reports `readopt`).
 *
 * A SIGKILL is not a power cut (the page cache survives), as the ADR itself notes.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { FaultPoint } from "../../src/coordinator.ts";
import { buildBundle, type Bundle } from "../support/bundle.ts";
import { waitFor, within } from "../support/wait.ts";
import { isRunning, waitUntilGone } from "../support/proc.ts";
import { Scratch } from "../support/scratch.ts";
import {
  expectReceiptsHonoured,
  readJournal,
  readReceipt,
  receiptPath,
} from "../support/state-files.ts";
import { type Served, startServe, stopAllServed } from "../support/serve-child.ts";
import { type Api, attemptsOf, stepNamed } from "../support/api-client.ts";
import type { RecoveryView, RunDetail } from "../support/api-views.ts";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

let bundle: Bundle;
const scratches: Scratch[] = [];

beforeAll(async () => {
  bundle = await buildBundle();
});

afterEach(async () => {
  stopAllServed();
  for (const item of scratches.splice(0)) await item.cleanup();
});

afterAll(async () => {
  await bundle.cleanup();
});

interface World {
  readonly dir: Scratch;
  readonly gateA: string;
  readonly runId: string;
  readonly served: Served;
  readonly api: Api;
  readonly recovery: RecoveryView[];
}

interface CrashCase {
  readonly point: FaultPoint;
  /** The ADR-0229 rule the case proves. */
  readonly rule: string;
  /** Step a waits on a gate (so it is still running at the restart) instead of exiting at once. */
  readonly gated: boolean;
  /** Cancel the run once step a runs (the cancellation points are only reached by a cancel). */
  readonly cancel: boolean;
  /** Checks right after the restart, before step a's gate opens. */
  readonly atRestart: (world: World) => Promise<void>;
  readonly final: "succeeded" | "cancelled";
  /** Checks of this case alone once the run ended and replayed exactly. */
  readonly atEnd?: (world: World, detail: RunDetail) => Promise<void>;
}

function recoveryOf(world: World, attemptId: string | undefined): RecoveryView[] {
  return world.recovery.filter((entry) => entry.attemptId === attemptId);
}

const CASES: readonly CrashCase[] = [
  {
    point: "admission.after_commit",
    rule: "§3: an orphaned claimed attempt never crossed the start barrier → lost, and its step gets a new ready epoch (admitted once more, spawned once)",
    gated: false,
    cancel: false,
    final: "succeeded",
    atRestart: async (world) => {
      const detail = await world.api.run(world.runId);
      const [first] = attemptsOf(detail, "a");
      expect(recoveryOf(world, first?.id)).toEqual([
        {
          attemptId: first?.id,
          decision: "lost_new_epoch",
          reason: "orphaned claim never crossed the start barrier",
        },
      ]);
      expect(first?.status).toBe("lost");
      expect(await readJournal(world.dir.stateDir, first?.id ?? "")).toBeNull();
    },
  },
  {
    point: "dispatch.after_starting",
    rule: "§3/§5: a starting attempt without a journal record was never spawned (the journal is written before spawn) → lost, new ready epoch",
    gated: false,
    cancel: false,
    final: "succeeded",
    atRestart: async (world) => {
      const detail = await world.api.run(world.runId);
      const [first] = attemptsOf(detail, "a");
      expect(recoveryOf(world, first?.id)).toEqual([
        {
          attemptId: first?.id,
          decision: "lost_new_epoch",
          reason: "no journal record: the process was never spawned",
        },
      ]);
      expect(first?.status).toBe("lost");
      expect(await world.dir.spawnCount("a")).toBe(0);
    },
  },
  {
    point: "launch.after_journal",
    rule: "§3/§5 with the second barrier: journaled, but no spawn record and no supervisor that could still write one → provably never spawned → lost before the start barrier, new ready epoch (spawned once, in the new epoch)",
    gated: false,
    cancel: false,
    final: "succeeded",
    atRestart: async (world) => {
      const detail = await world.api.run(world.runId);
      const [first] = attemptsOf(detail, "a");
      expect(recoveryOf(world, first?.id)).toEqual([
        {
          attemptId: first?.id,
          decision: "lost_new_epoch",
          reason:
            "journaled but never spawned: no spawn record and no supervisor that could still write one",
        },
      ]);
      expect(first?.status).toBe("lost");
      expect(await readJournal(world.dir.stateDir, first?.id ?? "")).not.toBeNull();
      expect(await world.dir.spawnCount("a")).toBe(0);
    },
  },
  {
    point: "dispatch.after_spawn",
    rule: "§3: a starting attempt with a journal but no persisted handle cannot be inspected → fails closed (reported) while it runs; its receipt later completes it ready → running → terminal",
    gated: true,
    cancel: false,
    final: "succeeded",
    atRestart: async (world) => {
      const detail = await world.api.run(world.runId);
      const [attempt] = attemptsOf(detail, "a");
      const reason = "no persisted process handle to inspect";
      expect(recoveryOf(world, attempt?.id)).toEqual([
        { attemptId: attempt?.id, decision: "fail_closed", reason },
      ]);
      expect(attempt).toMatchObject({
        status: "starting",
        pid: null,
        startedAtMs: null,
        error: reason,
      });
      expect(stepNamed(detail, "a").status).toBe("ready");
      expect(await readJournal(world.dir.stateDir, attempt?.id ?? "")).not.toBeNull();
      // The process it spawned is alive and unsupervised by any runtime handle.
      const [spawn] = await world.dir.spawns();
      expect(spawn?.label).toBe("a");
      expect(await isRunning(spawn?.pid ?? -1)).toBe(true);
      // Cycles without a receipt change nothing: still starting, still failed closed, no second spawn.
      await world.api.tick();
      await world.api.tick();
      const again = await world.api.run(world.runId);
      expect(attemptsOf(again, "a")).toEqual([attempt]);
      expect(await world.dir.spawnCount("a")).toBe(1);
    },
    atEnd: async (world, detail) => {
      // The completion path wrote ready → running → terminal in one transaction, with the
      // journal's pre-spawn startedAtMs (§5), not a clock reading at recovery.
      const [attempt] = attemptsOf(detail, "a");
      const events = (await world.api.events(world.runId)).filter(
        (event) =>
          event.stepRunId === stepNamed(detail, "a").id &&
          (event.type === "step.status_changed" || event.type === "attempt.status_changed"),
      );
      const transitions = events.map(
        (event) =>
          `${event.type === "step.status_changed" ? "step" : "attempt"}:${String(event.data.from)}→${String(event.data.to)}`,
      );
      expect(transitions).toEqual([
        "step:pending→ready",
        "attempt:claimed→starting",
        "attempt:starting→running",
        "step:ready→running",
        "attempt:running→succeeded",
        "step:running→succeeded",
      ]);
      const completion = events.slice(-4);
      expect(new Set(completion.map((event) => event.atMs)).size).toBe(1);
      expect(completion.map((event) => event.seq)).toEqual(
        [0, 1, 2, 3].map((offset) => (completion[0]?.seq ?? 0) + offset),
      );
      expect(attempt?.startedAtMs).toBe(
        (await readJournal(world.dir.stateDir, attempt?.id ?? ""))?.startedAtMs,
      );
      expect(attempt?.error).toBeNull();
      // The process identity was never persisted, and the receipt does not carry one: it stays
      // unknown (null) instead of being invented.
      expect(attempt).toMatchObject({ pid: null, exitCode: 0, status: "succeeded" });
    },
  },
  {
    point: "dispatch.after_running",
    rule: "§3: a running attempt whose exact process identity passes two consistent live inspections is re-adopted, never re-run",
    gated: true,
    cancel: false,
    final: "succeeded",
    atRestart: async (world) => {
      const detail = await world.api.run(world.runId);
      const [attempt] = attemptsOf(detail, "a");
      const [spawn] = await world.dir.spawns();
      expect(recoveryOf(world, attempt?.id)).toEqual([
        { attemptId: attempt?.id, decision: "readopt", reason: null },
      ]);
      expect(attempt).toMatchObject({ status: "running", pid: spawn?.pid });
      expect(await isRunning(spawn?.pid ?? -1)).toBe(true);
    },
  },
  {
    point: "completion.before_commit",
    rule: "§3: starting/running attempts read the authenticated receipt first → the completion lost with the crash is recorded from the receipt",
    gated: false,
    cancel: false,
    final: "succeeded",
    atRestart: async (world) => {
      const detail = await world.api.run(world.runId);
      const [attempt] = attemptsOf(detail, "a");
      const receipt = await readReceipt(world.dir.stateDir, attempt?.id ?? "");
      expect(recoveryOf(world, attempt?.id)).toEqual([
        { attemptId: attempt?.id, decision: "complete", reason: null },
      ]);
      expect(attempt).toMatchObject({
        status: "succeeded",
        exitCode: receipt?.exitCode,
        finishedAtMs: receipt?.finishedAtMs,
      });
    },
  },
  {
    point: "completion.after_commit",
    rule: "§2: the completion (attempt, step, run counters, events) committed in one transaction → nothing to recover, the completion is never applied twice",
    gated: false,
    cancel: false,
    final: "succeeded",
    atRestart: async (world) => {
      const detail = await world.api.run(world.runId);
      const [attempt] = attemptsOf(detail, "a");
      expect(recoveryOf(world, attempt?.id)).toEqual([]);
      expect(attempt?.status).toBe("succeeded");
    },
  },
  {
    point: "cancellation.after_stop_intent",
    rule: "§1/§2: the parent's cancel intent and the attempt's stop intent are durable before any signal → after the crash the re-adopted process is stopped exactly once and Attempt/StepRun/Run converge to cancelled",
    gated: true,
    cancel: true,
    final: "cancelled",
    atRestart: async (world) => {
      const detail = await world.api.run(world.runId);
      const [attempt] = attemptsOf(detail, "a");
      expect(recoveryOf(world, attempt?.id)).toEqual([
        { attemptId: attempt?.id, decision: "readopt", reason: null },
      ]);
      expect(detail.run.cancelRequestedAtMs).not.toBeNull();
    },
  },
  {
    point: "cancellation.after_stop",
    rule: "§2/§6-style exact stop: the runtime dies right after asking for the stop; the durable cancel stop intent makes the next runtime re-adopt and stop the exact process, then converge to cancelled",
    gated: true,
    cancel: true,
    final: "cancelled",
    atRestart: async (world) => {
      const detail = await world.api.run(world.runId);
      const [attempt] = attemptsOf(detail, "a");
      // The stop may or may not have reached the process before the SIGKILL: either its
      // receipt completes it, or it is re-adopted and stopped again. Both are exact.
      const decisions = recoveryOf(world, attempt?.id).map((entry) => entry.decision);
      expect([["readopt"], ["complete"]]).toContainEqual(decisions);
      expect(detail.run.cancelRequestedAtMs).not.toBeNull();
    },
  },
];

async function prepare(
  name: string,
  gated: boolean,
): Promise<{ dir: Scratch; gateA: string; file: string }> {
  const dir = await Scratch.create(name);
  scratches.push(dir);
  const gateA = dir.gate("a");
  const { file } = await dir.manifest(
    "crash",
    {
      ta: dir.task({ label: "a", then: gated ? Scratch.waitForGate(gateA) : "sleep 0.3" }),
      tb: dir.task({ label: "b", then: "sleep 0.2" }),
    },
    { pipeline: { steps: { a: { task: "ta" }, b: { task: "tb", needs: ["a"] } } } },
  );
  return { dir, gateA, file };
}

/**
 * POST /runs, tolerating a response torn by the SIGKILL (the fault point may fire in the
 * cycle right after the commit); the run is then found after the restart.
 */
async function startTolerant(api: Api): Promise<string | null> {
  try {
    return (await api.startWorkflow("crash", "pipeline")).id;
  } catch {
    return null;
  }
}

async function findRunId(api: Api, known: string | null): Promise<string> {
  if (known !== null) return known;
  const answer = await api.call<{ runs: { id: string }[] }>("GET", "/runs?limit=5");
  expect(answer.body.runs).toHaveLength(1);
  return answer.body.runs[0]?.id ?? "";
}

/** Final exact-replay checks shared by every case. */
async function expectExactReplay(
  dir: Scratch,
  api: Api,
  detail: RunDetail,
  final: "succeeded" | "cancelled",
): Promise<void> {
  expect(detail.run.status).toBe(final);
  const spawns = await dir.spawns();
  // No step spawned twice.
  expect(spawns.filter((spawn) => spawn.label === "a")).toHaveLength(1);
  expect(spawns.filter((spawn) => spawn.label === "b")).toHaveLength(final === "succeeded" ? 1 : 0);
  // Each spawn is the recorded process of a non-lost attempt of its step (identity preserved across the crash).
  for (const spawn of spawns) {
    const owners = attemptsOf(detail, spawn.label).filter((attempt) => attempt.status !== "lost");
    expect(owners).toHaveLength(1);
    if (owners[0]?.pid !== null) expect(owners[0]?.pid).toBe(spawn.pid);
  }
  // No lost completion, receipts honoured.
  await expectReceiptsHonoured(dir.stateDir, detail);
  // One admission per attempt: the ledger has exactly one winner per ready epoch.
  const events = await api.events(detail.run.id);
  expect(events.filter((event) => event.type === "workflow.task_attempt_admitted")).toHaveLength(
    detail.attempts.length,
  );
  // Every attempt completed once (one terminal transition each).
  for (const attempt of detail.attempts) {
    const terminal = events.filter(
      (event) =>
        event.attemptId === attempt.id &&
        event.type === "attempt.status_changed" &&
        ["succeeded", "failed", "timed_out", "cancelled", "lost"].includes(String(event.data.to)),
    );
    expect(terminal).toHaveLength(1);
  }
  // Stop intents are recorded once.
  expect(events.filter((event) => event.type === "attempt.stop_requested")).toHaveLength(
    final === "cancelled" ? 1 : 0,
  );
}

/** Every case runs on both device profiles: edge (one dispatch per cycle, low-memory store) and standalone. */
const PROFILES_UNDER_TEST = ["edge", "standalone"] as const;

for (const profile of PROFILES_UNDER_TEST)
  describe(`SIGKILL crash matrix on ${profile}: every named fault point, then exact replay`, () => {
    for (const crash of CASES) {
      it(`${crash.point} — ${crash.rule}`, { timeout: 90_000 }, async () => {
        const { dir, gateA, file } = await prepare(crash.point.replace(/[._]/g, "-"), crash.gated);
        const first = await startServe(bundle, dir.stateDir, {
          profile,
          fault: crash.point,
          apply: [file],
        });
        let runId = await startTolerant(first.api);
        if (crash.cancel) {
          expect(runId).not.toBeNull();
          const running = await first.api.waitStepRunning(runId ?? "", "a");
          expect(await isRunning(running.attempt.pid)).toBe(true);
          // The cancel commits before any cycle sees it; its response may be torn by the crash.
          await first.api.cancel(runId ?? "").catch(() => null);
        }
        const exit = await within(`the runtime to die at ${crash.point}`, first.exited, 45_000);
        expect(exit).toEqual({ code: null, signal: "SIGKILL" });

        const second = await startServe(bundle, dir.stateDir, { profile });
        runId = await findRunId(second.api, runId);
        const world: World = {
          dir,
          gateA,
          runId,
          served: second,
          api: second.api,
          recovery: await second.api.recovery(),
        };
        await crash.atRestart(world);
        if (crash.gated && !crash.cancel) await dir.open(gateA);
        const detail = await second.api.waitTerminal(runId, 45_000);
        await expectExactReplay(dir, second.api, detail, crash.final);

        if (crash.cancel) {
          const [attempt] = attemptsOf(detail, "a");
          expect(attempt).toMatchObject({ status: "cancelled", stopReason: "cancel" });
          expect(detail.steps.map((step) => step.status)).toEqual(["cancelled", "cancelled"]);
          await waitUntilGone(attempt?.pid ?? -1);
          // The launcher's durable stop intent names the same reason as the store's.
          expect(existsSync(join(dir.stateDir, "stops", `${attempt?.id ?? ""}.json`))).toBe(true);
        } else {
          expect(detail.steps.map((step) => step.status)).toEqual(["succeeded", "succeeded"]);
        }
        await crash.atEnd?.(world, detail);
        second.child.kill("SIGTERM");
        expect(await within("the runtime to stop", second.exited, 30_000)).toEqual({
          code: 0,
          signal: null,
        });
      });
    }

    /** The resident supervisor's pid, from the attempt's spawn record. */
    function supervisorOf(stateDir: string, attemptId: string): number {
      const record = JSON.parse(
        readFileSync(join(stateDir, "spawns", `${attemptId}.json`), "utf8"),
      ) as { supervisorPid: number };
      return record.supervisorPid;
    }

    /** Step a waits on a gate; b needs a. */
    async function gatedPair(name: string): Promise<{ dir: Scratch; gateA: string; file: string }> {
      return prepare(name, true);
    }

    /** Final checks of the supervisor cases: a ran once and, with no receipt possible, is lost by trusted evidence; b never ran. */
    async function expectLostWithoutReceipt(
      dir: Scratch,
      api: Api,
      runId: string,
      attemptId: string,
    ): Promise<void> {
      const detail = await api.waitTerminal(runId, 45_000);
      expect(detail.run.status).toBe("failed");
      expect(detail.steps.map((step) => [step.name, step.status])).toEqual([
        ["a", "failed"],
        ["b", "skipped"],
      ]);
      expect(attemptsOf(detail, "a")).toEqual([
        expect.objectContaining({
          id: attemptId,
          status: "lost",
          error: "trusted evidence: the exact process is not running and left no receipt",
        }),
      ]);
      expect(await readReceipt(dir.stateDir, attemptId)).toBeNull();
      expect((await dir.spawns()).map((spawn) => spawn.label)).toEqual(["a"]);
    }

    it(
      "supervisor killed while a task runs (runtime alive): the task runs on; once it ends, the live runtime settles it by the recovery rules, never re-run",
      { timeout: 90_000 },
      async () => {
        const { dir, gateA, file } = await gatedPair("supervisor-killed");
        const served = await startServe(bundle, dir.stateDir, { profile, apply: [file] });
        const runId = (await served.api.startWorkflow("crash", "pipeline")).id;
        const { attempt } = await served.api.waitStepRunning(runId, "a");
        process.kill(supervisorOf(dir.stateDir, attempt.id), "SIGKILL");
        // Re-adopted by identity while it runs: still running, nothing settled.
        await served.api.tick();
        expect(attemptsOf(await served.api.run(runId), "a")[0]).toMatchObject({
          status: "running",
          pid: attempt.pid,
        });
        expect(await isRunning(attempt.pid)).toBe(true);
        await dir.open(gateA);
        await expectLostWithoutReceipt(dir, served.api, runId, attempt.id);
        expect(served.child.exitCode).toBeNull();
      },
    );

    it(
      "runtime and supervisor killed together while a task runs: the restart re-adopts the task by identity, and its unreported end is settled by the recovery rules",
      { timeout: 90_000 },
      async () => {
        const { dir, gateA, file } = await gatedPair("both-killed");
        const first = await startServe(bundle, dir.stateDir, { profile, apply: [file] });
        const runId = (await first.api.startWorkflow("crash", "pipeline")).id;
        const { attempt } = await first.api.waitStepRunning(runId, "a");
        const supervisorPid = supervisorOf(dir.stateDir, attempt.id);
        process.kill(supervisorPid, "SIGKILL");
        expect(await first.kill9()).toEqual({ code: null, signal: "SIGKILL" });
        await waitUntilGone(supervisorPid);

        const second = await startServe(bundle, dir.stateDir, { profile });
        expect(
          (await second.api.recovery()).filter((entry) => entry.attemptId === attempt.id),
        ).toEqual([{ attemptId: attempt.id, decision: "readopt", reason: null }]);
        expect(await isRunning(attempt.pid)).toBe(true);
        await dir.open(gateA);
        await expectLostWithoutReceipt(dir, second.api, runId, attempt.id);
      },
    );

    it(
      "a task that finishes while the runtime is down: §3 receipt first → its completion is recorded from the receipt, not re-run",
      { timeout: 90_000 },
      async () => {
        const dir = await Scratch.create("finish-while-down");
        scratches.push(dir);
        const { file } = await dir.manifest(
          "crash",
          { ta: dir.task({ label: "a", then: "sleep 1" }), tb: dir.task({ label: "b" }) },
          { pipeline: { steps: { a: { task: "ta" }, b: { task: "tb", needs: ["a"] } } } },
        );
        const first = await startServe(bundle, dir.stateDir, { profile, apply: [file] });
        const runId = (await first.api.startWorkflow("crash", "pipeline")).id;
        const { attempt } = await first.api.waitStepRunning(runId, "a");
        expect(await first.kill9()).toEqual({ code: null, signal: "SIGKILL" });
        // The supervisor outlives the runtime and writes the receipt when the task ends (~1 s).
        await waitFor("the receipt written while the runtime is down", () =>
          existsSync(receiptPath(dir.stateDir, attempt.id)),
        );
        await waitUntilGone(attempt.pid);

        const second = await startServe(bundle, dir.stateDir, { profile });
        expect(
          (await second.api.recovery()).filter((entry) => entry.attemptId === attempt.id),
        ).toEqual([{ attemptId: attempt.id, decision: "complete", reason: null }]);
        const detail = await second.api.waitTerminal(runId);
        await expectExactReplay(dir, second.api, detail, "succeeded");
        const receipt = await readReceipt(dir.stateDir, attempt.id);
        expect(attemptsOf(detail, "a")).toEqual([
          expect.objectContaining({
            id: attempt.id,
            status: "succeeded",
            pid: attempt.pid,
            exitCode: receipt?.exitCode,
            finishedAtMs: receipt?.finishedAtMs,
          }),
        ]);
      },
    );
  });
