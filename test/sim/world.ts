import type { SqlDriver } from "../../storage/driver.ts";
import { countOrphanRows } from "../support/store-dump.ts";
import * as rows from "../../storage/rows.ts";

/**
 * Everything the invariant checkers look at, read straight from the database: each table's
 * rows typed by the mapper that reads it, so the world cannot drift from the store.
 */
export type World = Awaited<ReturnType<typeof readWorld>>;

/** Reads the rows of one package's runs (a store may hold many simulations). */
export async function readWorld(
  driver: SqlDriver,
  packageName: string,
  spawnCounts: ReadonlyMap<string, number>,
  idempotentTasks: ReadonlySet<string>,
) {
  const p = driver.dialect === "postgres" ? "$1" : "?";
  const mine = `run_id IN (SELECT id FROM runs WHERE package = ${p})`;
  return driver.transaction(async (tx) => ({
    runs: (
      await tx.query(
        `SELECT ${rows.RUNS.columns.join(", ")} FROM runs WHERE package = ${p} ORDER BY id`,
        [packageName],
      )
    ).map(rows.RUNS.read),
    steps: (
      await tx.query(
        `SELECT ${rows.STEPS.columns.join(", ")} FROM step_runs WHERE ${mine} ORDER BY run_id, position`,
        [packageName],
      )
    ).map(rows.STEPS.read),
    attempts: (
      await tx.query(
        `SELECT ${rows.ATTEMPTS.columns.join(", ")} FROM run_attempts WHERE ${mine} ORDER BY run_id, number`,
        [packageName],
      )
    ).map(rows.ATTEMPTS.read),
    events: (
      await tx.query(
        `SELECT run_id, seq, id, type, at_ms, step_run_id, attempt_id, data FROM run_events WHERE ${mine} ORDER BY run_id, seq`,
        [packageName],
      )
    ).map(rows.EVENTS.read),
    mutations: (
      await tx.query(
        `SELECT run_id, step_run_id, version, from_status, to_status, from_digest, to_digest, event_seq, at_ms FROM step_mutations WHERE ${mine} ORDER BY run_id, event_seq, step_run_id`,
        [packageName],
      )
    ).map(rows.MUTATIONS.read),
    admissions: (
      await tx.query<rows.AdmissionRow>(
        rows.admissionSelect(
          `WHERE a.${mine} ORDER BY a.run_id, a.step_run_id, a.step_run_version`,
        ),
        [packageName],
      )
    ).map(rows.toAdmission),
    /** Spawns per attempt id, as counted by the executor. */
    spawnCounts,
    /** Whether each task (by package/name) is declared idempotent. */
    idempotentTasks,
    /** Rows anywhere in the store that name a run (or step run) that no longer exists. */
    orphanRows: await countOrphanRows(tx),
  }));
}
