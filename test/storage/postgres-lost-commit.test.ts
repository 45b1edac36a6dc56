import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Coordinator } from "../../src/coordinator.ts";
import { isQlrError } from "../../src/errors.ts";
import { LeaseService } from "../../src/lease-service.ts";
import type { RunAttempt, RunEvent } from "../../src/model.ts";
import type { NodeIdentity } from "../../src/ownership.ts";
import type { Clock } from "../../src/ports.ts";
import { PROFILES } from "../../src/profiles.ts";
import { Prng } from "../../src/sim/prng.ts";
import { SimulatedExecutor } from "../../src/sim/simulated-executor.ts";
import type { Manifest } from "../../src/manifest/types.ts";
import { uuidv7Ids } from "../../runtimes/shared/uuidv7.ts";
import type { SqlDriver } from "../../storage/driver.ts";
import { openPgDriver } from "../../storage/postgres/pg-driver.ts";
import { isUnknownCommitOutcome } from "../../storage/postgres/transaction.ts";
import { openPostgresStore } from "../../storage/postgres/store.ts";
import type { SqlStore } from "../../storage/sql-store.ts";
import { applyAndStart, diamondManifest, SequentialSecrets, task } from "../support/fixtures.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import {
  startTcpProxy,
  urlThroughProxy,
  type CommitLoss,
  type ProxiedStatement,
  type TcpProxy,
} from "../support/tcp-proxy.ts";
import { waitFor } from "../support/wait.ts";
import { runLeasedTask } from "./fixtures/lease-worker.ts";

/**
 * Lost COMMITs on the wire: a coordinator (and a lease service, the coordinator a worker talks
 * to) reach a real PostgreSQL through a TCP proxy that breaks the connection at COMMIT. The
 * driver recorded the transaction id before COMMIT and asks the server about it on a new
 * connection: a COMMIT that was applied answers the caller as if nothing had been lost, one
 * that never reached the server is run again, and nothing is applied twice. When the server
 * cannot be asked (the partition outlasts the connection), the caller hears an unknown outcome
 * and its replay path reads what is durable. In every case: no second admission, no second spawn
 * or lease, no completion lost or doubled, events numbered without a gap.
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

/** A fresh database and a TCP proxy in front of it, for one describe. */
interface ProxiedDatabase {
  readonly database: TestDatabase;
  readonly proxy: TcpProxy;
  /** The database's URL through the proxy. */
  readonly proxiedUrl: string;
}

/**
 * The describe's database behind its proxy, ready before the describe's own `beforeAll`. After
 * each test the proxy is disarmed and takes connections again; once the describe's own
 * `afterAll` has closed what it opened, the proxy closes and the database is dropped.
 */
function useProxiedDatabase(): ProxiedDatabase {
  // Filled in by beforeAll, before any test reads it; the cleanups hold up if it failed half-way.
  const wire: Partial<ProxiedDatabase> = {};
  beforeAll(async () => {
    const database = await createTestDatabase();
    Object.assign(wire, { database });
    const server = new URL(database.url);
    const proxy = await startTcpProxy({ host: server.hostname, port: Number(server.port) });
    Object.assign(wire, { proxy, proxiedUrl: urlThroughProxy(database.url, proxy) });
  });
  afterEach(() => {
    wire.proxy?.disarm();
    wire.proxy?.acceptConnections();
  });
  afterAll(async () => {
    await wire.proxy?.close();
    await wire.database?.drop();
  });
  return wire as ProxiedDatabase;
}

