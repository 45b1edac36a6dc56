/**
 * Bench 8: `POST /tick` latency in workerd. Loads the built Worker bundle (dist/worker/index.js,
 * from `npm run build`) into Miniflare (the `miniflare` package wrangler ships; offline, a local
 * workerd process), with the coordinator Durable Object (SQLite-backed, as wrangler.toml
 * declares) and QLR_TOKEN bound, applies a package of remote_worker tasks, starts `runs` runs,
 * then times `ticks` sequential `POST /tick` requests end to end (dispatchFetch → Worker → DO
 * → coordinator.tick() → JSON response). The first ticks admit the runs' ready steps (claimed
 * attempts that wait for a remote worker), later ones find little to do, so the figure is the
 * floor of a cycle plus what admissions cost at the start.
 */
import { join } from "node:path";
import { log, now, readConfig, round, summarize, writeResult } from "./lib/common.ts";

export interface WorkerdConfig {
  readonly root: string;
  readonly runs: number;
  readonly ticks: number;
}

const MANIFEST = `package: bench
tasks:
  noop:
    run: ["true"]
    timeout: 30s
    executor: remote_worker
    pool: default
workflows:
  w:
    steps:
      a: { task: noop }
      b: { task: noop, needs: [a] }
`;

async function main(): Promise<void> {
  const config = readConfig<WorkerdConfig>();
  const { Miniflare } = await import("miniflare");
  const token = "bench-token-0123456789abcdef";
  const startedAt = now();
  const mf = new Miniflare({
    modules: true,
    scriptPath: join(config.root, "dist", "worker", "index.js"),
    compatibilityDate: "2026-04-01",
    durableObjects: { COORDINATOR: { className: "CoordinatorObject", useSQLite: true } },
    bindings: { QLR_TOKEN: token },
  });
  try {
    await mf.ready;
    const readyMs = now() - startedAt;
    const call = async (
      path: string,
      method = "GET",
      body?: string,
      contentType = "application/json",
    ): Promise<{ status: number; text: string }> => {
      const response = await mf.dispatchFetch(`http://localhost${path}`, {
        method,
        headers: {
          authorization: `Bearer ${token}`,
          ...(body === undefined ? {} : { "content-type": contentType }),
        },
        body,
      });
      return { status: response.status, text: await response.text() };
    };
    const applied = await call("/packages", "POST", MANIFEST, "application/yaml");
    if (applied.status >= 300) throw new Error(`apply: ${applied.status} ${applied.text}`);
    const startMs: number[] = [];
    for (let index = 0; index < config.runs; index += 1) {
      const t0 = now();
      const started = await call(
        "/runs",
        "POST",
        JSON.stringify({ package: "bench", workflow: "w" }),
      );
      startMs.push(now() - t0);
      if (started.status !== 201) throw new Error(`POST /runs: ${started.status} ${started.text}`);
    }
    const tickMs: number[] = [];
    let admitted = 0;
    for (let index = 0; index < config.ticks; index += 1) {
      const t0 = now();
      const response = await call("/tick", "POST");
      tickMs.push(now() - t0);
      if (response.status !== 200)
        throw new Error(`POST /tick: ${response.status} ${response.text}`);
      const report = JSON.parse(response.text) as {
        report: { stages: { name: string; processed: number }[] };
      };
      admitted += report.report.stages.find((stage) => stage.name === "admission")?.processed ?? 0;
    }
    const summary = summarize(tickMs);
    log(
      `workerd POST /tick: p50 ${summary.p50Ms} ms, p95 ${summary.p95Ms} ms, p99 ${summary.p99Ms} ms over ${config.ticks} ticks (${config.runs} runs, ${admitted} admissions)`,
    );
    writeResult({
      bench: "workerd",
      runs: config.runs,
      ticks: config.ticks,
      readyMs: round(readyMs, 0),
      admissionsDuringTicks: admitted,
      runStart: summarize(startMs),
      tick: summary,
      firstTickMs: round(tickMs[0] ?? Number.NaN, 3),
    });
  } finally {
    await mf.dispose();
  }
}

await main();
