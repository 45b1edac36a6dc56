/**
 * The memory of the real device runtime, `node dist/qlr.mjs serve --profile edge`, measured
 * from outside (`/proc/<pid>/status`) and from inside (`GET /metrics`,
 * `qlr_process_memory_bytes`: V8 heap, external memory, sql.js WebAssembly memory):
 *
 * 1. what the floor is made of: a child Node process imports the runtime's packages one after
 *    another and reports RSS after each (cumulative, in the order the bundle loads them);
 * 2. the floor: `qlr serve --profile edge` on an empty state dir, 1 s after it reported ready
 *    (package applied, HTTP listening, no run yet);
 * 3. with history: a state dir seeded with `historyRuns` finished runs (half one-task runs,
 *    half two-step workflows; written in this process through the same store code and the
 *    simulated executor, then checkpointed), opened by `qlr serve --profile edge` with two
 *    schedules firing real processes (a task every second, the workflow every 2 s) for
 *    `durationMs`; then SIGTERM, whose final checkpoint exports the whole database once more.
 *    VmRSS and VmHWM are sampled every 50 ms until the process has exited, so the peak of
 *    opening the snapshot and of the closing checkpoint are both seen.
 */
import { spawn } from "node:child_process";
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { parseManifest } from "../../src/manifest/index.ts";
import type { Manifest } from "../../src/manifest/types.ts";
import { loadSqlJs } from "../../storage/sqljs/node/load.ts";
import { openSqlJsFileDriver } from "../../storage/sqljs/node/file-driver.ts";
import { openSqliteStore } from "../../storage/sqlite/store.ts";
import { log, now, round } from "./common.ts";
import { databaseComposition, type TableShare } from "./db-composition.ts";
import { applyManifest, createWorld, driveUntilTerminal, startRuns } from "./world.ts";
import { spawnServe, type ServeProcess } from "./serve-process.ts";

export interface EdgeDeviceConfig {
  /** The repository root (dist/qlr.mjs must be built). */
  readonly root: string;
  readonly dataRoot: string;
  readonly historyRuns: number;
  /** How long the schedules fire on the seeded store before SIGTERM. */
  readonly durationMs: number;
  /** Node flags of the serve process, one measurement each. */
  readonly variants: readonly { readonly label: string; readonly flags: readonly string[] }[];
}

const MIB = 1024 * 1024;
const mib = (bytes: number | null | undefined): number | null =>
  bytes === null || bytes === undefined || Number.isNaN(bytes) ? null : round(bytes / MIB, 1);
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

const TASK_AND_WORKFLOW = [
  "package: edge",
  "tasks:",
  "  noop:",
  '    run: ["true"]',
  "    timeout: 30s",
  "workflows:",
  "  pair:",
  "    steps:",
  "      a: { task: noop }",
  "      b: { task: noop, needs: [a] }",
];
/** What the device serves: the same package plus two schedules that fire real processes. */
const SERVED_MANIFEST = [
  ...TASK_AND_WORKFLOW,
  "schedules:",
  '  each-second: { cron: "* * * * * *", task: noop }',
  '  every-two-seconds: { cron: "*/2 * * * * *", workflow: pair }',
  "",
].join("\n");
/** What the history was written with (no schedules: the seeding clock is virtual). */
const HISTORY_MANIFEST = [...TASK_AND_WORKFLOW, ""].join("\n");

function manifestOf(text: string): Manifest {
  const parsed = parseManifest(text, "yaml");
  if (!parsed.ok) throw new Error(`bench manifest: ${JSON.stringify(parsed.issues)}`);
  return parsed.manifest;
}

export interface ProcMemory {
  readonly rss: number;
  readonly hwm: number;
  readonly anon: number;
  readonly file: number;
}

export function procStatus(pid: number | "self"): ProcMemory | null {
  try {
    const text = readFileSync(`/proc/${pid}/status`, "utf8");
    const field = (name: string): number =>
      Number(new RegExp(`^${name}:\\s+(\\d+)\\s+kB`, "m").exec(text)?.[1] ?? Number.NaN) * 1024;
    return {
      rss: field("VmRSS"),
      hwm: field("VmHWM"),
      anon: field("RssAnon"),
      file: field("RssFile"),
    };
  } catch {
    return null;
  }
}

const procMiB = (memory: ProcMemory | null): Record<string, number | null> | null =>
  memory === null
    ? null
    : {
        rss: mib(memory.rss),
        vmHwm: mib(memory.hwm),
        rssAnon: mib(memory.anon),
        rssFile: mib(memory.file),
      };

// ---------------------------------------------------------------------------------------------
// 1. The floor, import by import

