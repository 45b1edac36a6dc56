/**
 * Micro-timings of the parts one admission is made of, each repeated on its own, to split the
 * admission latency into costs a reader can act on: the bare transaction, the reads, the JSON
 * bodies parsed, the digests the core recomputes, and (file store) the journal's fdatasync.
 * Means over `iterations` repetitions after a short warm-up; these are not added up to the
 * admission figure (they overlap), they say what each part costs alone.
 */
import { closeSync, fdatasyncSync, openSync, rmSync, writeSync } from "node:fs";
import { join } from "node:path";
import { admitTaskAttempt } from "../../src/admission.ts";
import { canonicalJson } from "../../src/canonical-json.ts";
import { digestOf } from "../../src/digest.ts";
import {
  renormalize,
  verifyPlan,
  verifyReconciliationReceipt,
  verifyTaskDefinition,
} from "../../src/packages.ts";
import type { AdmissionCandidate } from "../../src/ports.ts";
import type { SqlStore } from "../../storage/sql-store.ts";
import type { SqlDriver } from "../../storage/driver.ts";
import * as rows from "../../storage/rows.ts";
import { now, round } from "./common.ts";

/** What the parts are timed on: a store, its driver and one admission candidate of it. */
export interface ComponentSubject {
  readonly store: SqlStore;
  readonly driver: SqlDriver;
  readonly candidate: AdmissionCandidate;
  /** How many times each part is repeated for its mean. */
  readonly iterations: number;
}

export interface ComponentTiming {
  readonly name: string;
  readonly meanMs: number;
  readonly note: string;
}

async function time(iterations: number, fn: () => unknown): Promise<number> {
  for (let index = 0; index < Math.min(50, iterations); index += 1) await fn();
  const startedAt = now();
  for (let index = 0; index < iterations; index += 1) await fn();
  return (now() - startedAt) / iterations;
}

/** Mean time of one statement alone, measured inside its own transaction (BEGIN/COMMIT and journaling excluded). */
async function statementTime(
  driver: SqlDriver,
  iterations: number,
  sql: string,
  params: () => (string | number | null)[],
): Promise<number> {
  let total = 0;
  for (let index = 0; index < iterations + 20; index += 1) {
    await driver.transaction(async (tx) => {
      const startedAt = now();
      await tx.query(sql, params());
      if (index >= 20) total += now() - startedAt;
    });
  }
  return total / iterations;
}

/**
 * Two statement experiments behind the admission's most expensive statements: the run update
 * as apply() issues it (every column, so every index of runs is maintained) against one that
 * sets only what an admission changes, and reading every step of the run against reading the
 * one step being admitted. Both write the values already stored, so nothing changes.
 */
