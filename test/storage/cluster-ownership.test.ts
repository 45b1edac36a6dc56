import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Coordinator } from "../../src/coordinator.ts";
import { LeaseService } from "../../src/lease-service.ts";
import { isQlrError } from "../../src/errors.ts";
import type { RunAttempt } from "../../src/model.ts";
import { applyPackage } from "../../src/operations.ts";
import { COORDINATOR_LEASE_MS, type NodeIdentity } from "../../src/ownership.ts";
import type { Clock } from "../../src/ports.ts";
import { PROFILES } from "../../src/profiles.ts";
import { Prng } from "../../src/sim/prng.ts";
import { SimulatedExecutor } from "../../src/sim/simulated-executor.ts";
import { uuidv7Ids } from "../../runtimes/shared/uuidv7.ts";
import { openPgDriver } from "../../storage/postgres/pg-driver.ts";
import { openPostgresStore } from "../../storage/postgres/store.ts";
import type { SqlStore } from "../../storage/sql-store.ts";
import { applyAndStart, diamondManifest, SequentialSecrets, task } from "../support/fixtures.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { waitFor } from "../support/wait.ts";

/**
 * Two coordinators on one real PostgreSQL, each on its own "host": its own skewed clock and its
 * own executor (a simulated launcher whose journal, receipts and processes only it can see, as
 * on two machines). What a second coordinator did to the first one's attempts before nodes
 * owned them: started while the first sat between `starting` and its spawn, it marked the
 * attempt lost and spawned the step again; started while the attempt ran, it read another
 * host's process as gone and failed the run.
 */

/** A host clock `skewMs` away from this machine's (which the local PostgreSQL server shares). */
function skewedClock(skewMs: number): Clock {
  return { nowMs: () => Date.now() + skewMs };
}

interface Host {
  readonly node: NodeIdentity;
  readonly clock: Clock;
  readonly executor: SimulatedExecutor;
}

function host(name: string, skewMs: number, durationMs = 400): Host {
  const clock = skewedClock(skewMs);
  return {
    node: { nodeId: `node-${name}`, host: `host-${name}`, bootId: null },
    clock,
    executor: new SimulatedExecutor({
      clock,
      prng: new Prng(7),
      outcome: () => ({ exitCode: 0, durationMs }),
    }),
  };
}