describe("lost COMMITs on the wire to a real PostgreSQL", { timeout: 120_000 }, () => {
  const wire = useProxiedDatabase();
  /** Through the proxy: everything under test. */
  let store: SqlStore;
  /** Through the proxy, giving up on a server it cannot reach after a few tries. */
  let impatient: SqlStore;
  /** Straight to the server: set-up and inspection. */
  let direct: SqlStore;
  let executor: SimulatedExecutor;
  let coordinator: Coordinator;

  beforeAll(async () => {
    direct = await openPostgresStore(
      await openPgDriver({ connectionString: wire.database.url }),
      Date.now(),
      { clock: "database" },
    );
    store = await openPostgresStore(
      await openPgDriver({ connectionString: wire.proxiedUrl, poolSize: 2 }),
      Date.now(),
      { clock: "database" },
    );
    impatient = await openPostgresStore(
      await openPgDriver({
        connectionString: wire.proxiedUrl,
        poolSize: 2,
        reconnect: { maxAttempts: 3, baseDelayMs: 20, maxDelayMs: 50 },
      }),
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
  afterAll(async () => {
    await store?.close();
    await impatient?.close();
    await direct?.close();
  });

  function startWorkflow(manifest: Manifest, workflow: string): Promise<string> {
    const target = { kind: "workflow", name: workflow } as const;
    return applyAndStart(direct, clock, manifest, target, uuidv7Ids.runId());
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

  it("admission: the attempt committed, the answer lost; the driver learns it committed, nothing is admitted twice", async () => {
    const runId = await startWorkflow(diamondManifest("lost-admission"), "diamond");
    const loss = wire.proxy.arm({ mode: "after-commit", when: insertsAttempt });
    const errors = await tickUntil(loss, "the admission COMMIT is lost");
    // The server said the transaction committed: the stage never heard of the lost answer.
    expect(errors).toEqual([]);
    expect((await attemptsOf(runId)).length).toBeGreaterThanOrEqual(1);
    await finish(runId);
    await expectExactReplay(runId, 4);
  });

  it("dispatch: `starting` committed, the answer lost; the launcher still gets it and spawns once", async () => {
    const runId = await startWorkflow(diamondManifest("lost-dispatch"), "diamond");
    const loss = wire.proxy.arm({ mode: "after-commit", when: writesAttemptStatus("starting") });
    const errors = await tickUntil(loss, "the dispatch COMMIT is lost");
    expect(errors).toEqual([]);
    const lost = (await loss).statements.find((statement) =>
      /^\s*UPDATE run_attempts/i.test(statement.sql),
    );
    await finish(runId);
    await expectExactReplay(runId, 4);
    // The attempt whose `starting` answer was lost is the one that ran: no attempt ended lost.
    const attemptId = lost?.params.at(-2);
    const attempts = await attemptsOf(runId);
    expect(attempts.find((candidate) => candidate.id === attemptId)?.status).toBe("succeeded");
    expect(attempts.filter((attempt) => attempt.status === "lost")).toEqual([]);
    expect(executor.spawnCounts.get(attemptId ?? "") ?? 0).toBe(1);
  });

  it("completion: `succeeded` committed, the answer lost; recorded once, the run goes on", async () => {
    const runId = await startWorkflow(diamondManifest("lost-completion"), "diamond");
    const loss = wire.proxy.arm({ mode: "after-commit", when: writesAttemptStatus("succeeded") });
    const errors = await tickUntil(loss, "the completion COMMIT is lost");
    expect(errors).toEqual([]);
    await finish(runId);
    await expectExactReplay(runId, 4);
  });

  /**
   * A worker's lease completion whose COMMIT answer is lost. When the server can be asked, the
   * report is answered as applied; when it cannot (`unreachable`), the report fails as unknown
   * and the worker's retry of it is answered `replayed` from the durable state.
   */
  async function leaseCompletionLost(name: string, unreachable: boolean): Promise<void> {
    const pool = `pool-${name}`;
    const manifest: Manifest = {
      ...diamondManifest(name, {
        tasks: [task("work", ["true"], { executor: "remote_worker", pool })],
      }),
    };
    const runId = await startWorkflow(manifest, "diamond");
    const leases = new LeaseService({
      store: unreachable ? impatient : store,
      clock,
      secrets: new SequentialSecrets(),
      ttlMs: 30_000,
    });
    const worker = `worker-${name}`;
    const completedOnce = new Map<string, number>();
    let lostAnswers = 0;
    await waitFor(
      "every remote step completes",
      async () => {
        await coordinator.tick();
        for (const lease of await leases.claim(worker, pool, 4)) {
          const as = {
            workerId: worker,
            pid: 1000 + completedOnce.size,
            bootId: "boot-lost-lease",
          };
          const { fence, facts } = await runLeasedTask(leases, lease, as);
          completedOnce.set(lease.attemptId, (completedOnce.get(lease.attemptId) ?? 0) + 1);
          if (lostAnswers === 0) {
            const loss = wire.proxy.arm({
              mode: "after-commit",
              when: writesAttemptStatus("succeeded"),
              thenRefuseConnections: unreachable,
            });
            const outcome = await leases.complete(lease.attemptId, fence, facts).then(
              (answer) => ({ answer }),
              (error: unknown) => ({ error }),
            );
            expect((await loss).mode).toBe("after-commit");
            lostAnswers += 1;
            if (!unreachable) {
              // The server vouched for the commit: the report is answered as applied.
              expect(outcome).toEqual({ answer: { status: "succeeded", replayed: false } });
            } else {
              expect("error" in outcome && isQlrError(outcome.error, "storage_unavailable")).toBe(
                true,
              );
              expect(String((outcome as { error: unknown }).error)).toMatch(/during COMMIT/);
              wire.proxy.acceptConnections();
            }
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
  }

  it("lease completion: the worker's report committed, the answer lost; the server vouches for it", () =>
    leaseCompletionLost("lost-lease", false));

  it("lease completion: the answer lost and the server out of reach; the outcome is unknown and the worker's retry is a replay", () =>
    leaseCompletionLost("lost-lease-unreachable", true));

  it("a connection lost before COMMIT reached the server applied nothing; the driver learns it aborted and applies it once", async () => {
    const runId = await startWorkflow(diamondManifest("lost-before-commit"), "diamond");
    const loss = wire.proxy.arm({ mode: "before-commit", when: insertsAttempt });
    const errors = await tickUntil(loss, "the admission COMMIT never reaches the server");
    // The server reported the transaction aborted, so the driver ran it again within the same call.
    expect(errors).toEqual([]);
    const admitted = await attemptsOf(runId);
    expect(admitted.length).toBeGreaterThanOrEqual(1);
    expect(new Set(admitted.map((attempt) => attempt.stepRunId)).size).toBe(admitted.length);
    await finish(runId);
    await expectExactReplay(runId, 4);
  });
});

/**
 * The driver alone, on a counter no transaction may bump twice: the store's transactions re-read
 * their state and would hide a second run, this one would not.
 */
describe("the pg driver settles a lost COMMIT with the server", { timeout: 120_000 }, () => {
  const wire = useProxiedDatabase();
  let driver: SqlDriver;
  let direct: SqlDriver;
  const name = "lost_commit_counter";

  beforeAll(async () => {
    direct = await openPgDriver({ connectionString: wire.database.url });
    driver = await openPgDriver({
      connectionString: wire.proxiedUrl,
      reconnect: { maxAttempts: 3, baseDelayMs: 20, maxDelayMs: 50 },
    });
    await direct.transaction((tx) =>
      tx.query(`CREATE TABLE ${name} (id int PRIMARY KEY, bumps int NOT NULL)`),
    );
  });
  afterAll(async () => {
    await driver?.close();
    await direct?.close();
  });

  const bumps = async (id: number): Promise<number | undefined> =>
    (
      await direct.transaction((tx) =>
        tx.query<{ bumps: number }>(`SELECT bumps FROM ${name} WHERE id = $1`, [id]),
      )
    )[0]?.bumps;

  /** Bumps row `id` once per run of the transaction; returns what it computed and how often it ran. */
  async function bump(id: number): Promise<{ value: string; runs: number }> {
    let runs = 0;
    const value = await driver.transaction(async (tx) => {
      runs += 1;
      await tx.query(
        `INSERT INTO ${name} (id, bumps) VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET bumps = ${name}.bumps + 1`,
        [id],
      );
      return `bumped ${id}`;
    });
    return { value, runs };
  }

  const bumpsRow = (statements: readonly ProxiedStatement[]): boolean =>
    statements.some((statement) => statement.sql.includes(`INSERT INTO ${name}`));

  const settledCases = [
    {
      title: "committed: the call answers with the transaction's value, run once",
      mode: "after-commit",
      id: 1,
      runs: 1,
    },
    {
      title: "aborted: COMMIT never reached the server; the call runs it again and it applies once",
      mode: "before-commit",
      id: 2,
      runs: 2,
    },
  ] as const;
  for (const { title, mode, id, runs } of settledCases)
    it(title, async () => {
      const loss = wire.proxy.arm({ mode, when: bumpsRow });
      expect(await bump(id)).toEqual({ value: `bumped ${id}`, runs });
      expect((await loss).mode).toBe(mode);
      expect(await bumps(id)).toBe(1);
    });

  it("the evidence rides on the writing statement: once the connection knows its server, nothing is asked before COMMIT, and a lost COMMIT still settles as committed", async () => {
    // The connection's first writing transaction reads its server's timeline and start.
    expect(await bump(10)).toEqual({ value: "bumped 10", runs: 1 });
    const loss = wire.proxy.arm({ mode: "after-commit", when: bumpsRow });
    expect(await bump(11)).toEqual({ value: "bumped 11", runs: 1 });
    const { statements } = await loss;
    expect(statements.map((statement) => statement.sql.split(" ")[0])).toEqual(["INSERT"]);
    expect(statements[0]?.sql).toContain("pg_current_xact_id_if_assigned()");
    expect(statements.some((statement) => statement.sql.includes("pg_postmaster_start_time"))).toBe(
      false,
    );
    expect(await bumps(11)).toBe(1);
  });

  it("a transaction that wrote nothing is run again without asking", async () => {
    const loss = wire.proxy.arm({ mode: "after-commit" });
    let runs = 0;
    const rows = await driver.transaction(async (tx) => {
      runs += 1;
      return tx.query<{ one: number }>("SELECT 1 AS one");
    });
    const { mode, statements } = await loss;
    expect(mode).toBe("after-commit");
    // Only the read went out: a transaction that sent no write asks for no transaction id.
    expect(statements.map((statement) => statement.sql)).toEqual(["SELECT 1 AS one"]);
    expect({ rows, runs }).toEqual({ rows: [{ one: 1 }], runs: 2 });
  });

  it("unknown: the server cannot be asked; the caller hears an unknown outcome and the write stands once", async () => {
    const loss = wire.proxy.arm({
      mode: "after-commit",
      when: bumpsRow,
      thenRefuseConnections: true,
    });
    const outcome = await bump(3).then(
      (answer) => ({ answer }),
      (error: unknown) => ({ error }),
    );
    await loss;
    wire.proxy.acceptConnections();
    expect("error" in outcome && isUnknownCommitOutcome(outcome.error)).toBe(true);
    expect(await bumps(3)).toBe(1);
  });
});