export async function statementExperiments(subject: ComponentSubject): Promise<ComponentTiming[]> {
  const { store, driver, candidate, iterations } = subject;
  const run = await store.transaction((tx) => tx.getRun(candidate.runId));
  if (run === null) throw new Error("bench: candidate run missing");
  const rewrite = (sql: string): string => {
    if (driver.dialect !== "postgres") return sql;
    let index = 0;
    return sql.replace(/\?/g, () => `$${(index += 1)}`);
  };
  const all = rewrite(
    `UPDATE runs SET ${rows.RUNS.columns.map((column) => `${column} = ?`).join(", ")}, frontier_due = COALESCE(?, frontier_due) WHERE id = ? AND version = ? RETURNING id`,
  );
  const columnsButId = rows.RUNS.columns.filter((column) => column !== "id");
  const allButId = rewrite(
    `UPDATE runs SET ${columnsButId.map((column) => `${column} = ?`).join(", ")}, frontier_due = COALESCE(?, frontier_due) WHERE id = ? AND version = ? RETURNING id`,
  );
  const few = rewrite(
    "UPDATE runs SET version = ?, event_seq = ?, attempt_seq = ?, updated_at_ms = ? WHERE id = ? AND version = ? RETURNING id",
  );
  const stepsOfRun = rewrite(
    `SELECT ${rows.STEPS.columns.join(", ")} FROM step_runs WHERE run_id = ? ORDER BY position`,
  );
  const oneStep = rewrite(
    `SELECT ${rows.STEPS.columns.join(", ")} FROM step_runs WHERE run_id = ? AND id = ?`,
  );
  const mutations = await driver.transaction(async (tx) =>
    Number((await tx.query<{ n: number }>("SELECT COUNT(*) AS n FROM step_mutations"))[0]?.n ?? 0),
  );
  const context = `same values written back; statement time only; ${mutations} rows in step_mutations`;
  return [
    {
      name: "UPDATE runs, all 18 columns (as apply() does)",
      meanMs: round(
        await statementTime(driver, iterations, all, () => [
          ...rows.RUNS.params(run),
          null,
          run.id,
          run.version,
        ]),
      ),
      note: context,
    },
    {
      name: "UPDATE runs, all columns but id",
      meanMs: round(
        await statementTime(driver, iterations, allButId, () => [
          ...rows.RUNS.params(run).slice(1),
          null,
          run.id,
          run.version,
        ]),
      ),
      note: `${context}; isolates the cost of naming the primary key (a parent key of foreign keys) in SET`,
    },
    {
      name: "UPDATE runs, the 4 columns an admission changes",
      meanMs: round(
        await statementTime(driver, iterations, few, () => [
          run.version,
          run.eventSeq,
          run.attemptSeq,
          run.updatedAtMs,
          run.id,
          run.version,
        ]),
      ),
      note: context,
    },
    {
      name: "SELECT all step_runs of the run (as admit() does)",
      meanMs: round(await statementTime(driver, iterations, stepsOfRun, () => [candidate.runId])),
      note: "statement time only, rows materialized by the driver",
    },
    {
      name: "SELECT the one step_run being admitted",
      meanMs: round(
        await statementTime(driver, iterations, oneStep, () => [
          candidate.runId,
          candidate.stepRunId,
        ]),
      ),
      note: "statement time only",
    },
  ];
}

/** Store-dependent parts: the empty transaction and the admission's reads. */
export async function storeComponents(
  subject: ComponentSubject,
  nowMs: number,
): Promise<ComponentTiming[]> {
  const { store, driver, candidate, iterations } = subject;
  const results: ComponentTiming[] = [];
  const placeholder = driver.dialect === "postgres" ? "$1" : "?";
  results.push({
    name: "empty transaction",
    meanMs: round(await time(iterations, () => driver.transaction(() => Promise.resolve()))),
    note: "BEGIN + COMMIT through the driver (no statement, nothing journaled)",
  });
  results.push({
    name: "1-row write transaction",
    meanMs: round(
      await time(iterations, () =>
        driver.transaction((tx) =>
          tx.query(
            `UPDATE qlr_store_clock SET last_observed_ms = last_observed_ms WHERE id = ${placeholder}`,
            [1],
          ),
        ),
      ),
    ),
    note: "one UPDATE that changes a row: the file store journals and fdatasyncs it",
  });
  results.push({
    name: "admission reads",
    meanMs: round(
      await time(iterations, () =>
        store.transaction(async (tx) => {
          await tx.observe(nowMs);
          const run = await tx.getRun(candidate.runId);
          const steps = await tx.getSteps(candidate.runId);
          const step = steps.find((item) => item.id === candidate.stepRunId);
          if (run === null || step === undefined) return;
          if (run.planDigest !== null) await tx.getPlan(run.planDigest);
          await tx.getReconciliation(run.reconciliationDigest);
          await tx.getTaskDefinitionFor(run.reconciliationDigest, step.task);
          await tx.getAdmission(run.id, step.id, step.version);
        }),
      ),
    ),
    note: "the 7 reads admit() does, rows mapped and bodies JSON.parsed, in one read-only transaction",
  });
  return results;
}

