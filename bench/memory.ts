/**
 * Bench 4: memory of the device.
 *
 * Part "device" (bench/lib/edge-device.ts): the real `qlr serve --profile edge` process: what
 * its floor is made of (RSS after each package import, then V8 heap, external memory and
 * sql.js WebAssembly memory from its `GET /metrics`), and its peak with `historyRuns`
 * finished runs of history while schedules fire.
 *
 * Part "drive" (below): the device configuration (sql.js compiled as on the edge profile): the sql.js file store, the edge profile and the
 * simulated executor, `runs` diamond workflow runs started and driven until all succeeded.
 * RSS is sampled with `process.memoryUsage.rss()` after every tick, and the kernel's own peak
 * (`VmHWM` in /proc/self/status, which also sees peaks inside a tick such as a checkpoint's
 * export) is read at the end. This process imports only the core and the storage code (no HTTP
 * server), so it is a lower bound for the device runtime.
 */
import {
  readConfig,
  readProcStatus,
  round,
  diamondManifest,
  log,
  now,
  writeResult,
} from "./lib/common.ts";
import { statementExperiments } from "./lib/components.ts";
import { loadSqlJs } from "../storage/sqljs/node/load.ts";
import { measureEdgeDevice, type EdgeDeviceConfig } from "./lib/edge-device.ts";
import { fileStoreSizes, openBenchStore } from "./lib/stores.ts";
import { applyManifest, createWorld, driveUntilTerminal, startRuns } from "./lib/world.ts";

const rssAtStart = process.memoryUsage.rss();

export interface MemoryConfig {
  /** Set for the device part (the real `qlr serve` process); the other fields are then unused. */
  readonly device?: EdgeDeviceConfig;
  readonly runs: number;
  readonly maxTicks: number;
  readonly dataRoot: string;
  /** The node flags the orchestrator started this process with, for the report. */
  readonly label: string;
}

const MIB = 1024 * 1024;
const mib = (bytes: number): number => round(bytes / MIB, 1);
const mean = (values: readonly number[]): number =>
  values.length === 0 ? Number.NaN : values.reduce((sum, value) => sum + value, 0) / values.length;

async function main(): Promise<void> {
  const config = readConfig<MemoryConfig>();
  if (config.device !== undefined) {
    writeResult({
      bench: "memory-device",
      store: "sqljs-file",
      profile: "edge",
      ...(await measureEdgeDevice(config.device)),
    });
    return;
  }
  // As `qlr serve --profile edge` compiles it: the first load decides, openBenchStore reuses it.
  await loadSqlJs({ baselineCompilerOnly: true });
  const opened = await openBenchStore("sqljs-file", {
    dataRoot: config.dataRoot,
  });
  try {
    const world = createWorld(opened.store, { profile: "edge" });
    await applyManifest(world, diamondManifest("bench"));
    const rssAfterOpen = process.memoryUsage.rss();
    await startRuns(world, "bench", { kind: "workflow", name: "diamond" }, config.runs);
    const rssAfterRunStarts = process.memoryUsage.rss();
    let peakSampled = Math.max(rssAfterOpen, rssAfterRunStarts);
    const statsBefore = opened.fileDriver?.stats();
    const startedAt = now();
    const drive = await driveUntilTerminal(world, config.runs, config.maxTicks, () => {
      const rss = process.memoryUsage.rss();
      if (rss > peakSampled) peakSampled = rss;
    });
    const wallMs = now() - startedAt;
    const statsAfter = opened.fileDriver?.stats();
    const usage = process.memoryUsage();
    const status = readProcStatus();
    const sizes = opened.directory === null ? null : fileStoreSizes(opened.directory);
    // After every memory figure is taken: the run update's cost on this (large) database.
    const firstRun = (
      await opened.store.transaction((tx) => tx.listRuns({ status: null, cursor: null, limit: 1 }))
    )[0];
    const firstStep =
      firstRun === undefined
        ? undefined
        : (await opened.store.transaction((tx) => tx.getSteps(firstRun.id)))[0];
    const experiments =
      firstRun === undefined || firstStep === undefined
        ? []
        : await statementExperiments({
            store: opened.store,
            driver: opened.driver.inner,
            candidate: {
              runId: firstRun.id,
              stepRunId: firstStep.id,
              stepRunVersion: firstStep.version,
            },
            iterations: 50,
          });
    log(
      `memory (${config.label}): ${config.runs} runs in ${drive.ticks} ticks, peak ${mib(peakSampled)} MiB sampled, VmHWM ${status === null ? "?" : mib(status.vmHwmBytes)} MiB`,
    );
    writeResult({
      bench: "memory",
      store: "sqljs-file",
      profile: "edge",
      label: config.label,
      runs: config.runs,
      steps: config.runs * 4,
      ticks: drive.ticks,
      finished: drive.finished,
      succeeded: drive.statuses.succeeded,
      stageErrors: drive.stageErrors,
      wallMs: round(wallMs, 1),
      // The edge tick's cost as the database grows: mean of the first and of the last tenth of the ticks.
      tickMsFirstTenth: round(
        mean(drive.tickMs.slice(0, Math.max(1, Math.floor(drive.tickMs.length / 10)))),
        3,
      ),
      tickMsLastTenth: round(
        mean(drive.tickMs.slice(-Math.max(1, Math.floor(drive.tickMs.length / 10)))),
        3,
      ),
      rssMiB: {
        processStart: mib(rssAtStart),
        afterOpen: mib(rssAfterOpen),
        afterRunStarts: mib(rssAfterRunStarts),
        end: mib(usage.rss),
        peakSampled: mib(peakSampled),
        vmHwm: status === null ? null : mib(status.vmHwmBytes),
        growthDuringDrive: mib(usage.rss - rssAfterRunStarts),
        growthFromProcessStart: mib(usage.rss - rssAtStart),
      },
      endUsageMiB: {
        heapUsed: mib(usage.heapUsed),
        heapTotal: mib(usage.heapTotal),
        external: mib(usage.external),
        arrayBuffers: mib(usage.arrayBuffers),
      },
      database: sizes,
      statementExperimentsAtEnd: experiments,
      // Flash wear of the same drive, on a database that grows to its final size: checkpoints rewrite all of it.
      written:
        statsBefore === undefined || statsAfter === undefined
          ? null
          : {
              driverBytesPerStep: round(
                (statsAfter.bytesWrittenTotal - statsBefore.bytesWrittenTotal) / (config.runs * 4),
                1,
              ),
              checkpoints: statsAfter.checkpoints - statsBefore.checkpoints,
              commitsPerStep: round(
                (statsAfter.commits - statsBefore.commits) / (config.runs * 4),
                2,
              ),
            },
    });
  } finally {
    await opened.close();
  }
}

await main();