/** The code that imports each module, one after another. */
const importOf = (...modules: readonly string[]): string =>
  modules.map((module) => `await import("${module}");`).join(" ");

/** Cumulative steps; each names what it adds and the code that adds it. */
const IMPORT_STEPS: readonly { readonly label: string; readonly code: string }[] = [
  { label: "node (nothing imported)", code: "" },
  { label: "+ @noble/hashes, croner", code: importOf("@noble/hashes/sha2.js", "croner") },
  { label: "+ zod", code: importOf("zod") },
  { label: "+ yaml", code: importOf("yaml") },
  { label: "+ hono, @hono/node-server", code: importOf("hono", "@hono/node-server") },
  { label: "+ sql.js module", code: 'globalThis.init = (await import("sql.js")).default;' },
  {
    label: "+ sql.js compiled, Liftoff only (edge)",
    code: 'v8.setFlagsFromString("--liftoff-only"); globalThis.SQL = await globalThis.init();',
  },
  { label: "+ one empty database", code: "new globalThis.SQL.Database();" },
  { label: "(+ pg, no longer loaded by the device)", code: importOf("pg") },
  { label: "(+ PGlite, no longer loaded by the device)", code: importOf("@electric-sql/pglite") },
];

async function importBreakdown(root: string): Promise<
  {
    label: string;
    rssMiB: number | null;
    vmHwmMiB: number | null;
    heapUsedMiB: number;
    externalMiB: number;
  }[]
> {
  const lines = [
    'import v8 from "node:v8";',
    'import { readFileSync } from "node:fs";',
    "const out = [];",
    'const mark = (label) => { const text = readFileSync("/proc/self/status", "utf8"); const kb = (name) => Number(new RegExp(`^${name}:\\\\s+(\\\\d+)`, "m").exec(text)?.[1] ?? NaN) * 1024; const usage = process.memoryUsage(); out.push({ label, rss: kb("VmRSS"), hwm: kb("VmHWM"), heapUsed: usage.heapUsed, external: usage.external }); };',
    ...IMPORT_STEPS.map(
      (step) =>
        `${step.code} await new Promise((r) => setTimeout(r, 200)); mark(${JSON.stringify(step.label)});`,
    ),
    "process.stdout.write(JSON.stringify(out));",
  ];
  // Inside node_modules/.cache so that the bare specifiers resolve from the repository's node_modules.
  const dir = join(root, "node_modules", ".cache", "qlr-bench");
  mkdirSync(dir, { recursive: true });
  const script = join(dir, `import-steps-${process.pid}.mjs`);
  writeFileSync(script, lines.join("\n"));
  try {
    const text = await new Promise<string>((resolve, reject) => {
      const child = spawn(process.execPath, [script], {
        cwd: root,
        stdio: ["ignore", "pipe", "inherit"],
      });
      let stdout = "";
      child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
      child.on("exit", (code) =>
        code === 0 ? resolve(stdout) : reject(new Error(`import steps exited with ${code}`)),
      );
    });
    const steps = JSON.parse(text) as {
      label: string;
      rss: number;
      hwm: number;
      heapUsed: number;
      external: number;
    }[];
    return steps.map((step) => ({
      label: step.label,
      rssMiB: mib(step.rss),
      vmHwmMiB: mib(step.hwm),
      heapUsedMiB: mib(step.heapUsed) ?? 0,
      externalMiB: mib(step.external) ?? 0,
    }));
  } finally {
    rmSync(script, { force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// 2 and 3. The serve process

export type Served = ServeProcess;

/** Starts `qlr serve --profile edge` on 127.0.0.1 with a free port; `extraArgs` follow the standard ones (e.g. retention flags). */
export function startServe(
  root: string,
  stateDir: string,
  manifestPath: string,
  flags: readonly string[],
  extraArgs: readonly string[] = [],
): Promise<Served> {
  return spawnServe({
    root,
    stateDir,
    manifestPath,
    profile: "edge",
    nodeFlags: flags,
    extraArgs,
  });
}

export async function metricsOf(
  served: Served,
): Promise<{ memoryMiB: Record<string, number | null>; runs: Record<string, number> }> {
  const text = await (
    await fetch(`${served.url}/metrics`, { headers: { authorization: `Bearer ${served.token}` } })
  ).text();
  const memoryMiB: Record<string, number | null> = {};
  for (const match of text.matchAll(/^qlr_process_memory_bytes\{kind="([a-z_]+)"\} (\d+)$/gm))
    memoryMiB[match[1] ?? "?"] = mib(Number(match[2]));
  const runs: Record<string, number> = {};
  for (const match of text.matchAll(/^qlr_runs\{status="([a-z_]+)"\} (\d+)$/gm))
    runs[match[1] ?? "?"] = Number(match[2]);
  return { memoryMiB, runs };
}

/** Stops the serve process (SIGTERM, SIGKILL after 20 s) and any supervisor still naming its state dir. */
export async function stopServe(served: Served, stateDir: string): Promise<void> {
  if (!served.exited()) served.child.kill("SIGTERM");
  await Promise.race([served.exit, sleep(20_000)]);
  if (!served.exited()) served.child.kill("SIGKILL");
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(stateDir))
        process.kill(Number(entry), "SIGKILL");
    } catch {
      // Gone.
    }
  }
}

async function measureFloor(
  config: EdgeDeviceConfig,
  flags: readonly string[],
): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(config.dataRoot, "edge-floor-"));
  const manifestPath = join(dir, "package.yaml");
  writeFileSync(manifestPath, SERVED_MANIFEST.replace(/^schedules:[\s\S]*$/m, ""));
  const stateDir = join(dir, "state");
  const served = await startServe(config.root, stateDir, manifestPath, flags);
  try {
    await sleep(1000);
    const status = procStatus(served.pid);
    const metrics = await metricsOf(served);
    return { proc: procMiB(status), metrics: metrics.memoryMiB };
  } finally {
    await stopServe(served, stateDir);
    rmSync(dir, { recursive: true, force: true });
  }
}

