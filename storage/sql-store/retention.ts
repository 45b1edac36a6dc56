import { QlrError } from "../../src/errors.ts";
import type { ExecutorType, RunStatus } from "../../src/model.ts";
import type { PurgedRun } from "../../src/ports.ts";
import type { PurgeCandidate, PurgeKey } from "../../src/retention.ts";
import type { SqlParam } from "../driver.ts";
import { cap, type QueryContext } from "./query-context.ts";

/**
 * Retention: the terminal runs by finish time, the facts of each purge decision (the core
 * decides), and the purge of one run with everything that references it.
 */

/**
 * Runs with a finish time (only terminal runs have one): the exact predicate of the
 * `runs_terminal_by_finish` partial index (migration 0002), so both planners walk that index.
 * The status is not filtered here on purpose (see the migration); the purge decision checks it.
 */
export const TERMINAL_WITH_FINISH = "finished_at_ms IS NOT NULL";

/** The facts of the purge decision, read in one statement per run (the core decides). */
const PURGE_CANDIDATE_COLUMNS = `r.id, r.status, r.finished_at_ms, r.idempotency_key, r.frontier_due,
  (SELECT COUNT(*) FROM run_attempts a WHERE a.run_id = r.id AND a.status IN ('claimed', 'starting', 'running')) AS live_attempts,
  (SELECT COUNT(*) FROM schedules s WHERE s.last_run_id = r.id) AS schedule_refs`;

type PurgeCandidateRow = Record<
  | "id"
  | "status"
  | "finished_at_ms"
  | "idempotency_key"
  | "frontier_due"
  | "live_attempts"
  | "schedule_refs",
  unknown
>;

function toPurgeCandidate(row: PurgeCandidateRow): PurgeCandidate {
  return {
    runId: String(row.id),
    status: row.status as RunStatus,
    finishedAtMs:
      row.finished_at_ms === null || row.finished_at_ms === undefined
        ? null
        : Number(row.finished_at_ms),
    idempotencyKey: typeof row.idempotency_key === "string" ? row.idempotency_key : null,
    liveAttempts: Number(row.live_attempts),
    scheduleLastRun: Number(row.schedule_refs) > 0,
    frontierDue: Number(row.frontier_due) === 1,
  };
}

export async function terminalRunAtRank(tx: QueryContext, rank: number): Promise<PurgeKey | null> {
  if (!Number.isSafeInteger(rank) || rank < 1)
    throw new QlrError("invalid_request", `rank must be a positive integer, got ${rank}`);
  const found = await tx.q<{ finished_at_ms: number; id: string }>(
    `SELECT finished_at_ms, id FROM runs WHERE ${TERMINAL_WITH_FINISH} ORDER BY finished_at_ms DESC, id DESC LIMIT 1 OFFSET ?`,
    [rank - 1],
  );
  const row = found[0];
  return row === undefined
    ? null
    : { finishedAtMs: Number(row.finished_at_ms), runId: String(row.id) };
}

export async function listPurgeCandidates(
  tx: QueryContext,
  after: PurgeKey | null,
  end: PurgeKey,
  limit: number,
): Promise<PurgeCandidate[]> {
  // Keyset on (finished_at_ms, id), written as OR of comparisons: both dialects use the index.
  const afterSql =
    after === null ? "" : "AND (r.finished_at_ms > ? OR (r.finished_at_ms = ? AND r.id > ?))";
  const afterParams: SqlParam[] =
    after === null ? [] : [after.finishedAtMs, after.finishedAtMs, after.runId];
  const found = await tx.q<PurgeCandidateRow>(
    `SELECT ${PURGE_CANDIDATE_COLUMNS} FROM runs r
        WHERE r.${TERMINAL_WITH_FINISH} ${afterSql}
          AND (r.finished_at_ms < ? OR (r.finished_at_ms = ? AND r.id < ?))
        ORDER BY r.finished_at_ms, r.id LIMIT ?`,
    [...afterParams, end.finishedAtMs, end.finishedAtMs, end.runId, cap(limit)],
  );
  return found.map(toPurgeCandidate);
}

export async function getPurgeCandidate(
  tx: QueryContext,
  runId: string,
): Promise<PurgeCandidate | null> {
  const found = await tx.q<PurgeCandidateRow>(
    `SELECT ${PURGE_CANDIDATE_COLUMNS} FROM runs r WHERE r.id = ?`,
    [runId],
  );
  return found[0] === undefined ? null : toPurgeCandidate(found[0]);
}

export async function purgeRun(tx: QueryContext, runId: string): Promise<PurgedRun> {
  tx.known.forget();
  const run = await tx.q<{
    status: RunStatus;
    idempotency_key: unknown;
    finished_at_ms: number | null;
  }>("SELECT status, idempotency_key, finished_at_ms FROM runs WHERE id = ?", [runId]);
  if (run[0] === undefined) throw new QlrError("not_found", `run ${runId} does not exist`);
  const attempts = await tx.q<{ id: string; executor: ExecutorType }>(
    "SELECT id, executor FROM run_attempts WHERE run_id = ? ORDER BY number",
    [runId],
  );
  // Children first, in the order their references point: nothing is left pointing at a
  // deleted row even where the schema does not enforce its foreign keys. Leases are columns
  // of the attempt rows, so they go with them.
  await tx.q("DELETE FROM notifications WHERE run_id = ?", [runId]);
  await tx.q("DELETE FROM step_mutations WHERE run_id = ?", [runId]);
  await tx.q("DELETE FROM run_events WHERE run_id = ?", [runId]);
  await tx.q("DELETE FROM admission_receipts WHERE run_id = ?", [runId]);
  await tx.q("DELETE FROM run_attempts WHERE run_id = ?", [runId]);
  await tx.q("DELETE FROM step_runs WHERE run_id = ?", [runId]);
  await tx.q("DELETE FROM runs WHERE id = ?", [runId]);
  const finishedAtMs = run[0].finished_at_ms;
  const idempotencyKey = typeof run[0].idempotency_key === "string" ? run[0].idempotency_key : null;
  return {
    runId,
    status: run[0].status,
    idempotencyKey,
    finishedAtMs: finishedAtMs === null ? null : Number(finishedAtMs),
    attempts: attempts.map((row) => ({ id: String(row.id), executor: row.executor })),
  };
}
