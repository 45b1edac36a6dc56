/**
 * Bench 2: bytes the sql.js file store writes (flash wear).
 *
 * A. Admissions: as in bench 1 (wide workflow, every step ready), N admissions; bytes from the
 *    driver's own counter (`stats().bytesWrittenTotal`: journal records and snapshots), from
 *    `/proc/self/io` (`wchar`: bytes passed to write(2); `write_bytes`: bytes the process
 *    caused to be sent to the block layer, counted per dirtied 4 KiB page, so each fdatasynced
 *    append re-dirties a whole page) and, for context, sectors written by the whole block
 *    device (includes the file system's own journal and every other process on the machine).
 * B. One explicit checkpoint: bytes and time (the snapshot is the whole database).
 * C. Full workflow steps on a fresh store: diamond runs driven by the edge-profile cadence with
 *    the simulated executor until every run succeeded; bytes per step, split into journal and
 *    checkpoint bytes, and journaled transactions per step; then what the database holds.
 * D. Journal anatomy: the same drive on a store that never checkpoints, then every journal
 *    record decoded and its bytes attributed to the statements that wrote them.
 * E. The curve: one store with the default checkpoint threshold grows by batches of diamond
 *    runs, long enough for several checkpoints; after each batch, the bytes written so far per
 *    step (journal and snapshot parts) beside the database's size. A store that only grows
 *    writes every new page in a snapshot at least once, and the threshold follows the image,
 *    so one window's figure is not the figure: the curve shows where it settles. A cycle runs
 *    from the batch in which one checkpoint finished to the batch of the next; its bytes per
 *    step (everything written in it over its steps) is the figure a growing store averages.
 */
import { statSync } from "node:fs";
import { readFileSync } from "node:fs";
import type { AdmissionCandidate } from "../src/ports.ts";
import type { ProfileName } from "../src/profiles.ts";
import {
  diamondManifest,
  log,
  now,
  perUnit,
  readConfig,
  round,
  startProcIoMeter,
  wideManifest,
  writeResult,
} from "./lib/common.ts";
import { databaseComposition } from "./lib/db-composition.ts";
import { journalAnatomy } from "./lib/journal-anatomy.ts";
import { fileStoreSizes, openBenchStore, type OpenedStore } from "./lib/stores.ts";
import { applyManifest, createWorld, driveUntilTerminal, startRuns } from "./lib/world.ts";

export interface BytesConfig {
  readonly dataRoot: string;
  readonly admissions: number;
  readonly width: number;
  readonly workflowRuns: number;
  readonly profile: ProfileName;
  readonly maxTicks: number;
  /** Runs the curve (E) drives in all, `curveBatchRuns` at a time; 0 skips it. */
  readonly curveRuns?: number;
  readonly curveBatchRuns?: number;
  /**
   * The curve's first checkpoint threshold (the driver's default, 1 MiB, when unset). Later
   * thresholds follow the image, each ≈ 7× the steps of the one before, so a small first
   * threshold puts several checkpoints within a run of minutes; the cycles are the same shape.
   */
  readonly curveCheckpointJournalBytes?: number;
}

/** Sectors written by the block device holding `path` (`/sys/dev/block/M:m/stat`, field 7), in bytes. */
function deviceBytesWritten(path: string): number | null {
  try {
    const dev = statSync(path).dev;
    // glibc's st_dev encoding: minor in bits 0–7 and 20–31, major in bits 8–19 (device numbers below 2^32 here).
    const major = Math.floor(dev / 256) & 0xfff;
    const minor = (dev & 0xff) | (Math.floor(dev / 4096) & 0xfff00);
    const fields = readFileSync(`/sys/dev/block/${major}:${minor}/stat`, "utf8")
      .trim()
      .split(/\s+/);
    const sectors = Number(fields[6]);
    return Number.isFinite(sectors) ? sectors * 512 : null;
  } catch {
    return null;
  }
}

function requireFile(opened: OpenedStore): {
  driver: NonNullable<OpenedStore["fileDriver"]>;
  directory: string;
} {
  if (opened.fileDriver === null || opened.directory === null)
    throw new Error("bench: the bytes bench needs the sql.js file store");
  return { driver: opened.fileDriver, directory: opened.directory };
}

