import { afterEach, describe, expect, it } from "vitest";
import { RunChange } from "../../src/aggregate.ts";
import { Coordinator } from "../../src/coordinator.ts";
import { QlrError } from "../../src/errors.ts";
import { LeaseService, type Lease } from "../../src/lease-service.ts";
import { DEFAULT_LEASE_TTL_MS, MAX_CLAIM_CAPACITY, type LeaseFence } from "../../src/leases.ts";
import type { Manifest, TaskSpec } from "../../src/manifest/types.ts";
import type { RunAttempt } from "../../src/model.ts";
import { applyPackage, cancelRun, startRun } from "../../src/operations.ts";
import type { SecretSource, Store, StoreTransactionOptions, StoreTx } from "../../src/ports.ts";
import { PROFILES } from "../../src/profiles.ts";
import { openSqlStore, type SqlStore } from "../../storage/sql-store.ts";
import { openSqlJsMemoryDriver } from "../../storage/sqljs/memory-driver.ts";
import { loadSqlJs } from "../../storage/sqljs/node/load.ts";
import { migrationsFor } from "../support/dialect-migrations.ts";
import { SequentialIds, SequentialSecrets, task, TestClock } from "../support/fixtures.ts";
import { exitFacts } from "./core-fixtures.ts";

/**
 * The lease service over a real in-memory sql.js store: what each call reads, writes and
 * answers (ADR-0227 §4–§6). A Coordinator without executors admits the remote attempts; the
 * service plays the worker. The whole protocol on every driver is test/leases/.
 */

const TTL_MS = 10_000;
const TIMEOUT_MS = 60_000;

/**
 * The real store, seen through a window: it counts transactions, records the arguments of
 * each claim listing, runs `afterListing` once the listing's transaction committed (another
 * worker or an operator acting between the listing and the grants), and can refuse the apply
 * that writes one attempt with `conflict`, as the store does when another coordinator's write
 * of the same row committed first.
 */
class WatchedStore implements Store {
  readonly dialect;
  readonly driverName;
  transactions = 0;
  readonly listings: { pool: string; nowMs: number; limit: number }[] = [];
  afterListing: (() => Promise<void>) | null = null;
  conflictOnAttempt: string | null = null;

  constructor(private readonly inner: SqlStore) {
    this.dialect = inner.dialect;
    this.driverName = inner.driverName;
  }

  async transaction<T>(
    fn: (tx: StoreTx) => Promise<T>,
    options?: StoreTransactionOptions,
  ): Promise<T> {
    this.transactions += 1;
    let listed = false;
    const result = await this.inner.transaction((tx) => {
      const watched = new Proxy(tx, {
        get: (target, key, receiver) => {
          if (key === "listClaimableRemote")
            return (pool: string, nowMs: number, limit: number) => {
              listed = true;
              this.listings.push({ pool, nowMs, limit });
              return target.listClaimableRemote(pool, nowMs, limit);
            };
          if (key === "apply")
            return async (change: Parameters<StoreTx["apply"]>[0]) => {
              const conflicted = this.conflictOnAttempt;
              if (
                conflicted !== null &&
                change.attempts.some((row) => row.after.id === conflicted)
              ) {
                this.conflictOnAttempt = null;
                throw new QlrError("conflict", `attempt ${conflicted} changed meanwhile`);
              }
              return target.apply(change);
            };
          const value: unknown = Reflect.get(target, key, receiver);
          return typeof value === "function"
            ? (value as (...args: unknown[]) => unknown).bind(target)
            : value;
        },
      });
      return fn(watched);
    }, options);
    if (listed && this.afterListing !== null) {
      const hook = this.afterListing;
      this.afterListing = null;
      await hook();
    }
    return result;
  }