/** Store-independent parts: the pure core and the JSON/digest work inside it. */
export async function coreComponents(
  subject: ComponentSubject,
  nowMs: number,
): Promise<ComponentTiming[]> {
  const { store, driver, candidate, iterations } = subject;
  const inputs = await store.transaction(async (tx) => {
    const run = await tx.getRun(candidate.runId);
    const step = (await tx.getSteps(candidate.runId)).find(
      (item) => item.id === candidate.stepRunId,
    );
    if (run === null || step === undefined || run.planDigest === null)
      throw new Error("bench: candidate run or step missing");
    const plan = await tx.getPlan(run.planDigest);
    const reconciliation = await tx.getReconciliation(run.reconciliationDigest);
    const definition = await tx.getTaskDefinitionFor(run.reconciliationDigest, step.task);
    if (plan === null || reconciliation === null || definition === null)
      throw new Error("bench: plan, reconciliation or definition missing");
    return { run, step, plan, reconciliation, definition };
  });
  const placeholder = driver.dialect === "postgres" ? "$1" : "?";
  const bodies = await driver.transaction(async (tx) => ({
    plan:
      (
        await tx.query<{ body: string }>(
          `SELECT body FROM workflow_plans WHERE digest = ${placeholder}`,
          [inputs.plan.digest],
        )
      )[0]?.body ?? "{}",
    reconciliation:
      (
        await tx.query<{ body: string }>(
          `SELECT body FROM reconciliation_receipts WHERE digest = ${placeholder}`,
          [inputs.reconciliation.digest],
        )
      )[0]?.body ?? "{}",
    definition:
      (
        await tx.query<{ body: string }>(
          `SELECT body FROM task_definitions WHERE revision = ${placeholder}`,
          [inputs.definition.revision],
        )
      )[0]?.body ?? "{}",
  }));
  const { digest: _planDigest, ...planBody } = inputs.plan;
  const results: ComponentTiming[] = [];
  const add = async (name: string, note: string, fn: () => unknown): Promise<void> => {
    results.push({ name, meanMs: round(await time(iterations, fn)), note });
  };
  await add(
    "admitTaskAttempt (pure core)",
    "the whole decision with the inputs in hand: verifications, ids, receipt digest, change set",
    () => admitTaskAttempt({ ...inputs, existing: null, nowMs }),
  );
  await add(
    "verifyPlan",
    `canonical JSON + sha256 of the plan (${canonicalJson(planBody).length} chars canonical)`,
    () => verifyPlan(inputs.plan),
  );
  await add("verifyReconciliationReceipt", "two digests: the receipt body and its items", () =>
    verifyReconciliationReceipt(inputs.reconciliation),
  );
  await add("verifyTaskDefinition", "renormalize the execution revision + definition digest", () =>
    verifyTaskDefinition(inputs.definition),
  );
  await add("renormalize", "execution revision digest", () =>
    renormalize(inputs.definition.execution),
  );
  await add("canonicalJson(plan)", "canonical JSON text of the plan only", () =>
    canonicalJson(planBody),
  );
  await add("digestOf(plan)", "canonical JSON + sha256 of the plan", () => digestOf(planBody));
  await add(
    "JSON.parse of the 3 bodies",
    `plan ${bodies.plan.length} + reconciliation ${bodies.reconciliation.length} + definition ${bodies.definition.length} chars`,
    () => {
      JSON.parse(bodies.plan);
      JSON.parse(bodies.reconciliation);
      JSON.parse(bodies.definition);
    },
  );
  return results;
}

/** The raw cost of what the file store's journal does per commit: append a record, fdatasync. */
export async function fdatasyncComponent(
  dataRoot: string,
  recordBytes: number,
  iterations: number,
): Promise<ComponentTiming> {
  const path = join(dataRoot, `fdatasync-probe-${process.pid}.log`);
  const fd = openSync(path, "a");
  const record = new Uint8Array(Math.max(1, Math.round(recordBytes))).fill(0x61);
  try {
    const meanMs = await time(iterations, () => {
      writeSync(fd, record);
      fdatasyncSync(fd);
    });
    return {
      name: "append + fdatasync (raw fs)",
      meanMs: round(meanMs),
      note: `${record.length}-byte append to a growing file, then fdatasync, without SQLite`,
    };
  } finally {
    closeSync(fd);
    rmSync(path, { force: true });
  }
}
