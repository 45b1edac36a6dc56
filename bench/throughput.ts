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

    const startedAt = now();
    await startRuns(world, "bench", { kind: "workflow", name: "diamond" }, config.workflowRuns);
    const startMs = now() - startedAt;
    opened.driver.reset();
    const workflow = await driveUntilTerminal(
      world,
      config.workflowRuns,
      config.maxTicks,
      undefined,
      opened.driver,
    );
    const steps = config.workflowRuns * 4;
    const workflowStore = storeFigures(opened.driver.tally, steps);
    log(
      `${config.store}/${config.profile}: ${config.workflowRuns} diamond runs, ${workflow.ticks} ticks, ${Math.round(workflow.tickWallMs)} ms`,
    );

    let ordinary: Record<string, unknown> | null = null;
    if (config.ordinaryRuns > 0) {
      const ordinaryStartedAt = now();
      await startRuns(world, "bench", { kind: "task", name: "work" }, config.ordinaryRuns);
      const ordinaryStartMs = now() - ordinaryStartedAt;
      opened.driver.reset();
      const drive = await driveUntilTerminal(
        world,
        config.workflowRuns + config.ordinaryRuns,
        config.maxTicks,
        undefined,
        opened.driver,
      );
      ordinary = {
        runs: config.ordinaryRuns,
        store: storeFigures(opened.driver.tally, config.ordinaryRuns),
        runStartsPerSecond: round((config.ordinaryRuns / ordinaryStartMs) * 1000, 1),
        ...driveFigures(drive, config.ordinaryRuns),
      };
      log(
        `${config.store}/${config.profile}: ${config.ordinaryRuns} ordinary runs, ${drive.ticks} ticks, ${Math.round(drive.tickWallMs)} ms`,
      );
    }

    writeResult({
      bench: "throughput",
      store: config.store,
      engineVersion: opened.engineVersion,
      profile: config.profile,
      workflow: {
        runs: config.workflowRuns,
        steps,
        runStartsPerSecond: round((config.workflowRuns / startMs) * 1000, 1),
        ...driveFigures(workflow, steps),
        store: workflowStore,
      },
      ordinary,
    });
  } finally {
    await opened.close();
  }
}

await main();