  /** Watched like any other transaction: the listings it serves are what these tests count. */
  read<T>(fn: (tx: StoreTx) => Promise<T>): Promise<T> {
    return this.transaction(fn);
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}

interface World {
  readonly store: WatchedStore;
  readonly clock: TestClock;
  readonly coordinator: Coordinator;
  readonly leases: LeaseService;
}

const opened: SqlStore[] = [];
afterEach(async () => {
  for (const store of opened.splice(0)) await store.close();
});

async function openWorld(
  options: { ttlMs?: number | null; secrets?: SecretSource } = {},
): Promise<World> {
  const clock = new TestClock();
  const driver = openSqlJsMemoryDriver(await loadSqlJs());
  const inner = await openSqlStore(driver, migrationsFor(driver.dialect), clock.nowMs());
  opened.push(inner);
  const store = new WatchedStore(inner);
  const coordinator = new Coordinator({
    store,
    clock,
    ids: new SequentialIds("ls"),
    profile: PROFILES.standalone,
    executors: {},
  });
  const leases = new LeaseService({
    store,
    clock,
    secrets: options.secrets ?? new SequentialSecrets(),
    ...(options.ttlMs === null ? {} : { ttlMs: options.ttlMs ?? TTL_MS }),
  });
  return { store, clock, coordinator, leases };
}

function remoteTask(overrides: Partial<TaskSpec> = {}): TaskSpec {
  return task("work", ["sh", "-c", "echo remote"], {
    executor: "remote_worker",
    pool: "pool-1",
    timeoutMs: TIMEOUT_MS,
    ...overrides,
  });
}

function flowManifest(steps: Record<string, string[]>): Manifest {
  return {
    package: "leased",
    description: null,
    tasks: [remoteTask()],
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

/** Applies the manifest, starts `target` and ticks once: its first attempts are admitted `claimed`. */
async function started(
  world: World,
  manifest: Manifest,
  target: { kind: "workflow" | "task"; name: string } = { kind: "workflow", name: "flow" },
): Promise<string> {
  const runId = await world.store.transaction(async (tx) => {
    const nowMs = await tx.observe(world.clock.nowMs());
    await applyPackage(tx, manifest, nowMs);
    const { run } = await startRun(
      tx,
      {
        package: manifest.package,
        target,
        idempotencyKey: null,
        scheduleName: null,
        runId: `run-${target.name}`,
      },
      nowMs,
    );
    return run.id;
  });
  await tick(world);
  return runId;
}

async function tick(world: World): Promise<void> {
  const report = await world.coordinator.tick();
  for (const stage of report.stages)
    if (stage.errors.length > 0) throw new Error(JSON.stringify(stage.errors));
}

function attempts(world: World, runId: string): Promise<RunAttempt[]> {
  return world.store.transaction((tx) => tx.getAttempts(runId));
}

function attempt(world: World, attemptId: string): Promise<RunAttempt> {
  return world.store.transaction(async (tx) => (await tx.getAttempt(attemptId))!);
}

function fenceOf(lease: Lease, workerId = "worker-1"): LeaseFence {
  return { workerId, leaseVersion: lease.leaseVersion, leaseSecret: lease.leaseSecret };
}

const HANDLE = { pid: 77, processStartTicks: "ticks-77", bootId: "boot-w" };

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    return (error as { code?: string }).code ?? String(error);
  }
  return "ok";
}

async function messageOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    return (error as Error).message;
  }
  return "ok";
}

/** One step `a` claimed, leased by worker-1, started and running with its handle at `startedAtMs`. */
async function runningLease(
  world: World,
): Promise<{ runId: string; lease: Lease; startedAtMs: number }> {
  const runId = await started(world, flowManifest({ a: [] }));
  const [lease] = await world.leases.claim("worker-1", "pool-1", 1);
  await world.leases.start(lease!.attemptId, fenceOf(lease!), "starting", null);
  const startedAtMs = world.clock.nowMs();
  await world.leases.start(lease!.attemptId, fenceOf(lease!), "running", {
    ...HANDLE,
    startedAtMs,
  });
  return { runId, lease: lease!, startedAtMs };
}

