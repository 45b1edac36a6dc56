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
import { fileStoreSizes, openBenchStore, type StatementTally } from "./lib/stores.ts";
import { ioDelta, log, now, readConfig, readProcIo, round, summarize, wideManifest, writeResult, type StoreKind } from "./lib/common.ts";
import { applyManifest, createWorld, startRuns } from "./lib/world.ts";

export interface AdmissionConfig {
  readonly store: StoreKind;
  readonly width: number;
  readonly admissions: number;
  readonly warmup: number;
  readonly dataRoot: string;
}

async function main(): Promise<void> {
  const config = readConfig<AdmissionConfig>();
  const opened = await openBenchStore(config.store, 1_800_000_000_000, { dataRoot: config.dataRoot, postgresAdminUrl: process.env.QLR_BENCH_PG_URL });
  try {
    const world = createWorld(opened.store, { profile: "cluster" });
    const packageName = "bench";
    await applyManifest(world, wideManifest(packageName, config.width));
    const total = config.warmup + config.admissions;
    const runCount = Math.ceil(total / config.width);
    const setupStartedAt = now();
    const runIds = await startRuns(world, packageName, { kind: "workflow", name: "wide" }, runCount);
    for (const runId of runIds) await world.coordinator.frontier(runId);
    const candidates: AdmissionCandidate[] = [];
    let after: AdmissionCandidate | null = null;
    // Bounded: each page adds up to 64 candidates until `total` are listed or none remain.
    while (candidates.length < total) {
      const page: AdmissionCandidate[] = await opened.store.transaction((tx) => tx.listAdmissionCandidates(after, 64, world.clock.nowMs()));
      candidates.push(...page);
      if (page.length === 0) break;
      after = page[page.length - 1] ?? null;
    }
    const setupMs = now() - setupStartedAt;
    log(`${config.store}: ${runCount} runs of ${config.width} steps ready, ${candidates.length} candidates (setup ${Math.round(setupMs)} ms)`);

    // Warm-up, counted.
    let rejected = 0;
    opened.driver.reset();
    opened.driver.counting = true;
    const warmup = candidates.slice(0, config.warmup);
    for (const candidate of warmup) {
      world.clock.advance(1);
      if (!(await world.coordinator.admit(candidate))) rejected += 1;
    }
    opened.driver.counting = false;
    const tally: StatementTally = opened.driver.tally;
    const perAdmission = (value: number): number => round(warmup.length === 0 ? Number.NaN : value / warmup.length, 2);

    // Timed.
    const timed = candidates.slice(config.warmup);
    const samples: number[] = [];
    const samplesWithoutCheckpoint: number[] = [];
    const checkpointSamples: number[] = [];
    const journalDeltas: number[] = [];
    const file = opened.fileDriver;
    const statsBefore = file?.stats();
    const ioBefore = readProcIo();
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
    const io = ioDelta(ioBefore, readProcIo());
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
        bytesWrittenPerAdmission: round((statsAfter.bytesWrittenTotal - statsBefore.bytesWrittenTotal) / count, 1),
        journalBytesPerAdmission: round(journalDeltas.reduce((sum, value) => sum + value, 0) / Math.max(1, journalDeltas.length), 1),
        checkpointsDuringRun: statsAfter.checkpoints - statsBefore.checkpoints,
        admissionsWithCheckpoint: summarize(checkpointSamples),
        latencyWithoutCheckpoints: summarize(samplesWithoutCheckpoint),
        explicitCheckpoint: { bytes: checkpointAfter.bytesWrittenTotal - checkpointBefore.bytesWrittenTotal, ms: round(checkpointMs, 3) },
        sizesAfter: fileStoreSizes(opened.directory),
        procIoPerAdmission: io === null ? null : { wchar: round(io.wchar / count, 1), writeBytes: round(io.writeBytes / count, 1), syscw: round(io.syscw / count, 2) },
      };
    }

    writeResult({
      bench: "admission",
      store: config.store,
      engineVersion: opened.engineVersion,
      openMs: round(opened.openMs, 1),
      width: config.width,
      runs: runCount,
      warmup: warmup.length,
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
      file: fileFigures,
    });
  } finally {
    await opened.close();
  }
}

await main();
