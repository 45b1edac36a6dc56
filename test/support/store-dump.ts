/** "Nothing written" made checkable: every row of the schema's tables as one comparable text. */
import type { SqlStore } from "../../storage/sql-store.ts";
import type { SqlDriver, SqlTx } from "../../storage/driver.ts";

/** Every table of the schema, read in a fixed order for before/after comparisons. */
export const DUMP_TABLES = [
  "runs",
  "step_runs",
  "run_attempts",
  "run_events",
  "step_mutations",
  "admission_receipts",
  "packages",
  "generations",
  "reconciliation_receipts",
  "task_definitions",
  "workflow_plans",
  "schedules",
  "qlr_store_clock",
  "qlr_schema",
] as const;

/** Every row of every table in `DUMP_TABLES`, in one transaction, as one text. */
export async function dumpTables(driver: SqlDriver): Promise<string> {
  return driver.transaction(async (tx) => {
    const parts: string[] = [];
    for (const table of DUMP_TABLES) {
      const rows = await tx.query(`SELECT * FROM ${table} ORDER BY 1, 2`);
      parts.push(`-- ${table} (${rows.length})`, ...rows.map((row) => JSON.stringify(row)));
    }
    return parts.join("\n");
  });
}

/** One run's rows and events, for before/after checks that must not see other runs' writes. */
export async function runRows(store: SqlStore, runId: string): Promise<unknown> {
  return store.transaction(async (tx) => ({
    run: await tx.getRun(runId),
    steps: await tx.getSteps(runId),
    attempts: await tx.getAttempts(runId),
    events: await tx.listEvents(runId, 0, 500),
    mutations: await tx.listMutations(runId),
  }));
}

/** The tables whose rows belong to one run (each row carries its `run_id`), parents first. */
export const RUN_CHILD_TABLES = [
  "step_runs",
  "run_attempts",
  "admission_receipts",
  "run_events",
  "step_mutations",
] as const;

/** The tables whose rows may name a step run (`step_run_id`). */
const STEP_CHILD_TABLES = ["run_attempts", "admission_receipts", "step_mutations"] as const;

/**
 * The rows that name a run or a step run that does not exist (what foreign keys would refuse;
 * PostgreSQL's schema has none for these since migration 0014, so this is the check): a run's
 * rows whose run is gone, and attempts, receipts and mutations whose step is gone. Zero in a
 * consistent store.
 */
export async function countOrphanRows(tx: SqlTx): Promise<number> {
  const count = async (sql: string): Promise<number> =>
    Number((await tx.query<{ n: number }>(sql))[0]?.n ?? 0);
  let total = 0;
  for (const table of RUN_CHILD_TABLES)
    total += await count(
      `SELECT COUNT(*) AS n FROM ${table} t WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = t.run_id)`,
    );
  for (const table of STEP_CHILD_TABLES)
    total += await count(
      `SELECT COUNT(*) AS n FROM ${table} t WHERE t.step_run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM step_runs s WHERE s.id = t.step_run_id)`,
    );
  return total;
}
