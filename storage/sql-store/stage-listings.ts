import { MAX_ADMISSION_PAGE } from "../../src/admission.ts";
import { LIVE_ATTEMPT_STATUSES, type ExecutorType, type RunAttempt } from "../../src/model.ts";
import type { AdmissionCandidate, ListedAdmissionCandidate } from "../../src/ports.ts";
import type { SqlRow } from "../driver.ts";
import * as rows from "../rows.ts";
import {
  attemptStatusLiteral,
  cap,
  executorLiteral,
  LIVE_STATUSES_SQL,
  type QueryContext,
} from "./query-context.ts";

/**
 * The keyset listings the coordinator's stages page through: runs asked to cancel, runs the
 * frontier must visit, queued ordinary runs, ready steps to admit, live attempts (and their
 * counts, the admission's limits). Where a planner left to itself walked more than the page
 * returns, the statement's comment says how it is kept to the page.
 */

/** A row of `listAdmissionCandidates`. */
interface CandidateRow extends SqlRow {
  run_id: string;
  id: string;
  version: number;
  package: string;
  task: string;
}

export async function listCancellingRuns(
  tx: QueryContext,
  afterRunId: string | null,
  limit: number,
): Promise<string[]> {
  // Every tick asks, and almost always finds none. SQLite, left to its planner, walks
  // runs_by_status over every queued, dispatching and running run and reads each row for its
  // cancel mark (a cost that grew with the work in flight); runs_cancelling, whose predicate
  // is this very condition, holds only the runs asked to cancel.
  const found = await tx.q<{ id: string }>(
    `SELECT id FROM runs ${tx.dialect === "sqlite" ? "INDEXED BY runs_cancelling " : ""}WHERE cancel_requested_at_ms IS NOT NULL AND status IN ('queued', 'dispatching', 'running') AND id > ? ORDER BY id LIMIT ?`,
    [afterRunId ?? "", cap(limit)],
  );
  return found.map((row) => row.id);
}

export async function listFrontierRuns(
  tx: QueryContext,
  afterRunId: string | null,
  limit: number,
): Promise<string[]> {
  const found = await tx.q<{ id: string }>(
    "SELECT id FROM runs WHERE frontier_due = 1 AND id > ? ORDER BY id LIMIT ?",
    [afterRunId ?? "", cap(limit)],
  );
  return found.map((row) => row.id);
}

export async function listQueuedOrdinaryRuns(
  tx: QueryContext,
  afterRunId: string | null,
  limit: number,
  nowMs: number,
): Promise<string[]> {
  const found = await tx.q<{ id: string }>(
    "SELECT id FROM runs WHERE status = 'queued' AND kind = 'ordinary' AND cancel_requested_at_ms IS NULL AND (not_before_ms IS NULL OR not_before_ms <= ?) AND id > ? ORDER BY id LIMIT ?",
    [nowMs, afterRunId ?? "", cap(limit)],
  );
  return found.map((row) => row.id);
}

export async function listAdmissionCandidates(
  tx: QueryContext,
  after: AdmissionCandidate | null,
  limit: number,
  nowMs: number,
): Promise<ListedAdmissionCandidate[]> {
  // SQLite, left to itself, starts from the runs: every running run, each probed for ready
  // steps, then a sort, on every page (≈ 1 ms a page with 200 runs in flight, measured). Its
  // CROSS JOIN keeps the written order, so it walks the ready steps' partial index
  // (step_runs_ready) from the cursor, already in the page's order, and stops at the limit;
  // the row-value cursor is what lets it seek there.
  //
  // PostgreSQL did the same from statistics a burst of new runs had left behind (every
  // running run, ≈ 12,000 buffers a page; docs/PERFORMANCE.md, "PostgreSQL's server time per
  // unit"). There the run is a LATERAL subquery that OFFSET 0 keeps from being pulled up, so
  // it can only be probed by id for each ready step, and the row-value cursor is an index
  // condition on step_runs_ready: whatever the statistics say, the page walks the ready steps
  // from the cursor in order and stops at the limit. The receipts' bound on run_id (implied by
  // the cursor) lets a merge anti-join start at the cursor too.
  const found =
    tx.dialect === "sqlite"
      ? await tx.q<CandidateRow>(
          `SELECT s.run_id, s.id, s.version, r.package, s.task FROM step_runs s CROSS JOIN runs r ON r.id = s.run_id
        WHERE s.status = 'ready' AND r.status = 'running' AND r.cancel_requested_at_ms IS NULL
          AND (s.not_before_ms IS NULL OR s.not_before_ms <= ?)
          AND NOT EXISTS (SELECT 1 FROM admission_receipts a WHERE a.run_id = s.run_id AND a.step_run_id = s.id AND a.step_run_version = s.version)
          AND (s.run_id, s.id) > (?, ?)
        ORDER BY s.run_id, s.id LIMIT ?`,
          [
            nowMs,
            after?.runId ?? "",
            after?.stepRunId ?? "",
            Math.min(cap(limit), MAX_ADMISSION_PAGE),
          ],
        )
      : await tx.q<CandidateRow>(
          `SELECT s.run_id, s.id, s.version, r.package, s.task FROM step_runs s
        CROSS JOIN LATERAL (SELECT runs.package FROM runs WHERE runs.id = s.run_id AND runs.status = 'running' AND runs.cancel_requested_at_ms IS NULL OFFSET 0) r
        WHERE s.status = 'ready' AND (s.not_before_ms IS NULL OR s.not_before_ms <= ?)
          AND NOT EXISTS (SELECT 1 FROM admission_receipts a WHERE a.run_id = s.run_id AND a.step_run_id = s.id AND a.step_run_version = s.version AND a.run_id >= ?)
          AND (s.run_id, s.id) > (?, ?)
        ORDER BY s.run_id, s.id LIMIT ?`,
          [
            nowMs,
            after?.runId ?? "",
            after?.runId ?? "",
            after?.stepRunId ?? "",
            Math.min(cap(limit), MAX_ADMISSION_PAGE),
          ],
        );
  return found.map((row) => ({
    runId: row.run_id,
    stepRunId: row.id,
    stepRunVersion: Number(row.version),
    package: row.package,
    task: row.task,
  }));
}

