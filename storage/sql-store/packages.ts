import type {
  Generation,
  ReconciliationReceipt,
  TaskDefinition,
  WorkflowPlan,
} from "../../src/packages.ts";
import type { PackageHead } from "../../src/ports.ts";
import type { ScheduleState } from "../../src/schedules.ts";
import type { SqlParam } from "../driver.ts";
import * as rows from "../rows.ts";
import type { ImmutableCache } from "./immutable-cache.ts";
import {
  assignmentsSql,
  cap,
  insertSql,
  select,
  selectOne,
  updateOne,
  type QueryContext,
} from "./query-context.ts";
import type { StoreClock } from "./store-clock.ts";

/**
 * A package's rows: its head, its generations with their reconciliation receipts, task
 * definitions and workflow plans (JSON bodies read by key, the immutable ones kept parsed in
 * the store's `ImmutableCache`), and its schedules.
 */

/**
 * The JSON bodies a transaction reads by key: the table and the columns that name one row.
 * `cached`: the parsed body is kept across transactions (`ImmutableCache`), for keys whose row
 * is written once and never changes (a digest, or a reconciliation digest and a task name).
 */
const BODY_READS = {
  plan: { table: "workflow_plans", keys: ["digest"], cached: true },
  planOfWorkflow: {
    table: "workflow_plans",
    keys: ["package", "generation", "workflow"],
    cached: false,
  },
  reconciliation: { table: "reconciliation_receipts", keys: ["digest"], cached: true },
  // A revision names its definition's digest (`qltd:v1:<generation>:<digest>`): one body only.
  definition: { table: "task_definitions", keys: ["revision"], cached: true },
  definitionOfTask: {
    table: "task_definitions",
    keys: ["reconciliation_digest", "task"],
    cached: true,
  },
} as const satisfies Record<
  string,
  { readonly table: string; readonly keys: readonly string[]; readonly cached: boolean }
>;
export type BodyKind = keyof typeof BODY_READS;

/** The parsed JSON `body` of the row `kind` names by `values`; null when there is none. */
export async function readBody<T>(
  tx: QueryContext,
  bodies: ImmutableCache,
  kind: BodyKind,
  values: readonly SqlParam[],
): Promise<T | null> {
  const read = BODY_READS[kind];
  const key = `${kind}\u0000${values.join("\u0000")}`;
  if (read.cached) {
    const cached = bodies.get<T>(key);
    if (cached !== undefined) return cached;
  }
  const found = await tx.q<{ body: string }>(
    `SELECT body FROM ${read.table} WHERE ${read.keys.map((column) => `${column} = ?`).join(" AND ")}`,
    values,
  );
  if (found[0] === undefined) return null;
  const parsed = JSON.parse(found[0].body) as T;
  return read.cached ? bodies.set(key, parsed) : parsed;
}

export async function getPackageHead(tx: QueryContext, name: string): Promise<PackageHead | null> {
  return selectOne(tx, rows.PACKAGE_HEADS, "WHERE name = ?", [name]);
}

export async function listPackageHeads(tx: QueryContext, limit: number): Promise<PackageHead[]> {
  return select(tx, rows.PACKAGE_HEADS, "ORDER BY name LIMIT ?", [cap(limit)]);
}

export async function listGenerations(
  tx: QueryContext,
  name: string,
  limit: number,
): Promise<Omit<Generation, "manifest">[]> {
  const found = await tx.q<{
    package: string;
    generation: number;
    manifest_digest: string;
    created_at_ms: number;
  }>(
    "SELECT package, generation, manifest_digest, created_at_ms FROM generations WHERE package = ? ORDER BY generation DESC LIMIT ?",
    [name, cap(limit)],
  );
  return found.map((row) => ({
    package: row.package,
    generation: Number(row.generation),
    manifestDigest: row.manifest_digest as Generation["manifestDigest"],
    createdAtMs: Number(row.created_at_ms),
  }));
}

export async function getGeneration(
  tx: QueryContext,
  name: string,
  generation: number,
): Promise<Generation | null> {
  const found = await tx.q<{
    package: string;
    generation: number;
    manifest_digest: string;
    manifest: string;
    created_at_ms: number;
  }>(
    "SELECT package, generation, manifest_digest, manifest, created_at_ms FROM generations WHERE package = ? AND generation = ?",
    [name, generation],
  );
  const row = found[0];
  if (row === undefined) return null;
  return {
    package: row.package,
    generation: Number(row.generation),
    manifestDigest: row.manifest_digest as Generation["manifestDigest"],
    manifest: JSON.parse(row.manifest) as Generation["manifest"],
    createdAtMs: Number(row.created_at_ms),
  };
}

