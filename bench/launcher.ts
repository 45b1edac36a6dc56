/**
 * The launcher at scale, through a real `node dist/qlr.mjs serve` with real processes:
 *
 * 1. private memory per running task beyond the task itself: the resident supervisor's
 *    `/proc/<pid>/smaps_rollup` (Private_Clean + Private_Dirty) with 1 task running and with
 *    1 + N, divided by N;
 * 2. throughput: one-step runs of `true`, at most `inFlight` not terminal (standalone, sqlite
 *    file store), posted by one client `postConcurrency` at a time;
 * 3. latency: POST /runs → succeeded, one run at a time, for one step of `true` and the
 *    four-step diamond; the bench waits with the run long-poll (`GET /runs/:id?wait=terminal`),
 *    or polls every `latencyPollMs` when that is above 0;
 * 4. the launcher alone (no store, no HTTP): `true` launched through PosixLauncher with at
 *    most `inFlight` in flight until its receipt is valid, launches/s and launch latency
 *    (journal, spawn record, spawn, answer);
 * 5. 100 concurrent `sleep 5` steps under the edge profile with `--max-running 100` (edge's
 *    default is 4) and the serve process (and so the supervisor and every task) in a 128 MiB
 *    memory cgroup (v2 `memory.max`, else v1
 *    `memory.limit_in_bytes`): all must succeed, OOM kills are read from the cgroup;
 * 6. an idle cycle: serve's CPU (from /proc) per `POST /tick` with the package applied and
 *    nothing to do, on the edge and standalone profiles, beside its CPU per `GET /healthz` (the
 *    HTTP share of each tick, bar the token check): what the cadence costs a device every
 *    interval when nothing happens.
 *
 * Run alone: `node bench/run.mjs` with QLR_BENCH_ONLY=launcher (needs `node scripts/build.mjs`
 * first, as every serve bench), or bundle this file and run it with QLR_BENCH_CONFIG unset for
 * the defaults below.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadOrCreateReceiptKey, PosixLauncher } from "../runtimes/node/launcher/index.ts";
import { log, now, round, summarize, writeResult } from "./lib/common.ts";
import { createMemoryCgroup, removeWhenEmpty } from "./lib/memory-cgroup.ts";
import { leanRequest } from "./lib/http-client.ts";
import {
  childrenOf,
  cpuOf,
  cpuPerUnit,
  loadAverage1m,
  privateBytes,
  spawnerPidOf,
  supervisorPid,
} from "./lib/process-accounting.ts";
import { runsByStatus, spawnServe, terminalRuns, type ServeProcess } from "./lib/serve-process.ts";

export interface LauncherBenchConfig {
  readonly root: string;
  readonly memoryTasks: number;
  /**
   * One-step runs the throughput part times (QLR_BENCH_LAUNCHER_RUNS; 3,000 by default, 600
   * before 2026-12-04 20:50 UTC). A few thousand measure serve warm: over 600, V8's optimizing
   * compiler and WebAssembly's tier-up still take a share of serve's CPU.
   */
  readonly throughputRuns: number;
  readonly inFlight: number;
  /**
   * POST /runs requests the throughput part keeps open at once (QLR_BENCH_LAUNCHER_POSTS, 8 by
   * default since 2026-12-04): 1, one client posting serially, as every figure before then;
   * above 1, a server's rate rather than one client's round trips.
   */
  readonly postConcurrency: number;
  readonly latencySamples: number;
  /** 0: wait with the long-poll; above 0: poll `GET /runs/:id` every this many ms instead. */
  readonly latencyPollMs: number;
  readonly concurrentSleeps: number;
  readonly memoryLimitBytes: number;
  /** Ticks the idle part times per profile (after 50 it does not time). */
  readonly idleTicks: number;
}

const DEFAULTS: Omit<LauncherBenchConfig, "root"> = {
  memoryTasks: 50,
  throughputRuns: 3000,
  inFlight: 64,
  postConcurrency: 1,
  latencySamples: 30,
  latencyPollMs: 0,
  concurrentSleeps: 100,
  memoryLimitBytes: 128 * 1024 * 1024,
  idleTicks: 1500,
};
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const KIB = 1024;

