import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RunChange } from "../../src/aggregate.ts";
import { Coordinator, type TickReport } from "../../src/coordinator.ts";
import { isQlrError } from "../../src/errors.ts";
import { LeaseService, type Lease } from "../../src/lease-service.ts";
import { leaseSecretDigest, WORKER_CLOCK_SKEW_MAX_MS, type LeaseFence } from "../../src/leases.ts";
import type { Manifest, TaskSpec } from "../../src/manifest/types.ts";
import type { ProcessHandleFacts, Run, RunAttempt, RunEvent, StepRun } from "../../src/model.ts";
import { cancelRun } from "../../src/operations.ts";
import { PROFILES } from "../../src/profiles.ts";
import type { SqlDriver } from "../../storage/driver.ts";
import { lossyDriver, type LossyDriver } from "../../storage/lossy-driver.ts";
import { openSqlStore, type SqlStore } from "../../storage/sql-store.ts";
import type { DriverFactory } from "../support/drivers.ts";
import { migrationsFor } from "../support/dialect-migrations.ts";
import {
  applyAndStart,
  exitFacts,
  SequentialIds,
  SequentialSecrets,
  task,
  TestClock,
} from "../support/fixtures.ts";
import { dumpTables, runRows } from "../support/store-dump.ts";

/**
 * The lease protocol contract (ADR-0227 §4–§6, DESIGN.md §3 "Lease"), run on every store.
 * A Coordinator with no executors (profile standalone) admits remote attempts and runs the
 * execution_control stage (lease expiry); a LeaseService plays the workers. One driver per
 * store for the whole file; every test uses its own package and pool, and the clock only
 * moves forward.
 */

export const TTL_MS = 10_000;
const STEP_TIMEOUT_MS = 60_000;

function remoteTask(name: string, pool: string, overrides: Partial<TaskSpec> = {}): TaskSpec {
  return task(name, ["sh", "-c", "echo remote"], {
    executor: "remote_worker",
    pool,
    timeoutMs: STEP_TIMEOUT_MS,
    ...overrides,
  });
}

/** A workflow `flow` over one remote task `work`; `steps` maps each step name to its needs. */
function remoteManifest(
  packageName: string,
  pool: string,
  steps: Record<string, string[]>,
  overrides: Partial<TaskSpec> = {},
): Manifest {
  return {
    package: packageName,
    description: null,
    tasks: [remoteTask("work", pool, overrides)],
    workflows: [
      {
        name: "flow",
        description: null,
        steps: Object.entries(steps).map(([name, needs]) => ({ name, task: "work", needs })),
      },
    ],
    schedules: [],
  };
}

function handleAt(startedAtMs: number, pid = 4242): ProcessHandleFacts {
  return { pid, processStartTicks: "123456", bootId: "boot-0001", startedAtMs };
}

function fenceOf(lease: Lease, workerId: string): LeaseFence {
  return { workerId, leaseVersion: lease.leaseVersion, leaseSecret: lease.leaseSecret };
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  return (await errorOf(promise)).code;
}

async function errorOf(promise: Promise<unknown>): Promise<{
  code: string;
  message: string;
  details: readonly { path: string; message: string }[];
}> {
  try {
    await promise;
  } catch (error) {
    if (isQlrError(error))
      return { code: error.code, message: error.message, details: error.details };
    throw error;
  }
  return { code: "ok", message: "", details: [] };
}

