/**
 * Benches 5 and 6: the real device runtime, `node dist/qlr.mjs serve`, over HTTP, with real
 * processes (`true`). A package with one workflow (the 4-step diamond, or a 2-step chain) is
 * applied at start-up (`--apply`); runs are started with `POST /runs`, at most `inFlight` of
 * them not yet terminal at any time (new ones are started as others finish, so the runtime
 * keeps working), and `GET /metrics` (run counts by status) is polled every `pollMs` until all
 * are terminal. The serve process's `/proc/<pid>/status` (VmRSS, VmHWM) is sampled every
 * `sampleMs`. Optionally the serve process is moved into a fresh memory cgroup with a limit
 * (cgroup v2 `memory.max`, else cgroup v1 `memory.limit_in_bytes`), whose peak and OOM
 * counters are read at the end; every process it starts (one supervisor Node process per
 * attempt, the task's process) is charged to that cgroup too.
 */
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ProfileName } from "../src/profiles.ts";
import { log, now, readConfig, round, writeResult } from "./lib/common.ts";
import { createMemoryCgroup, removeWhenEmpty, type MemoryCgroup } from "./lib/memory-cgroup.ts";
import { runsByStatus, spawnServe, terminalRuns } from "./lib/serve-process.ts";

export interface ServeConfig {
  readonly profile: ProfileName;
  readonly workflow: "diamond" | "pair";
  readonly runs: number;
  /** At most this many started runs not yet terminal. */
  readonly inFlight: number;
  readonly nodeFlags: readonly string[];
  /** Memory limit for the serve process's cgroup, bytes; null for none. */
  readonly memoryLimitBytes: number | null;
  readonly dataRoot: string;
  readonly label: string;
  readonly timeoutMs: number;
  readonly root: string;
}

const MIB = 1024 * 1024;
const mib = (bytes: number | null): number | null =>
  bytes === null ? null : round(bytes / MIB, 1);
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function manifestYaml(workflow: ServeConfig["workflow"]): string {
  const steps =
    workflow === "diamond"
      ? [
          "      a: { task: noop }",
          "      b: { task: noop, needs: [a] }",
          "      c: { task: noop, needs: [a] }",
          "      d: { task: noop, needs: [b, c] }",
        ]
      : ["      a: { task: noop }", "      b: { task: noop, needs: [a] }"];
  return [
    "package: bench",
    "tasks:",
    "  noop:",
    '    run: ["true"]',
    "    timeout: 30s",
    "workflows:",
    "  w:",
    "    steps:",
    ...steps,
    "",
  ].join("\n");
}

function procStatus(pid: number): { rss: number; hwm: number } | null {
  try {
    const text = readFileSync(`/proc/${pid}/status`, "utf8");
    const field = (name: string): number =>
      Number(new RegExp(`^${name}:\\s+(\\d+)\\s+kB`, "m").exec(text)?.[1] ?? Number.NaN) * 1024;
    return { rss: field("VmRSS"), hwm: field("VmHWM") };
  } catch {
    return null;
  }
}

/** Processes whose command line names the state dir (the serve process and its supervisors). */
function processesNaming(stateDir: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(stateDir))
        found.push(Number(entry));
    } catch {
      // Gone.
    }
  }
  return found;
}

function killPid(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // Already gone.
  }
}