interface Served extends ServeProcess {
  readonly stateDir: string;
}

function manifest(
  tasks: Record<string, string>,
  workflows: Record<string, Record<string, { task: string; needs?: string[] }>>,
): string {
  const lines = ["package: bench", "tasks:"];
  for (const [name, argv] of Object.entries(tasks))
    lines.push(`  ${name}:`, `    run: ${argv}`, "    timeout: 120s");
  lines.push("workflows:");
  for (const [name, steps] of Object.entries(workflows)) {
    lines.push(`  ${name}:`, "    steps:");
    for (const [step, spec] of Object.entries(steps))
      lines.push(
        `      ${step}: { task: ${spec.task}${spec.needs === undefined ? "" : `, needs: [${spec.needs.join(", ")}]`} }`,
      );
  }
  return `${lines.join("\n")}\n`;
}

const PACKAGE = manifest(
  { noop: '["true"]', nap: '["sleep", "5"]', long: '["sleep", "600"]' },
  {
    one: { a: { task: "noop" } },
    diamond: {
      a: { task: "noop" },
      b: { task: "noop", needs: ["a"] },
      c: { task: "noop", needs: ["a"] },
      d: { task: "noop", needs: ["b", "c"] },
    },
    nap: { a: { task: "nap" } },
    long: { a: { task: "long" } },
  },
);

/**
 * Node flags for `qlr serve` from QLR_BENCH_SERVE_NODE_FLAGS (space-separated, e.g.
 * `--cpu-prof --cpu-prof-dir=/tmp/x`), to profile serve inside the bench; none by default.
 */
function serveNodeFlags(): string[] {
  return (process.env.QLR_BENCH_SERVE_NODE_FLAGS ?? "").split(" ").filter((flag) => flag !== "");
}

/** Per cadence stage: summed seconds and count (`qlr_tick_stage_duration_seconds`), and the cycles run. */
async function stageTimes(
  served: Served,
): Promise<{ ticks: number; stages: Record<string, { seconds: number; count: number }> }> {
  const response = await fetch(`${served.url}/metrics`, { headers: served.headers });
  const text = await response.text();
  const stages: Record<string, { seconds: number; count: number }> = {};
  for (const match of text.matchAll(
    /^qlr_tick_stage_duration_seconds_(sum|count)\{stage="([a-z_]+)"\} ([0-9.e+-]+)$/gm,
  )) {
    const name = match[2] ?? "?";
    const entry = (stages[name] ??= { seconds: 0, count: 0 });
    if (match[1] === "sum") entry.seconds = Number(match[3]);
    else entry.count = Number(match[3]);
  }
  return { ticks: Number(/^qlr_ticks_total (\d+)$/m.exec(text)?.[1] ?? 0), stages };
}

/**
 * Where the cadence's wall time went between two readings: cycles per step, and each stage's
 * ms per cycle, so a run's cycle length and the stage that holds it up show.
 */
function cadenceSplit(
  steps: number,
  before: Awaited<ReturnType<typeof stageTimes>>,
  after: Awaited<ReturnType<typeof stageTimes>>,
): { cycles: number; stepsPerCycle: number; msPerCycle: Record<string, number> } {
  const cycles = after.ticks - before.ticks;
  const msPerCycle: Record<string, number> = {};
  let total = 0;
  for (const [name, entry] of Object.entries(after.stages)) {
    const seconds = entry.seconds - (before.stages[name]?.seconds ?? 0);
    total += seconds;
    msPerCycle[name] = round((seconds * 1000) / Math.max(1, cycles), 2);
  }
  msPerCycle.total = round((total * 1000) / Math.max(1, cycles), 2);
  return { cycles, stepsPerCycle: round(steps / Math.max(1, cycles), 2), msPerCycle };
}