export function describeLeaseContract(factory: DriverFactory): void {
  describe(`lease contract on ${factory.name}`, () => {
    let driver: SqlDriver;
    let lossy: LossyDriver;
    let store: SqlStore;
    let coordinator: Coordinator;
    let leases: LeaseService;
    const clock = new TestClock();
    const ids = new SequentialIds(`lease${factory.name.replace(/[^a-z0-9]/g, "")}`);

    beforeAll(async () => {
      driver = await factory.open();
      lossy = lossyDriver(driver);
      const migrations = migrationsFor(driver.dialect);
      store = await openSqlStore(lossy.driver, migrations, clock.nowMs());
      coordinator = new Coordinator({
        store,
        clock,
        ids,
        profile: PROFILES.standalone,
        executors: {},
      });
      leases = new LeaseService({ store, clock, secrets: new SequentialSecrets(), ttlMs: TTL_MS });
    });
    afterAll(async () => {
      await store?.close();
    });

    /** One cadence cycle; a stage error means the scenario is not what the test thinks. */
    async function tick(): Promise<TickReport> {
      const report = await coordinator.tick();
      for (const stage of report.stages) {
        if (stage.errors.length > 0)
          throw new Error(
            `tick stage ${stage.name} reported errors: ${JSON.stringify(stage.errors)}`,
          );
      }
      return report;
    }

    /** The one task of the ordinary (workflow-less) runs below. */
    const job = { kind: "task", name: "job" } as const;

    /** Starts an ordinary run of `job`, a remote task of its own package in pool `pool-<package>`. */
    function startOrdinaryRun(packageName: string): Promise<string> {
      const manifest: Manifest = {
        package: packageName,
        description: null,
        tasks: [remoteTask("job", `pool-${packageName}`)],
        workflows: [],
        schedules: [],
      };
      return applyAndStart(store, clock, manifest, job, ids.runId());
    }

    function startWorkflow(manifest: Manifest): Promise<string> {
      return applyAndStart(store, clock, manifest, { kind: "workflow", name: "flow" }, ids.runId());
    }

    /** A one-step (`a`) remote workflow, ticked until its attempt is admitted `claimed`. */
    async function admittedSingle(
      packageName: string,
      pool: string,
      overrides: Partial<TaskSpec> = {},
    ): Promise<{ runId: string; attempt: RunAttempt }> {
      const runId = await startWorkflow(remoteManifest(packageName, pool, { a: [] }, overrides));
      await tick();
      const attempts = await attemptsOf(runId);
      expect(attempts.map((attempt) => attempt.status)).toEqual(["claimed"]);
      return { runId, attempt: attempts[0]! };
    }

    /** As `admittedSingle` in pool `pool-<package>`, then claimed and started by worker-1. */
    async function runningSingle(
      packageName: string,
      overrides: Partial<TaskSpec> = {},
    ): Promise<{
      runId: string;
      attempt: RunAttempt;
      lease: Lease;
      fence: LeaseFence;
      startedAtMs: number;
    }> {
      const pool = `pool-${packageName}`;
      const { runId, attempt } = await admittedSingle(packageName, pool, overrides);
      const lease = await claimOne("worker-1", pool);
      const fence = fenceOf(lease, "worker-1");
      await leases.start(attempt.id, fence, "starting", null);
      const startedAtMs = clock.nowMs();
      await leases.start(attempt.id, fence, "running", handleAt(startedAtMs));
      return { runId, attempt, lease, fence, startedAtMs };
    }

    /**
     * Runs `call` with its commit's answer lost, then `advanceMs` later again: the retry is
     * answered from the durable state and writes nothing. Resolves to the retry's answer.
     */
    async function retryAfterLostAnswer<T>(call: () => Promise<T>, advanceMs: number): Promise<T> {
      lossy.arm();
      await expect(call()).rejects.toThrow(/lost commit response/);
      const afterLoss = await dump();
      clock.advance(advanceMs);
      const answer = await call();
      expect(await dump()).toBe(afterLoss);
      return answer;
    }

    function runOf(runId: string): Promise<Run> {
      return store.transaction(async (tx) => (await tx.getRun(runId))!);
    }
    function stepsOf(runId: string): Promise<StepRun[]> {
      return store.transaction(async (tx) => tx.getSteps(runId));
    }
    function attemptsOf(runId: string): Promise<RunAttempt[]> {
      return store.transaction(async (tx) => tx.getAttempts(runId));
    }
    function attemptOf(attemptId: string): Promise<RunAttempt> {
      return store.transaction(async (tx) => (await tx.getAttempt(attemptId))!);
    }
    function eventsOf(runId: string): Promise<RunEvent[]> {
      return store.transaction(async (tx) => tx.listEvents(runId, 0, 500));
    }

    /** Every row of every table, as one comparable text: "nothing written" means it is unchanged. */
    function dump(): Promise<string> {
      return dumpTables(driver);
    }

    /** One run's rows and events: for checks across a tick, which may touch other tests' runs. */
    function snapshot(runId: string): Promise<unknown> {
      return runRows(store, runId);
    }

    async function claimOne(workerId: string, pool: string): Promise<Lease> {
      const granted = await leases.claim(workerId, pool, 1);
      expect(granted).toHaveLength(1);
      return granted[0]!;
    }

    it("claim leases only the asked pool, at most capacity, with the execution revision; a live lease is not offered again", async () => {
      const runA = await startWorkflow(
        remoteManifest("claim-a", "pool-claim-a", { s1: [], s2: [], s3: [] }),
      );
      const runB = await startWorkflow(remoteManifest("claim-b", "pool-claim-b", { s1: [] }));
      await tick();
      const attemptsA = await attemptsOf(runA);
      expect(
        attemptsA.map((attempt) => [attempt.status, attempt.pool, attempt.leaseVersion]),
      ).toEqual(Array.from({ length: 3 }, () => ["claimed", "pool-claim-a", 0]));

      expect(await leases.claim("worker-1", "pool-claim-a", 0)).toEqual([]);
      const first = await leases.claim("worker-1", "pool-claim-a", 2);
      expect(first).toHaveLength(2);
      const definition = await store.transaction(async (tx) => {
        const run = (await tx.getRun(runA))!;
        return (await tx.getTaskDefinitionFor(run.reconciliationDigest, "work"))!;
      });
      for (const lease of first) {
        const attempt = attemptsA.find((candidate) => candidate.id === lease.attemptId);
        expect(attempt).toBeDefined();
        expect(lease).toEqual({
          attemptId: attempt!.id,
          leaseVersion: 1,
          leaseSecret: lease.leaseSecret,
          leaseExpiresAtMs: clock.nowMs() + TTL_MS,
          runId: runA,
          stepRunId: attempt!.stepRunId,
          taskRevision: definition.revision,
          execution: definition.execution,
          context: {
            runId: runA,
            package: expect.any(String) as string,
            generation: 1,
            step: expect.any(String) as string,
            task: "work",
            attemptId: attempt!.id,
            attemptNumber: attempt!.number,
            input: {},
            needs: expect.any(Object) as object,
          },
        });
        expect(lease.leaseSecret).toMatch(/^[A-Za-z0-9_-]{16,128}$/);
        expect(lease.execution).toMatchObject({
          executor: "remote_worker",
          pool: "pool-claim-a",
          argv: ["sh", "-c", "echo remote"],
          timeoutMs: STEP_TIMEOUT_MS,
        });
        const stored = await attemptOf(lease.attemptId);
        expect(stored).toMatchObject({
          status: "claimed",
          leaseWorkerId: "worker-1",
          leaseVersion: 1,
          leaseExpiresAtMs: clock.nowMs() + TTL_MS,
          leaseSecretDigest: leaseSecretDigest(lease.leaseSecret),
        });
      }

      const second = await leases.claim("worker-2", "pool-claim-a", 5);
      expect(second).toHaveLength(1);
      expect(new Set([...first, ...second].map((lease) => lease.attemptId)).size).toBe(3);
      // While the leases live nothing more is offered, to anyone.
      clock.advance(TTL_MS - 1);
      expect(await leases.claim("worker-3", "pool-claim-a", 5)).toEqual([]);
      expect(await leases.claim("worker-1", "pool-claim-a", 5)).toEqual([]);

      const other = await leases.claim("worker-3", "pool-claim-b", 5);
      expect(other.map((lease) => lease.runId)).toEqual([runB]);
      expect(other[0]!.execution).toMatchObject({ pool: "pool-claim-b" });
      expect(await leases.claim("worker-3", "pool-nobody", 5)).toEqual([]);

      const leased = (await eventsOf(runA)).filter((event) => event.type === "attempt.leased");
      expect(leased.map((event) => event.attemptId).sort()).toEqual(
        attemptsA.map((attempt) => attempt.id).sort(),
      );
    });

    it("a claim whose ready epoch moved on is settled as lost instead of leased; the new epoch gets its own claim", async () => {
      const { runId, attempt } = await admittedSingle("stranded", "pool-stranded");
      // The step gets a new ready epoch while its claim is still pristine.
      await store.transaction(async (tx) => {
        const run = (await tx.getRun(runId))!;
        const [step] = await tx.getSteps(runId);
        const change = new RunChange(run, await tx.observe(clock.nowMs()));
        change.setStep(step!, "ready", {}, { reason: "new ready epoch" });
        await tx.apply(change.build());
      });
      const [moved] = await stepsOf(runId);
      expect(await leases.claim("worker-1", "pool-stranded", 1)).toEqual([]);
      expect(await attemptOf(attempt.id)).toMatchObject({ status: "lost", leaseWorkerId: null });
      expect(await stepsOf(runId)).toEqual([moved]);
      await tick();
      const lease = await claimOne("worker-1", "pool-stranded");
      expect(lease.attemptId).not.toBe(attempt.id);
      expect(await attemptOf(lease.attemptId)).toMatchObject({
        stepRunVersion: moved!.version,
        status: "claimed",
      });
    });

    it("a claimed attempt whose lease expired is lost at the next tick and its step gets a new ready epoch, a new admission and a new attempt id", async () => {
      const { runId, attempt } = await admittedSingle("exp-claimed", "pool-exp-claimed");
      const lease = await claimOne("worker-1", "pool-exp-claimed");
      expect(lease.attemptId).toBe(attempt.id);
      const [stepBefore] = await stepsOf(runId);
      expect(stepBefore!.status).toBe("ready");

      // Just before the expiry nothing happens.
      clock.advance(TTL_MS - 1);
      const unexpired = await snapshot(runId);
      await tick();
      expect(await snapshot(runId)).toEqual(unexpired);

      clock.advance(1);
      const before = await dump();
      // The expired claim cannot cross the start barrier any more, and that writes nothing.
      expect(
        await codeOf(leases.start(attempt.id, fenceOf(lease, "worker-1"), "starting", null)),
      ).toBe("conflict");
      expect(await dump()).toBe(before);

      const report = await tick();
      expect(
        report.stages.find((stage) => stage.name === "execution_control")!.processed,
      ).toBeGreaterThanOrEqual(1);
      const lost = await attemptOf(attempt.id);
      expect(lost.status).toBe("lost");
      const [epoch] = await stepsOf(runId);
      expect(epoch).toMatchObject({
        status: "ready",
        version: stepBefore!.version + 1,
        attemptCount: 0,
        readyAtMs: stepBefore!.readyAtMs,
      });
      expect(epoch!.digest).not.toBe(stepBefore!.digest);
      expect((await runOf(runId)).status).toBe("running");
      const events = await eventsOf(runId);
      expect(
        events.some(
          (event) =>
            event.type === "step.status_changed" &&
            event.data.from === "ready" &&
            event.data.to === "ready" &&
            event.data.lostAttemptId === attempt.id,
        ),
      ).toBe(true);
      const mutations = await store.transaction(async (tx) => tx.listMutations(runId));
      expect(mutations.at(-1)).toMatchObject({
        fromStatus: "ready",
        toStatus: "ready",
        version: epoch!.version,
        fromDigest: stepBefore!.digest,
        toDigest: epoch!.digest,
      });

      // The old fence is refused everywhere; nothing written.
      const afterLoss = await dump();
      expect(
        await codeOf(leases.start(attempt.id, fenceOf(lease, "worker-1"), "starting", null)),
      ).toBe("conflict");
      expect(await codeOf(leases.heartbeat(attempt.id, fenceOf(lease, "worker-1")))).toBe(
        "conflict",
      );
      expect(await dump()).toBe(afterLoss);

      // The next cycle admits the new epoch: a new attempt with a new id and number.
      await tick();
      const attempts = await attemptsOf(runId);
      expect(attempts.map((item) => item.status)).toEqual(["lost", "claimed"]);
      const next = attempts[1]!;
      expect(next.id).not.toBe(attempt.id);
      expect(next).toMatchObject({
        number: 2,
        stepRunVersion: epoch!.version,
        leaseVersion: 0,
        leaseWorkerId: null,
      });
      const receipt = await store.transaction(async (tx) =>
        tx.getAdmission(runId, epoch!.id, epoch!.version),
      );
      expect(receipt?.attemptId).toBe(next.id);

      // And it runs to the end like any other.
      const again = await claimOne("worker-2", "pool-exp-claimed");
      expect(again.attemptId).toBe(next.id);
      await leases.start(next.id, fenceOf(again, "worker-2"), "starting", null);
      const startedAtMs = clock.nowMs();
      await leases.start(next.id, fenceOf(again, "worker-2"), "running", handleAt(startedAtMs));
      clock.advance(100);
      expect(
        await leases.complete(
          next.id,
          fenceOf(again, "worker-2"),
          exitFacts(startedAtMs, clock.nowMs()),
        ),
      ).toEqual({ status: "succeeded", replayed: false });
      await tick();
      expect((await runOf(runId)).status).toBe("succeeded");
      expect((await stepsOf(runId))[0]).toMatchObject({ status: "succeeded", attemptCount: 1 });
    });

    for (const phase of ["starting", "running"] as const) {
      it(`a ${phase} attempt whose lease expired fails closed (status kept, reported once) and its worker can still complete it`, async () => {
        const { runId, attempt } = await admittedSingle(`exp-${phase}`, `pool-exp-${phase}`);
        const lease = await claimOne("worker-1", `pool-exp-${phase}`);
        const fence = fenceOf(lease, "worker-1");
        expect(await leases.start(attempt.id, fence, "starting", null)).toEqual({
          status: "starting",
          leaseExpiresAtMs: clock.nowMs() + TTL_MS,
        });
        const startedAtMs = clock.nowMs();
        if (phase === "running") {
          clock.advance(10);
          expect(await leases.start(attempt.id, fence, "running", handleAt(startedAtMs))).toEqual({
            status: "running",
            leaseExpiresAtMs: clock.nowMs() + TTL_MS,
          });
        }
        const stepBefore = (await stepsOf(runId))[0]!;
        clock.advance(TTL_MS + 1);
        await tick();
        const failedClosed = await attemptOf(attempt.id);
        expect(failedClosed.status).toBe(phase);
        expect(failedClosed.error).toMatch(/lease expired/);
        expect(failedClosed.leaseWorkerId).toBe("worker-1");
        expect(failedClosed.leaseVersion).toBe(1);
        expect((await stepsOf(runId))[0]).toEqual(stepBefore);
        const run = await runOf(runId);
        expect(run.status).toBe("running");
        expect(run.cancelRequestedAtMs).toBeNull();
        const reported = (await eventsOf(runId)).filter(
          (event) => event.type === "attempt.recovery_failed_closed",
        );
        expect(reported).toHaveLength(1);
        expect(reported[0]).toMatchObject({ attemptId: attempt.id, data: { status: phase } });

        // Repeating the same decision writes nothing.
        const afterReport = await snapshot(runId);
        clock.advance(1_000);
        await tick();
        expect(await snapshot(runId)).toEqual(afterReport);

        // Nobody else can take it over: it is not claimable.
        expect(await leases.claim("worker-2", `pool-exp-${phase}`, 4)).toEqual([]);

        // The worker comes back with its fence and reports the outcome.
        expect(
          await leases.complete(attempt.id, fence, exitFacts(startedAtMs, clock.nowMs())),
        ).toEqual({ status: "succeeded", replayed: false });
        const done = await attemptOf(attempt.id);
        expect(done).toMatchObject({ status: "succeeded", exitCode: 0, error: null });
        const step = (await stepsOf(runId))[0]!;
        expect(step).toMatchObject({ status: "succeeded", attemptCount: 1 });
        if (phase === "starting") {
          // The crash window: ready → running → succeeded written atomically, never skipping the start barrier.
          const stepEvents = (await eventsOf(runId))
            .filter((event) => event.type === "step.status_changed" && event.stepRunId === step.id)
            .map((event) => `${String(event.data.from)}→${String(event.data.to)}`);
          expect(stepEvents.slice(-2)).toEqual(["ready→running", "running→succeeded"]);
        }
        await tick();
        expect((await runOf(runId)).status).toBe("succeeded");
      });
    }

    it("heartbeat answers continue and extends the lease; after the deadline it answers stop_requested(timeout) without touching the parent, and the completion ends timed_out", async () => {
      const timeoutMs = 20_000;
      const { runId, attempt, fence, startedAtMs } = await runningSingle("deadline", { timeoutMs });
      expect((await attemptOf(attempt.id)).deadlineAtMs).toBe(startedAtMs + timeoutMs);

      // Heartbeats every 6 s keep a 10 s lease alive across ticks well past its first expiry.
      for (let beat = 1; beat <= 3; beat += 1) {
        clock.advance(6_000);
        const control = await leases.heartbeat(attempt.id, fence);
        expect(control).toEqual({ action: "continue", leaseExpiresAtMs: clock.nowMs() + TTL_MS });
        expect((await attemptOf(attempt.id)).leaseExpiresAtMs).toBe(clock.nowMs() + TTL_MS);
        await tick();
        expect((await attemptOf(attempt.id)).error).toBeNull();
      }
      expect(
        (await eventsOf(runId)).filter((event) => event.type === "attempt.recovery_failed_closed"),
      ).toEqual([]);

      // Past the deadline (started + 20 s; now started + 18 s).
      clock.advance(2_001);
      const stop = await leases.heartbeat(attempt.id, fence);
      expect(stop).toEqual({
        action: "stop_requested",
        reason: "timeout",
        leaseExpiresAtMs: clock.nowMs() + TTL_MS,
      });
      const stopped = await attemptOf(attempt.id);
      expect(stopped).toMatchObject({
        status: "running",
        stopReason: "timeout",
        stopRequestedAtMs: clock.nowMs(),
        leaseExpiresAtMs: clock.nowMs() + TTL_MS,
      });
      const run = await runOf(runId);
      expect(run.cancelRequestedAtMs).toBeNull();
      expect(run.status).toBe("running");
      const timeoutEvents = (await eventsOf(runId)).filter(
        (event) => event.type === "workflow.task_timeout_requested",
      );
      expect(timeoutEvents).toHaveLength(1);
      expect(timeoutEvents[0]).toMatchObject({
        attemptId: attempt.id,
        stepRunId: attempt.stepRunId,
        data: { reason: "timeout", deadlineAtMs: startedAtMs + timeoutMs },
      });
      expect((await eventsOf(runId)).some((event) => event.type === "run.cancel_requested")).toBe(
        false,
      );

      // The stop intent is repeated on the next heartbeat, with no second audit event.
      clock.advance(500);
      expect(await leases.heartbeat(attempt.id, fence)).toMatchObject({
        action: "stop_requested",
        reason: "timeout",
      });
      expect(
        (await eventsOf(runId)).filter((event) => event.type === "workflow.task_timeout_requested"),
      ).toHaveLength(1);

      // The worker claims the process finished in time and exited 0: store time says otherwise.
      clock.advance(500);
      const answer = await leases.complete(
        attempt.id,
        fence,
        exitFacts(startedAtMs, startedAtMs + timeoutMs - 1),
      );
      expect(answer).toEqual({ status: "timed_out", replayed: false });
      expect(await attemptOf(attempt.id)).toMatchObject({
        status: "timed_out",
        stopReason: "timeout",
      });
      expect((await stepsOf(runId))[0]!.status).toBe("timed_out");
      expect((await runOf(runId)).cancelRequestedAtMs).toBeNull();
      await tick();
      const finished = await runOf(runId);
      expect(finished).toMatchObject({ status: "failed", cancelRequestedAtMs: null });
    });

    it("cancelling the run while an attempt runs: the next tick sets the stop intent, heartbeat answers stop_requested(cancel), and the completion cancels attempt, step and run", async () => {
      const { runId, lease, fence, startedAtMs } = await runningRemote("cancel");

      await store.transaction(async (tx) => cancelRun(tx, runId, await tx.observe(clock.nowMs())));
      // Until the cancellation stage ran, the worker is not told anything.
      expect(await leases.heartbeat(lease.attemptId, fence)).toMatchObject({ action: "continue" });
      clock.advance(100);
      await tick();
      const intent = await attemptOf(lease.attemptId);
      expect(intent).toMatchObject({ status: "running", stopReason: "cancel" });
      expect(await stopEventsOf(runId, lease.attemptId)).toHaveLength(1);
      const steps = await stepsOf(runId);
      expect(steps.map((step) => [step.name, step.status])).toEqual([
        ["a", "running"],
        ["b", "cancelled"],
      ]);
      expect((await runOf(runId)).status).toBe("running");

      await expectStopAnsweredThenCancelled(lease, fence, startedAtMs, "cancel");
      expect((await stepsOf(runId)).map((step) => step.status)).toEqual(["cancelled", "cancelled"]);
      await tick();
      const run = await runOf(runId);
      expect(run.status).toBe("cancelled");
      // No step was admitted after the cancel intent.
      expect(await attemptsOf(runId)).toHaveLength(1);
    });

    it("a stale fence (wrong worker, old lease version) on start, heartbeat, complete and lost is a conflict and writes nothing", async () => {
      const { attempt } = await admittedSingle("stale", "pool-stale");
      const old = await claimOne("worker-old", "pool-stale");
      clock.advance(TTL_MS);
      // The expired claim is re-granted to another worker at the next lease version.
      const current = await claimOne("worker-new", "pool-stale");
      expect(current).toMatchObject({ attemptId: attempt.id, leaseVersion: 2 });
      expect(current.leaseSecret).not.toBe(old.leaseSecret);
      const stale: LeaseFence[] = [
        fenceOf(old, "worker-old"),
        { workerId: "worker-old", leaseVersion: 2, leaseSecret: current.leaseSecret },
        { workerId: "worker-new", leaseVersion: 1, leaseSecret: current.leaseSecret },
        { workerId: "worker-new", leaseVersion: 3, leaseSecret: current.leaseSecret },
        // The holder and version are public (events name them); without the secret they open nothing.
        { workerId: "worker-new", leaseVersion: 2, leaseSecret: old.leaseSecret },
        {
          workerId: "worker-new",
          leaseVersion: 2,
          leaseSecret: `${current.leaseSecret.slice(0, -1)}x`,
        },
        { workerId: "worker-new", leaseVersion: 2, leaseSecret: "" },
        {
          workerId: "worker-new",
          leaseVersion: 2,
          leaseSecret: leaseSecretDigest(current.leaseSecret),
        },
      ];
      const startedAtMs = clock.nowMs();
      const probe = async (): Promise<void> => {
        const before = await dump();
        for (const fence of stale) {
          // The refusal names neither the holder nor its version.
          const refused = await errorOf(leases.heartbeat(attempt.id, fence));
          expect(refused.code).toBe("conflict");
          expect(refused.message).not.toMatch(/worker-new|worker-old|version/);
          expect(await codeOf(leases.start(attempt.id, fence, "starting", null))).toBe("conflict");
          expect(
            await codeOf(leases.start(attempt.id, fence, "running", handleAt(startedAtMs))),
          ).toBe("conflict");
          expect(await codeOf(leases.heartbeat(attempt.id, fence))).toBe("conflict");
          expect(
            await codeOf(leases.complete(attempt.id, fence, exitFacts(startedAtMs, clock.nowMs()))),
          ).toBe("conflict");
          expect(await codeOf(leases.lost(attempt.id, fence, "gone"))).toBe("conflict");
        }
        expect(await dump()).toBe(before);
      };
      await probe();
      const fence = fenceOf(current, "worker-new");
      await leases.start(attempt.id, fence, "starting", null);
      await probe();
      await leases.start(attempt.id, fence, "running", handleAt(startedAtMs));
      clock.advance(10);
      await probe();
      expect(
        await leases.complete(attempt.id, fence, exitFacts(startedAtMs, clock.nowMs())),
      ).toEqual({ status: "succeeded", replayed: false });
      await probe();
      // An unknown attempt is not found, also with nothing written.
      const before = await dump();
      expect(await codeOf(leases.heartbeat("wta:00000000000000000000000000000000", fence))).toBe(
        "not_found",
      );
      expect(await dump()).toBe(before);
    });

    it("the lease secret is answered once at claim and stored only as its sha256: no row or event holds it", async () => {
      const { runId, attempt, lease, fence } = await runningSingle("secret");
      await leases.heartbeat(attempt.id, fence);
      const everything = await dump();
      expect(everything).not.toContain(lease.leaseSecret);
      expect(everything).toContain(leaseSecretDigest(lease.leaseSecret));
      expect(JSON.stringify(await eventsOf(runId))).not.toContain(lease.leaseSecret);
    });

    it("implausible worker times (before the claim, finish before start, in the coordinator's future) are invalid_request and write nothing", async () => {
      const { attempt } = await admittedSingle("times", "pool-times");
      clock.advance(1000);
      const lease = await claimOne("worker-1", "pool-times");
      const fence = fenceOf(lease, "worker-1");
      await leases.start(attempt.id, fence, "starting", null);
      const claimedAtMs = attempt.createdAtMs;
      const nowMs = clock.nowMs();
      const before = await dump();
      const cases: { call: () => Promise<unknown>; path: string }[] = [
        {
          call: () =>
            leases.start(
              attempt.id,
              fence,
              "running",
              handleAt(claimedAtMs - WORKER_CLOCK_SKEW_MAX_MS - 1),
            ),
          path: "handle.startedAtMs",
        },
        {
          call: () =>
            leases.start(
              attempt.id,
              fence,
              "running",
              handleAt(nowMs + WORKER_CLOCK_SKEW_MAX_MS + 1),
            ),
          path: "handle.startedAtMs",
        },
        {
          call: () =>
            leases.complete(
              attempt.id,
              fence,
              exitFacts(claimedAtMs - WORKER_CLOCK_SKEW_MAX_MS - 1, nowMs),
            ),
          path: "startedAtMs",
        },
        {
          call: () => leases.complete(attempt.id, fence, exitFacts(nowMs, nowMs - 1)),
          path: "finishedAtMs",
        },
        {
          call: () =>
            leases.complete(
              attempt.id,
              fence,
              exitFacts(nowMs, nowMs + WORKER_CLOCK_SKEW_MAX_MS + 1),
            ),
          path: "finishedAtMs",
        },
        {
          call: () =>
            leases.complete(
              attempt.id,
              fence,
              exitFacts(nowMs + WORKER_CLOCK_SKEW_MAX_MS + 1, nowMs + WORKER_CLOCK_SKEW_MAX_MS + 2),
            ),
          path: "startedAtMs",
        },
      ];
      for (const { call, path } of cases) {
        const error = await errorOf(call());
        expect(error.code, path).toBe("invalid_request");
        expect(error.details.map((detail) => detail.path)).toEqual([path]);
      }
      expect(await dump()).toBe(before);
      // Within the skew allowance on either side, the same calls are accepted.
      await leases.start(attempt.id, fence, "running", handleAt(claimedAtMs - 5));
      expect(
        await leases.complete(
          attempt.id,
          fence,
          exitFacts(claimedAtMs - 5, nowMs + WORKER_CLOCK_SKEW_MAX_MS),
        ),
      ).toEqual({ status: "succeeded", replayed: false });
    });

    it("a duplicate completion is answered replayed with the same status and writes nothing", async () => {
      const { runId, attempt, fence, startedAtMs } = await runningSingle("dup");
      clock.advance(50);
      const facts = exitFacts(startedAtMs, clock.nowMs(), 3);
      expect(await leases.complete(attempt.id, fence, facts)).toEqual({
        status: "failed",
        replayed: false,
      });
      const before = await dump();
      clock.advance(50);
      expect(await leases.complete(attempt.id, fence, facts)).toEqual({
        status: "failed",
        replayed: true,
      });
      expect(await dump()).toBe(before);
      // Heartbeat and lost on a settled attempt are refused without writing.
      expect(await codeOf(leases.heartbeat(attempt.id, fence))).toBe("conflict");
      // (illegal_transition is answered 409 conflict over HTTP.)
      expect(["conflict", "illegal_transition"]).toContain(
        await codeOf(leases.lost(attempt.id, fence, "late")),
      );
      expect(await dump()).toBe(before);
      await tick();
      expect((await runOf(runId)).status).toBe("failed");
    });

    it("a completion whose response was lost is answered replayed on retry and writes nothing more", async () => {
      const { runId, attempt, fence, startedAtMs } = await runningSingle("lost-resp");
      clock.advance(50);
      const facts = exitFacts(startedAtMs, clock.nowMs());
      expect(
        await retryAfterLostAnswer(() => leases.complete(attempt.id, fence, facts), 50),
      ).toEqual({ status: "succeeded", replayed: true });
      // The retry wrote nothing, so the lost commit itself settled the attempt.
      expect((await attemptOf(attempt.id)).status).toBe("succeeded");
      expect(
        (await eventsOf(runId)).filter(
          (event) =>
            event.type === "attempt.status_changed" &&
            event.attemptId === attempt.id &&
            event.data.to === "succeeded",
        ),
      ).toHaveLength(1);

      // The same holds for the worker's lost report.
      const second = await runningSingle("lost-resp2");
      clock.advance(50);
      expect(
        await retryAfterLostAnswer(
          () => leases.lost(second.attempt.id, second.fence, "the process is gone"),
          0,
        ),
      ).toEqual({ status: "lost", replayed: true });
      expect((await stepsOf(second.runId))[0]!.status).toBe("failed");
    });

    it("a start whose answer was lost is answered from the durable state on retry and writes nothing", async () => {
      const { attempt } = await admittedSingle("start-replay", "pool-start-replay");
      const lease = await claimOne("worker-1", "pool-start-replay");
      const fence = fenceOf(lease, "worker-1");
      expect(
        await retryAfterLostAnswer(() => leases.start(attempt.id, fence, "starting", null), 10),
      ).toEqual({
        status: "starting",
        leaseExpiresAtMs: (await attemptOf(attempt.id)).leaseExpiresAtMs,
      });

      const handle = handleAt(clock.nowMs());
      expect(
        await retryAfterLostAnswer(() => leases.start(attempt.id, fence, "running", handle), 10),
      ).toMatchObject({ status: "running" });
      const afterRunning = await dump();
      // A different process identity is not a replay; and a starting report after running is refused.
      expect(["conflict", "illegal_transition"]).toContain(
        await codeOf(
          leases.start(attempt.id, fence, "running", { ...handle, pid: handle.pid + 1 }),
        ),
      );
      expect(await codeOf(leases.start(attempt.id, fence, "starting", null))).toBe("conflict");
      expect(await dump()).toBe(afterRunning);
    });

    it("the worker's lost report: a claim that never started gives its step a new ready epoch; a started attempt is lost and its step failed", async () => {
      const unstarted = await admittedSingle("lost-claimed", "pool-lost-claimed");
      const lease = await claimOne("worker-1", "pool-lost-claimed");
      const [readyBefore] = await stepsOf(unstarted.runId);
      clock.advance(10);
      expect(
        await leases.lost(
          lease.attemptId,
          fenceOf(lease, "worker-1"),
          "the worker stopped before spawning",
        ),
      ).toEqual({ status: "lost", replayed: false });
      const [epoch] = await stepsOf(unstarted.runId);
      expect(epoch).toMatchObject({
        status: "ready",
        version: readyBefore!.version + 1,
        attemptCount: 0,
      });
      await tick();
      const attempts = await attemptsOf(unstarted.runId);
      expect(attempts.map((attempt) => attempt.status)).toEqual(["lost", "claimed"]);
      expect(attempts[1]!.stepRunVersion).toBe(epoch!.version);

      const started = await admittedSingle("lost-running", "pool-lost-running");
      const lease2 = await claimOne("worker-1", "pool-lost-running");
      const fence2 = fenceOf(lease2, "worker-1");
      await leases.start(lease2.attemptId, fence2, "starting", null);
      await leases.start(lease2.attemptId, fence2, "running", handleAt(clock.nowMs()));
      clock.advance(10);
      expect(
        await leases.lost(lease2.attemptId, fence2, "the process is gone and left no receipt"),
      ).toEqual({ status: "lost", replayed: false });
      expect((await stepsOf(started.runId))[0]!.status).toBe("failed");
      const stepEvents = (await eventsOf(started.runId))
        .filter((event) => event.type === "step.status_changed")
        .map((event) => `${String(event.data.from)}→${String(event.data.to)}`);
      expect(stepEvents.slice(-2)).toEqual(["ready→running", "running→failed"]);
      await tick();
      expect((await runOf(started.runId)).status).toBe("failed");
      expect(await attemptsOf(started.runId)).toHaveLength(1);
    });

    it("the worker's never-spawned report from the lease's holder: a starting attempt is lost before the start barrier, and its step runs exactly once in a new epoch", async () => {
      const { runId, attempt } = await admittedSingle("never-spawned", "pool-never-spawned");
      const lease = await claimOne("worker-1", "pool-never-spawned");
      const fence = fenceOf(lease, "worker-1");
      await leases.start(attempt.id, fence, "starting", null);
      const [readyBefore] = await stepsOf(runId);
      clock.advance(10);
      // The answer is lost after the commit: the retry is answered from the durable attempt.
      lossy.arm();
      await expect(
        leases.lost(attempt.id, fence, "journaled but never spawned", { neverSpawned: true }),
      ).rejects.toThrow(/lost commit response/);
      const afterLost = await dump();
      expect(
        await leases.lost(attempt.id, fence, "journaled but never spawned", {
          neverSpawned: true,
        }),
      ).toEqual({ status: "lost", replayed: true });
      expect(await dump()).toBe(afterLost);
      expect(await attemptOf(attempt.id)).toMatchObject({
        status: "lost",
        pid: null,
        error: "worker worker-1: journaled but never spawned",
      });
      const [epoch] = await stepsOf(runId);
      expect(epoch).toMatchObject({
        status: "ready",
        version: readyBefore!.version + 1,
        attemptCount: 0,
      });
      expect(
        (await eventsOf(runId)).filter(
          (event) => event.type === "step.status_changed" && event.data.to === "failed",
        ),
      ).toEqual([]);

      // The new epoch gets its own admission and attempt, which runs once and succeeds.
      await tick();
      const attempts = await attemptsOf(runId);
      expect(attempts.map((item) => item.status)).toEqual(["lost", "claimed"]);
      expect(attempts[1]!.id).not.toBe(attempt.id);
      expect(attempts[1]!.stepRunVersion).toBe(epoch!.version);
      const next = await claimOne("worker-1", "pool-never-spawned");
      expect(next.attemptId).toBe(attempts[1]!.id);
      const nextFence = fenceOf(next, "worker-1");
      await leases.start(next.attemptId, nextFence, "starting", null);
      const startedAtMs = clock.nowMs();
      await leases.start(next.attemptId, nextFence, "running", handleAt(startedAtMs));
      clock.advance(10);
      expect(
        await leases.complete(next.attemptId, nextFence, exitFacts(startedAtMs, clock.nowMs())),
      ).toEqual({ status: "succeeded", replayed: false });
      await tick();
      expect((await runOf(runId)).status).toBe("succeeded");
      expect((await stepsOf(runId))[0]).toMatchObject({ status: "succeeded", attemptCount: 1 });
      // The old lease's holder learns nothing new: a repeated report is still only replayed.
      expect(
        await leases.lost(attempt.id, fence, "journaled but never spawned", {
          neverSpawned: true,
        }),
      ).toEqual({ status: "lost", replayed: true });
    });

    it("the never-spawned fact also settles a starting attempt that failed closed at lease expiry; without the fact a starting attempt is lost with its step failed", async () => {
      const closed = await admittedSingle("never-spawned-closed", "pool-never-spawned-closed");
      const lease = await claimOne("worker-1", "pool-never-spawned-closed");
      const fence = fenceOf(lease, "worker-1");
      await leases.start(closed.attempt.id, fence, "starting", null);
      clock.advance(TTL_MS + 1);
      await tick();
      expect((await attemptOf(closed.attempt.id)).error).toMatch(/lease expired/);
      expect(
        await leases.lost(closed.attempt.id, fence, "the worker stopped before spawning", {
          neverSpawned: true,
        }),
      ).toEqual({ status: "lost", replayed: false });
      expect((await stepsOf(closed.runId))[0]).toMatchObject({ status: "ready", attemptCount: 0 });
      await tick();
      expect((await attemptsOf(closed.runId)).map((item) => item.status)).toEqual([
        "lost",
        "claimed",
      ]);

      const unproven = await admittedSingle("starting-unproven", "pool-starting-unproven");
      const lease2 = await claimOne("worker-1", "pool-starting-unproven");
      const fence2 = fenceOf(lease2, "worker-1");
      await leases.start(unproven.attempt.id, fence2, "starting", null);
      clock.advance(10);
      expect(await leases.lost(unproven.attempt.id, fence2, "gone")).toEqual({
        status: "lost",
        replayed: false,
      });
      expect((await stepsOf(unproven.runId))[0]!.status).toBe("failed");
      await tick();
      expect((await runOf(unproven.runId)).status).toBe("failed");
      expect(await attemptsOf(unproven.runId)).toHaveLength(1);
    });

    it("the never-spawned fact is refused without writing on a running attempt (its process is on record), from a stale fence, and on a settled attempt", async () => {
      const { runId, attempt } = await admittedSingle(
        "never-spawned-bad",
        "pool-never-spawned-bad",
      );
      const old = await claimOne("worker-old", "pool-never-spawned-bad");
      clock.advance(TTL_MS);
      const current = await claimOne("worker-new", "pool-never-spawned-bad");
      const fence = fenceOf(current, "worker-new");
      const staleFences = [
        fenceOf(old, "worker-old"),
        { workerId: "worker-new", leaseVersion: 1, leaseSecret: current.leaseSecret },
        { workerId: "worker-new", leaseVersion: 2, leaseSecret: old.leaseSecret },
      ];
      await leases.start(attempt.id, fence, "starting", null);
      const before = await dump();
      for (const stale of staleFences)
        expect(
          await codeOf(leases.lost(attempt.id, stale, "never spawned", { neverSpawned: true })),
        ).toBe("conflict");
      expect(await dump()).toBe(before);

      const startedAtMs = clock.nowMs();
      await leases.start(attempt.id, fence, "running", handleAt(startedAtMs));
      const running = await dump();
      const refused = await errorOf(
        leases.lost(attempt.id, fence, "never spawned", { neverSpawned: true }),
      );
      expect(refused.code).toBe("conflict");
      expect(refused.message).toMatch(/is running/);
      for (const stale of staleFences)
        expect(
          await codeOf(leases.lost(attempt.id, stale, "never spawned", { neverSpawned: true })),
        ).toBe("conflict");
      expect(await dump()).toBe(running);

      clock.advance(10);
      await leases.complete(attempt.id, fence, exitFacts(startedAtMs, clock.nowMs()));
      const settled = await dump();
      expect(
        await codeOf(leases.lost(attempt.id, fence, "never spawned", { neverSpawned: true })),
      ).toBe("conflict");
      expect(await dump()).toBe(settled);
      await tick();
      expect((await runOf(runId)).status).toBe("succeeded");
    });

    it("many workers racing for the same leases: each attempt is leased exactly once", async () => {
      const pool = "pool-race";
      const runs: string[] = [];
      for (let index = 0; index < 3; index += 1)
        runs.push(
          await startWorkflow(
            remoteManifest(`race-${index}`, pool, { s1: [], s2: [], s3: [], s4: [] }),
          ),
        );
      await tick();
      const all = (await Promise.all(runs.map((runId) => attemptsOf(runId)))).flat();
      expect(all).toHaveLength(12);
      expect(all.every((attempt) => attempt.status === "claimed")).toBe(true);

      const workers = Array.from({ length: 8 }, (_, index) => `racer-${index}`);
      const granted: { workerId: string; lease: Lease }[] = [];
      const results = await Promise.all(
        workers.map(async (workerId) => ({
          workerId,
          leases: await leases.claim(workerId, pool, 4),
        })),
      );
      for (const result of results)
        for (const lease of result.leases) granted.push({ workerId: result.workerId, lease });
      expect(granted.length).toBeGreaterThan(0);
      // Whatever the race did, nobody got an attempt twice.
      expect(new Set(granted.map((item) => item.lease.attemptId)).size).toBe(granted.length);
      // Claim what the race left over, sequentially.
      for (let round = 0; round < 12 && granted.length < all.length; round += 1) {
        for (const lease of await leases.claim("sweeper", pool, 64))
          granted.push({ workerId: "sweeper", lease });
      }
      expect(granted).toHaveLength(12);
      expect(new Set(granted.map((item) => item.lease.attemptId)).size).toBe(12);
      for (const { workerId, lease } of granted) {
        expect(lease.leaseVersion).toBe(1);
        expect(await attemptOf(lease.attemptId)).toMatchObject({
          leaseWorkerId: workerId,
          leaseVersion: 1,
        });
      }
      const leasedEvents = (await Promise.all(runs.map((runId) => eventsOf(runId))))
        .flat()
        .filter((event) => event.type === "attempt.leased");
      expect(leasedEvents).toHaveLength(12);
      expect(new Set(leasedEvents.map((event) => event.attemptId)).size).toBe(12);
      expect(await leases.claim("late", pool, 64)).toEqual([]);
    });

    it("a claim passes over an attempt that cannot be leased (integrity) and leases the rest; it fails only when nothing could be leased", async () => {
      const pool = "pool-poison";
      const poisoned = await admittedSingle("poison-a", pool);
      const healthy = await admittedSingle("poison-b", pool);
      // An attempt whose workflow epoch is gone from its row: its admission cannot be checked,
      // so it is never executed (src/attempt-scope.ts). It sorts first among the candidates.
      const placeholder = driver.dialect === "postgres" ? "$1" : "?";
      await driver.transaction((tx) =>
        tx.query(`UPDATE run_attempts SET step_run_version = NULL WHERE id = ${placeholder}`, [
          poisoned.attempt.id,
        ]),
      );
      const before = await snapshot(poisoned.runId);

      const granted = await leases.claim("worker-1", pool, 2);
      expect(granted.map((lease) => lease.attemptId)).toEqual([healthy.attempt.id]);
      expect(await snapshot(poisoned.runId)).toEqual(before);

      // Only the poisoned one is left: the claim names its error instead of answering nothing.
      const error = await errorOf(leases.claim("worker-2", pool, 2));
      expect(error.code).toBe("integrity");
      expect(error.message).toContain(poisoned.attempt.id);
      expect(await snapshot(poisoned.runId)).toEqual(before);
    });

    it("an ordinary remote run goes queued → dispatching → running → succeeded", async () => {
      const runId = await startOrdinaryRun("ordinary");
      expect((await runOf(runId)).status).toBe("queued");
      await tick();
      expect((await runOf(runId)).status).toBe("dispatching");
      const lease = await claimOne("worker-1", "pool-ordinary");
      expect(lease).toMatchObject({ runId, stepRunId: null, leaseVersion: 1 });
      const fence = fenceOf(lease, "worker-1");
      await leases.start(lease.attemptId, fence, "starting", null);
      expect((await runOf(runId)).status).toBe("dispatching");
      const startedAtMs = clock.nowMs();
      await leases.start(lease.attemptId, fence, "running", handleAt(startedAtMs));
      expect((await runOf(runId)).status).toBe("running");
      clock.advance(1_000);
      expect(await leases.heartbeat(lease.attemptId, fence)).toMatchObject({ action: "continue" });
      clock.advance(1_000);
      expect(
        await leases.complete(lease.attemptId, fence, exitFacts(startedAtMs, clock.nowMs())),
      ).toEqual({ status: "succeeded", replayed: false });
      const run = await runOf(runId);
      expect(run.status).toBe("succeeded");
      const transitions = (await eventsOf(runId))
        .filter((event) => event.type === "run.status_changed")
        .map((event) => `${String(event.data.from)}→${String(event.data.to)}`);
      expect(transitions).toEqual([
        "queued→dispatching",
        "dispatching→running",
        "running→succeeded",
      ]);
    });

    it("an ordinary remote claim whose lease expired goes back to queued and is admitted again", async () => {
      const runId = await startOrdinaryRun("ordinary-exp");
      await tick();
      const lease = await claimOne("worker-1", "pool-ordinary-exp");
      clock.advance(TTL_MS);
      await tick();
      expect((await attemptOf(lease.attemptId)).status).toBe("lost");
      expect((await runOf(runId)).status).toBe("queued");
      await tick();
      const attempts = await attemptsOf(runId);
      expect(attempts.map((attempt) => attempt.status)).toEqual(["lost", "claimed"]);
      expect((await runOf(runId)).status).toBe("dispatching");
    });

    /** A two-step (`a` → `b`) remote workflow whose `a` runs under worker-1's lease. */
    async function runningRemote(
      packageName: string,
    ): Promise<{ runId: string; lease: Lease; fence: LeaseFence; startedAtMs: number }> {
      const pool = `pool-${packageName}`;
      const runId = await startWorkflow(remoteManifest(packageName, pool, { a: [], b: ["a"] }));
      await tick();
      const lease = await claimOne("worker-1", pool);
      const fence = fenceOf(lease, "worker-1");
      await leases.start(lease.attemptId, fence, "starting", null);
      const startedAtMs = clock.nowMs();
      await leases.start(lease.attemptId, fence, "running", handleAt(startedAtMs));
      clock.advance(1_000);
      expect(await leases.heartbeat(lease.attemptId, fence)).toMatchObject({ action: "continue" });
      return { runId, lease, fence, startedAtMs };
    }

    /**
     * The running remote attempt's next heartbeat is told to stop for `reason`; the worker's
     * process then ends on its SIGTERM, and the completion cancels the attempt with that reason.
     */
    async function expectStopAnsweredThenCancelled(
      lease: Lease,
      fence: LeaseFence,
      startedAtMs: number,
      reason: "cancel" | "shutdown",
    ): Promise<void> {
      clock.advance(100);
      expect(await leases.heartbeat(lease.attemptId, fence)).toEqual({
        action: "stop_requested",
        reason,
        leaseExpiresAtMs: clock.nowMs() + TTL_MS,
      });
      clock.advance(100);
      const stopped = exitFacts(startedAtMs, clock.nowMs(), null, { stopReason: reason });
      expect(await leases.complete(lease.attemptId, fence, stopped)).toEqual({
        status: "cancelled",
        replayed: false,
      });
      expect(await attemptOf(lease.attemptId)).toMatchObject({
        status: "cancelled",
        stopReason: reason,
      });
    }

    function stopEventsOf(runId: string, attemptId: string): Promise<RunEvent[]> {
      return eventsOf(runId).then((events) =>
        events.filter(
          (event) => event.type === "attempt.stop_requested" && event.attemptId === attemptId,
        ),
      );
    }

    it("a run cancelled for shutdown: the run keeps the reason, heartbeat answers stop_requested(shutdown), and the completion cancels attempt, step and run", async () => {
      const { runId, lease, fence, startedAtMs } = await runningRemote("cancel-shutdown");
      await store.transaction(async (tx) =>
        cancelRun(tx, runId, await tx.observe(clock.nowMs()), "shutdown"),
      );
      expect(await runOf(runId)).toMatchObject({ status: "running", cancelReason: "shutdown" });
      clock.advance(100);
      await tick();
      expect(await attemptOf(lease.attemptId)).toMatchObject({
        status: "running",
        stopReason: "shutdown",
      });
      expect((await stopEventsOf(runId, lease.attemptId)).map((event) => event.data)).toEqual([
        { reason: "shutdown" },
      ]);
      await expectStopAnsweredThenCancelled(lease, fence, startedAtMs, "shutdown");
      // The whole run was cancelled: its running step is cancelled, not failed.
      expect((await stepsOf(runId)).map((step) => step.status)).toEqual(["cancelled", "cancelled"]);
      await tick();
      expect(await runOf(runId)).toMatchObject({ status: "cancelled", cancelReason: "shutdown" });
      expect(await stopEventsOf(runId, lease.attemptId)).toHaveLength(1);
      expect(await attemptsOf(runId)).toHaveLength(1);
    });

    it("a user's cancel after a shutdown cancel keeps the first reason", async () => {
      const { runId } = await admittedSingle("cancel-first-reason", "pool-cancel-first-reason");
      await store.transaction(async (tx) =>
        cancelRun(tx, runId, await tx.observe(clock.nowMs()), "shutdown"),
      );
      const before = await snapshot(runId);
      await store.transaction(async (tx) => cancelRun(tx, runId, await tx.observe(clock.nowMs())));
      expect(await snapshot(runId)).toEqual(before);
      await tick();
      // The claim that never started is cancelled with the run's reason.
      expect(
        (await attemptsOf(runId)).map((attempt) => [attempt.status, attempt.stopReason]),
      ).toEqual([["cancelled", "shutdown"]]);
      expect(await runOf(runId)).toMatchObject({ status: "cancelled", cancelReason: "shutdown" });
    });

    // Last in this file: the shutdown asks every running remote attempt of the store to stop.
    it("coordinator shutdown: a durable shutdown intent for each running remote attempt, answered by the heartbeat; the completion cancels the attempt and fails only its step", async () => {
      const { runId, lease, fence, startedAtMs } = await runningRemote("shutdown-remote");
      // A replica of a cluster leaves its workers to the other coordinators.
      const replica = new Coordinator({
        store,
        clock,
        ids,
        profile: PROFILES.standalone,
        executors: {},
        node: { nodeId: "replica-1", host: "test", bootId: null },
      });
      const untouched = await snapshot(runId);
      expect(await replica.requestRemoteShutdownStops()).toBe(0);
      expect(await snapshot(runId)).toEqual(untouched);

      coordinator.freezeAdmission();
      expect(await coordinator.requestRemoteShutdownStops()).toBeGreaterThanOrEqual(1);
      expect(await attemptOf(lease.attemptId)).toMatchObject({
        status: "running",
        stopReason: "shutdown",
      });
      // The run itself is not cancelled: the stop is step-scoped, as for a local shutdown stop.
      expect(await runOf(runId)).toMatchObject({ cancelRequestedAtMs: null, cancelReason: null });
      // Asked again (the drain asks each round): nothing more is written.
      const once = await snapshot(runId);
      await coordinator.requestRemoteShutdownStops();
      expect(await snapshot(runId)).toEqual(once);
      expect((await stopEventsOf(runId, lease.attemptId)).map((event) => event.data)).toEqual([
        { reason: "shutdown" },
      ]);

      await expectStopAnsweredThenCancelled(lease, fence, startedAtMs, "shutdown");
      expect((await stepsOf(runId)).map((step) => [step.name, step.status])).toEqual([
        ["a", "failed"],
        ["b", "pending"],
      ]);
      // No attempt of this run is waiting for a stop any more.
      const live = await store.transaction(async (tx) =>
        tx.listAttempts("remote_worker", ["running"], null, 500),
      );
      expect(live.filter((attempt) => attempt.runId === runId)).toEqual([]);
    });
  });
}
