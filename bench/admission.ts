/**
 * Bench 1: admission transaction latency per store.
 *
 * Applies a package with one wide workflow (`width` independent steps), starts enough runs,
 * runs the frontier of each so every step is `ready`, lists the admission candidates, and then
 * times every `coordinator.admit(candidate)` call on its own (performance.now around the whole
 * transaction: BEGIN, the reads, the core decision, the writes, COMMIT and, for the sql.js file
 * store, the journal append + fdatasync and any checkpoint that commit triggers). The virtual
 * clock moves 1 ms per admission, as a real clock would between two transactions, so the
 * store-clock row is written each time. A warm-up (not timed) precedes the timed admissions;
 * during the warm-up the statements of each transaction are counted.
 */
import type { AdmissionCandidate } from "../src/ports.ts";
import {
  coreComponents,
  fdatasyncComponent,
  statementExperiments,
  storeComponents,
  type ComponentTiming,
} from "./lib/components.ts";
import { startCpuProfile } from "./lib/profiler.ts";
import { fileStoreSizes, openBenchStore, type StatementTally } from "./lib/stores.ts";
import {
  log,
  now,
  readConfig,
  round,
  startProcIoMeter,
  summarize,
  wideManifest,
  writeResult,
  type StoreKind,
} from "./lib/common.ts";
import { applyManifest, createWorld, startRuns } from "./lib/world.ts";

export interface AdmissionConfig {
  readonly store: StoreKind;
  readonly width: number;
  readonly admissions: number;
  /** Admissions before the measured ones, not measured (JIT warm-up). */
  readonly warmup: number;
  /** Admissions after the warm-up whose transactions are counted and split into phases (not in the latency figures). */
  readonly instrumented: number;
  readonly dataRoot: string;
  /** When set, the timed section runs under the V8 CPU profiler and the profile is written here (timings are then not representative). */
  readonly cpuProfilePath?: string;
  readonly cpuProfileIntervalUs?: number;
  /** Repetitions for the component micro-timings; 0 skips them. */
  readonly componentIterations: number;
}