async function startServe(
  root: string,
  profile: "edge" | "standalone",
  cgroupProcsPath: string | null,
  extraArgs: readonly string[] = [],
): Promise<Served> {
  const stateDir = mkdtempSync(join(tmpdir(), `qlr-bench-launcher-${profile}-`));
  const manifestPath = join(stateDir, "..", `${stateDir.split("/").pop() ?? "x"}.yaml`);
  writeFileSync(manifestPath, PACKAGE);
  const served = await spawnServe({
    root,
    stateDir,
    manifestPath,
    profile,
    extraArgs,
    cgroupProcsPath,
    nodeFlags: serveNodeFlags(),
  });
  return { ...served, stateDir };
}

async function startRun(served: Served, workflow: string): Promise<string> {
  const response = await leanRequest(`${served.url}/runs`, {
    method: "POST",
    headers: served.headers,
    body: JSON.stringify({ package: "bench", workflow }),
  });
  if (response.status !== 201)
    throw new Error(`POST /runs answered ${response.status}: ${response.text}`);
  return (JSON.parse(response.text) as { run: { id: string } }).run.id;
}

async function runStatus(served: Served, runId: string, query = ""): Promise<string> {
  const response = await fetch(`${served.url}/runs/${runId}${query}`, { headers: served.headers });
  if (!response.ok)
    throw new Error(
      `GET /runs/${runId}${query} answered ${response.status}: ${await response.text()}`,
    );
  return ((await response.json()) as { run: { status: string } }).run.status;
}

const FAILED_STATUSES = ["failed", "cancelled", "timed_out", "lost"];

/** Until the run succeeded: long-polls (each answers at the end or after 30 s), or polls every `pollMs`. */
async function untilSucceeded(served: Served, runId: string, pollMs: number): Promise<void> {
  // Bounded by the run: each of its tasks has a 120 s timeout.
  for (;;) {
    const status =
      pollMs > 0
        ? await runStatus(served, runId)
        : await runStatus(served, runId, "?wait=terminal&timeoutMs=30000");
    if (status === "succeeded") return;
    if (FAILED_STATUSES.includes(status)) throw new Error(`run ${runId} ended ${status}`);
    if (pollMs > 0) await sleep(pollMs);
  }
}

async function counts(
  served: Served,
): Promise<{ terminal: number; succeeded: number; running: number }> {
  const runs = await runsByStatus(served);
  return {
    terminal: terminalRuns(runs),
    succeeded: runs.succeeded ?? 0,
    running: runs.running ?? 0,
  };
}

async function stopServe(served: Served): Promise<void> {
  const supervisor = supervisorPid(served.stateDir);
  served.child.kill("SIGTERM");
  for (
    let waited = 0;
    waited < 20_000 && served.child.exitCode === null && served.child.signalCode === null;
    waited += 50
  )
    await sleep(50);
  if (served.child.exitCode === null && served.child.signalCode === null)
    served.child.kill("SIGKILL");
  if (supervisor !== null) {
    for (const task of childrenOf(supervisor)) {
      try {
        process.kill(-task, "SIGKILL");
      } catch {
        // Gone.
      }
    }
    for (let waited = 0; waited < 10_000 && existsSync(`/proc/${supervisor}`); waited += 50)
      await sleep(50);
  }
  rmSync(served.stateDir, { recursive: true, force: true });
  rmSync(`${served.stateDir}.yaml`, { force: true });
}

async function waitUntil(
  description: string,
  probe: () => Promise<boolean>,
  timeoutMs: number,
  intervalMs = 20,
): Promise<void> {
  const deadline = now() + timeoutMs;
  while (!(await probe())) {
    if (now() > deadline) throw new Error(`timed out waiting for ${description}`);
    await sleep(intervalMs);
  }
}

