import type { ExecutorType, RunAttempt } from "../../src/model.ts";
import type { CoordinatorRecord } from "../../src/ports.ts";
import * as rows from "../rows.ts";
import {
  assignmentsSql,
  cap,
  executorLiteral,
  insertSql,
  select,
  selectOne,
  updateOne,
  type QueryContext,
} from "./query-context.ts";

/**
 * Who holds what: the coordinators' records (node, incarnation, lease), the remote workers'
 * leases on attempts, and the attempts whose owning coordinator is gone.
 */

export async function getCoordinator(
  tx: QueryContext,
  nodeId: string,
): Promise<CoordinatorRecord | null> {
  return selectOne(tx, rows.COORDINATORS, "WHERE node_id = ?", [nodeId]);
}

export async function putCoordinator(
  tx: QueryContext,
  record: CoordinatorRecord,
  expectedIncarnation: number | null,
): Promise<void> {
  if (expectedIncarnation === null) {
    await tx.q(
      insertSql("coordinators", rows.COORDINATORS.columns),
      rows.COORDINATORS.params(record),
    );
    return;
  }
  // A takeover rewrites every column but the key.
  const rewritten = rows.COORDINATORS.columnsBut("node_id");
  await updateOne(
    tx,
    `UPDATE coordinators SET ${assignmentsSql(rewritten)} WHERE node_id = ? AND incarnation = ? RETURNING node_id`,
    [...rows.COORDINATORS.params(record, rewritten), record.nodeId, expectedIncarnation],
    () => `coordinator node ${record.nodeId} is no longer at incarnation ${expectedIncarnation}`,
  );
}

export async function listCoordinators(
  tx: QueryContext,
  limit: number,
): Promise<CoordinatorRecord[]> {
  return select(tx, rows.COORDINATORS, "ORDER BY node_id LIMIT ?", [cap(limit)]);
}

export async function listClaimableRemote(
  tx: QueryContext,
  pool: string,
  nowMs: number,
  limit: number,
): Promise<RunAttempt[]> {
  return select(
    tx,
    rows.ATTEMPTS,
    "WHERE executor = 'remote_worker' AND status = 'claimed' AND pool = ? AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms <= ?) ORDER BY created_at_ms, id LIMIT ?",
    [pool, nowMs, cap(limit)],
  );
}

export async function listExpiredLeases(
  tx: QueryContext,
  nowMs: number,
  afterAttemptId: string | null,
  limit: number,
): Promise<RunAttempt[]> {
  return select(
    tx,
    rows.ATTEMPTS,
    "WHERE executor = 'remote_worker' AND status IN ('claimed', 'starting', 'running') AND lease_expires_at_ms IS NOT NULL AND lease_expires_at_ms <= ? AND id > ? ORDER BY id LIMIT ?",
    [nowMs, afterAttemptId ?? "", cap(limit)],
  );
}

export async function listOrphanedAttempts(
  tx: QueryContext,
  executor: ExecutorType,
  nowMs: number,
  afterAttemptId: string | null,
  limit: number,
): Promise<RunAttempt[]> {
  const found = await tx.q(
    `SELECT ${rows.ATTEMPTS.columns.map((column) => `a.${column}`).join(", ")} FROM run_attempts a LEFT JOIN coordinators c ON c.node_id = a.owner_node_id
        WHERE a.executor = ${executorLiteral(executor)} AND a.status IN ('starting', 'running') AND a.owner_node_id IS NOT NULL AND a.error IS NULL
          AND (c.node_id IS NULL OR c.lease_expires_at_ms <= ?) AND a.id > ? ORDER BY a.id LIMIT ?`,
    [nowMs, afterAttemptId ?? "", cap(limit)],
  );
  return found.map(rows.ATTEMPTS.read);
}
