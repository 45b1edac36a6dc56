import { isProfileName, type ProfileName } from "../../src/profiles.ts";

/** How much work each bench does: the default scale, the quick one, and the soak's. */

export interface Scale {
  readonly admissionsSqlite: number;
  readonly admissionsPostgres: number;
  readonly warmupSqlite: number;
  readonly warmupPostgres: number;
  readonly componentIterations: number;
  readonly profileAdmissions: number;
  readonly bytesAdmissions: number;
  readonly bytesWorkflowRuns: number;
  readonly throughputRuns: number;
  /**
   * The cluster profile's runs in bench 3, the figures set beside the peers: as many units as
   * the peers' jobs (diamond runs of 4 steps, ordinary runs of one), so both sides are measured
   * over the same amount of work, past their warm-up.
   */
  readonly clusterWorkflowRuns: number;
  readonly ordinaryRuns: number;
  readonly memoryRuns: number;
  /** Finished runs of history for the memory of `qlr serve --profile edge`, and how long its schedules fire. */
  readonly deviceHistoryRuns: number;
  readonly deviceWindowMs: number;
  /** Also measure admission on a 4-step workflow (sql.js file store) to show what the width costs. */
  readonly narrowAdmission: boolean;
  /** Also run the memory bench under V8 flags that cap the heap. */
  readonly memoryFlagVariant: boolean;
  readonly childTimeoutMs: number;
  /** Diamond runs started over HTTP on `qlr serve` (real `true` processes), per profile. */
  readonly serveRuns: number;
  /** Two-step runs for the memory of `qlr serve --profile edge`. */
  readonly serveMemoryRuns: number;
  /** Ordinary runs, then diamond runs, per variant of the scale-out bench (1–3 coordinators, grouped and per item). */
  readonly scaleoutOrdinaryRuns: number;
  readonly scaleoutWorkflowRuns: number;
  /** Trivial jobs per peer (pg-boss, graphile-worker) and mode. */
  readonly peerJobs: number;
  /** Time cap of a peer's processing (the defaults of pg-boss fetch one job per 2 s poll). */
  readonly peerCapMs: number;
  readonly workerdRuns: number;
  readonly workerdTicks: number;
  readonly workerdDiamonds: number;
  /** The long-life soak (bench/soak.ts): simulated days, retention variants, the real process's minutes. */
  readonly soak: SoakScale;
}

export interface SoakScale {
  readonly days: number;
  readonly sampleEveryHours: number;
  readonly profile: ProfileName;
  /** A variant bounded by time (`--retention`), runs unbounded; and one bounded by count. */
  readonly horizon: string;
  readonly countRuns: number;
  readonly serveMs: number;
  readonly serveRetention: string;
  readonly serveRetentionRuns: number;
}

export const DEFAULT_SCALE: Scale = {
  admissionsSqlite: 2000,
  admissionsPostgres: 1000,
  warmupSqlite: 200,
  warmupPostgres: 100,
  componentIterations: 300,
  profileAdmissions: 1000,
  bytesAdmissions: 2000,
  bytesWorkflowRuns: 200,
  throughputRuns: 200,
  clusterWorkflowRuns: 2_500,
  ordinaryRuns: 10_000,
  memoryRuns: 1000,
  deviceHistoryRuns: 10_000,
  deviceWindowMs: 60_000,
  narrowAdmission: true,
  memoryFlagVariant: true,
  childTimeoutMs: 8 * 60_000,
  serveRuns: 100,
  serveMemoryRuns: 1000,
  scaleoutOrdinaryRuns: 400,
  scaleoutWorkflowRuns: 100,
  peerJobs: 10_000,
  peerCapMs: 60_000,
  workerdRuns: 20,
  workerdTicks: 200,
  workerdDiamonds: 20,
  soak: {
    days: 30,
    sampleEveryHours: 24,
    profile: "edge",
    horizon: "2d",
    countRuns: 3000,
    serveMs: 8 * 60_000,
    serveRetention: "2m",
    serveRetentionRuns: 100,
  },
};

export const QUICK_SCALE: Scale = {
  admissionsSqlite: 500,
  admissionsPostgres: 250,
  warmupSqlite: 100,
  warmupPostgres: 50,
  componentIterations: 100,
  profileAdmissions: 300,
  bytesAdmissions: 500,
  bytesWorkflowRuns: 50,
  throughputRuns: 25,
  clusterWorkflowRuns: 250,
  ordinaryRuns: 1000,
  memoryRuns: 250,
  deviceHistoryRuns: 1000,
  deviceWindowMs: 15_000,
  narrowAdmission: false,
  memoryFlagVariant: false,
  childTimeoutMs: 4 * 60_000,
  serveRuns: 20,
  serveMemoryRuns: 100,
  scaleoutOrdinaryRuns: 100,
  scaleoutWorkflowRuns: 25,
  peerJobs: 1000,
  peerCapMs: 20_000,
  workerdRuns: 20,
  workerdTicks: 200,
  workerdDiamonds: 5,
  soak: {
    days: 1,
    sampleEveryHours: 3,
    profile: "edge",
    horizon: "6h",
    countRuns: 1000,
    serveMs: 60_000,
    serveRetention: "1m",
    serveRetentionRuns: 20,
  },
};

/**
 * The soak's scale from the environment, over the scale's: QLR_BENCH_SOAK_DAYS,
 * QLR_BENCH_SOAK_HORIZON (a duration), QLR_BENCH_SOAK_COUNT_RUNS (0: no count variant),
 * QLR_BENCH_SOAK_SAMPLE_HOURS, QLR_BENCH_SOAK_PROFILE, QLR_BENCH_SOAK_SERVE_S (0: no real process).
 */
export function soakScale(base: SoakScale): SoakScale {
  const number = (name: string, fallback: number): number => {
    const raw = process.env[name];
    if (raw === undefined || raw.trim() === "") return fallback;
    const value = Number(raw);
    if (!Number.isFinite(value) || value < 0)
      throw new Error(`${name}: not a non-negative number: ${raw}`);
    return value;
  };
  const profile = process.env.QLR_BENCH_SOAK_PROFILE;
  if (profile !== undefined && profile !== "" && !isProfileName(profile))
    throw new Error(`QLR_BENCH_SOAK_PROFILE: unknown profile ${profile}`);
  return {
    ...base,
    days: number("QLR_BENCH_SOAK_DAYS", base.days),
    horizon: process.env.QLR_BENCH_SOAK_HORIZON ?? base.horizon,
    countRuns: number("QLR_BENCH_SOAK_COUNT_RUNS", base.countRuns),
    sampleEveryHours: number("QLR_BENCH_SOAK_SAMPLE_HOURS", base.sampleEveryHours),
    profile: profile !== undefined && isProfileName(profile) ? profile : base.profile,
    serveMs: number("QLR_BENCH_SOAK_SERVE_S", base.serveMs / 1000) * 1000,
  };
}