async function memoryPerTask(config: LauncherBenchConfig): Promise<unknown> {
  // Every task must run at once to be counted, so the runtime's own limit must not hold any back.
  const served = await startServe(config.root, "standalone", null, [
    "--max-running",
    String(config.memoryTasks + 1),
  ]);
  try {
    await startRun(served, "long");
    await waitUntil(
      "the first task to run",
      async () => (await counts(served)).running >= 1 && supervisorPid(served.stateDir) !== null,
      60_000,
    );
    const pid = supervisorPid(served.stateDir) ?? -1;
    // With the native spawner the tasks are its children, and its memory counts with the
    // supervisor's: together they are what a running task costs beyond itself.
    const spawner = spawnerPidOf(pid);
    const parent = spawner ?? pid;
    const supervision = (): ReturnType<typeof privateBytes> => {
      const own = privateBytes(pid);
      if (spawner === null) return own;
      const helper = privateBytes(spawner);
      return {
        privateBytes: own.privateBytes + helper.privateBytes,
        pssBytes: own.pssBytes + helper.pssBytes,
        rssBytes: own.rssBytes + helper.rssBytes,
      };
    };
    await waitUntil(
      "one task under the supervisor",
      () => Promise.resolve(childrenOf(parent).length >= 1),
      30_000,
    );
    await sleep(500);
    const one = supervision();
    const spawnerOne = spawner === null ? null : privateBytes(spawner);
    for (let index = 0; index < config.memoryTasks; index += 1) await startRun(served, "long");
    await waitUntil(
      `${config.memoryTasks + 1} tasks under the supervisor`,
      () => Promise.resolve(childrenOf(parent).length >= config.memoryTasks + 1),
      120_000,
      100,
    );
    await sleep(1000);
    const many = supervision();
    const spawnerMany = spawner === null ? null : privateBytes(spawner);
    const perTaskBytes = (many.privateBytes - one.privateBytes) / config.memoryTasks;
    const spawnerMemory =
      spawnerOne === null || spawnerMany === null
        ? null
        : {
            rssKiB: {
              oneTask: round(spawnerOne.rssBytes / KIB, 0),
              allTasks: round(spawnerMany.rssBytes / KIB, 0),
            },
            privateKiB: {
              oneTask: round(spawnerOne.privateBytes / KIB, 0),
              allTasks: round(spawnerMany.privateBytes / KIB, 0),
            },
          };
    log(
      `memory: supervisor${spawner === null ? "" : " + spawner"} private ${round(one.privateBytes / KIB / KIB, 2)} MiB with 1 task, ${round(many.privateBytes / KIB / KIB, 2)} MiB with ${config.memoryTasks + 1}: ${round(perTaskBytes / KIB, 1)} KiB per task${spawnerMemory === null ? "" : `; spawner ${JSON.stringify(spawnerMemory)}`}`,
    );
    return {
      spawner: spawnerMemory,
      tasks: config.memoryTasks + 1,
      supervisorPrivateMiB: {
        oneTask: round(one.privateBytes / KIB / KIB, 2),
        allTasks: round(many.privateBytes / KIB / KIB, 2),
      },
      supervisorPssMiB: {
        oneTask: round(one.pssBytes / KIB / KIB, 2),
        allTasks: round(many.pssBytes / KIB / KIB, 2),
      },
      privateKiBPerTask: round(perTaskBytes / KIB, 1),
    };
  } finally {
    await stopServe(served);
  }
}

/** Where a one-step run's time goes, from its events (store time at each commit): medians over `runIds`, ms. */
async function stepTimeline(
  served: Served,
  runIds: readonly string[],
): Promise<Record<string, number>> {
  const gaps: Record<string, number[]> = {};
  const add = (name: string, fromMs: number | undefined, toMs: number | undefined): void => {
    if (fromMs === undefined || toMs === undefined) return;
    (gaps[name] ??= []).push(toMs - fromMs);
  };
  for (const runId of runIds) {
    const response = await fetch(`${served.url}/runs/${runId}/events?limit=100`, {
      headers: served.headers,
    });
    const { events } = (await response.json()) as {
      events: { type: string; atMs: number; data: { to?: string } }[];
    };
    const at = (type: string, to?: string): number | undefined =>
      events.find((event) => event.type === type && (to === undefined || event.data.to === to))
        ?.atMs;
    const detail = (await (
      await fetch(`${served.url}/runs/${runId}`, { headers: served.headers })
    ).json()) as { attempts: { finishedAtMs: number | null }[] };
    const created = at("run.created");
    const admitted = at("workflow.task_attempt_admitted");
    const starting = at("attempt.status_changed", "starting");
    const running = at("attempt.status_changed", "running");
    const completed = at("attempt.status_changed", "succeeded");
    const finished = at("run.status_changed", "succeeded");
    const exitedAtMs = detail.attempts[0]?.finishedAtMs ?? undefined;
    add("createdToAdmitted", created, admitted);
    add("admittedToStarting", admitted, starting);
    add("startingToRunning", starting, running);
    add("runningToExit", running, exitedAtMs);
    add("exitToCompleted", exitedAtMs, completed);
    add("completedToRunSucceeded", completed, finished);
    add("createdToRunSucceeded", created, finished);
  }
  const median = (values: number[]): number => {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
  };
  return Object.fromEntries(Object.entries(gaps).map(([name, values]) => [name, median(values)]));
}