interface Seeded {
  readonly stateDir: string;
  readonly seconds: number;
  readonly snapshotBytes: number;
  readonly runs: number;
  readonly succeeded: number;
  /** What the history holds, table by table (VACUUMed copy). */
  readonly composition: { totalBytes: number; tables: TableShare[] };
}

/** Writes `runs` finished runs into a fresh state dir's store (the layout `qlr serve` opens). */
async function seedHistory(config: EdgeDeviceConfig): Promise<Seeded> {
  const startedAt = now();
  const stateDir = mkdtempSync(join(config.dataRoot, "edge-history-"));
  const driver = await openSqlJsFileDriver(await loadSqlJs({ baselineCompilerOnly: true }), {
    path: join(stateDir, "db"),
  });
  // Store time must stay behind the wall clock the serve process will read.
  const startMs = Date.now() - 24 * 3600 * 1000;
  const store = await openSqliteStore(driver, startMs);
  let succeeded = 0;
  try {
    const world = createWorld(store, { profile: "cluster", startMs, idPrefix: "hist" });
    await applyManifest(world, manifestOf(HISTORY_MANIFEST));
    const batch = 500;
    for (let done = 0; done < config.historyRuns; done += batch) {
      const size = Math.min(batch, config.historyRuns - done);
      await startRuns(world, "edge", { kind: "workflow", name: "pair" }, Math.ceil(size / 2));
      await startRuns(world, "edge", { kind: "task", name: "noop" }, Math.floor(size / 2));
      const drive = await driveUntilTerminal(world, done + size, 100_000);
      succeeded = drive.statuses.succeeded;
      if (!drive.finished)
        throw new Error(
          `seeding stopped at ${drive.terminal} terminal runs: ${drive.firstStageError ?? "no stage error"}`,
        );
    }
  } finally {
    await store.close();
  }
  const seconds = round((now() - startedAt) / 1000, 1);
  const snapshotBytes = statSync(join(stateDir, "db", "snapshot.sqlite")).size;
  return {
    stateDir,
    seconds,
    snapshotBytes,
    runs: config.historyRuns,
    succeeded,
    composition: await databaseComposition(join(stateDir, "db")),
  };
}