export async function countLiveTaskAttempts(
  tx: QueryContext,
  packageName: string,
  task: string,
): Promise<number> {
  // Walks the live attempts (the partial index run_attempts_live), few by construction.
  const found = await tx.q<{ count: number }>(
    `SELECT COUNT(*) AS count FROM run_attempts a JOIN runs r ON r.id = a.run_id
        LEFT JOIN step_runs s ON s.id = a.step_run_id
        WHERE a.status IN ('claimed', 'starting', 'running') AND r.package = ?
          AND CASE WHEN a.step_run_id IS NULL THEN r.target ELSE s.task END = ?`,
    [packageName, task],
  );
  return Number(found[0]?.count ?? 0);
}

/** Counted once a transaction, then followed through its own attempt writes (`TransactionRows`). */
export async function countLiveAttempts(tx: QueryContext, executor: ExecutorType): Promise<number> {
  const known = tx.known.liveAttemptsOf(executor);
  if (known !== undefined) return known;
  const found = await tx.q<{ count: number }>(
    `SELECT COUNT(*) AS count FROM run_attempts WHERE executor = ${executorLiteral(executor)} AND status IN (${LIVE_STATUSES_SQL})`,
    [],
  );
  const count = Number(found[0]?.count ?? 0);
  tx.known.rememberLiveAttempts(executor, count);
  return count;
}

export async function listAttempts(
  tx: QueryContext,
  executor: ExecutorType,
  statuses: readonly RunAttempt["status"][],
  afterAttemptId: string | null,
  limit: number,
  ownerNodeId?: string,
): Promise<RunAttempt[]> {
  if (statuses.length === 0) return [];
  const ownerSql =
    ownerNodeId === undefined ? "" : "AND (owner_node_id = ? OR owner_node_id IS NULL)";
  // Live statuses only (every caller's): on SQLite the partial index's own condition,
  // repeated word for word, is what lets it use run_attempts_live, whose predicate a bound
  // status list cannot imply. Without it SQLite walks every attempt ever made from the cursor
  // in id order (its primary key saves a sort), so a dispatch page cost more as history grew.
  const liveSql =
    tx.dialect === "sqlite" && statuses.every((status) => LIVE_ATTEMPT_STATUSES.has(status))
      ? `AND status IN (${LIVE_STATUSES_SQL})`
      : "";
  // The executor and the statuses are literals: bound, SQLite compiled this listing again on
  // every run (executorLiteral in query-context.ts).
  const found = await tx.q(
    `SELECT ${rows.ATTEMPTS.columns.join(", ")} FROM run_attempts WHERE executor = ${executorLiteral(executor)} AND status IN (${statuses.map(attemptStatusLiteral).join(", ")}) ${liveSql} ${ownerSql} AND id > ? ORDER BY id LIMIT ?`,
    [...(ownerNodeId === undefined ? [] : [ownerNodeId]), afterAttemptId ?? "", cap(limit)],
  );
  return found.map(rows.ATTEMPTS.read);
}