type Cpu = ReturnType<typeof cpuOf>;

/** The supervisor's, the native spawner's (when there is one) and the tasks' CPU, for `cpuPerUnit`; the tasks are reaped by whichever starts them. */
function supervisionCpu(
  supervisorBefore: Cpu,
  supervisorAfter: Cpu,
  spawnerBefore: Cpu | null,
  spawnerAfter: Cpu | null,
): Record<string, { before: number; after: number }> {
  return {
    supervisor: { before: supervisorBefore.ownMs, after: supervisorAfter.ownMs },
    ...(spawnerBefore === null || spawnerAfter === null
      ? {}
      : { spawner: { before: spawnerBefore.ownMs, after: spawnerAfter.ownMs } }),
    tasks: {
      before: supervisorBefore.reapedChildrenMs + (spawnerBefore?.reapedChildrenMs ?? 0),
      after: supervisorAfter.reapedChildrenMs + (spawnerAfter?.reapedChildrenMs ?? 0),
    },
  };
}

/**
 * How often the throughput part asks serve how many runs ended (`GET /metrics`, which counts
 * runs by status): often enough that the in-flight window never empties (64 runs last ≈ 0.4 s at
 * 150 steps/s), rarely enough that the asking costs serve little (every 20 ms until
 * 2026-12-04: ≈ 0.35 requests per step).
 */
const THROUGHPUT_POLL_MS = 100;