async function main(): Promise<void> {
  const config = readConfig<AdmissionConfig>();
  const opened = await openBenchStore(config.store, {
    dataRoot: config.dataRoot,
    countTextChars: true,
  });
  try {
    const world = createWorld(opened.store, { profile: "cluster" });
    const packageName = "bench";
    await applyManifest(world, wideManifest(packageName, config.width));
    const total = config.warmup + config.instrumented + config.admissions;
    const runCount = Math.ceil(total / config.width);
    const setupStartedAt = now();
    const runIds = await startRuns(
      world,
      packageName,
      { kind: "workflow", name: "wide" },
      runCount,
    );
    for (const runId of runIds) await world.coordinator.frontier(runId);
    const candidates: AdmissionCandidate[] = [];
    let after: AdmissionCandidate | null = null;
    // Bounded: each page adds up to 64 candidates until `total` are listed or none remain.
    while (candidates.length < total) {
      const page: AdmissionCandidate[] = await opened.store.transaction((tx) =>
        tx.listAdmissionCandidates(after, 64, world.clock.nowMs()),
      );
      candidates.push(...page);
      if (page.length === 0) break;
      after = page[page.length - 1] ?? null;
    }
    const setupMs = now() - setupStartedAt;
    log(
      `${config.store}: ${runCount} runs of ${config.width} steps ready, ${candidates.length} candidates (setup ${Math.round(setupMs)} ms)`,
    );

    // Warm-up, then the instrumented admissions (counted and split into phases).
    let rejected = 0;
    const warmup = candidates.slice(0, config.warmup);
    for (const candidate of warmup) {
      world.clock.advance(1);
      if (!(await world.coordinator.admit(candidate))) rejected += 1;
    }
    const instrumented = candidates.slice(config.warmup, config.warmup + config.instrumented);
    opened.driver.reset();
    opened.driver.counting = true;
    const instrumentedStartedAt = now();
    for (const candidate of instrumented) {
      world.clock.advance(1);
      if (!(await world.coordinator.admit(candidate))) rejected += 1;
    }
    const instrumentedMs = now() - instrumentedStartedAt;
    opened.driver.counting = false;
    const tally: StatementTally = opened.driver.tally;
    const perAdmission = (value: number, digits = 2): number =>
      round(instrumented.length === 0 ? Number.NaN : value / instrumented.length, digits);

    // Timed.
    const timed = candidates.slice(config.warmup + config.instrumented);
    const samples: number[] = [];
    const samplesWithoutCheckpoint: number[] = [];
    const checkpointSamples: number[] = [];
    const journalDeltas: number[] = [];
    const file = opened.fileDriver;
    const statsBefore = file?.stats();
    const profiler =
      config.cpuProfilePath === undefined
        ? null
        : await startCpuProfile(config.cpuProfileIntervalUs ?? 100);
    const io = startProcIoMeter();
    const startedAt = now();
    for (const candidate of timed) {
      world.clock.advance(1);
      const before = file?.stats();
      const t0 = now();
      const admitted = await world.coordinator.admit(candidate);
      const elapsed = now() - t0;
      samples.push(elapsed);
      if (!admitted) rejected += 1;
      if (file !== null && before !== undefined) {
        const afterStats = file.stats();
        if (afterStats.checkpoints !== before.checkpoints) checkpointSamples.push(elapsed);
        else {
          samplesWithoutCheckpoint.push(elapsed);
          journalDeltas.push(afterStats.bytesWrittenTotal - before.bytesWrittenTotal);
        }
      }
    }
    const wallMs = now() - startedAt;
    const procIoPerAdmission = io.writtenPer(timed.length);
    if (profiler !== null && config.cpuProfilePath !== undefined)
      await profiler.stop(config.cpuProfilePath);
    const latency = summarize(samples);
    const busyMs = samples.reduce((sum, value) => sum + value, 0);

    let fileFigures: Record<string, unknown> | null = null;
    if (file !== null && statsBefore !== undefined && opened.directory !== null) {
      const statsAfter = file.stats();
      const checkpointBefore = file.stats();
      const checkpointStartedAt = now();
      await file.checkpoint();
      const checkpointMs = now() - checkpointStartedAt;
      const checkpointAfter = file.stats();
      const count = timed.length;
      fileFigures = {
        bytesWrittenPerAdmission: round(
          (statsAfter.bytesWrittenTotal - statsBefore.bytesWrittenTotal) / count,
          1,
        ),
        journalBytesPerAdmission: round(
          journalDeltas.reduce((sum, value) => sum + value, 0) / Math.max(1, journalDeltas.length),
          1,
        ),
        checkpointsDuringRun: statsAfter.checkpoints - statsBefore.checkpoints,
        admissionsWithCheckpoint: summarize(checkpointSamples),
        latencyWithoutCheckpoints: summarize(samplesWithoutCheckpoint),
        explicitCheckpoint: {
          bytes: checkpointAfter.bytesWrittenTotal - checkpointBefore.bytesWrittenTotal,
          ms: round(checkpointMs, 3),
        },
        sizesAfter: fileStoreSizes(opened.directory),
        procIoPerAdmission,
      };
    }

    let components: ComponentTiming[] = [];
    const sample = timed[0] ?? instrumented[0] ?? warmup[0];
    if (config.componentIterations > 0 && sample !== undefined) {
      const subject = {
        store: opened.store,
        driver: opened.driver.inner,
        candidate: sample,
        iterations: config.componentIterations,
      };
      components = await storeComponents(subject, world.clock.nowMs());
      components.push(...(await statementExperiments(subject)));
      if (config.store === "sqljs-file") {
        components.push(...(await coreComponents(subject, world.clock.nowMs())));
        const recordBytes =
          typeof fileFigures?.journalBytesPerAdmission === "number"
            ? fileFigures.journalBytesPerAdmission
            : 2048;
        components.push(
          await fdatasyncComponent(config.dataRoot, recordBytes, config.componentIterations),
        );
      }
    }

    writeResult({
      bench: "admission",
      store: config.store,
      engineVersion: opened.engineVersion,
      openMs: round(opened.openMs, 1),
      width: config.width,
      runs: runCount,
      warmup: warmup.length,
      instrumented: instrumented.length,
      admissions: timed.length,
      rejected,
      latency,
      admissionsPerSecond: round((timed.length / busyMs) * 1000, 1),
      wallMs: round(wallMs, 1),
      perAdmission: {
        transactions: perAdmission(tally.transactions),
        statements: perAdmission(tally.statements),
        reads: perAdmission(tally.reads),
        writes: perAdmission(tally.writes),
        rowsReturned: perAdmission(tally.rowsReturned),
        textCharsReturned: perAdmission(tally.textCharsReturned),
        bodiesParsed: perAdmission(tally.bodiesReturned),
        bodyCharsParsed: perAdmission(tally.bodyCharsReturned),
      },
      phasesMs: {
        total: perAdmission(instrumentedMs, 4),
        begin: perAdmission(tally.beginMs, 4),
        statements: perAdmission(tally.statementMs, 4),
        coreAndMapping: perAdmission(tally.bodyOutsideStatementsMs, 4),
        commit: perAdmission(tally.commitMs, 4),
      },
      statements: Object.entries(tally.byStatement)
        .sort((a, b) => b[1].ms - a[1].ms)
        .map(([sql, entry]) => ({
          sql,
          perAdmission: perAdmission(entry.count),
          msPerAdmission: perAdmission(entry.ms, 4),
        })),
      file: fileFigures,
      components,
    });
  } finally {
    await opened.close();
  }
}

await main();