async function measureHistory(
  config: EdgeDeviceConfig,
  seeded: Seeded,
  flags: readonly string[],
): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(config.dataRoot, "edge-run-"));
  const stateDir = join(dir, "state");
  cpSync(seeded.stateDir, stateDir, { recursive: true });
  const manifestPath = join(dir, "package.yaml");
  writeFileSync(manifestPath, SERVED_MANIFEST);
  const samples: { t: number; memory: ProcMemory }[] = [];
  const startedAt = now();
  const served = await startServe(config.root, stateDir, manifestPath, flags);
  const readyS = round((now() - startedAt) / 1000, 2);
  const sampler = setInterval(() => {
    const memory = procStatus(served.pid);
    if (memory !== null) samples.push({ t: now(), memory });
  }, 50);
  try {
    await sleep(1000);
    const atReady = procStatus(served.pid);
    const metricsAtReady = await metricsOf(served);
    const windowStart = now();
    const rssByTenth: (number | null)[] = [];
    for (let tenth = 1; tenth <= 10; tenth += 1) {
      await sleep(config.durationMs / 10);
      rssByTenth.push(mib(procStatus(served.pid)?.rss));
    }
    const windowS = (now() - windowStart) / 1000;
    const beforeStop = procStatus(served.pid);
    const metricsBeforeStop = await metricsOf(served);
    const stopStart = now();
    served.child.kill("SIGTERM");
    await Promise.race([served.exit, sleep(20_000)]);
    const stopS = round((now() - stopStart) / 1000, 2);
    clearInterval(sampler);
    const last = samples[samples.length - 1]?.memory ?? null;
    const finishedBefore = (runs: Record<string, number>): number =>
      (runs.succeeded ?? 0) +
      (runs.failed ?? 0) +
      (runs.timed_out ?? 0) +
      (runs.cancelled ?? 0) +
      (runs.lost ?? 0);
    const firedRuns = finishedBefore(metricsBeforeStop.runs) - finishedBefore(metricsAtReady.runs);
    const snapshotAfter = (() => {
      try {
        return statSync(join(stateDir, "db", "snapshot.sqlite")).size;
      } catch {
        return null;
      }
    })();
    return {
      readyS,
      windowS: round(windowS, 1),
      stopS,
      runsAtReady: metricsAtReady.runs,
      runsBeforeStop: metricsBeforeStop.runs,
      runsFinishedInWindow: firedRuns,
      atReady: { proc: procMiB(atReady), metrics: metricsAtReady.memoryMiB },
      beforeStop: { proc: procMiB(beforeStop), metrics: metricsBeforeStop.memoryMiB },
      rssMiBByTenthOfWindow: rssByTenth,
      growthDuringWindowMiB:
        atReady === null || beforeStop === null ? null : mib(beforeStop.rss - atReady.rss),
      vmHwmBeforeStopMiB: mib(beforeStop?.hwm),
      // The last sample before exit: its VmHWM includes the closing checkpoint's export.
      vmHwmAtExitMiB: mib(last?.hwm),
      peakRssSampledMiB: mib(samples.reduce((max, sample) => Math.max(max, sample.memory.rss), 0)),
      snapshotBytesAfter: snapshotAfter,
    };
  } finally {
    clearInterval(sampler);
    await stopServe(served, stateDir);
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function measureEdgeDevice(
  config: EdgeDeviceConfig,
): Promise<Record<string, unknown>> {
  const bare = await new Promise<ProcMemory | null>((resolve) => {
    const child = spawn(process.execPath, ["-e", "setTimeout(() => {}, 1e5)"], { stdio: "ignore" });
    setTimeout(() => {
      const memory = procStatus(child.pid ?? -1);
      child.kill("SIGKILL");
      resolve(memory);
    }, 1000);
  });
  log("edge device: import steps");
  const imports = await importBreakdown(config.root);
  const floors: Record<string, unknown>[] = [];
  for (const variant of config.variants) {
    log(`edge device: floor (${variant.label})`);
    floors.push({
      label: variant.label,
      flags: variant.flags,
      ...(await measureFloor(config, variant.flags)),
    });
  }
  log(`edge device: seeding ${config.historyRuns} finished runs`);
  const seeded = await seedHistory(config);
  log(`edge device: seeded in ${seeded.seconds} s, snapshot ${mib(seeded.snapshotBytes)} MiB`);
  const history: Record<string, unknown>[] = [];
  try {
    for (const variant of config.variants) {
      log(
        `edge device: ${config.historyRuns} runs of history, schedules firing for ${config.durationMs / 1000} s (${variant.label})`,
      );
      const measured = await measureHistory(config, seeded, variant.flags);
      log(
        `edge device: VmHWM ${String(measured.vmHwmBeforeStopMiB)} MiB before stop, ${String(measured.vmHwmAtExitMiB)} MiB at exit`,
      );
      history.push({ label: variant.label, flags: variant.flags, ...measured });
    }
  } finally {
    rmSync(seeded.stateDir, { recursive: true, force: true });
  }
  return {
    bareNode: procMiB(bare),
    importSteps: imports,
    floors,
    history: {
      runs: seeded.runs,
      succeeded: seeded.succeeded,
      seedSeconds: seeded.seconds,
      snapshotMiB: mib(seeded.snapshotBytes),
      snapshotBytesPerRun: Math.round(seeded.snapshotBytes / seeded.runs),
      composition: {
        vacuumedBytes: seeded.composition.totalBytes,
        tables: seeded.composition.tables.map((table) => ({
          ...table,
          bytesPerRun: Math.round(table.bytes / seeded.runs),
        })),
      },
      durationS: config.durationMs / 1000,
      variants: history,
    },
  };
}