async function throughput(config: LauncherBenchConfig): Promise<unknown> {
  const served = await startServe(config.root, "standalone", null);
  try {
    // One run first, so the resident supervisor is up and its start is not counted.
    const warmRunId = await startRun(served, "one");
    await waitUntil(
      "the warm-up run",
      async () => (await runStatus(served, warmRunId)) === "succeeded",
      60_000,
    );
    const supervisor = supervisorPid(served.stateDir) ?? -1;
    const spawner = spawnerPidOf(supervisor);
    const servePid = served.child.pid ?? -1;
    const serveBefore = cpuOf(servePid);
    const supervisorBefore = cpuOf(supervisor);
    const spawnerBefore = spawner === null ? null : cpuOf(spawner);
    const loadBefore = loadAverage1m();
    const stagesBefore = await stageTimes(served);
    let started = 0;
    let state = { terminal: 0, succeeded: 0, running: 0 };
    // This process posts and polls: the load's own CPU shares the machine with what it measures.
    const clientBefore = process.cpuUsage();
    const t0 = now();
    const runIds: string[] = [];
    while (state.terminal < config.throughputRuns + 1) {
      if (!Number.isSafeInteger(config.postConcurrency) || config.postConcurrency < 1)
        throw new Error(
          `postConcurrency must be a positive integer, not ${config.postConcurrency}`,
        );
      while (started < config.throughputRuns && started + 1 - state.terminal < config.inFlight) {
        const batch = Math.min(
          config.postConcurrency,
          config.throughputRuns - started,
          config.inFlight - (started + 1 - state.terminal),
        );
        runIds.push(
          ...(await Promise.all(Array.from({ length: batch }, () => startRun(served, "one")))),
        );
        started += batch;
      }
      await sleep(THROUGHPUT_POLL_MS);
      state = await counts(served);
      if (now() - t0 > 600_000) throw new Error("throughput did not finish in 10 minutes");
    }
    const wallMs = now() - t0;
    const clientCpu = process.cpuUsage(clientBefore);
    const clientMsPerStep = round(
      (clientCpu.user + clientCpu.system) / 1000 / config.throughputRuns,
      2,
    );
    const serveAfter = cpuOf(servePid);
    const supervisorAfter = cpuOf(supervisor);
    const spawnerAfter = spawner === null ? null : cpuOf(spawner);
    const cadence = cadenceSplit(config.throughputRuns, stagesBefore, await stageTimes(served));
    // The middle half of the runs: past the start's ramp, before the end's drain.
    const timeline = await stepTimeline(
      served,
      runIds.slice(Math.floor(runIds.length / 4), Math.floor((runIds.length * 3) / 4)),
    );
    const succeeded = state.succeeded - 1;
    const stepsPerSecond = round((succeeded / wallMs) * 1000, 1);
    const cpuMsPerStep = cpuPerUnit(config.throughputRuns, {
      serve: { before: serveBefore.ownMs, after: serveAfter.ownMs },
      ...supervisionCpu(supervisorBefore, supervisorAfter, spawnerBefore, spawnerAfter),
    });
    const load1m = { before: loadBefore, after: loadAverage1m() };
    log(
      `throughput: ${succeeded}/${config.throughputRuns} one-step runs of true in ${Math.round(wallMs)} ms: ${stepsPerSecond} steps/s; CPU per step ${JSON.stringify(cpuMsPerStep)} ms, the load client's ${clientMsPerStep} ms; load ${load1m.before} → ${load1m.after}; cadence ${JSON.stringify(cadence)}; step timeline (medians, ms) ${JSON.stringify(timeline)}`,
    );
    return {
      runs: config.throughputRuns,
      cadence,
      timeline,
      succeeded,
      inFlight: config.inFlight,
      postConcurrency: config.postConcurrency,
      wallMs: Math.round(wallMs),
      stepsPerSecond,
      cpuMsPerStep,
      clientMsPerStep,
      load1m,
    };
  } finally {
    await stopServe(served);
  }
}

/** Serve's CPU per request of `path` (`method`), over `count` requests one after another. */
async function cpuPerRequest(
  served: Served,
  method: "GET" | "POST",
  path: string,
  count: number,
): Promise<number> {
  const pid = served.child.pid ?? -1;
  const before = cpuOf(pid).ownMs;
  for (let index = 0; index < count; index += 1) {
    const response = await fetch(`${served.url}${path}`, { method, headers: served.headers });
    if (!response.ok) throw new Error(`${method} ${path} answered ${response.status}`);
    await response.arrayBuffer();
  }
  return round((cpuOf(pid).ownMs - before) / count, 3);
}

async function idleCycle(config: LauncherBenchConfig): Promise<unknown> {
  const result: Record<string, unknown> = {};
  for (const profile of ["edge", "standalone"] as const) {
    const served = await startServe(config.root, profile, null);
    try {
      // Warm: V8's compilers and SQLite's statements see the path before it is timed.
      await cpuPerRequest(served, "POST", "/tick", 50);
      await cpuPerRequest(served, "GET", "/healthz", 50);
      const tickMs = await cpuPerRequest(served, "POST", "/tick", config.idleTicks);
      const healthzMs = await cpuPerRequest(served, "GET", "/healthz", config.idleTicks);
      log(
        `idle cycle, ${profile}: ${tickMs} ms of serve's CPU per POST /tick with nothing to do, ${healthzMs} per GET /healthz, over ${config.idleTicks} each`,
      );
      result[profile] = {
        ticks: config.idleTicks,
        cpuMsPerTick: tickMs,
        cpuMsPerHealthz: healthzMs,
      };
    } finally {
      await stopServe(served);
    }
  }
  return result;
}

