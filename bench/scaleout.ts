/**
 * Bench: group commit and scale-out on one PostgreSQL server.
 *
 * For each mode (`grouped`: one transaction per stage page, the default; `per-item`: one per
 * item, as before group commit) and each number of coordinators (1, 2, 3 by default), a fresh
 * database on the bench's server, `coordinators` in-process `Coordinator`s over it, each with
 * its own `pg` pool, its own node identity (ownership, heartbeat lease), the database clock and
 * the cluster profile, exactly as `qlr serve --store postgres --profile cluster` wires them,
 * and its own simulated executor on the wall clock (processes of 1–10 ms that always succeed).
 * The coordinators tick back to back, all at once, until every run is terminal:
 *
 * 1. `ordinaryRuns` runs of one task, started first (one transaction each, not timed): runs/s;
 * 2. then `workflowRuns` 4-step diamond runs: steps/s.
 *
 * The wall time runs from the first tick to the last run seen terminal (polled every 20 ms on a
 * connection of its own), or to the phase's time cap, where the rate counts the runs that
 * finished within it. Per variant it also reports what the coordinators' transactions cost:
 * transactions, bodies run (above transactions by PostgreSQL's serializable retries), failed
 * transactions, statements, and the stage pages written as one transaction or item by item.
 * One Node process runs every coordinator, so their JavaScript shares one core; the server has
 * the other.
 */
import { Coordinator, type PageReport } from "../src/coordinator.ts";
import type { Clock } from "../src/ports.ts";
import { transactAtStoreTime } from "../src/ports.ts";
import { PROFILES } from "../src/profiles.ts";
import { Prng } from "../src/sim/prng.ts";
import { SimulatedExecutor } from "../src/sim/simulated-executor.ts";
import { applyPackage, startRun } from "../src/operations.ts";
import { TERMINAL_RUN_STATUSES } from "../src/model.ts";
import type { SqlStore } from "../storage/sql-store.ts";
import {
  BenchIds,
  diamondManifest,
  log,
  now,
  readConfig,
  round,
  writeResult,
} from "./lib/common.ts";
import { CountingDriver, createDatabase, type StatementTally } from "./lib/stores.ts";
import { stageErrorsOf } from "./lib/world.ts";

export type ScaleoutMode = "grouped" | "per-item";

export interface ScaleoutConfig {
  readonly coordinators: readonly number[];
  readonly modes: readonly ScaleoutMode[];
  readonly ordinaryRuns: number;
  readonly workflowRuns: number;
  /** Time cap of one phase; a phase that hits it reports `finished: false`. */
  readonly capMs: number;
}

interface PhaseFigures {
  readonly runs: number;
  readonly completedRuns: number;
  readonly units: number;
  readonly finished: boolean;
  readonly wallMs: number;
  readonly perSecond: number;
  readonly ticks: number;
  readonly stageErrors: number;
  readonly firstStageError: string | null;
  readonly transactions: number;
  readonly bodyRuns: number;
  readonly failedTransactions: number;
  readonly statements: number;
  readonly statementsPerUnit: number;
  readonly transactionsPerUnit: number;
  readonly pagesCommitted: number;
  readonly pagesItemByItem: number;
  readonly meanPageSize: number;
}

const wallClock: Clock = { nowMs: () => Date.now() };

async function startRuns(
  store: SqlStore,
  ids: BenchIds,
  target: { kind: "task" | "workflow"; name: string },
  count: number,
): Promise<void> {
  for (let index = 0; index < count; index += 1) {
    const runId = ids.runId();
    await transactAtStoreTime(store, wallClock, (tx, nowMs) =>
      startRun(
        tx,
        { package: "bench", target, idempotencyKey: null, scheduleName: null, runId },
        nowMs,
      ),
    );
  }
}

async function terminalRuns(store: SqlStore): Promise<number> {
  const counts = await store.transaction((tx) => tx.countRunsByStatus());
  let terminal = 0;
  for (const [status, count] of Object.entries(counts))
    if (TERMINAL_RUN_STATUSES.has(status as never)) terminal += count;
  return terminal;
}

function sumTallies(tallies: readonly StatementTally[]): {
  transactions: number;
  bodyRuns: number;
  failedTransactions: number;
  statements: number;
} {
  const sum = { transactions: 0, bodyRuns: 0, failedTransactions: 0, statements: 0 };
  for (const tally of tallies) {
    sum.transactions += tally.transactions;
    sum.bodyRuns += tally.bodyRuns;
    sum.failedTransactions += tally.failedTransactions;
    sum.statements += tally.statements;
  }
  return sum;
}