async function admissions(config: BytesConfig): Promise<Record<string, unknown>> {
  const opened = await openBenchStore("sqljs-file", {
    dataRoot: config.dataRoot,
  });
  try {
    const { driver, directory } = requireFile(opened);
    const world = createWorld(opened.store, { profile: "cluster" });
    await applyManifest(world, wideManifest("bench", config.width));
    const runIds = await startRuns(
      world,
      "bench",
      { kind: "workflow", name: "wide" },
      Math.ceil(config.admissions / config.width),
    );
    for (const runId of runIds) await world.coordinator.frontier(runId);
    const candidates: AdmissionCandidate[] = [];
    let after: AdmissionCandidate | null = null;
    while (candidates.length < config.admissions) {
      const page: AdmissionCandidate[] = await opened.store.transaction((tx) =>
        tx.listAdmissionCandidates(after, 64, world.clock.nowMs()),
      );
      candidates.push(...page.slice(0, config.admissions - candidates.length));
      if (page.length === 0) break;
      after = page[page.length - 1] ?? null;
    }
    const sizesBefore = fileStoreSizes(directory);
    const statsBefore = driver.stats();
    const count = candidates.length;
    const io = startProcIoMeter();
    const deviceBefore = deviceBytesWritten(directory);
    for (const candidate of candidates) {
      world.clock.advance(1);
      await world.coordinator.admit(candidate);
    }
    const procIoPerAdmission = io.writtenPer(count);
    const deviceAfter = deviceBytesWritten(directory);
    const statsAfter = driver.stats();
    const checkpointBytes =
      statsAfter.snapshotBytesWrittenTotal - statsBefore.snapshotBytesWrittenTotal;
    const journalBytes =
      statsAfter.bytesWrittenTotal - statsBefore.bytesWrittenTotal - checkpointBytes;

    const explicitBefore = driver.stats();
    const startedAt = now();
    await driver.checkpoint();
    const checkpointMs = now() - startedAt;
    const explicitBytes = driver.stats().bytesWrittenTotal - explicitBefore.bytesWrittenTotal;
    log(
      `bytes: ${count} admissions, ${statsAfter.checkpoints - statsBefore.checkpoints} checkpoints`,
    );
    return {
      admissions: count,
      width: config.width,
      commits: statsAfter.commits - statsBefore.commits,
      driverBytesPerAdmission: perUnit(
        statsAfter.bytesWrittenTotal - statsBefore.bytesWrittenTotal,
        count,
      ),
      journalBytesPerAdmission: perUnit(journalBytes, count),
      checkpointBytesPerAdmission: perUnit(checkpointBytes, count),
      checkpoints: statsAfter.checkpoints - statsBefore.checkpoints,
      procIoPerAdmission,
      deviceBytesPerAdmission:
        deviceBefore === null || deviceAfter === null
          ? null
          : perUnit(deviceAfter - deviceBefore, count),
      databaseBytesBefore: sizesBefore.snapshotBytes,
      checkpoint: {
        bytes: explicitBytes,
        ms: round(checkpointMs, 2),
        snapshotBytes: fileStoreSizes(directory).snapshotBytes,
      },
    };
  } finally {
    await opened.close();
  }
}