async function latency(config: LauncherBenchConfig): Promise<unknown> {
  const served = await startServe(config.root, "standalone", null);
  try {
    const result: Record<string, unknown> = {};
    for (const workflow of ["one", "diamond"]) {
      const samples: number[] = [];
      // One warm-up run: the first launch also starts the resident supervisor.
      for (let index = 0; index <= config.latencySamples; index += 1) {
        const t0 = now();
        const runId = await startRun(served, workflow);
        await untilSucceeded(served, runId, config.latencyPollMs);
        if (index > 0) samples.push(now() - t0);
      }
      const summary = summarize(samples);
      log(
        `latency ${workflow}: p50 ${summary.p50Ms} ms, p95 ${summary.p95Ms} ms over ${samples.length} runs`,
      );
      result[workflow] = summary;
    }
    return result;
  } finally {
    await stopServe(served);
  }
}

async function concurrentUnderLimit(config: LauncherBenchConfig): Promise<unknown> {
  const { cgroup, why } = createMemoryCgroup(
    config.memoryLimitBytes,
    `qlr-bench-launcher-${process.pid}`,
  );
  if (cgroup === null) {
    log(`concurrent sleeps: no memory cgroup (${why})`);
    return { skipped: why };
  }
  // The target is about memory and dispatch with 100 tasks live at once, so the runtime may run
  // them all: edge's default --max-running (4) is the guard for a real router, where 100 live
  // tasks would be the operator's explicit choice, as it is here.
  const served = await startServe(config.root, "edge", cgroup.procsPath, [
    "--max-running",
    String(config.concurrentSleeps),
  ]);
  try {
    const t0 = now();
    for (let index = 0; index < config.concurrentSleeps; index += 1) await startRun(served, "nap");
    let peakRunning = 0;
    let state = { terminal: 0, succeeded: 0, running: 0 };
    while (state.terminal < config.concurrentSleeps) {
      await sleep(100);
      state = await counts(served);
      const supervisor = supervisorPid(served.stateDir);
      // The tasks are the spawner's children when the supervisor has one.
      const parent = supervisor === null ? null : (spawnerPidOf(supervisor) ?? supervisor);
      if (parent !== null) peakRunning = Math.max(peakRunning, childrenOf(parent).length);
      if (now() - t0 > 300_000)
        throw new Error("the concurrent sleeps did not finish in 5 minutes");
      if (served.child.exitCode !== null || served.child.signalCode !== null)
        throw new Error(
          `qlr serve exited under the limit: ${served.child.signalCode ?? served.child.exitCode}`,
        );
    }
    const wallMs = now() - t0;
    const usage = cgroup.read();
    log(
      `concurrent sleeps: ${state.succeeded}/${config.concurrentSleeps} succeeded in ${Math.round(wallMs)} ms, at most ${peakRunning} tasks at once, cgroup peak ${round((usage.peakBytes ?? 0) / KIB / KIB, 1)} MiB, OOM kills ${usage.oomKills}`,
    );
    return {
      runs: config.concurrentSleeps,
      succeeded: state.succeeded,
      wallMs: Math.round(wallMs),
      peakConcurrentTasks: peakRunning,
      limitMiB: config.memoryLimitBytes / KIB / KIB,
      cgroupPeakMiB: round((usage.peakBytes ?? 0) / KIB / KIB, 1),
      oomKills: usage.oomKills,
    };
  } finally {
    await stopServe(served);
    await removeWhenEmpty(cgroup);
  }
}

