import { QlrError } from "./errors.ts";
import { formatDurationMs, tryParseDurationMs } from "./manifest/duration.ts";
import { TERMINAL_RUN_STATUSES, type RunStatus } from "./model.ts";

/**
 * Retention: bounded history on a long-lived device. A terminal run is purged, with everything
 * it owns, once it finished more than `horizonMs` ago (store time) or once it is no longer
 * among the newest `maxRuns` terminal runs. The decision lives here, pure: the store lists
 * candidates with the facts the decision needs, and deletes only what this module allows.
 *
 * What is never purged, whatever its age:
 * - a run that is not terminal, or that still has an attempt that may be live (claimed,
 *   starting, running): its process, lease or receipt may still need the rows;
 * - the last run of a schedule (the overlap rule reads it);
 * - a run the frontier still has to look at;
 * - a run holding an idempotency key that finished within the horizon, even past the count:
 *   the idempotency window is the retention horizon, exactly, so a repeated start within the
 *   horizon always answers the same run, and one after the horizon creates a new run.
 */

const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;

export const MIN_RETENTION_MS = MINUTE_MS;
export const MAX_RETENTION_MS = 3_650 * DAY_MS;
export const MIN_RETENTION_RUNS = 1;
export const MAX_RETENTION_RUNS = 10_000_000;
export const DEFAULT_RETENTION_MS = 7 * DAY_MS;
export const DEFAULT_RETENTION_RUNS = 10_000;

export interface RetentionPolicy {
  /** Terminal runs that finished longer ago than this (store time) are purged. */
  readonly horizonMs: number;
  /** At most this many terminal runs are kept (the newest by finish time). */
  readonly maxRuns: number;
}

export const DEFAULT_RETENTION: RetentionPolicy = {
  horizonMs: DEFAULT_RETENTION_MS,
  maxRuns: DEFAULT_RETENTION_RUNS,
};

/**
 * Parses the two settings as an operator writes them (`--retention 7d`, `QLR_RETENTION_RUNS`).
 * Every problem is named in one `invalid_request` error whose details carry the setting's name;
 * undefined or empty text means the default.
 */
export function parseRetentionPolicy(
  input: { readonly horizon?: string | undefined; readonly maxRuns?: string | undefined },
  names: { readonly horizon: string; readonly maxRuns: string } = {
    horizon: "retention",
    maxRuns: "retention-runs",
  },
): RetentionPolicy {
  const problems: { path: string; message: string }[] = [];
  let horizonMs = DEFAULT_RETENTION_MS;
  if (input.horizon !== undefined && input.horizon !== "") {
    const parsed = tryParseDurationMs(input.horizon);
    if (!parsed.ok)
      problems.push({
        path: names.horizon,
        message: `${JSON.stringify(input.horizon)} ${parsed.reason}`,
      });
    else if (parsed.ms < MIN_RETENTION_MS || parsed.ms > MAX_RETENTION_MS)
      problems.push({
        path: names.horizon,
        message: `must be from ${formatDurationMs(MIN_RETENTION_MS)} to ${formatDurationMs(MAX_RETENTION_MS)}, got ${input.horizon}`,
      });
    else horizonMs = parsed.ms;
  }
  let maxRuns = DEFAULT_RETENTION_RUNS;
  if (input.maxRuns !== undefined && input.maxRuns !== "") {
    const text = input.maxRuns;
    const count = /^[0-9]{1,9}$/.test(text) ? Number(text) : Number.NaN;
    if (!Number.isSafeInteger(count) || count < MIN_RETENTION_RUNS || count > MAX_RETENTION_RUNS)
      problems.push({
        path: names.maxRuns,
        message: `must be a whole number of runs from ${MIN_RETENTION_RUNS} to ${MAX_RETENTION_RUNS}, got ${JSON.stringify(text)}`,
      });
    else maxRuns = count;
  }
  if (problems.length > 0)
    throw new QlrError(
      "invalid_request",
      `invalid retention: ${problems.map((problem) => `${problem.path} ${problem.message}`).join("; ")}`,
      { details: problems },
    );
  return { horizonMs, maxRuns };
}

/** A position in the purge order: terminal runs by finish time, then id, oldest first. */
export interface PurgeKey {
  readonly finishedAtMs: number;
  readonly runId: string;
}

/** What the store knows about one terminal run the retention may purge. */
export interface PurgeCandidate {
  readonly runId: string;
  readonly status: RunStatus;
  readonly finishedAtMs: number | null;
  readonly idempotencyKey: string | null;
  /** Attempts of the run in claimed, starting or running. */
  readonly liveAttempts: number;
  /** Whether a schedule names this run as its last run. */
  readonly scheduleLastRun: boolean;
  /** Whether the run is still marked for the frontier. */
  readonly frontierDue: boolean;
}