describe("several coordinators on one PostgreSQL", { timeout: 120_000 }, () => {
  let database: TestDatabase;
  let store: SqlStore;
  let hostClockStore: SqlStore;

  beforeAll(async () => {
    database = await createTestDatabase();
    store = await openPostgresStore(
      await openPgDriver({ connectionString: database.url }),
      Date.now(),
      { clock: "database" },
    );
    hostClockStore = await openPostgresStore(
      await openPgDriver({ connectionString: database.url }),
      Date.now(),
    );
  });
  afterAll(async () => {
    await store?.close();
    await hostClockStore?.close();
    await database?.drop();
  });

  /** `launches: false` is a node that admits but has no launcher: its claims wait for another node's dispatch. */
  function coordinator(on: Host, fault?: (point: string) => void, launches = true): Coordinator {
    return new Coordinator({
      store,
      clock: on.clock,
      ids: uuidv7Ids,
      profile: PROFILES.cluster,
      executors: launches ? { local_process: on.executor } : {},
      node: on.node,
      ...(fault === undefined ? {} : { fault }),
    });
  }

  function startDiamond(
    packageName: string,
    clock: Clock,
    executor: "local_process" | "remote_worker" = "local_process",
  ): Promise<string> {
    return applyAndStart(
      store,
      clock,
      diamondManifest(packageName, {
        tasks: [
          task("work", ["true"], {
            timeoutMs: 600_000,
            ...(executor === "remote_worker" ? { executor, pool: "claims" } : {}),
          }),
        ],
      }),
      { kind: "workflow", name: "diamond" },
      uuidv7Ids.runId(),
    );
  }

  async function attemptsOf(runId: string): Promise<RunAttempt[]> {
    return store.transaction((tx) => tx.getAttempts(runId));
  }

  async function attemptById(
    runId: string,
    attemptId: string | undefined,
  ): Promise<RunAttempt | undefined> {
    return (await attemptsOf(runId)).find((attempt) => attempt.id === attemptId);
  }

  async function runStatus(runId: string): Promise<string | undefined> {
    return store.transaction(async (tx) => (await tx.getRun(runId))?.status);
  }

  /** Recovers `on` and ticks it until the run's first attempt reaches `status`; returns that attempt. */
  async function firstAttemptIn(
    on: Coordinator,
    runId: string,
    status: RunAttempt["status"],
  ): Promise<RunAttempt> {
    await on.recover();
    return waitFor(
      `the first step's attempt is ${status}`,
      async () => {
        await on.tick();
        return (await attemptsOf(runId)).find((attempt) => attempt.status === status);
      },
      30_000,
    );
  }

  /** Ticks every one of `nodes` in turn, each round after `beforeRound`, until the run succeeds. */
  async function tickUntilSucceeded(
    runId: string,
    nodes: readonly Coordinator[],
    beforeRound: () => Promise<unknown> = () => Promise.resolve(),
  ): Promise<void> {
    await waitFor(
      `run ${runId} succeeds`,
      async () => {
        await beforeRound();
        for (const node of nodes) await node.tick();
        return (await runStatus(runId)) === "succeeded";
      },
      60_000,
    );
  }

  /** Every step of the diamond succeeded, each with one attempt. */
  function expectFourSucceeded(attempts: readonly RunAttempt[]): void {
    expect(attempts.map((attempt) => attempt.status)).toEqual([
      "succeeded",
      "succeeded",
      "succeeded",
      "succeeded",
    ]);
  }

  async function failedClosedEvents(runId: string): Promise<number> {
    const events = await store.transaction((tx) => tx.listEvents(runId, 0, 500));
    return events.filter((event) => event.type === "attempt.recovery_failed_closed").length;
  }

  function spawnsOf(hosts: readonly Host[], attemptIds: readonly string[]): number {
    return attemptIds.reduce(
      (sum, id) =>
        sum + hosts.reduce((inner, on) => inner + (on.executor.spawnCounts.get(id) ?? 0), 0),
      0,
    );
  }

  it("store time is the database server's: coordinators an hour apart both write, and every event carries server time", async () => {
    const behind = host("behind", -3_600_000);
    const ahead = host("ahead", 3_600_000);
    const before = Date.now();
    const runId = await startDiamond("clock-skew", ahead.clock);
    const a = coordinator(ahead);
    const b = coordinator(behind);
    const regressions: unknown[] = [];
    await a.recover();
    await b.recover();
    await waitFor(
      "the diamond finishes on two skewed coordinators",
      async () => {
        // The host an hour behind ticks first, so it dispatches: its launcher stamps times an hour
        // before store time, which the coordinator moves onto store time (else every deadline passed).
        for (const report of [await b.tick(), await a.tick()]) {
          for (const stage of report.stages)
            regressions.push(...stage.errors.filter((error) => error.code === "clock_regression"));
        }
        return (await runStatus(runId)) === "succeeded";
      },
      60_000,
    );
    const after = Date.now();
    expect(regressions).toEqual([]);
    const attempts = await attemptsOf(runId);
    expectFourSucceeded(attempts);
    expect(attempts.some((attempt) => attempt.ownerNodeId === behind.node.nodeId)).toBe(true);
    for (const attempt of attempts) {
      expect(attempt.startedAtMs).toBeGreaterThanOrEqual(before - 1_000);
      expect(attempt.finishedAtMs).toBeLessThanOrEqual(after + 1_000);
    }
    const events = await store.transaction((tx) => tx.listEvents(runId, 0, 500));
    expect(events.length).toBeGreaterThan(8);
    // The server shares this machine's clock; a host reading would be an hour off.
    for (const event of events) {
      expect(event.atMs).toBeGreaterThanOrEqual(before - 1_000);
      expect(event.atMs).toBeLessThanOrEqual(after + 1_000);
    }
  });

  it("with the host clock instead, the coordinator an hour behind fails closed and writes nothing", async () => {
    const ahead = host("host-ahead", 3_600_000);
    await hostClockStore.transaction(async (tx) => {
      const nowMs = await tx.observe(ahead.clock.nowMs());
      await applyPackage(tx, diamondManifest("host-clock"), nowMs);
    });
    const error = await hostClockStore
      .transaction(async (tx) => tx.observe(Date.now() - 3_600_000))
      .catch((caught: unknown) => caught);
    expect(isQlrError(error, "clock_regression")).toBe(true);
  });

  it("a database server clock that went back by more than a step fails closed and writes nothing", async () => {
    const runId = await startDiamond("server-clock-back", skewedClock(0));
    const before = await store.transaction((tx) => tx.listEvents(runId, 0, 500));
    // As if the server's clock stepped back an hour: the watermark is an hour ahead of it.
    await store.driver.transaction((tx) =>
      tx.query("SELECT setval('qlr_store_clock_watermark', $1)", [Date.now() + 3_600_000]),
    );
    const coordinatorBehind = coordinator(host("server-back", 0));
    const report = await coordinatorBehind.tick();
    expect(
      report.stages
        .flatMap((stage) => stage.errors)
        .some((stageError) => stageError.code === "clock_regression"),
    ).toBe(true);
    const error = await store
      .transaction(async (tx) => tx.observe(Date.now()))
      .catch((caught: unknown) => caught);
    expect(isQlrError(error, "clock_regression")).toBe(true);
    expect(await store.transaction((tx) => tx.listEvents(runId, 0, 500))).toEqual(before);
    // Put the watermark back so later tests write again (the refusal is what was under test).
    await store.driver.transaction((tx) =>
      tx.query("SELECT setval('qlr_store_clock_watermark', $1)", [Date.now() - 60_000]),
    );
  });

  it("a coordinator started while another sits between `starting` and its spawn leaves that attempt alone: one spawn", async () => {
    const first = host("first", 2_000);
    const second = host("second", -2_000);
    const runId = await startDiamond("between-starting-and-spawn", first.clock);
    // The first coordinator commits `starting` and dies before its launch (its fault throws here).
    let crash = true;
    const a = coordinator(first, (point) => {
      if (crash && point === "dispatch.after_starting")
        throw new Error("crashed between starting and spawn");
    });
    const starting = await firstAttemptIn(a, runId, "starting");
    expect(starting.ownerNodeId).toBe(first.node.nodeId);

    const b = coordinator(second);
    const recovered = await b.recover();
    expect(recovered.map((entry) => entry.attemptId)).not.toContain(starting.id);
    for (let round = 0; round < 3; round += 1) await b.tick();
    expect(await attemptById(runId, starting.id)).toMatchObject({
      status: "starting",
      ownerNodeId: first.node.nodeId,
      version: starting.version,
    });
    expect(second.executor.spawnCounts.size).toBe(0);

    // The first node returns (same node, new incarnation): its journal has no record, so the
    // attempt never spawned and gets a new epoch; the step then runs exactly once.
    crash = false;
    const again = coordinator(first);
    const decisions = await again.recover();
    expect(decisions.find((entry) => entry.attemptId === starting.id)?.decision).toBe(
      "lost_new_epoch",
    );
    await tickUntilSucceeded(runId, [again, b]);
    const attempts = await attemptsOf(runId);
    const spawned = attempts.filter((attempt) => attempt.status === "succeeded");
    expect(spawned).toHaveLength(4);
    // Every step spawned exactly once across both hosts; the lost attempt never.
    expect(
      spawnsOf(
        [first, second],
        spawned.map((attempt) => attempt.id),
      ),
    ).toBe(4);
    expect(spawnsOf([first, second], [starting.id])).toBe(0);
  });

  it("a coordinator started while another's attempt runs does not fail the run: the owner completes it", async () => {
    const first = host("runner", 1_500, 3_000);
    const second = host("bystander", -1_500);
    const runId = await startDiamond("running-elsewhere", first.clock);
    const a = coordinator(first);
    const running = await firstAttemptIn(a, runId, "running");

    const b = coordinator(second);
    const recovered = await b.recover();
    expect(recovered.map((entry) => entry.attemptId)).not.toContain(running.id);
    await b.tick();
    expect(await attemptById(runId, running.id)).toMatchObject({
      status: "running",
      error: null,
    });
    expect(await runStatus(runId)).toBe("running");

    await tickUntilSucceeded(runId, [a, b]);
    expect((await attemptById(runId, running.id))?.status).toBe("succeeded");
  });

  it("a node's restart leaves the claims other nodes made and the claims leased to workers untouched: no churn, one attempt each", async () => {
    const admitter = host("admitter", 1_000);
    const restarted = host("restarted", -1_000);
    const localRunId = await startDiamond("claims-stay-local", admitter.clock);
    const remoteRunId = await startDiamond("claims-stay-remote", admitter.clock, "remote_worker");
    // A node that admits but has no launcher: its claims stay `claimed`, as between another
    // node's admission and its dispatch.
    const a = coordinator(admitter, undefined, false);
    await a.recover();
    await waitFor(
      "both runs' first steps are claimed",
      async () => {
        await a.tick();
        const attempts = [...(await attemptsOf(localRunId)), ...(await attemptsOf(remoteRunId))];
        return attempts.filter((attempt) => attempt.status === "claimed").length === 2;
      },
      30_000,
    );
    // A worker leases the remote claim (still `claimed`: its process has not started).
    const leases = await new LeaseService({
      store,
      clock: admitter.clock,
      secrets: new SequentialSecrets(),
    }).claim("worker-1", "claims", 1);
    expect(leases).toHaveLength(1);
    const [localClaim] = await attemptsOf(localRunId);
    const [remoteClaim] = await attemptsOf(remoteRunId);
    expect(localClaim).toMatchObject({ status: "claimed", ownerNodeId: null });
    expect(remoteClaim).toMatchObject({ status: "claimed", leaseWorkerId: "worker-1" });

    // Another node restarts: its start-up recovery reads only attempts past the start barrier.
    const b = coordinator(restarted);
    const recovered = await b.recover();
    expect(recovered).toEqual([]);
    expect((await attemptsOf(localRunId))[0]).toEqual(localClaim);
    expect((await attemptsOf(remoteRunId))[0]).toEqual(remoteClaim);

    // The other node's claim is dispatched by the restarted node: one attempt per step, none lost.
    await tickUntilSucceeded(localRunId, [b]);
    const attempts = await attemptsOf(localRunId);
    expectFourSucceeded(attempts);
    expect(attempts[0]).toMatchObject({ id: localClaim?.id, ownerNodeId: restarted.node.nodeId });
    expect(spawnsOf([restarted], [localClaim?.id ?? ""])).toBe(1);
  });

  it("an attempt whose owner's lease expired fails closed once and is settled by its owner when it returns", async () => {
    const gone = host("gone", 0, 2_000);
    const survivor = host("survivor", 0);
    const runId = await startDiamond("owner-gone", gone.clock);
    const running = await firstAttemptIn(coordinator(gone), runId, "running");
    // The owner stops heartbeating: expire its lease in the store rather than wait 15 s.
    await store.transaction(async (tx) => {
      const record = await tx.getCoordinator(gone.node.nodeId);
      if (record === null) throw new Error("the owner never registered");
      const nowMs = await tx.observe(Date.now());
      await tx.putCoordinator({ ...record, leaseExpiresAtMs: nowMs - 1 }, record.incarnation);
    });
    const b = coordinator(survivor);
    await b.recover();
    await waitFor(
      "the orphaned attempt is reported",
      async () => {
        await b.tick();
        return (await attemptById(runId, running.id))?.error !== null;
      },
      30_000,
    );
    const reported = await attemptById(runId, running.id);
    expect(reported?.status).toBe("running");
    expect(reported?.error).toContain(`owner node ${gone.node.nodeId}`);
    const failedClosed = await failedClosedEvents(runId);
    await b.tick();
    expect(await failedClosedEvents(runId)).toBe(failedClosed);
    expect(survivor.executor.spawnCounts.has(running.id)).toBe(false);

    // The owner returns on the same state dir: a new incarnation with a live lease, its own receipt settles it.
    const back = coordinator(gone);
    const registered = await back.register();
    expect(registered?.incarnation).toBeGreaterThan(1);
    expect(registered?.leaseExpiresAtMs).toBeGreaterThan(Date.now() + COORDINATOR_LEASE_MS / 2);
    await tickUntilSucceeded(runId, [back, b], () => back.recover());
    // The earlier incarnation is superseded: its heartbeat would fail, so it freezes.
    await store.transaction(async (tx) => {
      const record = await tx.getCoordinator(gone.node.nodeId);
      expect(record?.incarnation).toBe(registered?.incarnation);
    });
  });
});
