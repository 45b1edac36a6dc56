/**
 * Bench 8: the Worker in workerd. Part one, `POST /tick` latency. Loads the built Worker bundle (dist/worker/index.js,
 * from `npm run build`) into Miniflare (the `miniflare` package wrangler ships; offline, a local
 * workerd process), with the coordinator Durable Object (SQLite-backed, as wrangler.toml
 * declares) and QLR_TOKEN bound, applies a package of remote_worker tasks, starts `runs` runs,
 * then times `ticks` sequential `POST /tick` requests end to end (dispatchFetch → Worker → DO
 * → coordinator.tick() → JSON response). The first ticks admit the runs' ready steps (claimed
 * attempts that wait for a remote worker), later ones find little to do, so the figure is the
 * floor of a cycle plus what admissions cost at the start.
 *
 * Part two, the event-driven cadence end to end: a fresh Miniflare listening on 127.0.0.1, a real
 * `qlr worker` (dist/qlr.mjs) leasing its pool over HTTP and running `true`, and four-step
 * diamonds started one at a time; each is timed from `POST /runs` to `succeeded` seen by
 * `GET /runs/:id` (polled every few ms). No cron fires and nothing calls `/tick`: only the
 * object's alarm (set by the start and by every worker report) and the worker's own rounds move
 * the run.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Miniflare } from "miniflare";
import { QlrClient } from "../runtimes/http/client.ts";
import { TERMINAL_RUN_STATUSES, type RunStatus } from "../src/model.ts";
import { log, now, readConfig, round, summarize, writeResult } from "./lib/common.ts";

export interface WorkerdConfig {
  readonly root: string;
  readonly runs: number;
  readonly ticks: number;
  /** Diamonds timed end to end with a real `qlr worker` (part two). */
  readonly diamonds: number;
}

/**
 * A package of one remote_worker task, `noop` (`true`), and one workflow whose steps all run it;
 * `needsOf` maps each step to the steps it needs.
 */
function remoteManifest(
  packageName: string,
  workflow: string,
  needsOf: Record<string, readonly string[]>,
): string {
  return [
    `package: ${packageName}`,
    "tasks:",
    "  noop:",
    '    run: ["true"]',
    "    timeout: 30s",
    "    executor: remote_worker",
    "    pool: default",
    "workflows:",
    `  ${workflow}:`,
    "    steps:",
    ...Object.entries(needsOf).map(
      ([step, needs]) =>
        `      ${step}: { task: noop${needs.length === 0 ? "" : `, needs: [${needs.join(", ")}]`} }`,
    ),
    "",
  ].join("\n");
}

const CHAIN_MANIFEST = remoteManifest("bench", "w", { a: [], b: ["a"] });
const DIAMOND_MANIFEST = remoteManifest("diamond", "d", {
  a: [],
  b: ["a"],
  c: ["a"],
  e: ["b", "c"],
});
/** A diamond that takes longer than this is a failure of the bench, not a sample. */
const DIAMOND_TIMEOUT_MS = 60_000;
const STATUS_POLL_MS = 5;

const TOKEN = "bench-token-0123456789abcdef";

/** A Miniflare over the built Worker, with the coordinator object and the token bound. */
async function startWorker(root: string, listen: boolean): Promise<{ mf: Miniflare; url: URL }> {
  const { Miniflare } = await import("miniflare");
  const mf = new Miniflare({
    modules: true,
    scriptPath: join(root, "dist", "worker", "index.js"),
    compatibilityDate: "2026-04-01",
    durableObjects: { COORDINATOR: { className: "CoordinatorObject", useSQLite: true } },
    bindings: { QLR_TOKEN: TOKEN },
    ...(listen ? { host: "127.0.0.1", port: 0 } : {}),
  });
  return { mf, url: await mf.ready };
}

/** The one API client, over Miniflare's dispatch (no socket). */
function clientOf(mf: Miniflare): QlrClient {
  return new QlrClient({
    baseUrl: "http://localhost",
    token: TOKEN,
    fetch: async (input, init) =>
      (await mf.dispatchFetch(input, init as never)) as unknown as Response,
  });
}

