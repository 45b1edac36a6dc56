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

/** A stage budget as `[pageSize, pages]`, short enough to set the three profiles side by side. */
type Budget = readonly [pageSize: number, pages: number];
type PerProfile<T> = Readonly<Record<ProfileName, T>>;

/** The profiles compared: a row per setting, a column per profile. */
const SETTINGS = {
  cancellation: { edge: [4, 1], standalone: [32, 4], cluster: [128, 4] },
  schedules: { edge: [4, 1], standalone: [16, 2], cluster: [32, 2] },
  ordinary: { edge: [1, 1], standalone: [16, 4], cluster: [128, 4] },
  frontier: { edge: [1, 1], standalone: [16, 4], cluster: [128, 4] },
  admission: { edge: [1, 1], standalone: [16, 4], cluster: [64, 4] },
  dispatch: { edge: 1, standalone: 4, cluster: 128 },
  executionControl: { edge: [8, 1], standalone: [32, 4], cluster: [128, 4] },
  purge: { edge: [4, 1], standalone: [16, 2], cluster: [32, 2] },
  notifications: { edge: [2, 1], standalone: [8, 1], cluster: [16, 1] },
  tickIntervalMs: { edge: 1000, standalone: 500, cluster: 250 },
  // edge: a router, each task a process of its own beside a 128 MiB budget. cluster: counted
  // over the shared store, so it caps local processes across every coordinator of the cluster
  // (whose bulk of work runs on remote workers, which it never counts): four coordinators'
  // worth of a standalone server.
  maxRunning: { edge: 4, standalone: 32, cluster: 128 },
} as const satisfies Readonly<Record<string, PerProfile<Budget> | PerProfile<number>>>;

function profileOf(name: ProfileName): Profile {
  const budget = (row: PerProfile<Budget>): StageBudget => {
    const [pageSize, pages] = row[name];
    return { pageSize, pages };
  };
  return {
    name,
    cancellation: budget(SETTINGS.cancellation),
    schedules: budget(SETTINGS.schedules),
    ordinary: budget(SETTINGS.ordinary),
    frontier: budget(SETTINGS.frontier),
    admission: budget(SETTINGS.admission),
    dispatch: SETTINGS.dispatch[name],
    executionControl: budget(SETTINGS.executionControl),
    purge: budget(SETTINGS.purge),
    notifications: budget(SETTINGS.notifications),
    tickIntervalMs: SETTINGS.tickIntervalMs[name],
    maxRunning: SETTINGS.maxRunning[name],
  };
}

export const PROFILES: Readonly<Record<ProfileName, Profile>> = {
  edge: profileOf("edge"),
  standalone: profileOf("standalone"),
  cluster: profileOf("cluster"),
};

export function isProfileName(value: unknown): value is ProfileName {
  return value === "edge" || value === "standalone" || value === "cluster";
}
