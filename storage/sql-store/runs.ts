import type { AdmissionReceipt, Run, RunAttempt, StepMutation, StepRun } from "../../src/model.ts";
import { QlrError } from "../../src/errors.ts";
import * as rows from "../rows.ts";
import { admissionKey, type RowOfRun, type RowsOfRuns } from "./transaction-rows.ts";
import {
  keyList,
  MAX_BOUND_PARAMETERS,
  MAX_PAGE,
  select,
  selectOne,
  type QueryContext,
} from "./query-context.ts";

/**
 * A run's own rows read by id or by run: the run, its steps, attempts, admission receipts and
 * step mutations. Each is read once a transaction and then answered from the rows it knows
 * (see `TransactionRows`); `preloadRuns` reads a page's runs in a few statements.
 */

/** Rows of several runs read in one statement, remembered as each run's whole list in the order read. */
function rememberByRun<T extends RowOfRun>(
  known: RowsOfRuns<T>,
  runIds: readonly string[],
  found: readonly T[],
): void {
  const byRun = new Map<string, T[]>(runIds.map((runId) => [runId, []]));
  for (const row of found) byRun.get(row.runId)?.push(row);
  for (const [runId, ofRun] of byRun) known.rememberOfRun(runId, ofRun);
}

/**
 * Four statements per chunk of runs (runs, steps, attempts, receipts) instead of one per row
 * and item. The reads are the ones the page's items make one by one (a run read whole, or
 * an attempt with its run, step and receipt), so on PostgreSQL they take no predicate lock
 * the items would not take; a run already read in this transaction is not read again. The
 * steps and receipts of a run whose row is the one an earlier commit knew them with, and its
 * attempts while none is a remote worker's, are lent by `RunRowsByVersion` instead of read:
 * the run row read here still stands for them.
 */
export async function preloadRuns(tx: QueryContext, runIds: readonly string[]): Promise<void> {
  const unread = [...new Set(runIds)].filter((runId) => !tx.known.knowsWholeRun(runId));
  // Bounded: one pass per MAX_BOUND_PARAMETERS runs of a page the caller already bounds.
  for (let start = 0; start < unread.length; start += MAX_BOUND_PARAMETERS) {
    const chunk = unread.slice(start, start + MAX_BOUND_PARAMETERS);
    const byId = keyList(tx, chunk);
    const found = await select(tx, rows.RUNS, `WHERE ${byId.where("id")}`, byId.params);
    const runsById = new Map(found.map((run) => [run.id, run]));
    for (const runId of chunk) tx.known.rememberRun(runId, runsById.get(runId) ?? null);
    // Only a workflow run has steps, and so admission receipts (each names a step): an
    // ordinary run's are known empty without asking (a page of ordinary runs saves two round
    // trips on PostgreSQL). A run's kind never changes. A run whose row has not moved since a
    // commit that knew it whole lends its steps and receipts (PostgreSQL, `RunRowsByVersion`).
    const kept = tx.known.kept;
    const lent = new Map<string, "attempts too" | "steps and receipts" | "none">();
    if (kept !== null)
      for (const run of found)
        if (run.kind === "workflow") lent.set(run.id, kept.lend(run, tx.known));
    const unlent =
      lent.size === 0 ? chunk : chunk.filter((runId) => (lent.get(runId) ?? "none") === "none");
    const attemptsUnlent =
      lent.size === 0 ? chunk : chunk.filter((runId) => lent.get(runId) !== "attempts too");
    const withSteps = unlent.filter((runId) => runsById.get(runId)?.kind === "workflow");
    // One list for the steps and the receipts: both are read by the same runs.
    const stepRuns = keyList(tx, withSteps);
    const steps =
      withSteps.length === 0
        ? []
        : await select(
            tx,
            rows.STEPS,
            `WHERE ${stepRuns.where("run_id")} ORDER BY run_id, position`,
            stepRuns.params,
          );
    rememberByRun(tx.known.steps, unlent, steps);
    const attemptRuns = keyList(tx, attemptsUnlent);
    const attempts =
      attemptsUnlent.length === 0
        ? []
        : await select(
            tx,
            rows.ATTEMPTS,
            `WHERE ${attemptRuns.where("run_id")} ORDER BY run_id, number`,
            attemptRuns.params,
          );
    rememberByRun(tx.known.attempts, attemptsUnlent, attempts);
    const receipts =
      withSteps.length === 0
        ? []
        : await tx.q<rows.AdmissionRow>(
            rows.admissionSelect(`WHERE ${stepRuns.where("a.run_id")}`),
            stepRuns.params,
          );
    const bodiesByRun = new Map<string, Map<string, string>>(
      unlent.map((runId) => [runId, new Map()]),
    );
    for (const row of receipts) {
      const receipt = rows.toAdmission(row);
      bodiesByRun
        .get(receipt.runId)
        ?.set(
          admissionKey(receipt.runId, receipt.stepRunId, receipt.stepRunVersion),
          JSON.stringify(receipt),
        );
    }
    for (const [runId, bodies] of bodiesByRun) tx.known.rememberAdmissionsOfRun(runId, bodies);
  }
}