describe("claim", () => {
  it("a claim asks the store for the pool at the clock's time and at most the capacity, never more than 64", async () => {
    const world = await openWorld();
    await started(world, flowManifest({ a: [], b: [], c: [] }));
    expect(await world.leases.claim("worker-1", "pool-1", 2)).toHaveLength(2);
    expect(await world.leases.claim("worker-1", "pool-1", 1_000)).toHaveLength(1);
    expect(world.store.listings).toEqual([
      { pool: "pool-1", nowMs: world.clock.nowMs(), limit: 2 },
      { pool: "pool-1", nowMs: world.clock.nowMs(), limit: MAX_CLAIM_CAPACITY },
    ]);
  });

  it("a claim for no capacity, or a negative one, opens no transaction and leases nothing", async () => {
    const world = await openWorld();
    await started(world, flowManifest({ a: [] }));
    const before = world.store.transactions;
    expect(await world.leases.claim("worker-1", "pool-1", 0)).toEqual([]);
    expect(await world.leases.claim("worker-1", "pool-1", -5)).toEqual([]);
    expect(world.store.transactions).toBe(before);
  });

  it("the lease answers the attempt, its fence and expiry, the admitted revision and the task's context", async () => {
    const world = await openWorld();
    const runId = await started(world, flowManifest({ a: [] }));
    const [claimed] = await attempts(world, runId);
    const [lease] = await world.leases.claim("worker-1", "pool-1", 1);
    expect(lease).toMatchObject({
      attemptId: claimed!.id,
      leaseVersion: 1,
      leaseSecret: "lease-secret-00000001",
      leaseExpiresAtMs: world.clock.nowMs() + TTL_MS,
      runId,
      stepRunId: claimed!.stepRunId,
      execution: { executor: "remote_worker", pool: "pool-1", argv: ["sh", "-c", "echo remote"] },
      context: { runId, step: "a", task: "work", attemptId: claimed!.id, needs: {} },
    });
    expect(lease!.taskRevision).toMatch(/\S/);
  });

  it("without a configured ttl a lease lasts the default", async () => {
    const world = await openWorld({ ttlMs: null });
    await started(world, flowManifest({ a: [] }));
    const [lease] = await world.leases.claim("worker-1", "pool-1", 1);
    expect(lease!.leaseExpiresAtMs).toBe(world.clock.nowMs() + DEFAULT_LEASE_TTL_MS);
  });

  it("a step's context carries the outputs of the steps it needs", async () => {
    const world = await openWorld();
    const runId = await started(world, flowManifest({ a: [], b: ["a"] }));
    const [first] = await world.leases.claim("worker-1", "pool-1", 1);
    const fence = fenceOf(first!);
    await world.leases.start(first!.attemptId, fence, "starting", null);
    const startedAtMs = world.clock.nowMs();
    await world.leases.start(first!.attemptId, fence, "running", { ...HANDLE, startedAtMs });
    world.clock.advance(10);
    await world.leases.complete(
      first!.attemptId,
      fence,
      exitFacts(startedAtMs, world.clock.nowMs(), 0, { output: { rows: 3 } }),
    );
    await tick(world);
    const [second] = await world.leases.claim("worker-2", "pool-1", 1);
    expect(second!.context).toMatchObject({ runId, step: "b", needs: { a: { rows: 3 } } });
  });

  it("an ordinary run's lease is told its task as its step, with no needs", async () => {
    const world = await openWorld();
    const runId = await started(world, flowManifest({ a: [] }), { kind: "task", name: "work" });
    const [lease] = await world.leases.claim("worker-1", "pool-1", 1);
    expect(lease).toMatchObject({ runId, stepRunId: null, context: { step: "work", needs: {} } });
  });

  it("a candidate another worker leased after the listing is skipped, not leased twice", async () => {
    const world = await openWorld();
    await started(world, flowManifest({ a: [], b: [] }));
    const rival = new LeaseService({
      store: world.store,
      clock: world.clock,
      secrets: new SequentialSecrets(),
      ttlMs: TTL_MS,
    });
    let rivalLeases: Lease[] = [];
    world.store.afterListing = async () => {
      rivalLeases = await rival.claim("worker-2", "pool-1", 1);
    };
    const mine = await world.leases.claim("worker-1", "pool-1", 2);
    expect(rivalLeases).toHaveLength(1);
    expect(mine).toHaveLength(1);
    expect(mine[0]!.attemptId).not.toBe(rivalLeases[0]!.attemptId);
    expect((await attempt(world, rivalLeases[0]!.attemptId)).leaseWorkerId).toBe("worker-2");
  });

  it("a candidate whose run was cancelled after the listing is not leased", async () => {
    const world = await openWorld();
    const runId = await started(world, flowManifest({ a: [] }));
    world.store.afterListing = async () => {
      await world.store.transaction(async (tx) =>
        cancelRun(tx, runId, await tx.observe(world.clock.nowMs())),
      );
    };
    expect(await world.leases.claim("worker-1", "pool-1", 1)).toEqual([]);
    expect((await attempts(world, runId))[0]).toMatchObject({
      leaseVersion: 0,
      leaseWorkerId: null,
    });
  });

  it("a lease lost to a concurrent write is skipped and the others are still granted", async () => {
    const world = await openWorld();
    const runId = await started(world, flowManifest({ a: [], b: [] }));
    const [first, second] = await attempts(world, runId);
    world.store.conflictOnAttempt = first!.id;
    const granted = await world.leases.claim("worker-1", "pool-1", 2);
    expect(granted.map((lease) => lease.attemptId)).toEqual([second!.id]);
  });

  it("a candidate whose ready epoch moved on is settled as lost in its own transaction, and the claim goes on to lease the next", async () => {
    const world = await openWorld();
    const runId = await started(world, flowManifest({ a: [], b: [] }));
    const [stranded, pristine] = await attempts(world, runId);
    // Step a gets a new ready epoch while its claim is still pristine: that claim may not start.
    await world.store.transaction(async (tx) => {
      const step = (await tx.getStep(stranded!.stepRunId!))!;
      const change = new RunChange(
        (await tx.getRun(runId))!,
        await tx.observe(world.clock.nowMs()),
      );
      change.setStep(step, "ready", {}, { reason: "new ready epoch" });
      await tx.apply(change.build());
    });
    const granted = await world.leases.claim("worker-1", "pool-1", 2);
    expect(granted.map((lease) => lease.attemptId)).toEqual([pristine!.id]);
    expect(await attempt(world, stranded!.id)).toMatchObject({
      status: "lost",
      leaseVersion: 0,
      leaseWorkerId: null,
    });
  });

  it("any other failure of a grant is not swallowed", async () => {
    const world = await openWorld({ secrets: { leaseSecret: () => "not a secret" } });
    await started(world, flowManifest({ a: [] }));
    expect(await codeOf(world.leases.claim("worker-1", "pool-1", 1))).toBe("integrity");
  });

  /** Secrets whose first draws are `failures` (each returns a bad secret or throws), then good. */
  function failingFirst(...failures: (() => string)[]): SecretSource {
    const good = new SequentialSecrets();
    return { leaseSecret: () => (failures.shift() ?? (() => good.leaseSecret()))() };
  }

  it("a candidate that cannot be leased is passed over and the claim leases the next", async () => {
    const world = await openWorld({ secrets: failingFirst(() => "not a secret") });
    const runId = await started(world, flowManifest({ a: [], b: [] }));
    const [refused, next] = await attempts(world, runId);
    const granted = await world.leases.claim("worker-1", "pool-1", 2);
    expect(granted.map((lease) => lease.attemptId)).toEqual([next!.id]);
    expect(await attempt(world, refused!.id)).toMatchObject({ status: "claimed", leaseVersion: 0 });
  });

  it("when nothing was leased the claim fails with the first candidate's error, made an Error if it was none", async () => {
    const first = await openWorld({
      secrets: failingFirst(
        () => {
          throw new QlrError("invalid_request", "first refusal");
        },
        () => {
          throw new QlrError("integrity", "second refusal");
        },
      ),
    });
    await started(first, flowManifest({ a: [], b: [] }));
    const refused = first.leases.claim("worker-1", "pool-1", 2);
    await expect(refused).rejects.toMatchObject({
      code: "invalid_request",
      message: "first refusal",
    });
    const thrown = await openWorld({
      secrets: failingFirst(() => {
        // eslint-disable-next-line @typescript-eslint/only-throw-error -- a source that throws a non-Error
        throw "no secret today";
      }),
    });
    await started(thrown, flowManifest({ a: [] }));
    const error: unknown = await thrown.leases
      .claim("worker-1", "pool-1", 1)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toBe("no secret today");
  });

  it("a claim whose only candidate was lost to a concurrent write leases nothing and does not fail", async () => {
    const world = await openWorld();
    const runId = await started(world, flowManifest({ a: [] }));
    world.store.conflictOnAttempt = (await attempts(world, runId))[0]!.id;
    expect(await world.leases.claim("worker-1", "pool-1", 1)).toEqual([]);
  });

  it("a storage error ends the claim: the next candidate is not tried", async () => {
    const world = await openWorld({
      secrets: failingFirst(() => {
        throw new QlrError("storage_unavailable", "disk full");
      }),
    });
    const runId = await started(world, flowManifest({ a: [], b: [] }));
    expect(await codeOf(world.leases.claim("worker-1", "pool-1", 2))).toBe("storage_unavailable");
    for (const row of await attempts(world, runId)) expect(row.leaseVersion).toBe(0);
  });
});

