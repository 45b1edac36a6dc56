/**
 * A state dir's embedded store opened by the test itself, with no runtime on it: to prepare
 * rows before a runtime starts, and to read what a runtime left after it stopped.
 */
import { openConfiguredStore } from "../../runtimes/node/open-store.ts";
import type { Run, RunAttempt, RunEvent, StepRun } from "../../src/model.ts";
import type { SqlStore } from "../../storage/sql-store.ts";

/** The most events `readRunRecords` reads: more than any device test's run writes. */
const EVENTS_READ = 500;

export interface RunRecords {
  readonly run: Run | null;
  readonly steps: StepRun[];
  readonly attempts: RunAttempt[];
  readonly events: RunEvent[];
}

/** Opens the state dir's SQLite store the way `qlr serve` does (the test closes it). */
export function openStateDirStore(stateDir: string): Promise<SqlStore> {
  return openConfiguredStore({ kind: "sqlite", stateDir, databaseUrl: null, nowMs: Date.now() });
}

/** A run's rows in one transaction: the run, its steps, attempts and events. */
export function readRunRecords(store: SqlStore, runId: string): Promise<RunRecords> {
  return store.transaction(async (tx) => ({
    run: await tx.getRun(runId),
    steps: await tx.getSteps(runId),
    attempts: await tx.getAttempts(runId),
    events: await tx.listEvents(runId, 0, EVENTS_READ),
  }));
}

/** Reads a run straight from the store file, with no runtime running (the store must open cleanly). */
export async function readRunOffline(stateDir: string, runId: string): Promise<RunRecords> {
  const store = await openStateDirStore(stateDir);
  try {
    return await readRunRecords(store, runId);
  } finally {
    await store.close();
  }
}
