import { copyFile, mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildDist } from "../support/bundle.ts";
import { isAlive, spawnQlr, stopQlr, type QlrProcess } from "../support/qlr-process.ts";
import { workerArgs } from "../support/qlr-args.ts";

/**
 * The Cloudflare Worker as deployed (dist/worker/index.js, the `wrangler deploy --dry-run`
 * bundle) running in workerd through Miniflare, with its SQLite-backed coordinator Durable
 * Object, and a real `qlr worker` process leasing its remote_worker attempts over loopback
 * HTTP. The cron trigger does not fire here, so the test drives the cadence with POST /tick.
 * Every wait is bounded; nothing asserts how fast anything is.
 */

const ROOT = resolve(import.meta.dirname, "../..");
const QLR = join(ROOT, "dist/qlr.mjs");
const TOKEN = "worker-e2e-token";
/** The remote worker's credential: the Worker secret QLR_WORKER_TOKEN, valid on /worker/* only. */
const WORKER_TOKEN = "worker-e2e-lease-token";
const RUN_WAIT_MS = 60_000;
const TICK_EVERY_MS = 200;
const TERMINAL = ["succeeded", "failed", "timed_out", "cancelled", "lost"];

interface AttemptView {
  readonly id: string;
  readonly stepRunId: string | null;
  readonly number: number;
  readonly status: string;
  readonly executor: string;
  readonly pid: number | null;
  readonly exitCode: number | null;
  readonly error: string | null;
}

interface RunDetail {
  readonly run: { readonly id: string; readonly status: string };
  readonly steps: readonly {
    readonly name: string;
    readonly status: string;
    readonly attemptCount: number;
  }[];
  readonly attempts: readonly AttemptView[];
}

let scratch: string | undefined;
let mf: Miniflare | undefined;
let coordinatorUrl: string;
let worker: QlrProcess | undefined;

async function api<T>(
  method: string,
  path: string,
  body?: { readonly type: string; readonly text: string },
): Promise<T> {
  const response = await fetch(`${coordinatorUrl}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${TOKEN}`,
      ...(body === undefined ? {} : { "content-type": body.type }),
    },
    ...(body === undefined ? {} : { body: body.text }),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  return JSON.parse(text) as T;
}

function startWorker(stateDir: string): QlrProcess {
  const args = workerArgs(coordinatorUrl, stateDir, { capacity: 2 });
  // childEnv: the caller's QLR_* settings must not leak into the process under test.
  return spawnQlr(QLR, "worker", args, { cwd: scratch, env: { QLR_WORKER_TOKEN: WORKER_TOKEN } });
}

async function lines(path: string): Promise<string[]> {
  const text = await readFile(path, "utf8").catch(() => "");
  return text.split("\n").filter((line) => line.length > 0);
}

/** Ticks the coordinator every TICK_EVERY_MS until the run is terminal, bounded by RUN_WAIT_MS. */
async function tickUntilTerminal(runId: string): Promise<RunDetail> {
  const deadline = performance.now() + RUN_WAIT_MS;
  for (;;) {
    await api("POST", "/tick");
    const current = await api<RunDetail>("GET", `/runs/${runId}`);
    if (TERMINAL.includes(current.run.status)) return current;
    if (worker !== undefined && !isAlive(worker))
      throw new Error(
        `qlr worker exited (${worker.child.exitCode ?? worker.child.signalCode})\n--- stdout\n${worker.stdout}\n--- stderr\n${worker.stderr}`,
      );
    if (performance.now() > deadline) {
      throw new Error(
        `timed out after ${RUN_WAIT_MS} ms waiting for run ${runId} to end: ${JSON.stringify(current)}\n--- worker stdout\n${worker?.stdout ?? ""}\n--- worker stderr\n${worker?.stderr ?? ""}`,
      );
    }
    await sleep(TICK_EVERY_MS);
  }
}

let markers: string;

beforeAll(async () => {
  // dist/qlr.mjs and dist/worker/index.js (wrangler deploy --dry-run, offline).
  await buildDist(110_000);
  scratch = await mkdtemp(join(tmpdir(), "qlr-worker-e2e-"));
  markers = join(scratch, "markers");
  await mkdir(markers);
  // A private copy of the bundle: other test files rebuild dist/ concurrently.
  const bundle = join(scratch, "worker.js");
  await copyFile(join(ROOT, "dist/worker/index.js"), bundle);

  mf = new Miniflare({
    modules: true,
    scriptPath: bundle,
    // Module names are relative to modulesRoot (default: the cwd), which must contain the script.
    modulesRoot: scratch,
    compatibilityDate: "2026-04-01",
    durableObjects: { COORDINATOR: { className: "CoordinatorObject", useSQLite: true } },
    bindings: { QLR_TOKEN: TOKEN, QLR_WORKER_TOKEN: WORKER_TOKEN },
    host: "127.0.0.1",
    port: 0,
  });
  coordinatorUrl = (await mf.ready).toString().replace(/\/$/, "");
}, 120_000);

afterAll(async () => {
  if (worker !== undefined) await stopQlr(worker);
  await mf?.dispose();
  if (scratch !== undefined) await rm(scratch, { recursive: true, force: true });
}, 60_000);

describe("qlr worker against the workerd-hosted coordinator", () => {
  it("runs a two-step remote workflow to success, each step spawned exactly once", async () => {
    const append = (text: string): string => `echo ${text} >> ${join(markers, "two")}`;
    const manifest = `package: edge-e2e
tasks:
  first:
    run: ["sh", "-c", "${append("a")}"]
    timeout: 30s
    executor: remote_worker
    pool: p1
  second:
    run: ["sh", "-c", "${append("b")}"]
    timeout: 30s
    executor: remote_worker
    pool: p1
workflows:
  two:
    steps:
      a: { task: first }
      b: { task: second, needs: [a] }
`;
    await api("POST", "/packages", { type: "application/yaml", text: manifest });
    const { run } = await api<{ run: { id: string; status: string } }>("POST", "/runs", {
      type: "application/json",
      text: JSON.stringify({ package: "edge-e2e", workflow: "two" }),
    });

    worker = startWorker(join(scratch!, "worker"));
    const done = await tickUntilTerminal(run.id);

    expect(done.run.status).toBe("succeeded");
    expect(done.steps.map((step) => [step.name, step.status, step.attemptCount])).toEqual([
      ["a", "succeeded", 1],
      ["b", "succeeded", 1],
    ]);
    expect(done.attempts).toHaveLength(2);
    for (const attempt of done.attempts) {
      expect(attempt).toMatchObject({
        status: "succeeded",
        executor: "remote_worker",
        exitCode: 0,
        error: null,
      });
      expect(attempt.pid).toEqual(expect.any(Number));
    }
    // One attempt per step (attempt numbers are run-global).
    expect(new Set(done.attempts.map((attempt) => attempt.stepRunId)).size).toBe(2);
    expect(done.attempts.map((attempt) => attempt.number).sort((x, y) => x - y)).toEqual([1, 2]);
    expect(await lines(join(markers, "two"))).toEqual(["a", "b"]);
  }, 90_000);
});