async function tickLatency(config: WorkerdConfig): Promise<Record<string, unknown>> {
  const startedAt = now();
  const { mf } = await startWorker(config.root, false);
  try {
    const readyMs = now() - startedAt;
    const client = clientOf(mf);
    await client.apply({ text: CHAIN_MANIFEST, contentType: "application/yaml" });
    const startMs: number[] = [];
    for (let index = 0; index < config.runs; index += 1) {
      const t0 = now();
      await client.startRun({ package: "bench", workflow: "w" });
      startMs.push(now() - t0);
    }
    const tickMs: number[] = [];
    let admitted = 0;
    for (let index = 0; index < config.ticks; index += 1) {
      const t0 = now();
      const { report } = await client.tick();
      tickMs.push(now() - t0);
      admitted += report.stages.find((stage) => stage.name === "admission")?.processed ?? 0;
    }
    const summary = summarize(tickMs);
    log(
      `workerd POST /tick: p50 ${summary.p50Ms} ms, p95 ${summary.p95Ms} ms, p99 ${summary.p99Ms} ms over ${config.ticks} ticks (${config.runs} runs, ${admitted} admissions)`,
    );
    return {
      readyMs: round(readyMs, 0),
      admissionsDuringTicks: admitted,
      runStart: summarize(startMs),
      tick: summary,
      firstTickMs: round(tickMs[0] ?? Number.NaN, 3),
    };
  } finally {
    await mf.dispose();
  }
}

/** Part two: diamonds through the object's alarm and a real `qlr worker`, no cron, no `/tick`. */
async function remoteDiamonds(config: WorkerdConfig): Promise<Record<string, unknown>> {
  const { mf, url } = await startWorker(config.root, true);
  const stateDir = mkdtempSync(join(tmpdir(), "qlr-bench-workerd-"));
  const worker = spawn(
    process.execPath,
    [
      join(config.root, "dist", "qlr.mjs"),
      "worker",
      "--coordinator",
      url.origin,
      "--pool",
      "default",
      "--capacity",
      "4",
      "--state-dir",
      stateDir,
    ],
    { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", QLR_TOKEN: TOKEN }, stdio: "pipe" },
  );
  let workerOutput = "";
  const keep = (chunk: Buffer): void => {
    workerOutput = (workerOutput + chunk.toString("utf8")).slice(-4000);
  };
  worker.stdout.on("data", keep);
  worker.stderr.on("data", keep);
  try {
    const client = clientOf(mf);
    await client.apply({ text: DIAMOND_MANIFEST, contentType: "application/yaml" });
    const diamondMs: number[] = [];
    for (let index = 0; index < config.diamonds; index += 1) {
      const t0 = now();
      const runId = (await client.startRun({ package: "diamond", workflow: "d" })).run.id;
      let status: string = "pending";
      while (!TERMINAL_RUN_STATUSES.has(status as RunStatus)) {
        if (now() - t0 > DIAMOND_TIMEOUT_MS)
          throw new Error(
            `diamond ${runId} still ${status} after ${DIAMOND_TIMEOUT_MS} ms; worker said:\n${workerOutput}`,
          );
        if (worker.exitCode !== null)
          throw new Error(`qlr worker exited ${worker.exitCode}:\n${workerOutput}`);
        await new Promise((wake) => setTimeout(wake, STATUS_POLL_MS));
        status = (await client.run(runId)).run.status;
      }
      if (status !== "succeeded")
        throw new Error(`diamond ${runId} ended ${status}; worker said:\n${workerOutput}`);
      diamondMs.push(now() - t0);
    }
    const summary = summarize(diamondMs);
    log(
      `workerd diamond with a real qlr worker, no cron or /tick: p50 ${summary.p50Ms} ms, p95 ${summary.p95Ms} ms over ${config.diamonds} runs`,
    );
    return { diamonds: config.diamonds, diamond: summary };
  } finally {
    worker.kill("SIGTERM");
    await new Promise((done) =>
      worker.exitCode !== null ? done(null) : worker.once("exit", done),
    );
    await mf.dispose();
    rmSync(stateDir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const config = readConfig<WorkerdConfig>();
  const ticks = await tickLatency(config);
  const diamonds = await remoteDiamonds(config);
  writeResult({ bench: "workerd", runs: config.runs, ticks: config.ticks, ...ticks, ...diamonds });
}

await main();
