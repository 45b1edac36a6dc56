import { RUN_STATUSES, type Run, type RunEvent, type RunStatus } from "../../src/model.ts";
import {
  HOUR_MS,
  OVERVIEW_LIST_LIMIT,
  OVERVIEW_SERIES_LIMIT,
  overviewSinceMs,
  type Overview,
  type OverviewRun,
} from "../../src/overview.ts";
import type { RunListFilter } from "../../src/ports.ts";
import type { SqlRow } from "../driver.ts";
import * as rows from "../rows.ts";
import { cap, newestFirst, select, type QueryContext } from "./query-context.ts";
import { TERMINAL_WITH_FINISH } from "./retention.ts";

/** What people look at: the runs listed newest first, a run's events, the counts and the overview. */

export async function listRuns(tx: QueryContext, filter: RunListFilter): Promise<Run[]> {
  return newestFirst(tx, rows.RUNS, { status: filter.status }, filter.cursor, cap(filter.limit));
}

export async function listEvents(
  tx: QueryContext,
  runId: string,
  afterSeq: number,
  limit: number,
): Promise<RunEvent[]> {
  return select(tx, rows.EVENTS, "WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?", [
    runId,
    afterSeq,
    cap(limit),
  ]);
}

export async function countRunsByStatus(tx: QueryContext): Promise<Record<RunStatus, number>> {
  const found = await tx.q<{ status: RunStatus; count: number }>(
    "SELECT status, COUNT(*) AS count FROM runs GROUP BY status",
  );
  const counts = Object.fromEntries(RUN_STATUSES.map((status) => [status, 0])) as Record<
    RunStatus,
    number
  >;
  for (const row of found) counts[row.status] = Number(row.count);
  return counts;
}

export async function overview(tx: QueryContext, nowMs: number, hours: number): Promise<Overview> {
  const sinceMs = overviewSinceMs(nowMs, hours);
  const num = (value: unknown): number => Number(value);
  // Bucketed by the finish time: the predicate of runs_terminal_by_finish, so both planners
  // walk that index over the window only. Integer division floors on both dialects here (times are positive).
  const perHour = await tx.q<{ hour: unknown; status: RunStatus; count: unknown }>(
    `SELECT finished_at_ms / ${HOUR_MS} AS hour, status, COUNT(*) AS count FROM runs WHERE ${TERMINAL_WITH_FINISH} AND finished_at_ms >= ? GROUP BY finished_at_ms / ${HOUR_MS}, status ORDER BY hour, status LIMIT ?`,
    [sinceMs, OVERVIEW_SERIES_LIMIT],
  );
  const durations = await tx.q<{
    hour: unknown;
    package: string;
    target: string;
    runs: unknown;
    avg_ms: unknown;
    max_ms: unknown;
  }>(
    `SELECT finished_at_ms / ${HOUR_MS} AS hour, package, target, COUNT(*) AS runs, AVG(finished_at_ms - created_at_ms) AS avg_ms, MAX(finished_at_ms - created_at_ms) AS max_ms
       FROM runs WHERE ${TERMINAL_WITH_FINISH} AND finished_at_ms >= ? AND kind = 'workflow'
       GROUP BY finished_at_ms / ${HOUR_MS}, package, target ORDER BY hour, package, target LIMIT ?`,
    [sinceMs, OVERVIEW_SERIES_LIMIT],
  );
  const toRun = (row: SqlRow): OverviewRun => {
    const run = rows.RUNS.read(row);
    return {
      id: run.id,
      kind: run.kind,
      package: run.package,
      target: run.target,
      status: run.status,
      createdAtMs: run.createdAtMs,
      finishedAtMs: run.finishedAtMs,
    };
  };
  const failures = await tx.q(
    `SELECT ${rows.RUNS.columns.join(", ")} FROM runs WHERE ${TERMINAL_WITH_FINISH} AND finished_at_ms >= ? AND status IN ('failed', 'timed_out', 'lost') ORDER BY finished_at_ms DESC, id DESC LIMIT ?`,
    [nowMs - 24 * HOUR_MS, OVERVIEW_LIST_LIMIT],
  );
  const activeWhere = "status IN ('queued', 'dispatching', 'running')";
  const active = await tx.q(
    `SELECT ${rows.RUNS.columns.join(", ")} FROM runs WHERE ${activeWhere} ORDER BY created_at_ms, id LIMIT ?`,
    [OVERVIEW_LIST_LIMIT],
  );
  const activeCount = await tx.q<{ count: unknown }>(
    `SELECT COUNT(*) AS count FROM runs WHERE ${activeWhere}`,
  );
  const fires = await tx.q<{ package: string; name: string; next_fire_at_ms: unknown }>(
    "SELECT package, name, next_fire_at_ms FROM schedules WHERE next_fire_at_ms IS NOT NULL ORDER BY next_fire_at_ms, package, name LIMIT ?",
    [OVERVIEW_LIST_LIMIT],
  );
  return {
    nowMs,
    sinceMs,
    hours,
    runsPerHour: perHour.map((row) => ({
      hourStartMs: num(row.hour) * HOUR_MS,
      status: row.status,
      count: num(row.count),
    })),
    durations: durations.map((row) => ({
      hourStartMs: num(row.hour) * HOUR_MS,
      package: row.package,
      workflow: row.target,
      runs: num(row.runs),
      avgDurationMs: Math.round(num(row.avg_ms)),
      maxDurationMs: num(row.max_ms),
    })),
    recentFailures: failures.map(toRun),
    active: active.map(toRun),
    activeCount: num(activeCount[0]?.count ?? 0),
    nextFires: fires.map((row) => ({
      package: row.package,
      name: row.name,
      nextFireAtMs: num(row.next_fire_at_ms),
    })),
  };
}
