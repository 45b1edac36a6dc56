/**
 * Bench 7: the peers, pg-boss and graphile-worker, on the same PostgreSQL server as our pg
 * store, each in a fresh database (CREATE DATABASE, dropped at the end), `jobs` trivial jobs
 * whose handler does nothing. Enqueue is timed separately (one bulk insert: pg-boss
 * `insert()`, graphile-worker `addJobs()`), then the workers are started and the clock runs
 * until every job has been processed, or until `capMs` (jobs/s then counts what completed in
 * the window). `defaults` uses each library's defaults; `tuned` what its docs advise for
 * throughput. Completed jobs are counted in the database: pg-boss rows in state `completed`,
 * graphile-worker rows gone from `graphile_worker._private_jobs`.
 */
import pg from "pg";
import { log, now, readConfig, round, writeResult } from "./lib/common.ts";

export interface PeersConfig {
  readonly system: "pg-boss" | "graphile-worker";
  readonly mode: "defaults" | "tuned";
  readonly jobs: number;
  readonly capMs: number;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function databaseUrl(adminUrl: string, database: string): string {
  const url = new URL(adminUrl);
  url.pathname = `/${database}`;
  return url.toString();
}

interface Outcome {
  readonly settings: Record<string, unknown>;
  readonly enqueueMs: number;
  readonly processMs: number;
  readonly completed: number;
  readonly handlerCalls: number;
  readonly capped: boolean;
}

/** Enqueues `jobs` no-op jobs 1000 at a time through `insert`; the milliseconds it took. */
async function enqueueInBatches(
  jobs: number,
  insert: (count: number) => Promise<unknown>,
): Promise<number> {
  const startedAt = now();
  for (let offset = 0; offset < jobs; offset += 1000) await insert(Math.min(1000, jobs - offset));
  return now() - startedAt;
}

/** The `n` of a `SELECT count(*) AS n …` (PostgreSQL answers a bigint as text). */
async function countOf(probe: pg.Client, sql: string): Promise<number> {
  return Number((await probe.query<{ n: string }>(sql)).rows[0]?.n ?? 0);
}

async function pollCompleted(
  count: () => Promise<number>,
  jobs: number,
  capMs: number,
): Promise<{ processMs: number; completed: number; capped: boolean; startedAt: number }> {
  const startedAt = now();
  while (now() - startedAt < capMs) {
    const completed = await count();
    if (completed >= jobs)
      return { processMs: now() - startedAt, completed, capped: false, startedAt };
    await sleep(20);
  }
  const completed = await count();
  return { processMs: now() - startedAt, completed, capped: completed < jobs, startedAt };
}

type Polled = Awaited<ReturnType<typeof pollCompleted>>;

/** Processing is timed from the workers' start (`processStarted`), not from the first poll. */
function outcomeOf(
  settings: Record<string, unknown>,
  enqueueMs: number,
  processStarted: number,
  polled: Polled,
  handlerCalls: number,
): Outcome {
  return {
    settings,
    enqueueMs,
    processMs: polled.startedAt - processStarted + polled.processMs,
    completed: polled.completed,
    handlerCalls,
    capped: polled.capped,
  };
}

async function runPgBoss(url: string, config: PeersConfig, probe: pg.Client): Promise<Outcome> {
  const { default: PgBoss } = await import("pg-boss");
  const tuned = config.mode === "tuned";
  // Tuned per the pg-boss README/types: several work() calls (each its own polling loop), a large batchSize, the shortest polling interval (0.5 s).
  const workers = tuned ? 4 : 1;
  const workOptions = tuned ? { batchSize: 100, pollingIntervalSeconds: 0.5 } : {};
  const boss = new PgBoss({ connectionString: url, ...(tuned ? { max: 12 } : {}) });
  boss.on("error", (error: unknown) =>
    log(`pg-boss error: ${error instanceof Error ? error.message : String(error)}`),
  );
  await boss.start();
  try {
    await boss.createQueue("noop");
    const enqueueMs = await enqueueInBatches(config.jobs, (count) =>
      boss.insert(Array.from({ length: count }, () => ({ name: "noop", data: {} }))),
    );
    let handlerCalls = 0;
    const handler = (jobs: unknown[]): Promise<void> => {
      handlerCalls += jobs.length;
      return Promise.resolve();
    };
    const processStarted = now();
    for (let index = 0; index < workers; index += 1) await boss.work("noop", workOptions, handler);
    const polled = await pollCompleted(
      () =>
        countOf(
          probe,
          "SELECT count(*) AS n FROM pgboss.job WHERE name = 'noop' AND state = 'completed'",
        ),
      config.jobs,
      config.capMs,
    );
    const settings = tuned
      ? { workCalls: workers, batchSize: 100, pollingIntervalSeconds: 0.5, poolMax: 12 }
      : {
          workCalls: 1,
          batchSize: "1 (default)",
          pollingIntervalSeconds: "2 (default)",
          poolMax: "10 (default)",
        };
    return outcomeOf(settings, enqueueMs, processStarted, polled, handlerCalls);
  } finally {
    await boss.stop({ graceful: false, wait: true, timeout: 2000 }).catch(() => undefined);
  }
}

async function runGraphileWorker(
  url: string,
  config: PeersConfig,
  probe: pg.Client,
): Promise<Outcome> {
  const { run, makeWorkerUtils, Logger } = await import("graphile-worker");
  // No per-job log lines (the default logger prints two per job, which would be measured too).
  const logger = new Logger(() => () => undefined);
  const tuned = config.mode === "tuned";
  const utils = await makeWorkerUtils({ connectionString: url, logger });
  let runner: Awaited<ReturnType<typeof run>> | null = null;
  try {
    await utils.migrate();
    const enqueueMs = await enqueueInBatches(config.jobs, (count) =>
      utils.addJobs(Array.from({ length: count }, () => ({ identifier: "noop", payload: {} }))),
    );
    let handlerCalls = 0;
    const concurrency = tuned ? 16 : undefined;
    const localQueueSize = tuned ? 100 : undefined;
    const processStarted = now();
    // Defaults: concurrentJobs 1, pollInterval 2000 ms, maxPoolSize 10, no local queue (size -1). Tuned (docs/performance#batching): concurrency 16, maxPoolSize 18 (concurrency + 2), localQueue.size 100.
    runner = await run({
      connectionString: url,
      noHandleSignals: true,
      logger,
      ...(tuned ? { concurrency, maxPoolSize: 18 } : {}),
      taskList: {
        noop: () => {
          handlerCalls += 1;
          return Promise.resolve();
        },
      },
      ...(tuned ? { preset: { worker: { localQueue: { size: localQueueSize ?? 100 } } } } : {}),
    });
    const polled = await pollCompleted(
      async () =>
        config.jobs -
        (await countOf(probe, "SELECT count(*) AS n FROM graphile_worker._private_jobs")),
      config.jobs,
      config.capMs,
    );
    const settings = tuned
      ? { concurrency, maxPoolSize: 18, localQueueSize, pollInterval: "2000 (default)" }
      : {
          concurrency: "1 (default)",
          maxPoolSize: "10 (default)",
          localQueueSize: "-1 (default, off)",
          pollInterval: "2000 (default)",
        };
    return outcomeOf(settings, enqueueMs, processStarted, polled, handlerCalls);
  } finally {
    if (runner !== null) await runner.stop().catch(() => undefined);
    await utils.release();
  }
}

async function main(): Promise<void> {
  const config = readConfig<PeersConfig>();
  const adminUrl = process.env.QLR_BENCH_PG_URL;
  if (adminUrl === undefined || adminUrl === "") throw new Error("QLR_BENCH_PG_URL is not set");
  const database = `peers_${config.system.replace(/-/g, "_")}_${config.mode}_${process.pid}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${database}`);
  const url = databaseUrl(adminUrl, database);
  const probe = new pg.Client({ connectionString: url });
  await probe.connect();
  try {
    const outcome =
      config.system === "pg-boss"
        ? await runPgBoss(url, config, probe)
        : await runGraphileWorker(url, config, probe);
    const jobsPerSecond = (outcome.completed / outcome.processMs) * 1000;
    log(
      `${config.system} ${config.mode}: ${outcome.completed}/${config.jobs} jobs in ${Math.round(outcome.processMs)} ms${outcome.capped ? " (capped)" : ""}, ${round(jobsPerSecond, 1)} jobs/s; enqueue ${Math.round(outcome.enqueueMs)} ms`,
    );
    writeResult({
      bench: "peers",
      system: config.system,
      mode: config.mode,
      jobs: config.jobs,
      settings: outcome.settings,
      enqueueMs: round(outcome.enqueueMs, 1),
      enqueuePerSecond: round((config.jobs / outcome.enqueueMs) * 1000, 1),
      processMs: round(outcome.processMs, 1),
      capMs: config.capMs,
      capped: outcome.capped,
      completed: outcome.completed,
      handlerCalls: outcome.handlerCalls,
      jobsPerSecond: round(jobsPerSecond, 2),
    });
  } finally {
    await probe.end().catch(() => undefined);
    // A library's idle pool connection that outlived its stop() is terminated by the forced
    // DROP below; its pool then emits 'error' with nothing listening. Only that error is ignored.
    process.on("uncaughtException", (error) => {
      if (/terminating connection due to administrator command/.test(error.message)) return;
      process.stderr.write(`${error.stack ?? error.message}\n`);
      process.exit(1);
    });
    await sleep(200);
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`).catch(() => undefined);
    await admin.end();
  }
}

await main();