async function variant(
  adminUrl: string,
  mode: ScaleoutMode,
  coordinatorCount: number,
  config: ScaleoutConfig,
): Promise<Record<string, unknown>> {
  const { openPgDriver } = await import("../storage/postgres/pg-driver.ts");
  const { openPostgresStore } = await import("../storage/postgres/store.ts");
  const database = await createDatabase(adminUrl);
  const monitorStore = await openPostgresStore(
    await openPgDriver({ connectionString: database.url, poolSize: 1 }),
    Date.now(),
    { clock: "database" },
  );
  const drivers: CountingDriver[] = [];
  const stores: SqlStore[] = [];
  try {
    for (let index = 0; index < coordinatorCount; index += 1) {
      const driver = new CountingDriver(await openPgDriver({ connectionString: database.url }));
      drivers.push(driver);
      stores.push(await openPostgresStore(driver, Date.now(), { clock: "database" }));
    }
    await transactAtStoreTime(monitorStore, wallClock, (tx, nowMs) =>
      applyPackage(tx, diamondManifest("bench"), nowMs),
    );
    const pages: PageReport[] = [];
    let stageErrors = 0;
    let firstStageError: string | null = null;
    let ticks = 0;
    const coordinators = stores.map(
      (store, index) =>
        new Coordinator({
          store,
          clock: wallClock,
          ids: new BenchIds(`c${index}`),
          profile: PROFILES.cluster,
          node: { nodeId: `bench-${index}`, host: `bench-host-${index}`, bootId: null },
          executors: {
            local_process: new SimulatedExecutor({
              clock: wallClock,
              prng: new Prng(0x5ca1e + index),
              failureRate: 0,
              spawnFailureRate: 0,
              minDurationMs: 1,
              maxDurationMs: 10,
            }),
          },
          maxRunning: null,
          groupCommit: mode === "grouped",
          onPage: (page) => pages.push(page),
          onTick: (report) => {
            ticks += 1;
            const errors = stageErrorsOf(report);
            stageErrors += errors.count;
            firstStageError ??= errors.first;
          },
        }),
    );
    for (const coordinator of coordinators) await coordinator.register();

    const ids = new BenchIds("run");
    const phase = async (
      target: { kind: "task" | "workflow"; name: string },
      runs: number,
      unitsPerRun: number,
    ): Promise<PhaseFigures> => {
      const terminalBefore = await terminalRuns(monitorStore);
      await startRuns(monitorStore, ids, target, runs);
      for (const driver of drivers) {
        driver.reset();
        driver.counting = true;
      }
      pages.length = 0;
      stageErrors = 0;
      firstStageError = null;
      ticks = 0;
      let done = false;
      let finished = false;
      let completed = 0;
      const startedAt = now();
      const loops = coordinators.map(async (coordinator) => {
        while (!done) await coordinator.tick();
      });
      while (now() - startedAt < config.capMs) {
        completed = (await terminalRuns(monitorStore)) - terminalBefore;
        if (completed >= runs) {
          finished = true;
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const endedAt = now();
      done = true;
      await Promise.all(loops);
      for (const driver of drivers) driver.counting = false;
      const wallMs = endedAt - startedAt;
      // A phase cut by the cap counts what finished in it: the rate stays a rate.
      const units = Math.min(runs, completed) * unitsPerRun;
      const sums = sumTallies(drivers.map((driver) => driver.tally));
      const committed = pages.filter((page) => page.committed);
      return {
        runs,
        completedRuns: completed,
        units,
        finished,
        wallMs: round(wallMs, 1),
        perSecond: round((units / wallMs) * 1000, 1),
        ticks,
        stageErrors,
        firstStageError,
        ...sums,
        statementsPerUnit: round(sums.statements / Math.max(1, units), 1),
        transactionsPerUnit: round(sums.transactions / Math.max(1, units), 2),
        pagesCommitted: committed.length,
        pagesItemByItem: pages.length - committed.length,
        meanPageSize: round(
          committed.reduce((total, page) => total + page.size, 0) / Math.max(1, committed.length),
          1,
        ),
      };
    };

    const ordinary =
      config.ordinaryRuns > 0
        ? await phase({ kind: "task", name: "work" }, config.ordinaryRuns, 1)
        : null;
    const workflow =
      config.workflowRuns > 0
        ? await phase({ kind: "workflow", name: "diamond" }, config.workflowRuns, 4)
        : null;
    log(
      `scaleout ${mode}, ${coordinatorCount} coordinator(s): ordinary ${ordinary?.perSecond ?? "-"} runs/s, workflow ${workflow?.perSecond ?? "-"} steps/s`,
    );
    return { mode, coordinators: coordinatorCount, ordinary, workflow };
  } finally {
    for (const store of stores) await store.close().catch(() => undefined);
    await monitorStore.close().catch(() => undefined);
    await database.drop();
  }
}

async function main(): Promise<void> {
  const config = readConfig<ScaleoutConfig>();
  const adminUrl = process.env.QLR_BENCH_PG_URL;
  if (adminUrl === undefined || adminUrl === "")
    throw new Error("the scale-out bench needs QLR_BENCH_PG_URL (the orchestrator starts one)");
  const variants: Record<string, unknown>[] = [];
  for (const mode of config.modes)
    for (const count of config.coordinators)
      variants.push(await variant(adminUrl, mode, count, config));
  writeResult({
    bench: "scaleout",
    store: "pg",
    profile: "cluster",
    ordinaryRuns: config.ordinaryRuns,
    workflowRuns: config.workflowRuns,
    variants,
  });
}

await main();
