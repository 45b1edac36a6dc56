import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Coordinator } from "../../src/coordinator.ts";
import { isQlrError } from "../../src/errors.ts";
import { LeaseService } from "../../src/lease-service.ts";
import type { RunAttempt, RunEvent } from "../../src/model.ts";
import { applyPackage, startRun } from "../../src/operations.ts";
import type { NodeIdentity } from "../../src/ownership.ts";
import type { Clock } from "../../src/ports.ts";
import { PROFILES } from "../../src/profiles.ts";
import { Prng } from "../../src/sim/prng.ts";
import { SimulatedExecutor } from "../../src/sim/simulated-executor.ts";
import type { Manifest } from "../../src/manifest/types.ts";
import { uuidv7Ids } from "../../runtimes/shared/uuidv7.ts";
import { openPgDriver } from "../../storage/postgres/pg-driver.ts";
import { openPostgresStore } from "../../storage/postgres/store.ts";
import type { SqlStore } from "../../storage/sql-store.ts";
import { diamondManifest, SequentialSecrets, task } from "../support/fixtures.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import {
  startTcpProxy,
  urlThroughProxy,
  type CommitLoss,
  type ProxiedStatement,
  type TcpProxy,
} from "../support/tcp-proxy.ts";
import { waitFor } from "../support/wait.ts";

/**
 * Lost COMMITs on the wire: a coordinator (and a lease service, the coordinator a worker talks
 * to) reach a real PostgreSQL through a TCP proxy that breaks the connection at COMMIT. After
 * the COMMIT is applied and its answer lost, the store reports an unknown outcome (never a
 * blind retry); the next cycle reads what is durable and converges: no second admission, no
 * second spawn or lease, no completion lost or doubled, events numbered without a gap. When the
 * connection breaks before COMMIT reaches the server, nothing was applied and the next cycle
 * applies it once.
 */

const clock: Clock = { nowMs: () => Date.now() };
const node: NodeIdentity = { nodeId: "node-lost-commit", host: "host-lost-commit", bootId: null };

/** Transactions that write an attempt row whose status (the first mutable column) is `status`. */
function writesAttemptStatus(status: RunAttempt["status"]) {
  return (statements: readonly ProxiedStatement[]): boolean =>
    statements.some(
      (statement) =>
        /^\s*UPDATE run_attempts SET status = /i.test(statement.sql) &&
        statement.params[0] === status,
    );
}

function insertsAttempt(statements: readonly ProxiedStatement[]): boolean {
  return statements.some((statement) => /^\s*INSERT INTO run_attempts\b/i.test(statement.sql));
}

function expectContiguous(events: readonly RunEvent[]): void {
  expect(events.map((event) => event.seq)).toEqual(events.map((_, index) => index + 1));
}