export async function getRun(tx: QueryContext, runId: string): Promise<Run | null> {
  const known = tx.known.run(runId);
  if (known !== undefined) return known;
  const run = await selectOne(tx, rows.RUNS, "WHERE id = ?", [runId]);
  tx.known.rememberRun(runId, run);
  return run;
}

export async function getRunByIdempotencyKey(tx: QueryContext, key: string): Promise<Run | null> {
  return selectOne(tx, rows.RUNS, "WHERE idempotency_key = ?", [key]);
}

export async function getSteps(tx: QueryContext, runId: string): Promise<StepRun[]> {
  return rowsOfRun(tx, rows.STEPS, tx.known.steps, runId, "position");
}

export async function getStep(tx: QueryContext, stepRunId: string): Promise<StepRun | null> {
  return rowById(tx, rows.STEPS, tx.known.steps, stepRunId);
}

export async function getAttempts(tx: QueryContext, runId: string): Promise<RunAttempt[]> {
  return rowsOfRun(tx, rows.ATTEMPTS, tx.known.attempts, runId, "number");
}

export async function getAttempt(tx: QueryContext, attemptId: string): Promise<RunAttempt | null> {
  return rowById(tx, rows.ATTEMPTS, tx.known.attempts, attemptId);
}

/** A run's rows of `table` ordered by `orderBy`, read once a transaction (see `TransactionRows`). */
async function rowsOfRun<T extends RowOfRun>(
  tx: QueryContext,
  table: rows.RowTable<T>,
  known: RowsOfRuns<T>,
  runId: string,
  orderBy: string,
): Promise<T[]> {
  const remembered = known.ofRun(runId);
  if (remembered !== undefined) return remembered;
  const found = await select(tx, table, `WHERE run_id = ? ORDER BY ${orderBy}`, [runId]);
  known.rememberOfRun(runId, found);
  return known.ofRun(runId) ?? found;
}

/** The row of `table` with `id`, read once a transaction (see `TransactionRows`). */
async function rowById<T extends RowOfRun>(
  tx: QueryContext,
  table: rows.RowTable<T>,
  known: RowsOfRuns<T>,
  id: string,
): Promise<T | null> {
  const remembered = known.get(id);
  if (remembered !== undefined) return remembered;
  const found = await selectOne(tx, table, "WHERE id = ?", [id]);
  if (found !== null) known.remember(found);
  return found;
}

export async function getAdmission(
  tx: QueryContext,
  runId: string,
  stepRunId: string,
  stepRunVersion: number,
): Promise<AdmissionReceipt | null> {
  const key = admissionKey(runId, stepRunId, stepRunVersion);
  const known = tx.known.admission(runId, key);
  if (known !== undefined) return known === null ? null : (JSON.parse(known) as AdmissionReceipt);
  const found = await tx.q<rows.AdmissionRow>(
    rows.admissionSelect("WHERE a.run_id = ? AND a.step_run_id = ? AND a.step_run_version = ?"),
    [runId, stepRunId, stepRunVersion],
  );
  const receipt = found[0] === undefined ? null : rows.toAdmission(found[0]);
  tx.known.rememberAdmission(runId, key, receipt === null ? null : JSON.stringify(receipt));
  return receipt;
}

export async function existingAttemptIds(
  tx: QueryContext,
  attemptIds: readonly string[],
): Promise<string[]> {
  if (attemptIds.length === 0) return [];
  if (attemptIds.length > MAX_PAGE)
    throw new QlrError(
      "invalid_request",
      `at most ${MAX_PAGE} attempt ids per call, got ${attemptIds.length}`,
    );
  const byId = keyList(tx, attemptIds);
  const found = await tx.q<{ id: string }>(
    `SELECT id FROM run_attempts WHERE ${byId.where("id")}`,
    byId.params,
  );
  return found.map((row) => String(row.id));
}

export async function listMutations(tx: QueryContext, runId: string): Promise<StepMutation[]> {
  return select(tx, rows.MUTATIONS, "WHERE run_id = ? ORDER BY event_seq, step_run_id", [runId]);
}
