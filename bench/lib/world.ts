/**
 * A coordinator on a virtual clock with the simulated executor, over one bench store: the
 * same wiring as the deterministic simulation, without its faults. Processes never fail and
 * never fail to spawn, so every step runs exactly one attempt and the step counts are exact.
 */
import type { Coordinator, TickReport } from "../../src/coordinator.ts";
import type { Manifest } from "../../src/manifest/types.ts";
import { TERMINAL_RUN_STATUSES, type RunStatus } from "../../src/model.ts";
import { applyPackage, startRun, type RunTarget } from "../../src/operations.ts";
import { transactAtStoreTime, type Store } from "../../src/ports.ts";
import { PROFILES, type Profile, type ProfileName } from "../../src/profiles.ts";
import type { SimulatedExecutor } from "../../src/sim/simulated-executor.ts";
import type { VirtualClock } from "../../src/sim/virtual-clock.ts";
import { manualStart } from "../../test/support/fixtures.ts";
import { simulatedCoordinator } from "../../test/support/simulated-coordinator.ts";
import { BENCH_START_MS, BenchIds, now } from "./common.ts";

export interface World {
  readonly clock: VirtualClock;
  readonly executor: SimulatedExecutor;
  readonly coordinator: Coordinator;
  readonly profile: Profile;
  readonly ids: BenchIds;
  readonly store: Store;
}

export interface WorldOptions {
  readonly profile: ProfileName;
  readonly seed?: number;
  /** Simulated process durations; by default every process ends before the next tick of any profile. */
  readonly minDurationMs?: number;
  readonly maxDurationMs?: number;
  /** The virtual clock's start; BENCH_START_MS by default. A store that a real `qlr serve` opens afterwards needs a start in the past (store time never goes back). */
  readonly startMs?: number;
  /** Run id prefix; "bench" by default. */
  readonly idPrefix?: string;
  /**
   * Group commit (`CoordinatorDeps.groupCommit`): unset, the coordinator's default (on);
   * `QLR_BENCH_GROUP_COMMIT=0` in the environment turns it off, so
   * one load window can measure both.
   */
  readonly groupCommit?: boolean;
}

/** `QLR_BENCH_GROUP_COMMIT`: "0" off, "1" on, unset the coordinator's default. */
export function groupCommitFromEnv(env: NodeJS.ProcessEnv = process.env): boolean | undefined {
  const value = env.QLR_BENCH_GROUP_COMMIT;
  if (value === undefined || value === "") return undefined;
  if (value !== "0" && value !== "1") throw new Error("QLR_BENCH_GROUP_COMMIT must be 0 or 1");
  return value === "1";
}

export function createWorld(store: Store, options: WorldOptions): World {
  const profile = PROFILES[options.profile];
  const ids = new BenchIds(options.idPrefix ?? "bench");
  const { clock, executor, coordinator } = simulatedCoordinator({
    store,
    ids,
    profile,
    startMs: options.startMs ?? BENCH_START_MS,
    seed: options.seed ?? 0x0be7c4,
    failureRate: 0,
    minDurationMs: options.minDurationMs ?? 20,
    maxDurationMs: options.maxDurationMs ?? 200,
    deps: {
      elapsedMs: now,
      ...(options.groupCommit === undefined ? {} : { groupCommit: options.groupCommit }),
    },
  });
  return { clock, executor, coordinator, profile, ids, store };
}

export async function applyManifest(world: World, manifest: Manifest): Promise<void> {
  await transactAtStoreTime(world.store, world.clock, (tx, nowMs) =>
    applyPackage(tx, manifest, nowMs),
  );
}

/** Starts `count` runs, one transaction each (as `POST /runs` does); returns their ids. */
export async function startRuns(
  world: World,
  packageName: string,
  target: RunTarget,
  count: number,
): Promise<string[]> {
  const runIds: string[] = [];
  for (let index = 0; index < count; index += 1) {
    const runId = world.ids.runId();
    await transactAtStoreTime(world.store, world.clock, (tx, nowMs) =>
      startRun(tx, manualStart(packageName, target, runId), nowMs),
    );
    runIds.push(runId);
  }
  return runIds;
}

/**
 * A measurement of one phase: start `runs` runs of `target`, then tick until `expectedTerminal`
 * runs (of all phases so far) are terminal, and report per `units`.
 */