describe("lost COMMITs on the wire to a real PostgreSQL", { timeout: 120_000 }, () => {
  let database: TestDatabase;
  let proxy: TcpProxy;
  /** Through the proxy: everything under test. */
  let store: SqlStore;
  /** Straight to the server: set-up and inspection. */
  let direct: SqlStore;
  let executor: SimulatedExecutor;
  let coordinator: Coordinator;

  beforeAll(async () => {
    database = await createTestDatabase();
    const server = new URL(database.url);
    proxy = await startTcpProxy({ host: server.hostname, port: Number(server.port) });
    direct = await openPostgresStore(
      await openPgDriver({ connectionString: database.url }),
      Date.now(),
      { clock: "database" },
    );
    store = await openPostgresStore(
      await openPgDriver({ connectionString: urlThroughProxy(database.url, proxy), poolSize: 2 }),
      Date.now(),
      { clock: "database" },
    );
    executor = new SimulatedExecutor({
      clock,
      prng: new Prng(11),
      outcome: () => ({ exitCode: 0, durationMs: 100 }),
    });
    coordinator = new Coordinator({
      store,
      clock,
      ids: uuidv7Ids,
      profile: PROFILES.cluster,
      executors: { local_process: executor },
      node,
    });
    await coordinator.recover();
  });
  afterEach(() => proxy?.disarm());
  afterAll(async () => {
    await store?.close();
    await direct?.close();
    await proxy?.close();
    await database?.drop();
  });

  async function startWorkflow(manifest: Manifest, workflow: string): Promise<string> {
    return direct.transaction(async (tx) => {
      const nowMs = await tx.observe(clock.nowMs());
      await applyPackage(tx, manifest, nowMs);
      const { run } = await startRun(
        tx,
        {
          package: manifest.package,
          target: { kind: "workflow", name: workflow },
          idempotencyKey: null,
          scheduleName: null,
          runId: uuidv7Ids.runId(),
        },
        nowMs,
      );
      return run.id;
    });
  }

  const attemptsOf = (runId: string): Promise<RunAttempt[]> =>
    direct.transaction((tx) => tx.getAttempts(runId));
  const eventsOf = (runId: string): Promise<RunEvent[]> =>
    direct.transaction((tx) => tx.listEvents(runId, 0, 1_000));
  const statusOf = async (runId: string): Promise<string | undefined> =>
    direct.transaction(async (tx) => (await tx.getRun(runId))?.status);

  /** Ticks until `loss` happened, collecting the stage errors it caused. */
  async function tickUntil(loss: Promise<CommitLoss>, label: string): Promise<string[]> {
    let happened = false;
    void loss.then(() => {
      happened = true;
    });
    const errors: string[] = [];
    await waitFor(
      label,
      async () => {
        const report = await coordinator.tick();
        for (const stage of report.stages)
          for (const error of stage.errors) errors.push(`${stage.name}: ${error.message}`);
        return happened;
      },
      60_000,
    );
    return errors;
  }

  async function finish(runId: string): Promise<void> {
    await waitFor(
      `run ${runId} succeeds`,
      async () => {
        await coordinator.tick();
        return (await statusOf(runId)) === "succeeded";
      },
      60_000,
    );
  }

  /** Exactly one attempt per step, each spawned exactly once, every event once and in order. */
  async function expectExactReplay(runId: string, steps: number): Promise<void> {
    const attempts = await attemptsOf(runId);
    const succeeded = attempts.filter((attempt) => attempt.status === "succeeded");
    expect(succeeded).toHaveLength(steps);
    expect(new Set(succeeded.map((attempt) => attempt.stepRunId)).size).toBe(steps);
    // No attempt of these non-idempotent steps was spawned twice, and none that did not succeed spawned at all.
    for (const attempt of attempts)
      expect(executor.spawnCounts.get(attempt.id) ?? 0).toBe(
        attempt.status === "succeeded" ? 1 : 0,
      );
    const events = await eventsOf(runId);
    expectContiguous(events);
    const toSucceeded = events.filter(
      (event) => event.type === "attempt.status_changed" && event.data.to === "succeeded",
    );
    expect(toSucceeded).toHaveLength(steps);
  }

  it("admission: the attempt committed, the answer lost; the next cycle admits nothing twice", async () => {
    const runId = await startWorkflow(diamondManifest("lost-admission"), "diamond");
    const loss = proxy.arm({ mode: "after-commit", when: insertsAttempt });
    const errors = await tickUntil(loss, "the admission COMMIT is lost");
    expect(errors.some((message) => /during COMMIT/.test(message))).toBe(true);
    // The commit went through: the attempt exists although the coordinator was told otherwise.
    expect((await attemptsOf(runId)).length).toBeGreaterThanOrEqual(1);
    await finish(runId);
    await expectExactReplay(runId, 4);
  });

  it("dispatch: `starting` committed, the answer lost; the step is spawned exactly once", async () => {
    const runId = await startWorkflow(diamondManifest("lost-dispatch"), "diamond");
    const loss = proxy.arm({ mode: "after-commit", when: writesAttemptStatus("starting") });
    const errors = await tickUntil(loss, "the dispatch COMMIT is lost");
    expect(errors.some((message) => /during COMMIT/.test(message))).toBe(true);
    const lost = (await loss).statements.find((statement) =>
      /^\s*UPDATE run_attempts/i.test(statement.sql),
    );
    await finish(runId);
    await expectExactReplay(runId, 4);
    // The attempt whose `starting` answer was lost was never handed to a launcher: it ends lost
    // without a spawn, and its step ran once under a new epoch.
    const attemptId = lost?.params.at(-2);
    const attempt = (await attemptsOf(runId)).find((candidate) => candidate.id === attemptId);
    expect(attempt?.status).toBe("lost");
    expect(executor.spawnCounts.get(attemptId ?? "") ?? 0).toBe(0);
  });

  it("completion: `succeeded` committed, the answer lost; recorded once, the run goes on", async () => {
    const runId = await startWorkflow(diamondManifest("lost-completion"), "diamond");
    const loss = proxy.arm({ mode: "after-commit", when: writesAttemptStatus("succeeded") });
    const errors = await tickUntil(loss, "the completion COMMIT is lost");
    expect(errors.some((message) => /during COMMIT/.test(message))).toBe(true);
    await finish(runId);
    await expectExactReplay(runId, 4);
  });

  it("lease completion: the worker's report committed, the answer lost; its retry is a replay", async () => {
    const pool = "pool-lost-lease";
    const manifest: Manifest = {
      ...diamondManifest("lost-lease", {
        tasks: [task("work", ["true"], { executor: "remote_worker", pool })],
      }),
    };
    const runId = await startWorkflow(manifest, "diamond");
    const leases = new LeaseService({
      store,
      clock,
      secrets: new SequentialSecrets(),
      ttlMs: 30_000,
    });
    const worker = "worker-lost-lease";
    const completedOnce = new Map<string, number>();
    let lostAnswers = 0;
    await waitFor(
      "every remote step completes",
      async () => {
        await coordinator.tick();
        for (const lease of await leases.claim(worker, pool, 4)) {
          const fence = {
            workerId: worker,
            leaseVersion: lease.leaseVersion,
            leaseSecret: lease.leaseSecret,
          };
          await leases.start(lease.attemptId, fence, "starting", null);
          const startedAtMs = Date.now();
          await leases.start(lease.attemptId, fence, "running", {
            pid: 1000 + completedOnce.size,
            processStartTicks: "1",
            bootId: "boot-lost-lease",
            startedAtMs,
          });
          completedOnce.set(lease.attemptId, (completedOnce.get(lease.attemptId) ?? 0) + 1);
          const facts = {
            startedAtMs,
            finishedAtMs: Date.now(),
            exitCode: 0,
            signal: null,
            stopReason: null,
            spawnError: null,
          };
          if (lostAnswers === 0) {
            const loss = proxy.arm({
              mode: "after-commit",
              when: writesAttemptStatus("succeeded"),
            });
            const error = await leases.complete(lease.attemptId, fence, facts).then(
              () => undefined,
              (caught: unknown) => caught,
            );
            expect(isQlrError(error, "storage_unavailable")).toBe(true);
            expect((await loss).mode).toBe("after-commit");
            lostAnswers += 1;
            // The worker retries its report: answered from the durable state, nothing written again.
            const eventsBefore = await eventsOf(runId);
            expect(await leases.complete(lease.attemptId, fence, facts)).toEqual({
              status: "succeeded",
              replayed: true,
            });
            expect(await eventsOf(runId)).toEqual(eventsBefore);
          } else {
            expect(await leases.complete(lease.attemptId, fence, facts)).toMatchObject({
              status: "succeeded",
              replayed: false,
            });
          }
        }
        return (await statusOf(runId)) === "succeeded";
      },
      60_000,
    );
    expect(lostAnswers).toBe(1);
    const attempts = await attemptsOf(runId);
    expect(attempts.map((attempt) => attempt.status)).toEqual(Array(4).fill("succeeded"));
    // Every lease was granted and run once: no attempt claimed twice.
    expect([...completedOnce.keys()].sort()).toEqual(attempts.map((attempt) => attempt.id).sort());
    expect([...completedOnce.values()]).toEqual([1, 1, 1, 1]);
    const events = await eventsOf(runId);
    expectContiguous(events);
    expect(
      events.filter(
        (event) => event.type === "attempt.status_changed" && event.data.to === "succeeded",
      ),
    ).toHaveLength(4);
  });

  it("a connection lost before COMMIT reached the server applied nothing; the next cycle applies it once", async () => {
    const runId = await startWorkflow(diamondManifest("lost-before-commit"), "diamond");
    const loss = proxy.arm({ mode: "before-commit", when: insertsAttempt });
    const errors = await tickUntil(loss, "the admission COMMIT never reaches the server");
    // The client cannot tell this from a lost answer: it reports an unknown outcome as well.
    expect(errors.some((message) => /during COMMIT/.test(message))).toBe(true);
    // But nothing was applied: no attempt exists until the next cycle admits one.
    expect(await attemptsOf(runId)).toEqual([]);
    await finish(runId);
    await expectExactReplay(runId, 4);
  });
});