async function launcherAlone(config: LauncherBenchConfig): Promise<unknown> {
  const stateDir = mkdtempSync(join(tmpdir(), "qlr-bench-launcher-alone-"));
  // The receipt is read when the supervisor says it is durable, as the runtime does; a slow
  // poll stays as the fallback. (Polling every few milliseconds from 64 waiters made this
  // process, not the launcher, the bottleneck on a 2-core machine.)
  const exitWaiters = new Map<string, () => void>();
  const launcher = new PosixLauncher({
    stateDir,
    hmacKey: await loadOrCreateReceiptKey(stateDir),
    nowMs: () => Date.now(),
    supervisorPath: join(config.root, "dist", "supervisor.mjs"),
    onSupervisorExit: (attemptId) => exitWaiters.get(attemptId)?.(),
  });
  const receiptValid = async (attemptId: string): Promise<void> => {
    const deadline = now() + 60_000;
    while ((await launcher.readReceipt(attemptId)).status !== "valid") {
      if (now() > deadline) throw new Error(`timed out waiting for the receipt of ${attemptId}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 200);
        exitWaiters.set(attemptId, () => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    exitWaiters.delete(attemptId);
  };
  try {
    // Warm-up: the first launch starts the resident supervisor.
    const warm = await launcher.launch({
      attemptId: "wta:warmup",
      argv: ["true"],
      env: {},
      cwd: null,
      logMaxBytes: 4096,
    });
    await waitUntil(
      "the warm-up receipt",
      async () => (await launcher.readReceipt(warm.attemptId)).status === "valid",
      30_000,
    );
    const total = config.throughputRuns;
    const launchMs: number[] = [];
    let next = 0;
    const supervisor = supervisorPid(stateDir) ?? -1;
    const spawner = spawnerPidOf(supervisor);
    const launcherBefore = process.cpuUsage();
    const supervisorBefore = cpuOf(supervisor);
    const spawnerBefore = spawner === null ? null : cpuOf(spawner);
    const loadBefore = loadAverage1m();
    const t0 = now();
    const worker = async (): Promise<void> => {
      while (next < total) {
        const attemptId = `wta:${String(next).padStart(32, "0")}`;
        next += 1;
        const started = now();
        // Listening before the launch: a `true` can end before its launch is answered.
        const receipt = receiptValid(attemptId);
        await launcher.launch({ attemptId, argv: ["true"], env: {}, cwd: null, logMaxBytes: 4096 });
        launchMs.push(now() - started);
        await receipt;
      }
    };
    await Promise.all(Array.from({ length: config.inFlight }, () => worker()));
    const wallMs = now() - t0;
    const launcherCpu = process.cpuUsage(launcherBefore);
    const supervisorAfter = cpuOf(supervisor);
    const spawnerAfter = spawner === null ? null : cpuOf(spawner);
    const summary = summarize(launchMs);
    const cpuMsPerLaunch = cpuPerUnit(total, {
      launcher: { before: 0, after: (launcherCpu.user + launcherCpu.system) / 1000 },
      ...supervisionCpu(supervisorBefore, supervisorAfter, spawnerBefore, spawnerAfter),
    });
    const load1m = { before: loadBefore, after: loadAverage1m() };
    log(
      `launcher alone: ${total} launches of true to a valid receipt in ${Math.round(wallMs)} ms: ${round((total / wallMs) * 1000, 1)} tasks/s, launch p50 ${summary.p50Ms} ms; CPU per launch ${JSON.stringify(cpuMsPerLaunch)} ms; load ${load1m.before} → ${load1m.after}`,
    );
    return {
      launches: total,
      inFlight: config.inFlight,
      wallMs: Math.round(wallMs),
      tasksPerSecond: round((total / wallMs) * 1000, 1),
      launch: summary,
      cpuMsPerLaunch,
      load1m,
    };
  } finally {
    launcher.close();
    rmSync(stateDir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const text = process.env.QLR_BENCH_CONFIG;
  const config: LauncherBenchConfig =
    text === undefined || text === ""
      ? { root: process.cwd(), ...DEFAULTS }
      : {
          ...DEFAULTS,
          ...(JSON.parse(text) as Partial<LauncherBenchConfig>),
          root: (JSON.parse(text) as { root?: string }).root ?? process.cwd(),
        };
  const only = (
    process.env.QLR_BENCH_LAUNCHER_PARTS ?? "alone,memory,throughput,latency,concurrent,idle"
  ).split(",");
  const result: Record<string, unknown> = { bench: "launcher" };
  if (only.includes("alone")) result.alone = await launcherAlone(config);
  if (only.includes("memory")) result.memory = await memoryPerTask(config);
  if (only.includes("throughput")) result.throughput = await throughput(config);
  if (only.includes("latency")) result.latency = await latency(config);
  if (only.includes("concurrent")) result.concurrent = await concurrentUnderLimit(config);
  if (only.includes("idle")) result.idle = await idleCycle(config);
  writeResult(result);
}

await main();
