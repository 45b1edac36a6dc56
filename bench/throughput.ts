/**
 * Bench 3: end-to-end step throughput with the simulated executor, per store and profile.
 *
 * Applies a package with a 4-step diamond workflow, starts `workflowRuns` runs (one
 * transaction each, timed separately), then calls `coordinator.tick()` again and again, moving
 * the virtual clock by the profile's tick interval between ticks, until every run is terminal.
 * Simulated processes last 20–200 virtual ms and always succeed, so every step runs exactly one
 * attempt and finishes by the next tick: ticks needed measures the profile's budgets, and
 * steps/s measures the coordinator and the store. Wall time is the time spent inside
 * `tick()`; the check for terminal runs between ticks is not counted. Optionally the same is
 * done for ordinary runs (runs of one task).
 */
import type { RunTarget } from "../src/operations.ts";
import type { ProfileName } from "../src/profiles.ts";
import {
  diamondManifest,
  log,
  now,
  readConfig,
  round,
  summarize,
  writeResult,
  type StoreKind,
} from "./lib/common.ts";
import { openBenchStore, type StatementTally } from "./lib/stores.ts";
import {
  applyManifest,
  createWorld,
  diamondsThenOrdinary,
  driveUntilTerminal,
  startRuns,
  type DriveResult,
  groupCommitFromEnv,
} from "./lib/world.ts";

export interface ThroughputConfig {
  readonly store: StoreKind;
  readonly profile: ProfileName;
  readonly workflowRuns: number;
  readonly ordinaryRuns: number;
  readonly maxTicks: number;
  readonly dataRoot: string;
}

/** The store's work per unit while the ticks ran (the run starts are not counted). */
function storeFigures(tally: StatementTally, units: number): Record<string, unknown> {
  const per = (value: number): number => round(value / Math.max(1, units), 2);
  return {
    transactionsPerUnit: per(tally.transactions),
    statementsPerUnit: per(tally.statements),
    readsPerUnit: per(tally.reads),
    writesPerUnit: per(tally.writes),
    byStatementPerUnit: Object.fromEntries(
      Object.entries(tally.byStatement)
        .sort((left, right) => right[1].count - left[1].count)
        .map(([sql, entry]) => [sql, per(entry.count)]),
    ),
  };
}

function driveFigures(drive: DriveResult, units: number): Record<string, unknown> {
  return {
    ticks: drive.ticks,
    finished: drive.finished,
    terminal: drive.terminal,
    succeeded: drive.statuses.succeeded,
    stageErrors: drive.stageErrors,
    firstStageError: drive.firstStageError,
    wallMs: round(drive.tickWallMs, 1),
    perSecond: round((units / drive.tickWallMs) * 1000, 1),
    cpuMs: round(drive.tickCpuMs, 1),
    cpuMsPerUnit: round(drive.tickCpuMs / Math.max(1, units), 3),
    tick: summarize(drive.tickMs),
  };
}

async function main(): Promise<void> {
  const config = readConfig<ThroughputConfig>();
  const opened = await openBenchStore(config.store, { dataRoot: config.dataRoot });
  try {
    const groupCommit = groupCommitFromEnv();
    const world = createWorld(opened.store, {
      profile: config.profile,
      ...(groupCommit === undefined ? {} : { groupCommit }),
    });
    await applyManifest(world, diamondManifest("bench"));

    /**
     * Starts `runs` runs of `target` (timed on their own), then ticks until `expectedTerminal`
     * runs are terminal, counting the store's work inside the ticks only, per `units`.
     */
    const measure = async (
      target: RunTarget,
      runs: number,
      expectedTerminal: number,
      units: number,
    ): Promise<Record<string, unknown>> => {
      const startedAt = now();
      await startRuns(world, "bench", target, runs);
      const startMs = now() - startedAt;
      opened.driver.reset();
      const drive = await driveUntilTerminal(
        world,
        expectedTerminal,
        config.maxTicks,
        undefined,
        opened.driver,
      );
      log(
        `${config.store}/${config.profile}: ${runs} runs of ${target.name}, ${drive.ticks} ticks, ${Math.round(drive.tickWallMs)} ms`,
      );
      return {
        runs,
        runStartsPerSecond: round((runs / startMs) * 1000, 1),
        ...driveFigures(drive, units),
        store: storeFigures(opened.driver.tally, units),
      };
    };

    const { workflow, ordinary } = await diamondsThenOrdinary(config, measure);

    writeResult({
      bench: "throughput",
      store: config.store,
      engineVersion: opened.engineVersion,
      profile: config.profile,
      workflow: { ...workflow, steps: config.workflowRuns * 4 },
      ordinary,
    });
  } finally {
    await opened.close();
  }
}

await main();
