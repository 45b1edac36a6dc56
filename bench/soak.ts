/**
 * Bench 9: long life. Does a device that runs for months stay flat once retention has caught up?
 *
 * Part "simulated" (in process): the device's store (`openConfiguredStore`, the sql.js file
 * store in a temporary state dir, sql.js compiled as on the edge profile), the edge profile's
 * Coordinator with retention, the buffer reclaimer the edge runtime runs after each cycle, and
 * the simulated executor (tasks of 1–5 simulated seconds) on a virtual clock. A package with
 * `schedules` cron schedules every 5 minutes runs for `days` simulated days. The cadence ticks
 * the way the device's timer does: at once while a cycle reports more work, every tick
 * interval while anything is in flight, and when a cycle found nothing to do and no process is
 * running, the clock jumps to the next 5-minute slot (nothing can become due in between: no
 * retries, no timeouts; expired runs wait for the next slot's cycles, whose purge budget is
 * far above 30 runs). Every schedule slot fires and every cycle runs the purge stage.
 * At the end of each simulated day: the database size (page_count × page_size, and the free
 * list), snapshot and journal bytes on disk (allocated blocks), runs retained and purged, the
 * process's RSS, VmHWM and ArrayBuffers, and sql.js's WebAssembly memory.
 *
 * Part "serve" (real process): `qlr serve --profile edge` with a short `--retention` and a
 * small `--retention-runs`, schedules firing `true` every second, for `durationMs`. Every
 * `sampleMs`: VmRSS and VmHWM from /proc/<pid>/status and the state dir's allocated bytes.
 * Reported: the least-squares slope of RSS over the second half (MiB per hour) and the state
 * dir's size first and last.
 *
 * The bench measures; it asserts nothing.
 */
import { lstatSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { Coordinator } from "../src/coordinator.ts";
import { parseManifest } from "../src/manifest/index.ts";
import { applyPackage } from "../src/operations.ts";
import { transactAtStoreTime } from "../src/ports.ts";
import { PROFILES, type ProfileName } from "../src/profiles.ts";
import { parseRetentionPolicy, type RetentionPolicy } from "../src/retention.ts";
import { Prng } from "../src/sim/prng.ts";
import { SimulatedExecutor } from "../src/sim/simulated-executor.ts";
import { VirtualClock } from "../src/sim/virtual-clock.ts";
import { BufferReclaimer } from "../runtimes/node/buffer-reclaimer.ts";
import { openConfiguredStore } from "../runtimes/node/open-store.ts";
import { sqlJsWasmMemoryBytes } from "../storage/sqljs/node/wasm-memory.ts";
import {
  BENCH_START_MS,
  BenchIds,
  log,
  now,
  readConfig,
  readProcStatus,
  round,
  writeResult,
} from "./lib/common.ts";
import { metricsOf, procStatus, startServe, stopServe } from "./lib/edge-device.ts";
import { terminalRuns } from "./lib/serve-process.ts";

export interface SoakSimulatedConfig {
  readonly part: "simulated";
  readonly label: string;
  readonly dataRoot: string;
  readonly days: number;
  readonly schedules: number;
  /** `--retention` and `--retention-runs` as an operator writes them. */
  readonly retention: string;
  readonly retentionRuns: string;
  /** The cadence's budgets; the device's is edge (one item per stage per cycle). */
  readonly profile: ProfileName;
  /** A sample every this many simulated hours (24: once a day). */
  readonly sampleEveryHours: number;
}

export interface SoakServeConfig {
  readonly part: "serve";
  readonly root: string;
  readonly dataRoot: string;
  readonly durationMs: number;
  readonly sampleMs: number;
  /** Schedules firing `true` every second. */
  readonly schedules: number;
  readonly retention: string;
  readonly retentionRuns: string;
}

export type SoakConfig = SoakSimulatedConfig | SoakServeConfig;

const MIB = 1024 * 1024;
const DAY_MS = 86_400_000;
const SLOT_MS = 5 * 60_000;
const mib = (bytes: number | null | undefined): number | null =>
  bytes === null || bytes === undefined || Number.isNaN(bytes) ? null : round(bytes / MIB, 2);
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Bytes a path occupies on disk (allocated blocks, recursively), as `du` counts them. */
export function diskBytes(path: string): number {
  let stat;
  try {
    stat = lstatSync(path);
  } catch {
    return 0;
  }
  let total = stat.blocks * 512;
  if (stat.isDirectory()) {
    let names: string[];
    try {
      names = readdirSync(path);
    } catch {
      names = [];
    }
    for (const name of names) total += diskBytes(join(path, name));
  }
  return total;
}

/** Least-squares slope of y over x. */
export function slope(points: readonly { x: number; y: number }[]): number {
  const n = points.length;
  if (n < 2) return Number.NaN;
  const meanX = points.reduce((sum, point) => sum + point.x, 0) / n;
  const meanY = points.reduce((sum, point) => sum + point.y, 0) / n;
  let numerator = 0;
  let denominator = 0;
  for (const point of points) {
    numerator += (point.x - meanX) * (point.y - meanY);
    denominator += (point.x - meanX) ** 2;
  }
  return denominator === 0 ? Number.NaN : numerator / denominator;
}

// ---------------------------------------------------------------------------------------------
// Simulated: 30 schedules × 288 slots a day, on the device's store

/**
 * The simulated executor keeps every process it ever started (the simulation's checkers read
 * them). A soak of 250,000 runs must not measure that: once retention has discarded an
 * attempt's files, the bench forgets the attempt too, as the real launcher does.
 */
class ForgetfulExecutor extends SimulatedExecutor {
  /** Attempts whose simulated process may still be running (a handful: one slot's runs at most). */
  private readonly running = new Set<string>();

  override async launch(
    request: Parameters<SimulatedExecutor["launch"]>[0],
  ): ReturnType<SimulatedExecutor["launch"]> {
    const facts = await super.launch(request);
    this.running.add(request.attempt.id);
    return facts;
  }

  override async discard(attemptIds: readonly string[]): Promise<void> {
    await super.discard(attemptIds);
    for (const attemptId of attemptIds) {
      this.processes.delete(attemptId);
      this.spawnCounts.delete(attemptId);
      this.discarded.delete(attemptId);
    }
  }

  /** When the first simulated process still running at `nowMs` ends; null when none runs. */
  nextFinishAfter(nowMs: number): number | null {
    let next: number | null = null;
    for (const attemptId of this.running) {
      const finishAtMs = this.processes.get(attemptId)?.finishAtMs ?? nowMs;
      if (finishAtMs <= nowMs) this.running.delete(attemptId);
      else if (next === null || finishAtMs < next) next = finishAtMs;
    }
    return next;
  }
}

function soakManifest(schedules: number, cron: string): string {
  const lines = [
    "package: soak",
    "tasks:",
    "  job:",
    '    run: ["true"]',
    "    timeout: 60s",
    "schedules:",
  ];
  for (let index = 0; index < schedules; index += 1)
    lines.push(`  s${String(index).padStart(2, "0")}: { cron: "${cron}", task: job }`);
  return `${lines.join("\n")}\n`;
}

export interface SoakDay {
  readonly day: number;
  readonly wallS: number;
  readonly ticks: number;
  readonly runsStarted: number;
  readonly runsRetained: number;
  readonly runsPurged: number;
  readonly nonTerminal: number;
  readonly databaseMiB: number | null;
  readonly freelistMiB: number | null;
  readonly snapshotMiB: number | null;
  readonly journalMiB: number | null;
  readonly stateDirMiB: number | null;
  readonly rssMiB: number | null;
  readonly vmHwmMiB: number | null;
  readonly heapUsedMiB: number | null;
  readonly arrayBuffersMiB: number | null;
  readonly wasmMiB: number | null;
  readonly load1m: number;
  /**
   * One purge pass's start (`terminalRunAtRank(maxRuns)`, an index walk of up to maxRuns
   * terminal runs), ms: paid by every cycle whose previous pass ended, idle ones included.
   */
  readonly purgeRangeMs: number;
  /** Rows per table: what a database that still grows keeps. */
  readonly tableRows: Record<string, number>;
}

async function soakSimulated(config: SoakSimulatedConfig): Promise<Record<string, unknown>> {
  const policy: RetentionPolicy = parseRetentionPolicy({
    horizon: config.retention,
    maxRuns: config.retentionRuns,
  });
  const parent = mkdtempSync(join(config.dataRoot, "soak-"));
  const stateDir = join(parent, "state");
  const startMs = BENCH_START_MS;
  const clock = new VirtualClock(startMs);
  const store = await openConfiguredStore({
    kind: "sqlite",
    stateDir,
    databaseUrl: null,
    nowMs: startMs,
    lowMemory: true,
  });
  const profile = PROFILES[config.profile];
  const executor = new ForgetfulExecutor({
    clock,
    prng: new Prng(0x50a6),
    failureRate: 0,
    spawnFailureRate: 0,
    minDurationMs: 1_000,
    maxDurationMs: 5_000,
  });
  let purged = 0;
  const coordinator = new Coordinator({
    store,
    clock,
    ids: new BenchIds("soak"),
    profile,
    executors: { local_process: executor },
    elapsedMs: now,
    retention: policy,
    onPurge: () => {
      purged += 1;
    },
  });
  const reclaimer = new BufferReclaimer();
  const days: SoakDay[] = [];
  const startedAt = now();
  let stageErrors = 0;
  let firstStageError: string | null = null;
  let ticks = 0;
  let fired = 0;
  let overlaps: { skipped: number; missed: number };
  try {
    const parsed = parseManifest(soakManifest(config.schedules, "*/5 * * * *"), "yaml");
    if (!parsed.ok) throw new Error(`soak manifest: ${JSON.stringify(parsed.issues)}`);
    await transactAtStoreTime(store, clock, (tx, nowMs) =>
      applyPackage(tx, parsed.manifest, nowMs),
    );
    await coordinator.recover();
    const endMs = startMs + config.days * DAY_MS;
    const sampleMs = Math.max(1, config.sampleEveryHours) * 3_600_000;
    let nextDayMs = startMs + sampleMs;
    let dayStartedAt = now();
    let dayTicks = 0;
    let consecutiveMore = 0;
    while (clock.nowMs() < endMs) {
      const report = await coordinator.tick();
      reclaimer.afterCycle();
      ticks += 1;
      dayTicks += 1;
      let processed = 0;
      for (const stage of report.stages) {
        processed += stage.processed;
        stageErrors += stage.errors.length;
        const error = stage.errors[0];
        if (firstStageError === null && error !== undefined)
          firstStageError = `${stage.name}: ${error.code}: ${error.message}`;
        if (stage.name === "schedules") fired += stage.processed;
      }
      // As the device's timer: at once while a cycle reports more (a few ms pass), else the interval.
      if ((report.more || report.followUp) && consecutiveMore < 50) {
        consecutiveMore += 1;
        clock.advance(5);
      } else {
        consecutiveMore = 0;
        if (processed > 0) clock.advance(profile.tickIntervalMs);
        else {
          // Nothing to do: nothing changes before the next process ends or the next slot, so
          // the timer's empty cycles up to then are skipped (the clock stays on the tick grid).
          const nowMs = clock.nowMs();
          const nextSlot = (Math.floor((nowMs - startMs) / SLOT_MS) + 1) * SLOT_MS + startMs;
          const wakeAt = Math.min(executor.nextFinishAfter(nowMs) ?? nextSlot, nextSlot);
          clock.advance(
            Math.max(1, Math.ceil((wakeAt - nowMs) / profile.tickIntervalMs)) *
              profile.tickIntervalMs,
          );
        }
      }
      if (clock.nowMs() >= nextDayMs) {
        days.push(
          await measureDay(store, stateDir, round((clock.nowMs() - startMs) / DAY_MS, 2), {
            wallS: (now() - dayStartedAt) / 1000,
            ticks: dayTicks,
            purged,
            maxRuns: policy.maxRuns,
          }),
        );
        const day = days[days.length - 1];
        if (day !== undefined)
          log(
            `soak ${config.label}: day ${day.day}, load ${day.load1m}: ${day.runsRetained} runs kept, ${day.runsPurged} purged, db ${day.databaseMiB} MiB, state dir ${day.stateDirMiB} MiB, RSS ${day.rssMiB} MiB, ${round(day.wallS, 1)} s`,
          );
        nextDayMs += sampleMs;
        dayStartedAt = now();
        dayTicks = 0;
      }
    }
    overlaps = await store.transaction(async (tx) => {
      let skippedTotal = 0;
      let missedTotal = 0;
      for (const schedule of await tx.getSchedules("soak")) {
        skippedTotal += schedule.skippedOverlaps;
        missedTotal += schedule.missedFires;
      }
      return { skipped: skippedTotal, missed: missedTotal };
    });
  } finally {
    await store.close();
    rmSync(parent, { recursive: true, force: true });
  }
  const wallS = (now() - startedAt) / 1000;
  const horizonDay = policy.horizonMs / DAY_MS;
  return {
    bench: "soak-simulated",
    label: config.label,
    store: "sqljs-file (openConfiguredStore, state dir on the data root)",
    profile: config.profile,
    days: config.days,
    schedules: config.schedules,
    slotMinutes: 5,
    sampleEveryHours: config.sampleEveryHours,
    runsPerDay: config.schedules * (DAY_MS / SLOT_MS),
    retention: {
      horizon: config.retention,
      horizonMs: policy.horizonMs,
      horizonDay: round(horizonDay, 3),
      maxRuns: policy.maxRuns,
    },
    ticks,
    schedulesFired: fired,
    skippedOverlaps: overlaps.skipped,
    missedFires: overlaps.missed,
    expectedFires: config.schedules * config.days * (DAY_MS / SLOT_MS),
    stageErrors,
    firstStageError,
    wallS: round(wallS, 1),
    perDay: days,
    flatness: flatness(days, policy, config.schedules * (DAY_MS / SLOT_MS)),
  };
}

async function measureDay(
  store: Awaited<ReturnType<typeof openConfiguredStore>>,
  stateDir: string,
  day: number,
  facts: { wallS: number; ticks: number; purged: number; maxRuns: number },
): Promise<SoakDay> {
  const counts = await store.transaction((tx) => tx.countRunsByStatus());
  const terminal =
    (counts.succeeded ?? 0) +
    (counts.failed ?? 0) +
    (counts.timed_out ?? 0) +
    (counts.cancelled ?? 0) +
    (counts.lost ?? 0);
  const total = Object.values(counts).reduce((sum, value) => sum + value, 0);
  const pages = await store.driver.transaction(async (tx) => {
    const value = async (sql: string): Promise<number> =>
      Number(Object.values((await tx.query(sql))[0] ?? {})[0] ?? Number.NaN);
    const tableRows: Record<string, number> = {};
    for (const row of await tx.query<{ name: string }>(
      "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
    ))
      tableRows[row.name] = await value(`SELECT count(*) FROM "${row.name.replace(/"/g, '""')}"`);
    return {
      pageCount: await value("PRAGMA page_count"),
      pageSize: await value("PRAGMA page_size"),
      freelist: await value("PRAGMA freelist_count"),
      tableRows,
    };
  });
  const rankStartedAt = now();
  for (let index = 0; index < 5; index += 1)
    await store.transaction((tx) => tx.terminalRunAtRank(facts.maxRuns));
  const purgeRangeMs = (now() - rankStartedAt) / 5;
  const db = join(stateDir, "db");
  const snapshot = diskBytes(join(db, "snapshot.sqlite"));
  // Both journal files: the sealed segment stays beside journal.log while a checkpoint writes its snapshot.
  const journal = diskBytes(join(db, "journal.log")) + diskBytes(join(db, "journal.sealed.log"));
  const usage = process.memoryUsage();
  const status = readProcStatus();
  return {
    day,
    wallS: round(facts.wallS, 2),
    ticks: facts.ticks,
    runsStarted: total + facts.purged,
    runsRetained: total,
    runsPurged: facts.purged,
    nonTerminal: total - terminal,
    databaseMiB: mib(pages.pageCount * pages.pageSize),
    freelistMiB: mib(pages.freelist * pages.pageSize),
    snapshotMiB: mib(snapshot),
    journalMiB: mib(journal),
    stateDirMiB: mib(diskBytes(stateDir)),
    rssMiB: mib(usage.rss),
    vmHwmMiB: mib(status?.vmHwmBytes),
    heapUsedMiB: mib(usage.heapUsed),
    arrayBuffersMiB: mib(usage.arrayBuffers),
    wasmMiB: mib(sqlJsWasmMemoryBytes()),
    load1m: round(os.loadavg()[0] ?? 0, 2),
    purgeRangeMs: round(purgeRangeMs, 3),
    tableRows: pages.tableRows,
  };
}

/**
 * Flat or not, by the numbers: the days after retention has caught up (the horizon, or the day
 * the count cap is reached, plus half of that and at least 6 hours for the store to settle).
 */
function flatness(
  days: readonly SoakDay[],
  policy: RetentionPolicy,
  runsPerDay: number,
): Record<string, unknown> {
  const capDay = policy.maxRuns / runsPerDay;
  const caughtUp = Math.min(policy.horizonMs / DAY_MS, capDay);
  const steadyFrom = caughtUp + Math.max(0.25, caughtUp / 2);
  const steady = days.filter((day) => day.day >= steadyFrom);
  if (steady.length < 2)
    return {
      steadyFromDay: steadyFrom,
      days: steady.length,
      note: "fewer than two days after retention caught up",
    };
  const per = (key: keyof SoakDay): Record<string, number | null> => {
    const values = steady
      .map((day) => day[key])
      .filter((value): value is number => typeof value === "number");
    const first = values[0] ?? Number.NaN;
    const last = values[values.length - 1] ?? Number.NaN;
    return {
      first,
      last,
      min: Math.min(...values),
      max: Math.max(...values),
      slopePerDay: round(slope(steady.map((day) => ({ x: day.day, y: Number(day[key]) }))), 3),
    };
  };
  const firstRows = steady[0]?.tableRows ?? {};
  const lastRows = steady[steady.length - 1]?.tableRows ?? {};
  const tablesThatGrew = Object.fromEntries(
    Object.keys(lastRows)
      .filter((name) => (lastRows[name] ?? 0) !== (firstRows[name] ?? 0))
      .map((name) => [name, { first: firstRows[name] ?? 0, last: lastRows[name] ?? 0 }]),
  );
  return {
    steadyFromDay: steadyFrom,
    days: steady.length,
    tablesThatChanged: tablesThatGrew,
    runsRetained: per("runsRetained"),
    databaseMiB: per("databaseMiB"),
    stateDirMiB: per("stateDirMiB"),
    rssMiB: per("rssMiB"),
    vmHwmMiB: per("vmHwmMiB"),
    heapUsedMiB: per("heapUsedMiB"),
    arrayBuffersMiB: per("arrayBuffersMiB"),
  };
}

// ---------------------------------------------------------------------------------------------
// Serve: the real device process

async function soakServe(config: SoakServeConfig): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(config.dataRoot, "serve-soak-"));
  const stateDir = join(dir, "state");
  const manifestPath = join(dir, "package.yaml");
  writeFileSync(manifestPath, soakManifest(config.schedules, "* * * * * *"));
  const samples: {
    tS: number;
    rssMiB: number | null;
    vmHwmMiB: number | null;
    stateDirMiB: number | null;
    dbMiB: number | null;
    load1m: number;
  }[] = [];
  const extraArgs = [
    "--host",
    "127.0.0.1",
    "--retention",
    config.retention,
    "--retention-runs",
    config.retentionRuns,
  ];
  const served = await startServe(config.root, stateDir, manifestPath, [], extraArgs);
  const startedAt = now();
  const load1Before = os.loadavg()[0] ?? 0;
  let metricsAtEnd: {
    runs: Record<string, number>;
    purged: number | null;
    memoryMiB: Record<string, number | null>;
  } | null;
  try {
    const sampleCount = Math.max(2, Math.floor(config.durationMs / config.sampleMs));
    for (let index = 0; index <= sampleCount && !served.exited(); index += 1) {
      if (index > 0) await sleep(Math.max(0, startedAt + index * config.sampleMs - now()));
      const status = procStatus(served.pid);
      samples.push({
        tS: round((now() - startedAt) / 1000, 1),
        rssMiB: mib(status?.rss),
        vmHwmMiB: mib(status?.hwm),
        stateDirMiB: mib(diskBytes(stateDir)),
        dbMiB: mib(diskBytes(join(stateDir, "db"))),
        load1m: round(os.loadavg()[0] ?? 0, 2),
      });
    }
    const metrics = await metricsOf(served);
    const text = await (
      await fetch(`${served.url}/metrics`, { headers: { authorization: `Bearer ${served.token}` } })
    ).text();
    const purgedMatch = /^qlr_runs_purged_total (\d+)$/m.exec(text);
    metricsAtEnd = {
      runs: metrics.runs,
      purged: purgedMatch?.[1] === undefined ? null : Number(purgedMatch[1]),
      memoryMiB: metrics.memoryMiB,
    };
  } finally {
    await stopServe(served, stateDir);
    rmSync(dir, { recursive: true, force: true });
  }
  const half = samples.filter((sample) => sample.tS >= config.durationMs / 2000);
  const points = (key: "rssMiB" | "stateDirMiB" | "vmHwmMiB") =>
    half
      .filter((sample) => sample[key] !== null)
      .map((sample) => ({ x: sample.tS / 3600, y: Number(sample[key]) }));
  const finished = metricsAtEnd === null ? null : terminalRuns(metricsAtEnd.runs);
  const first = samples[0];
  const last = samples[samples.length - 1];
  return {
    bench: "soak-serve",
    profile: "edge",
    schedules: config.schedules,
    cron: "* * * * * *",
    retention: config.retention,
    retentionRuns: Number(config.retentionRuns),
    durationS: round((now() - startedAt) / 1000, 1),
    sampleS: config.sampleMs / 1000,
    serveExitedEarly: served.exited() && metricsAtEnd === null,
    runsAtEnd: metricsAtEnd?.runs ?? null,
    runsRetainedTerminalAtEnd: finished,
    runsPurgedAtEnd: metricsAtEnd?.purged ?? null,
    runsStartedTotal:
      finished === null || metricsAtEnd?.purged === null || metricsAtEnd === null
        ? null
        : Object.values(metricsAtEnd.runs).reduce((sum, count) => sum + count, 0) +
          (metricsAtEnd.purged ?? 0),
    memoryAtEndMiB: metricsAtEnd?.memoryMiB ?? null,
    secondHalf: {
      fromS: round(config.durationMs / 2000, 1),
      samples: half.length,
      rssSlopeMiBPerHour: round(slope(points("rssMiB")), 2),
      vmHwmSlopeMiBPerHour: round(slope(points("vmHwmMiB")), 2),
      stateDirSlopeMiBPerHour: round(slope(points("stateDirMiB")), 2),
      rssMinMiB: Math.min(...half.map((sample) => sample.rssMiB ?? Number.NaN)),
      rssMaxMiB: Math.max(...half.map((sample) => sample.rssMiB ?? Number.NaN)),
    },
    rssMiB: {
      first: first?.rssMiB ?? null,
      last: last?.rssMiB ?? null,
      vmHwmLast: last?.vmHwmMiB ?? null,
    },
    stateDirMiB: {
      first: first?.stateDirMiB ?? null,
      last: last?.stateDirMiB ?? null,
      max: Math.max(...samples.map((sample) => sample.stateDirMiB ?? 0)),
    },
    load1m: {
      before: round(load1Before, 2),
      after: round(os.loadavg()[0] ?? 0, 2),
      max: Math.max(...samples.map((sample) => sample.load1m)),
    },
    samples,
  };
}

async function main(): Promise<void> {
  const config = readConfig<SoakConfig>();
  if (config.part === "serve") writeResult(await soakServe(config));
  else writeResult(await soakSimulated(config));
}

await main();
