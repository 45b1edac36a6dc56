/**
 * Budgets of one cadence cycle, per stage: `pageSize × pages` items at most. The edge and
 * standalone figures are ADR-0229's; schedules, purge and the cluster profile are ours.
 */
export interface StageBudget {
  readonly pageSize: number;
  readonly pages: number;
}

export interface Profile {
  readonly name: ProfileName;
  readonly cancellation: StageBudget;
  readonly schedules: StageBudget;
  readonly ordinary: StageBudget;
  readonly frontier: StageBudget;
  readonly admission: StageBudget;
  readonly dispatch: number;
  readonly executionControl: StageBudget;
  /**
   * Retention: runs purged per cycle (one short transaction each), and attempt ids the orphan
   * file sweep looks at per cycle. Small on purpose: a purge is housekeeping and must never
   * hold the cycle up for the stages that move work.
   */
  readonly purge: StageBudget;
  /**
   * Alerts: outbox entries sent per cycle, each a network call or a command outside any
   * transaction, so small: an unreachable receiver costs at most its sender's timeout each.
   */
  readonly notifications: StageBudget;
  /** How often the device runtime's timer calls the cycle. */
  readonly tickIntervalMs: number;
  /**
   * The default of `qlr serve --max-running`: live `local_process` attempts (claimed, starting
   * or running) at once. Ready steps beyond it wait as ready (src/backpressure.ts).
   */
  readonly maxRunning: number;
}

export type ProfileName = "edge" | "standalone" | "cluster";

export const PROFILES: Readonly<Record<ProfileName, Profile>> = {
  edge: {
    name: "edge",
    cancellation: { pageSize: 4, pages: 1 },
    schedules: { pageSize: 4, pages: 1 },
    ordinary: { pageSize: 1, pages: 1 },
    frontier: { pageSize: 1, pages: 1 },
    admission: { pageSize: 1, pages: 1 },
    dispatch: 1,
    executionControl: { pageSize: 8, pages: 1 },
    purge: { pageSize: 4, pages: 1 },
    notifications: { pageSize: 2, pages: 1 },
    tickIntervalMs: 1000,
    // A router: each task is a process of its own beside a 128 MiB budget.
    maxRunning: 4,
  },
  standalone: {
    name: "standalone",
    cancellation: { pageSize: 32, pages: 4 },
    schedules: { pageSize: 16, pages: 2 },
    ordinary: { pageSize: 16, pages: 4 },
    frontier: { pageSize: 16, pages: 4 },
    admission: { pageSize: 16, pages: 4 },
    dispatch: 4,
    executionControl: { pageSize: 32, pages: 4 },
    purge: { pageSize: 16, pages: 2 },
    notifications: { pageSize: 8, pages: 1 },
    tickIntervalMs: 500,
    maxRunning: 32,
  },
  cluster: {
    name: "cluster",
    cancellation: { pageSize: 64, pages: 4 },
    schedules: { pageSize: 32, pages: 2 },
    ordinary: { pageSize: 64, pages: 4 },
    frontier: { pageSize: 64, pages: 4 },
    admission: { pageSize: 64, pages: 4 },
    dispatch: 16,
    executionControl: { pageSize: 64, pages: 4 },
    purge: { pageSize: 32, pages: 2 },
    notifications: { pageSize: 16, pages: 1 },
    tickIntervalMs: 250,
    // Counted over the shared store, so it caps local processes across every coordinator of
    // the cluster (whose bulk of work runs on remote workers, which it never counts): four
    // coordinators' worth of a standalone server.
    maxRunning: 128,
  },
};

export function isProfileName(value: unknown): value is ProfileName {
  return value === "edge" || value === "standalone" || value === "cluster";
}