async function workflowSteps(config: BytesConfig): Promise<Record<string, unknown>> {
  const opened = await openBenchStore("sqljs-file", {
    dataRoot: config.dataRoot,
  });
  try {
    const { driver, directory } = requireFile(opened);
    const world = createWorld(opened.store, { profile: config.profile });
    await applyManifest(world, diamondManifest("bench"));

    const startStats = driver.stats();
    const runStartIo = startProcIoMeter();
    await startRuns(world, "bench", { kind: "workflow", name: "diamond" }, config.workflowRuns);
    const procIoPerRunStart = runStartIo.writtenPer(config.workflowRuns);
    const afterStart = driver.stats();

    const steps = config.workflowRuns * 4;
    const driveIo = startProcIoMeter();
    const deviceBefore = deviceBytesWritten(directory);
    const drive = await driveUntilTerminal(world, config.workflowRuns, config.maxTicks);
    const procIoPerStep = driveIo.writtenPer(steps);
    const deviceAfter = deviceBytesWritten(directory);
    const end = driver.stats();
    const checkpointBytes = end.snapshotBytesWrittenTotal - afterStart.snapshotBytesWrittenTotal;
    const journalBytes = end.bytesWrittenTotal - afterStart.bytesWrittenTotal - checkpointBytes;
    const sizesAtEnd = fileStoreSizes(directory);
    // Fold the journal into the snapshot (after the figures above) to see what the database holds per step.
    await driver.checkpoint();
    const composition = await databaseComposition(directory);
    log(
      `bytes: ${config.workflowRuns} diamond runs (${config.profile}) in ${drive.ticks} ticks, ${drive.statuses.succeeded} succeeded`,
    );
    return {
      profile: config.profile,
      runs: config.workflowRuns,
      steps,
      succeeded: drive.statuses.succeeded,
      ticks: drive.ticks,
      stageErrors: drive.stageErrors,
      firstStageError: drive.firstStageError,
      bytesPerRunStart: perUnit(
        afterStart.bytesWrittenTotal - startStats.bytesWrittenTotal,
        config.workflowRuns,
      ),
      commitsPerRunStart: perUnit(afterStart.commits - startStats.commits, config.workflowRuns, 2),
      procIoPerRunStart,
      driverBytesPerStep: perUnit(end.bytesWrittenTotal - afterStart.bytesWrittenTotal, steps),
      journalBytesPerStep: perUnit(journalBytes, steps),
      checkpointBytesPerStep: perUnit(checkpointBytes, steps),
      checkpoints: end.checkpoints - afterStart.checkpoints,
      commitsPerStep: perUnit(end.commits - afterStart.commits, steps, 2),
      journalBytesPerCommit: perUnit(journalBytes, end.commits - afterStart.commits),
      procIoPerStep,
      deviceBytesPerStep:
        deviceBefore === null || deviceAfter === null
          ? null
          : perUnit(deviceAfter - deviceBefore, steps),
      databaseBytesAtEnd: sizesAtEnd,
      // Per table (with its indexes), after VACUUM; includes the run starts and the package.
      composition: {
        totalBytes: composition.totalBytes,
        bytesPerStep: round(composition.totalBytes / steps, 1),
        tables: composition.tables.map((table) => ({
          ...table,
          bytesPerStep: round(table.bytes / steps, 1),
        })),
      },
    };
  } finally {
    await opened.close();
  }
}

async function anatomy(config: BytesConfig): Promise<Record<string, unknown>> {
  const runs = Math.min(50, config.workflowRuns);
  const opened = await openBenchStore("sqljs-file", {
    dataRoot: config.dataRoot,
    checkpointJournalBytes: 1024 ** 3,
  });
  try {
    const { directory } = requireFile(opened);
    const world = createWorld(opened.store, { profile: config.profile });
    await applyManifest(world, diamondManifest("bench"));
    const before = journalAnatomy(directory);
    await startRuns(world, "bench", { kind: "workflow", name: "diamond" }, runs);
    await driveUntilTerminal(world, runs, config.maxTicks);
    const after = journalAnatomy(directory);
    const steps = runs * 4;
    // Only what the run starts and the drive wrote: subtract the package's records (applied before).
    const beforeBySql = new Map(before.statements.map((entry) => [entry.sql, entry]));
    return {
      runs,
      steps,
      records: after.records - before.records,
      bytesPerStep: round((after.totalBytes - before.totalBytes) / steps, 1),
      headerBytesPerStep: round((after.headerBytes - before.headerBytes) / steps, 1),
      sqlTextBytesPerStep: round((after.sqlTextBytes - before.sqlTextBytes) / steps, 1),
      statements: after.statements
        .map((entry) => {
          const earlier = beforeBySql.get(entry.sql);
          return {
            sql: entry.sql,
            perStep: round((entry.count - (earlier?.count ?? 0)) / steps, 2),
            bytesPerStep: round((entry.bytes - (earlier?.bytes ?? 0)) / steps, 1),
          };
        })
        .filter((entry) => entry.perStep > 0),
    };
  } finally {
    await opened.close();
  }
}

/** The live database's size (pages × page size), not vacuumed: what a checkpoint exports. */
async function imageBytes(opened: OpenedStore): Promise<number> {
  return opened.driver.transaction(async (tx) => {
    const pages = await tx.query<{ page_count: number }>("PRAGMA page_count");
    const size = await tx.query<{ page_size: number }>("PRAGMA page_size");
    return Number(pages[0]?.page_count ?? 0) * Number(size[0]?.page_size ?? 0);
  });
}

