import type { RunKind, RunStatus } from "./model.ts";

/**
 * The dashboard's overview (`GET /overview?hours=N`): aggregates computed by the store in SQL,
 * bounded in rows whatever the history holds. Runs are bucketed by the hour they finished in
 * (the terminal-runs index serves it); runs still going are listed as active.
 */

export const HOUR_MS = 3_600_000;
export const DEFAULT_OVERVIEW_HOURS = 24;
export const MAX_OVERVIEW_HOURS = 168;
/** Rows of each list (failures, active runs, next fires). */
export const OVERVIEW_LIST_LIMIT = 20;
/** Duration series rows: hours × workflows, cut here. */
export const OVERVIEW_SERIES_LIMIT = 2_000;

export interface OverviewRun {
  readonly id: string;
  readonly kind: RunKind;
  readonly package: string;
  readonly target: string;
  readonly status: RunStatus;
  readonly createdAtMs: number;
  readonly finishedAtMs: number | null;
}

export interface Overview {
  readonly nowMs: number;
  /** The window's start: the start of the hour `hours - 1` hours before now. */
  readonly sinceMs: number;
  readonly hours: number;
  /** Ended runs per hour (of their finish) and status; hours without runs are absent. */
  readonly runsPerHour: readonly {
    readonly hourStartMs: number;
    readonly status: RunStatus;
    readonly count: number;
  }[];
  /** Workflow runs that ended, per hour and workflow: how long they took, created to finished. */
  readonly durations: readonly {
    readonly hourStartMs: number;
    readonly package: string;
    readonly workflow: string;
    readonly runs: number;
    readonly avgDurationMs: number;
    readonly maxDurationMs: number;
  }[];
  /** Failed, timed-out and lost runs of the last 24 hours, newest first. */
  readonly recentFailures: readonly OverviewRun[];
  /** Runs not ended yet, oldest first, and how many there are. */
  readonly active: readonly OverviewRun[];
  readonly activeCount: number;
  /** Enabled schedules by their next fire time. */
  readonly nextFires: readonly {
    readonly package: string;
    readonly name: string;
    readonly nextFireAtMs: number;
  }[];
}

/** The window's start for `hours` hours ending now: whole hours, the current one included. */
export function overviewSinceMs(nowMs: number, hours: number): number {
  return Math.floor(nowMs / HOUR_MS) * HOUR_MS - (hours - 1) * HOUR_MS;
}