export async function putGeneration(
  tx: QueryContext,
  clock: StoreClock,
  generation: Generation,
  reconciliation: ReconciliationReceipt,
  definitions: readonly TaskDefinition[],
  plans: readonly WorkflowPlan[],
  previousGeneration: number | null,
): Promise<void> {
  await tx.q(
    "INSERT INTO generations (package, generation, manifest_digest, reconciliation_digest, manifest, created_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
    [
      generation.package,
      generation.generation,
      generation.manifestDigest,
      reconciliation.digest,
      JSON.stringify(generation.manifest),
      generation.createdAtMs,
    ],
  );
  await tx.q(
    "INSERT INTO reconciliation_receipts (digest, package, generation, body) VALUES (?, ?, ?, ?)",
    [
      reconciliation.digest,
      reconciliation.package,
      reconciliation.generation,
      JSON.stringify(reconciliation),
    ],
  );
  for (const definition of definitions) {
    await tx.q(
      "INSERT INTO task_definitions (revision, reconciliation_digest, task, body) VALUES (?, ?, ?, ?)",
      [definition.revision, reconciliation.digest, definition.task, JSON.stringify(definition)],
    );
  }
  for (const plan of plans) {
    await tx.q(
      "INSERT INTO workflow_plans (digest, package, generation, workflow, body) VALUES (?, ?, ?, ?, ?)",
      [plan.digest, plan.package, plan.generation, plan.workflow, JSON.stringify(plan)],
    );
  }
  const head: PackageHead = {
    package: generation.package,
    generation: generation.generation,
    manifestDigest: generation.manifestDigest,
    reconciliationDigest: reconciliation.digest,
    updatedAtMs: generation.createdAtMs,
  };
  if (previousGeneration === null) {
    await tx.q(insertSql("packages", rows.PACKAGE_HEADS.columns), rows.PACKAGE_HEADS.params(head));
  } else {
    // A new generation rewrites every column but the package's name.
    const rewritten = rows.PACKAGE_HEADS.columnsBut("name");
    await updateOne(
      tx,
      `UPDATE packages SET ${assignmentsSql(rewritten)} WHERE name = ? AND generation = ? RETURNING name`,
      [...rows.PACKAGE_HEADS.params(head, rewritten), head.package, previousGeneration],
      () => `package ${generation.package} moved past generation ${previousGeneration}`,
    );
  }
  await clock.advanceWatermark(generation.createdAtMs);
}

export async function getSchedules(
  tx: QueryContext,
  packageName: string,
): Promise<ScheduleState[]> {
  return select(tx, rows.SCHEDULES, "WHERE package = ? ORDER BY name", [packageName]);
}

export async function listDueSchedules(
  tx: QueryContext,
  nowMs: number,
  limit: number,
): Promise<ScheduleState[]> {
  return select(
    tx,
    rows.SCHEDULES,
    "WHERE next_fire_at_ms IS NOT NULL AND next_fire_at_ms <= ? ORDER BY next_fire_at_ms, package, name LIMIT ?",
    [nowMs, cap(limit)],
  );
}

export async function putSchedule(
  tx: QueryContext,
  state: ScheduleState,
  expectedVersion: number | null,
): Promise<void> {
  if (expectedVersion === null) {
    await tx.q(insertSql("schedules", rows.SCHEDULES.columns), rows.SCHEDULES.params(state));
    return;
  }
  await updateOne(
    tx,
    `UPDATE schedules SET ${assignmentsSql(rows.SCHEDULES.columns)} WHERE package = ? AND name = ? AND version = ? RETURNING name`,
    [...rows.SCHEDULES.params(state), state.package, state.name, expectedVersion],
    () => `schedule ${state.package}/${state.name} changed since version ${expectedVersion}`,
  );
}

export async function deleteSchedule(
  tx: QueryContext,
  packageName: string,
  name: string,
): Promise<void> {
  await tx.q("DELETE FROM schedules WHERE package = ? AND name = ?", [packageName, name]);
}