async function curve(config: BytesConfig): Promise<Record<string, unknown> | null> {
  const totalRuns = config.curveRuns ?? 0;
  if (totalRuns <= 0) return null;
  const batchRuns = Math.max(1, config.curveBatchRuns ?? 250);
  const opened = await openBenchStore("sqljs-file", {
    dataRoot: config.dataRoot,
    ...(config.curveCheckpointJournalBytes === undefined
      ? {}
      : { checkpointJournalBytes: config.curveCheckpointJournalBytes }),
  });
  try {
    const { driver, directory } = requireFile(opened);
    const world = createWorld(opened.store, { profile: config.profile });
    await applyManifest(world, diamondManifest("bench"));
    const start = driver.stats();
    const cycles: Record<string, unknown>[] = [];
    let cycleStart: { stats: typeof start; steps: number } | null = null;
    const points: Record<string, unknown>[] = [];
    let runs = 0;
    let previous = start;
    let previousSteps = 0;
    while (runs < totalRuns) {
      const batch = Math.min(batchRuns, totalRuns - runs);
      await startRuns(world, "bench", { kind: "workflow", name: "diamond" }, batch);
      runs += batch;
      const drive = await driveUntilTerminal(world, runs, config.maxTicks);
      if (!drive.finished) throw new Error(`bench: the curve's runs did not finish (${runs})`);
      // A checkpoint still writing its snapshot counts once it is done.
      while (driver.stats().checkpointInFlight) await new Promise((r) => setTimeout(r, 20));
      const stats = driver.stats();
      const steps = runs * 4;
      const snapshot = stats.snapshotBytesWrittenTotal - start.snapshotBytesWrittenTotal;
      const total = stats.bytesWrittenTotal - start.bytesWrittenTotal;
      const batchSnapshot = stats.snapshotBytesWrittenTotal - previous.snapshotBytesWrittenTotal;
      const batchTotal = stats.bytesWrittenTotal - previous.bytesWrittenTotal;
      const batchSteps = steps - previousSteps;
      points.push({
        steps,
        databaseBytes: await imageBytes(opened),
        snapshotFileBytes: fileStoreSizes(directory).snapshotBytes,
        checkpoints: stats.checkpoints - start.checkpoints,
        bytesPerStep: round(total / steps, 1),
        journalBytesPerStep: round((total - snapshot) / steps, 1),
        checkpointBytesPerStep: round(snapshot / steps, 1),
        batchBytesPerStep: round(batchTotal / batchSteps, 1),
        batchCheckpointBytesPerStep: round(batchSnapshot / batchSteps, 1),
      });
      log(
        `bytes curve: ${steps} steps, ${stats.checkpoints - start.checkpoints} checkpoints, ${round(total / steps, 1)} B per step`,
      );
      if (stats.checkpoints !== previous.checkpoints) {
        if (cycleStart !== null) {
          const cycleSteps = steps - cycleStart.steps;
          const cycleSnapshot =
            stats.snapshotBytesWrittenTotal - cycleStart.stats.snapshotBytesWrittenTotal;
          const cycleTotal = stats.bytesWrittenTotal - cycleStart.stats.bytesWrittenTotal;
          cycles.push({
            fromSteps: cycleStart.steps,
            toSteps: steps,
            checkpoints: stats.checkpoints - cycleStart.stats.checkpoints,
            databaseBytes: points.at(-1)?.databaseBytes ?? null,
            bytesPerStep: round(cycleTotal / cycleSteps, 1),
            journalBytesPerStep: round((cycleTotal - cycleSnapshot) / cycleSteps, 1),
            checkpointBytesPerStep: round(cycleSnapshot / cycleSteps, 1),
          });
        }
        cycleStart = { stats, steps };
      }
      previous = stats;
      previousSteps = steps;
    }
    return {
      profile: config.profile,
      runs: totalRuns,
      batchRuns,
      firstCheckpointJournalBytes: config.curveCheckpointJournalBytes ?? null,
      cycles,
      points,
    };
  } finally {
    await opened.close();
  }
}

async function main(): Promise<void> {
  const config = readConfig<BytesConfig>();
  const admissionFigures = await admissions(config);
  const stepFigures = await workflowSteps(config);
  const anatomyFigures = await anatomy(config);
  const curveFigures = await curve(config);
  writeResult({
    bench: "bytes",
    store: "sqljs-file",
    admissions: admissionFigures,
    workflow: stepFigures,
    journalAnatomy: anatomyFigures,
    curve: curveFigures,
  });
}

await main();