export type PhaseMeasure<T> = (
  target: RunTarget,
  runs: number,
  expectedTerminal: number,
  units: number,
) => Promise<T>;

/**
 * The throughput workload, in its order: `workflowRuns` 4-step diamond runs (units: steps),
 * then `ordinaryRuns` runs of the one task `work` (units: runs; none when 0), in the same store.
 */
export async function diamondsThenOrdinary<T>(
  counts: { readonly workflowRuns: number; readonly ordinaryRuns: number },
  measure: PhaseMeasure<T>,
): Promise<{ readonly workflow: T; readonly ordinary: T | null }> {
  const { workflowRuns, ordinaryRuns } = counts;
  const workflow = await measure(
    { kind: "workflow", name: "diamond" },
    workflowRuns,
    workflowRuns,
    workflowRuns * 4,
  );
  const ordinary =
    ordinaryRuns > 0
      ? await measure(
          { kind: "task", name: "work" },
          ordinaryRuns,
          workflowRuns + ordinaryRuns,
          ordinaryRuns,
        )
      : null;
  return { workflow, ordinary };
}

export async function countRuns(store: Store): Promise<Record<RunStatus, number>> {
  return store.transaction((tx) => tx.countRunsByStatus());
}

export interface DriveResult {
  readonly ticks: number;
  /** Wall time spent inside `coordinator.tick()`, ms (the terminal check between ticks is excluded). */
  readonly tickWallMs: number;
  /**
   * CPU time of the whole process (user and system, all threads) inside `coordinator.tick()`,
   * ms: unlike wall time it hardly moves when other processes share the cores.
   */
  readonly tickCpuMs: number;
  readonly tickMs: number[];
  readonly terminal: number;
  readonly statuses: Record<RunStatus, number>;
  readonly stageErrors: number;
  readonly firstStageError: string | null;
  readonly finished: boolean;
}

/**
 * Ticks until `expectedTerminal` runs are terminal, advancing the virtual clock by the
 * profile's tick interval between ticks. `afterTick` runs outside the timed section; a
 * `counter` (the bench's counting driver) counts only inside the ticks.
 */
export async function driveUntilTerminal(
  world: World,
  expectedTerminal: number,
  maxTicks: number,
  afterTick?: (report: TickReport, tick: number) => void,
  counter?: { counting: boolean },
): Promise<DriveResult> {
  const tickMs: number[] = [];
  let tickWallMs = 0;
  let tickCpuMicros = 0;
  let ticks = 0;
  let stageErrors = 0;
  let firstStageError: string | null = null;
  let statuses = await countRuns(world.store);
  let terminal = terminalCount(statuses);
  while (terminal < expectedTerminal && ticks < maxTicks) {
    if (counter) counter.counting = true;
    const cpuAtStart = process.cpuUsage();
    const startedAt = now();
    const report = await world.coordinator.tick();
    const elapsed = now() - startedAt;
    const cpu = process.cpuUsage(cpuAtStart);
    tickCpuMicros += cpu.user + cpu.system;
    if (counter) counter.counting = false;
    tickWallMs += elapsed;
    tickMs.push(elapsed);
    ticks += 1;
    const errors = stageErrorsOf(report);
    stageErrors += errors.count;
    firstStageError ??= errors.first;
    afterTick?.(report, ticks);
    world.clock.advance(world.profile.tickIntervalMs);
    statuses = await countRuns(world.store);
    terminal = terminalCount(statuses);
  }
  return {
    ticks,
    tickWallMs,
    tickCpuMs: tickCpuMicros / 1000,
    tickMs,
    terminal,
    statuses,
    stageErrors,
    firstStageError,
    finished: terminal >= expectedTerminal,
  };
}

function terminalCount(statuses: Record<RunStatus, number>): number {
  let total = 0;
  for (const [status, count] of Object.entries(statuses))
    if (TERMINAL_RUN_STATUSES.has(status as RunStatus)) total += count;
  return total;
}

/** How many stage errors a tick reported, and the first of them as one line (null when none). */
export function stageErrorsOf(report: TickReport): { count: number; first: string | null } {
  let count = 0;
  let first: string | null = null;
  for (const stage of report.stages) {
    count += stage.errors.length;
    const error = stage.errors[0];
    if (first === null && error !== undefined)
      first = `${stage.name}: ${error.code}: ${error.message}`;
  }
  return { count, first };
}
