import {
  alertingRuns,
  alertingSteps,
  entriesForRun,
  entriesForStep,
  notifiersForRun,
  notifiersForStep,
  type NotificationEntry,
} from "../../src/notifications.ts";
import type { ChangeSet } from "../../src/model.ts";
import type { NotifierSpec } from "../../src/manifest/types.ts";
import type { NotificationListFilter, StoreTx } from "../../src/ports.ts";
import * as rows from "../rows.ts";
import {
  cap,
  insertSql,
  newestFirst,
  select,
  selectOne,
  updateOne,
  type QueryContext,
} from "./query-context.ts";

/**
 * The notification outbox: the alerts a change enqueues in its own transaction, and the
 * entries the notification stage delivers and the API lists.
 */

/** What `enqueueAlerts` reads through the transaction: a run, and the generation it ran with. */
type AlertReads = Pick<StoreTx, "getRun" | "getGeneration">;

/** Manifests whose task notifiers are kept (oldest dropped first). */
const TASK_NOTIFIERS_CACHE_SIZE = 32;
const TASK_NOTIFIERS_BY_DIGEST = new Map<string, Map<string, NotifierSpec[]>>();

/**
 * The outbox entries of runs that entered failed, timed_out or lost in this change, and of
 * workflow steps that entered failed or timed_out, written in its transaction: the alert
 * commits exactly when the transition does. The notifiers come from the run's own generation
 * (what it ran with), decided by the core.
 */
export async function enqueueAlerts(
  tx: QueryContext,
  reads: AlertReads,
  change: ChangeSet,
): Promise<void> {
  const entries: NotificationEntry[] = [];
  for (const run of alertingRuns(change)) {
    const generation = await reads.getGeneration(run.package, run.generation);
    if (generation === null) continue;
    entries.push(...entriesForRun(run, notifiersForRun(generation.manifest, run), run.updatedAtMs));
  }
  // A workflow step that ended failed or timed out: its task's notifiers, from the run's generation.
  for (const step of alertingSteps(change)) {
    const run =
      change.runs.find(({ after }) => after.id === step.runId)?.after ??
      (await reads.getRun(step.runId));
    if (run === null) continue;
    const notifiers = await taskNotifiers(tx, reads, run.package, run.generation, step.task);
    entries.push(...entriesForStep(run, step, notifiers, step.finishedAtMs ?? run.updatedAtMs));
  }
  for (const entry of entries) {
    // A run or a step enters an alerting status once, so the derived id is new; DO NOTHING
    // keeps a replayed change (a lost commit answer) from failing on it.
    await tx.q(
      `${insertSql("notifications", rows.NOTIFICATIONS.columns)} ON CONFLICT (id) DO NOTHING`,
      rows.NOTIFICATIONS.params(entry),
    );
  }
}

/**
 * A task's notifiers in one generation. A run whose steps fail one per transaction would
 * otherwise load and parse its whole manifest for each; the notifiers are cached by the
 * manifest's digest (content-addressed, so right for any database), bounded.
 */
async function taskNotifiers(
  tx: QueryContext,
  reads: AlertReads,
  packageName: string,
  generation: number,
  task: string,
): Promise<NotifierSpec[]> {
  const found = await tx.q<{ manifest_digest: string }>(
    "SELECT manifest_digest FROM generations WHERE package = ? AND generation = ?",
    [packageName, generation],
  );
  const digest = found[0]?.manifest_digest;
  if (digest === undefined) return [];
  let byTask = TASK_NOTIFIERS_BY_DIGEST.get(digest);
  if (byTask === undefined) {
    const loaded = await reads.getGeneration(packageName, generation);
    if (loaded === null) return [];
    byTask = new Map(
      loaded.manifest.tasks.map((spec) => [
        spec.name,
        notifiersForStep(loaded.manifest, { task: spec.name }),
      ]),
    );
    if (TASK_NOTIFIERS_BY_DIGEST.size >= TASK_NOTIFIERS_CACHE_SIZE)
      TASK_NOTIFIERS_BY_DIGEST.delete(TASK_NOTIFIERS_BY_DIGEST.keys().next().value ?? "");
    TASK_NOTIFIERS_BY_DIGEST.set(digest, byTask);
  }
  return byTask.get(task) ?? [];
}

export async function listDueNotifications(
  tx: QueryContext,
  nowMs: number,
  limit: number,
): Promise<NotificationEntry[]> {
  return select(
    tx,
    rows.NOTIFICATIONS,
    "WHERE state = 'pending' AND next_attempt_at_ms <= ? ORDER BY next_attempt_at_ms, id LIMIT ?",
    [nowMs, cap(limit)],
  );
}

export async function getNotification(
  tx: QueryContext,
  id: string,
): Promise<NotificationEntry | null> {
  return selectOne(tx, rows.NOTIFICATIONS, "WHERE id = ?", [id]);
}

export async function updateNotification(
  tx: QueryContext,
  entry: NotificationEntry,
  expectedVersion: number,
): Promise<void> {
  await updateOne(
    tx,
    "UPDATE notifications SET state = ?, attempts = ?, next_attempt_at_ms = ?, last_error = ?, updated_at_ms = ?, delivered_at_ms = ?, version = ? WHERE id = ? AND version = ? RETURNING id",
    [
      entry.state,
      entry.attempts,
      entry.nextAttemptAtMs,
      entry.lastError,
      entry.updatedAtMs,
      entry.deliveredAtMs,
      entry.version,
      entry.id,
      expectedVersion,
    ],
    () => `notification ${entry.id} changed since version ${expectedVersion}`,
  );
}

export async function listNotifications(
  tx: QueryContext,
  filter: NotificationListFilter,
): Promise<NotificationEntry[]> {
  return newestFirst(
    tx,
    rows.NOTIFICATIONS,
    { run_id: filter.runId, state: filter.state },
    filter.cursor,
    cap(filter.limit),
  );
}