async function main(): Promise<void> {
  const config = readConfig<ServeConfig>();
  const stateDir = mkdtempSync(join(config.dataRoot, "serve-"));
  const manifestPath = join(stateDir, "bench-package.yaml");
  writeFileSync(manifestPath, manifestYaml(config.workflow));
  const stepsPerRun = config.workflow === "diamond" ? 4 : 2;

  let cgroup: MemoryCgroup | null = null;
  let limitMethod: string | null = null;
  if (config.memoryLimitBytes !== null) {
    const created = createMemoryCgroup(config.memoryLimitBytes);
    cgroup = created.cgroup;
    limitMethod = created.why;
    log(`memory limit: ${limitMethod}`);
  }

  let child: ChildProcess | null = null;
  let exited: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  const samples: { t: number; rss: number; hwm: number }[] = [];
  let cgroupAnonPeak = 0;
  let cgroupFilePeak = 0;
  let sampler: NodeJS.Timeout | null = null;
  try {
    const served = await spawnServe({
      root: config.root,
      stateDir,
      manifestPath,
      profile: config.profile,
      nodeFlags: config.nodeFlags,
      cgroupProcsPath: cgroup?.procsPath ?? null,
      urlTimeoutMs: 30_000,
    });
    child = served.child;
    const { pid, url, readyMs, headers } = served;
    child.on("exit", (code, signal) => {
      exited = { code, signal };
    });
    sampler = setInterval(() => {
      const status = procStatus(pid);
      if (status !== null) samples.push({ t: now(), rss: status.rss, hwm: status.hwm });
      const usage = cgroup?.usage();
      if (usage !== undefined) {
        if (usage.anonBytes > cgroupAnonPeak) cgroupAnonPeak = usage.anonBytes;
        if (usage.fileBytes > cgroupFilePeak) cgroupFilePeak = usage.fileBytes;
      }
    }, 50);
    await sleep(200);
    const atReady = procStatus(pid);

    const counts = async (): Promise<{ terminal: number; succeeded: number }> => {
      const runs = await runsByStatus(served);
      return { terminal: terminalRuns(runs), succeeded: runs.succeeded ?? 0 };
    };

    let started = 0;
    let startMsTotal = 0;
    let state = { terminal: 0, succeeded: 0 };
    const rssAtProgress: { runsTerminal: number; rssMiB: number | null }[] = [];
    let nextMark = Math.ceil(config.runs / 10);
    const firstStart = now();
    const deadline = firstStart + config.timeoutMs;
    while (state.terminal < config.runs && now() < deadline && exited === null) {
      while (started < config.runs && started - state.terminal < config.inFlight) {
        const t0 = now();
        const response = await fetch(`${url}/runs`, {
          method: "POST",
          headers,
          body: JSON.stringify({ package: "bench", workflow: "w" }),
        });
        startMsTotal += now() - t0;
        if (response.status !== 201)
          throw new Error(`POST /runs answered ${response.status}: ${await response.text()}`);
        started += 1;
      }
      await sleep(50);
      state = await counts();
      while (state.terminal >= nextMark && nextMark <= config.runs) {
        rssAtProgress.push({
          runsTerminal: state.terminal,
          rssMiB: mib(procStatus(pid)?.rss ?? null),
        });
        nextMark += Math.ceil(config.runs / 10);
      }
    }
    const wallMs = now() - firstStart;
    await sleep(300);
    const atEnd = procStatus(pid);
    const limit = cgroup?.read() ?? null;
    const peakSampled = samples.reduce((max, sample) => Math.max(max, sample.rss), 0);
    const finished = state.terminal >= config.runs;
    log(
      `serve ${config.profile} (${config.label}): ${state.terminal}/${config.runs} runs terminal (${state.succeeded} succeeded) in ${Math.round(wallMs)} ms, ${round(((state.succeeded * stepsPerRun) / wallMs) * 1000, 1)} steps/s, VmHWM ${mib(atEnd?.hwm ?? null)} MiB${exited === null ? "" : `; serve EXITED ${JSON.stringify(exited)}`}`,
    );
    writeResult({
      bench: "serve",
      label: config.label,
      profile: config.profile,
      workflow: config.workflow,
      stepsPerRun,
      runs: config.runs,
      inFlight: config.inFlight,
      nodeFlags: config.nodeFlags,
      finished,
      terminal: state.terminal,
      succeeded: state.succeeded,
      serveExited: exited,
      readyMs: round(readyMs, 0),
      wallMs: round(wallMs, 0),
      runsPerSecond: round((state.succeeded / wallMs) * 1000, 2),
      stepsPerSecond: round(((state.succeeded * stepsPerRun) / wallMs) * 1000, 2),
      meanPostRunsMs: round(startMsTotal / Math.max(1, started), 3),
      rssMiB: {
        atReady: mib(atReady?.rss ?? null),
        end: mib(atEnd?.rss ?? null),
        growth: atReady === null || atEnd === null ? null : mib(atEnd.rss - atReady.rss),
        peakSampled: mib(peakSampled),
        vmHwm: mib(atEnd?.hwm ?? samples[samples.length - 1]?.hwm ?? null),
        atProgress: rssAtProgress,
      },
      memoryLimit:
        config.memoryLimitBytes === null
          ? null
          : {
              limitMiB: mib(config.memoryLimitBytes),
              method: limitMethod,
              cgroupVersion: cgroup?.version ?? null,
              peakMiB: mib(limit?.peakBytes ?? null),
              anonPeakSampledMiB: mib(cgroupAnonPeak),
              pageCachePeakSampledMiB: mib(cgroupFilePeak),
              limitHits: limit?.limitHits ?? null,
              oomEvents: limit?.oomEvents ?? null,
              oomKills: limit?.oomKills ?? null,
            },
    });
  } finally {
    if (sampler !== null) clearInterval(sampler);
    if (child?.pid !== undefined && exited === null) {
      killPid(child.pid, "SIGTERM");
      for (let waited = 0; waited < 5000 && exited === null; waited += 50) await sleep(50);
      if (exited === null) killPid(child.pid, "SIGKILL");
    }
    // Supervisors still running (they name the state dir on their command line), and whatever is left in the cgroup.
    for (const leftover of processesNaming(stateDir)) killPid(leftover, "SIGKILL");
    if (cgroup !== null) {
      for (const leftover of cgroup.pids()) killPid(leftover, "SIGKILL");
      await removeWhenEmpty(cgroup);
    }
    rmSync(stateDir, { recursive: true, force: true });
  }
}

await main();