describe("start", () => {
  it("starting and running answer the durable status and the extended lease", async () => {
    const world = await openWorld();
    await started(world, flowManifest({ a: [] }));
    const [lease] = await world.leases.claim("worker-1", "pool-1", 1);
    const fence = fenceOf(lease!);
    world.clock.advance(100);
    expect(await world.leases.start(lease!.attemptId, fence, "starting", null)).toEqual({
      status: "starting",
      leaseExpiresAtMs: world.clock.nowMs() + TTL_MS,
    });
    world.clock.advance(100);
    const startedAtMs = world.clock.nowMs();
    expect(
      await world.leases.start(lease!.attemptId, fence, "running", { ...HANDLE, startedAtMs }),
    ).toEqual({ status: "running", leaseExpiresAtMs: startedAtMs + TTL_MS });
    expect(await attempt(world, lease!.attemptId)).toMatchObject({
      status: "running",
      pid: 77,
      leaseExpiresAtMs: startedAtMs + TTL_MS,
    });
  });

  it("a repeated start answers the lease on record, not a new one", async () => {
    const world = await openWorld();
    await started(world, flowManifest({ a: [] }));
    const [lease] = await world.leases.claim("worker-1", "pool-1", 1);
    const fence = fenceOf(lease!);
    const first = await world.leases.start(lease!.attemptId, fence, "starting", null);
    world.clock.advance(500);
    expect(await world.leases.start(lease!.attemptId, fence, "starting", null)).toEqual(first);
  });

  it("phase running without the process handle is refused and writes nothing", async () => {
    const world = await openWorld();
    await started(world, flowManifest({ a: [] }));
    const [lease] = await world.leases.claim("worker-1", "pool-1", 1);
    const fence = fenceOf(lease!);
    await world.leases.start(lease!.attemptId, fence, "starting", null);
    const before = await attempt(world, lease!.attemptId);
    const refused = world.leases.start(lease!.attemptId, fence, "running", null);
    expect(await messageOf(refused)).toBe("phase running needs the process handle");
    expect(await codeOf(world.leases.start(lease!.attemptId, fence, "running", null))).toBe(
      "invalid_request",
    );
    expect(await attempt(world, lease!.attemptId)).toEqual(before);
  });

  it("an unknown attempt is not_found", async () => {
    const world = await openWorld();
    const fence = { workerId: "w", leaseVersion: 1, leaseSecret: "lease-secret-00000001" };
    expect(await codeOf(world.leases.start("att-none", fence, "starting", null))).toBe("not_found");
  });
});