/**
 * The range one purge pass looks at: every terminal run before `end` in purge order. `end` is
 * the later of the time horizon and the oldest run of the newest `maxRuns`, so both rules are
 * one range scan of one index. `countBoundary` is that oldest kept run (null: fewer terminal
 * runs than `maxRuns` exist).
 */
export interface PurgeRange {
  readonly finishedBeforeMs: number;
  readonly countBoundary: PurgeKey | null;
  readonly end: PurgeKey;
}

export function comparePurgeKeys(a: PurgeKey, b: PurgeKey): number {
  if (a.finishedAtMs !== b.finishedAtMs) return a.finishedAtMs < b.finishedAtMs ? -1 : 1;
  return a.runId < b.runId ? -1 : a.runId > b.runId ? 1 : 0;
}

/**
 * The purge range at store time `nowMs`. `newestKept` is the `maxRuns`-th newest terminal run
 * (the store finds it by rank), or null when there are not that many.
 */
export function purgeRange(
  policy: RetentionPolicy,
  nowMs: number,
  newestKept: PurgeKey | null,
): PurgeRange {
  const finishedBeforeMs = nowMs - policy.horizonMs;
  // The empty id sorts before every portable id: "finished strictly before finishedBeforeMs".
  const byTime: PurgeKey = { finishedAtMs: finishedBeforeMs, runId: "" };
  const end = newestKept !== null && comparePurgeKeys(newestKept, byTime) > 0 ? newestKept : byTime;
  return { finishedBeforeMs, countBoundary: newestKept, end };
}

/** The longest a purge may go on using a count boundary it found earlier (store time). */
export const COUNT_BOUNDARY_MAX_AGE_MS = 30_000;

/**
 * How long a count boundary found by rank stays in use: one millisecond per kept run, at most
 * `COUNT_BOUNDARY_MAX_AGE_MS`. Finding it walks up to `maxRuns` entries of the finish-order
 * index (SQLite and PostgreSQL have no cheaper rank); walking them every cycle would cost a
 * setting of a million runs tens of milliseconds a cycle. Amortised this way a walk costs at
 * most about one index entry per millisecond, and a small setting (the tests' 1 or 2) still
 * finds its boundary every cycle.
 *
 * An old boundary only purges less, never more: runs that finished since are newer than it, so
 * it sits older than the true one, and the runs between the two wait for the next boundary.
 * The only rows that leave the newest `maxRuns` meanwhile are purged by the horizon, and a run
 * the horizon reached has every older run past the horizon too, so nothing the boundary keeps
 * is lost to a boundary that moved the other way.
 */
export function countBoundaryMaxAgeMs(policy: RetentionPolicy): number {
  return Math.min(COUNT_BOUNDARY_MAX_AGE_MS, policy.maxRuns);
}

export type PurgeDecision =
  | { readonly purge: true; readonly reason: "expired" | "over_count" }
  | {
      readonly purge: false;
      readonly reason:
        | "not_terminal"
        | "not_finished"
        | "live_attempt"
        | "schedule_last_run"
        | "frontier_due"
        | "idempotency_window"
        | "retained";
    };

/**
 * Whether one candidate is purged now. Re-run inside the deleting transaction on freshly read
 * facts, so a run that changed since it was listed (a new attempt, a schedule firing) is kept.
 */
export function decidePurge(candidate: PurgeCandidate, range: PurgeRange): PurgeDecision {
  if (!TERMINAL_RUN_STATUSES.has(candidate.status)) return { purge: false, reason: "not_terminal" };
  if (candidate.finishedAtMs === null) return { purge: false, reason: "not_finished" };
  if (candidate.liveAttempts > 0) return { purge: false, reason: "live_attempt" };
  if (candidate.scheduleLastRun) return { purge: false, reason: "schedule_last_run" };
  if (candidate.frontierDue) return { purge: false, reason: "frontier_due" };
  const expired = candidate.finishedAtMs < range.finishedBeforeMs;
  if (expired) return { purge: true, reason: "expired" };
  const key: PurgeKey = { finishedAtMs: candidate.finishedAtMs, runId: candidate.runId };
  const overCount = range.countBoundary !== null && comparePurgeKeys(key, range.countBoundary) < 0;
  if (!overCount) return { purge: false, reason: "retained" };
  // The idempotency window is the time horizon: the count never shortens it.
  if (candidate.idempotencyKey !== null) return { purge: false, reason: "idempotency_window" };
  return { purge: true, reason: "over_count" };
}
