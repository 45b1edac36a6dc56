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
 */
import { statSync } from "node:fs";
import { readFileSync } from "node:fs";
import type { AdmissionCandidate } from "../src/ports.ts";
import type { ProfileName } from "../src/profiles.ts";
import {
  diamondManifest,
  ioDelta,
  log,
  now,
  readConfig,
  readProcIo,
  round,
  wideManifest,
  writeResult,
  type ProcIo,
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

function perUnit(value: number | null | undefined, units: number, digits = 1): number | null {
  if (value === null || value === undefined || units === 0) return null;
  return round(value / units, digits);
}

function ioPer(
  io: ProcIo | null,
  units: number,
): { wchar: number | null; writeBytes: number | null; syscw: number | null } {
  return {
    wchar: perUnit(io?.wchar, units),
    writeBytes: perUnit(io?.writeBytes, units),
    syscw: perUnit(io?.syscw, units, 2),
  };
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
    const ioBefore = readProcIo();
    const deviceBefore = deviceBytesWritten(directory);
    let checkpointBytes = 0;
    let journalBytes = 0;
    for (const candidate of candidates) {
      world.clock.advance(1);
      const before = driver.stats();
      await world.coordinator.admit(candidate);
      const afterStats = driver.stats();
      const delta = afterStats.bytesWrittenTotal - before.bytesWrittenTotal;
      if (afterStats.checkpoints !== before.checkpoints) {
        // The checkpoint wrote the snapshot file (image + trailer); the rest of the delta is the record.
        const snapshot = fileStoreSizes(directory).snapshotBytes;
        checkpointBytes += snapshot;
        journalBytes += delta - snapshot;
      } else {
        journalBytes += delta;
      }
    }
    const io = ioDelta(ioBefore, readProcIo());
    const deviceAfter = deviceBytesWritten(directory);
    const statsAfter = driver.stats();
    const count = candidates.length;

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
      procIoPerAdmission: ioPer(io, count),
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
    const startIo = readProcIo();
    await startRuns(world, "bench", { kind: "workflow", name: "diamond" }, config.workflowRuns);
    const runStartIo = ioDelta(startIo, readProcIo());
    const afterStart = driver.stats();

    const ioBefore = readProcIo();
    const deviceBefore = deviceBytesWritten(directory);
    let checkpointBytes = 0;
    let lastCheckpoints = afterStart.checkpoints;
    let lastBytes = afterStart.bytesWrittenTotal;
    let journalBytes = 0;
    const drive = await driveUntilTerminal(world, config.workflowRuns, config.maxTicks, () => {
      const stats = driver.stats();
      const delta = stats.bytesWrittenTotal - lastBytes;
      if (stats.checkpoints !== lastCheckpoints) {
        // At most one checkpoint per commit; a tick has several commits, so attribute the snapshot size per checkpoint.
        const snapshot =
          fileStoreSizes(directory).snapshotBytes * (stats.checkpoints - lastCheckpoints);
        checkpointBytes += snapshot;
        journalBytes += delta - snapshot;
      } else {
        journalBytes += delta;
      }
      lastCheckpoints = stats.checkpoints;
      lastBytes = stats.bytesWrittenTotal;
    });
    const io = ioDelta(ioBefore, readProcIo());
    const deviceAfter = deviceBytesWritten(directory);
    const end = driver.stats();
    const steps = config.workflowRuns * 4;
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
      procIoPerRunStart: ioPer(runStartIo, config.workflowRuns),
      driverBytesPerStep: perUnit(end.bytesWrittenTotal - afterStart.bytesWrittenTotal, steps),
      journalBytesPerStep: perUnit(journalBytes, steps),
      checkpointBytesPerStep: perUnit(checkpointBytes, steps),
      checkpoints: end.checkpoints - afterStart.checkpoints,
      commitsPerStep: perUnit(end.commits - afterStart.commits, steps, 2),
      journalBytesPerCommit: perUnit(journalBytes, end.commits - afterStart.commits),
      procIoPerStep: ioPer(io, steps),
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

async function main(): Promise<void> {
  const config = readConfig<BytesConfig>();
  const admissionFigures = await admissions(config);
  const stepFigures = await workflowSteps(config);
  const anatomyFigures = await anatomy(config);
  writeResult({
    bench: "bytes",
    store: "sqljs-file",
    admissions: admissionFigures,
    workflow: stepFigures,
    journalAnatomy: anatomyFigures,
  });
}

await main();