describe("heartbeat", () => {
  it("a heartbeat extends the stored lease from store time and answers continue", async () => {
    const world = await openWorld();
    const { lease } = await runningLease(world);
    world.clock.advance(2_000);
    expect(await world.leases.heartbeat(lease.attemptId, fenceOf(lease))).toEqual({
      action: "continue",
      leaseExpiresAtMs: world.clock.nowMs() + TTL_MS,
    });
    expect((await attempt(world, lease.attemptId)).leaseExpiresAtMs).toBe(
      world.clock.nowMs() + TTL_MS,
    );
  });

  it("a heartbeat past the deadline records the timeout intent and answers stop_requested", async () => {
    const world = await openWorld();
    const { lease, startedAtMs } = await runningLease(world);
    world.clock.advance(TIMEOUT_MS);
    expect(await world.leases.heartbeat(lease.attemptId, fenceOf(lease))).toEqual({
      action: "stop_requested",
      reason: "timeout",
      leaseExpiresAtMs: startedAtMs + TIMEOUT_MS + TTL_MS,
    });
    expect((await attempt(world, lease.attemptId)).stopReason).toBe("timeout");
  });
});

describe("complete", () => {
  it("a completion is recorded and answered with the stored status; a repeat is replayed", async () => {
    const world = await openWorld();
    const { lease, startedAtMs } = await runningLease(world);
    world.clock.advance(50);
    const done = exitFacts(startedAtMs, world.clock.nowMs(), 3);
    expect(await world.leases.complete(lease.attemptId, fenceOf(lease), done)).toEqual({
      status: "failed",
      replayed: false,
    });
    expect((await attempt(world, lease.attemptId)).exitCode).toBe(3);
    expect(await world.leases.complete(lease.attemptId, fenceOf(lease), done)).toEqual({
      status: "failed",
      replayed: true,
    });
  });
});

describe("lost", () => {
  it("a claim the worker lost before its start is lost and its step gets a new ready epoch", async () => {
    const world = await openWorld();
    const runId = await started(world, flowManifest({ a: [] }));
    const [lease] = await world.leases.claim("worker-1", "pool-1", 1);
    expect(await world.leases.lost(lease!.attemptId, fenceOf(lease!), "gone")).toEqual({
      status: "lost",
      replayed: false,
    });
    const steps = await world.store.transaction((tx) => tx.getSteps(runId));
    expect(steps[0]).toMatchObject({ status: "ready", attemptCount: 0 });
    expect(await attempt(world, lease!.attemptId)).toMatchObject({
      error: "worker worker-1: gone",
    });
  });

  it("a started attempt the worker lost is lost with its step failed, and a repeat is replayed", async () => {
    const world = await openWorld();
    const { runId, lease } = await runningLease(world);
    expect(await world.leases.lost(lease.attemptId, fenceOf(lease), "process vanished")).toEqual({
      status: "lost",
      replayed: false,
    });
    const steps = await world.store.transaction((tx) => tx.getSteps(runId));
    expect(steps[0]?.status).toBe("failed");
    expect(await world.leases.lost(lease.attemptId, fenceOf(lease), "again")).toEqual({
      status: "lost",
      replayed: true,
    });
  });

  it("a loss reported under a stale fence is refused and writes nothing", async () => {
    const world = await openWorld();
    const { lease } = await runningLease(world);
    const before = await attempt(world, lease.attemptId);
    expect(
      await codeOf(
        world.leases.lost(lease.attemptId, { ...fenceOf(lease), workerId: "worker-9" }, "x"),
      ),
    ).toBe("conflict");
    expect(await attempt(world, lease.attemptId)).toEqual(before);
  });

  it("a starting attempt the worker proves never spawned opens a new ready epoch; without the proof its step fails", async () => {
    for (const [evidence, stepStatus] of [
      [{ neverSpawned: true }, "ready"],
      [{ neverSpawned: false }, "failed"],
      [{}, "failed"],
    ] as const) {
      const world = await openWorld();
      const runId = await started(world, flowManifest({ a: [] }));
      const [lease] = await world.leases.claim("worker-1", "pool-1", 1);
      await world.leases.start(lease!.attemptId, fenceOf(lease!), "starting", null);
      const answer = world.leases.lost(lease!.attemptId, fenceOf(lease!), "gone", evidence);
      expect(await answer).toEqual({ status: "lost", replayed: false });
      const steps = await world.store.transaction((tx) => tx.getSteps(runId));
      expect(steps[0]).toMatchObject({ status: stepStatus, attemptCount: 0 });
    }
  });

  it("never-spawned evidence on a running attempt is refused and writes nothing", async () => {
    const world = await openWorld();
    const { lease } = await runningLease(world);
    const before = await attempt(world, lease.attemptId);
    const refused = world.leases.lost(lease.attemptId, fenceOf(lease), "x", { neverSpawned: true });
    expect(await codeOf(refused)).toBe("conflict");
    expect(await attempt(world, lease.attemptId)).toEqual(before);
  });
});
