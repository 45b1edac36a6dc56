import { existsSync } from "node:fs";
/**
 * Readers of the launcher's state files (journal records and receipts) as the tests see them,
 * and the exact replay check the crash and stop tests share.
 */
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { recordOf } from "../../runtimes/node/launcher/record-file.ts";
import { TERMINAL_ATTEMPT } from "./api-client.ts";
import type { RunDetail } from "./api-views.ts";

export interface JournalFile {
  readonly attemptId: string;
  readonly startedAtMs: number;
  readonly bootId: string;
}

export interface ReceiptFile {
  readonly attemptId: string;
  readonly startedAtMs: number;
  readonly finishedAtMs: number;
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly stopReason: string | null;
  readonly spawnError: string | null;
  readonly mac: string;
}

export function receiptPath(stateDir: string, attemptId: string): string {
  return join(stateDir, "receipts", `${attemptId}.json`);
}

export async function readJournal(
  stateDir: string,
  attemptId: string,
): Promise<JournalFile | null> {
  return (await readRecord(
    join(stateDir, "journal", `${attemptId}.json`),
    attemptId,
  )) as JournalFile | null;
}

export async function readReceipt(
  stateDir: string,
  attemptId: string,
): Promise<ReceiptFile | null> {
  return (await readRecord(receiptPath(stateDir, attemptId), attemptId)) as ReceiptFile | null;
}

/**
 * The attempt's record from a launcher record file, which records created together share (a
 * line each, `recordOf`); null when the file is missing or holds no record of the attempt.
 */
async function readRecord(path: string, attemptId: string): Promise<unknown> {
  try {
    const own = recordOf(await readFile(path, "utf8"), attemptId);
    return own.ok ? own.record : null;
  } catch {
    return null;
  }
}

/** The journal's file names (every attempt that crossed the pre-spawn barrier). */
export async function journalNames(stateDir: string): Promise<string[]> {
  return (await readdir(join(stateDir, "journal")).catch(() => [] as string[])).sort();
}

/**
 * Every attempt that crossed the pre-spawn barrier (has a journal record) ended exactly as its
 * authenticated receipt says: terminal, the receipt's exit code and signal, and the journal's
 * pre-spawn startedAtMs (ADR-0229 §5) — no lost completion, no completion invented. Attempts
 * without a journal never spawned and must not be running.
 */
export async function expectReceiptsHonoured(
  stateDir: string,
  detail: RunDetail,
  options: {
    /**
     * The supervisor was SIGKILLed: an attempt it spawned may have no receipt, and must then be
     * `lost` (settled on trusted not-running evidence), never completed with invented facts.
     */
    readonly supervisorKilled?: boolean;
    /** Attempts of other runs on the same state dir, whose journal records are theirs. */
    readonly otherAttemptIds?: readonly string[];
  } = {},
): Promise<void> {
  const names = await journalNames(stateDir);
  const journaled = new Set(names.map((name) => name.replace(/\.json$/, "")));
  for (const attempt of detail.attempts) {
    if (!journaled.has(attempt.id)) {
      if (attempt.status === "running" || attempt.status === "starting")
        throw new Error(`attempt ${attempt.id} is ${attempt.status} without a journal record`);
      continue;
    }
    const journal = await readJournal(stateDir, attempt.id);
    const receipt = await readReceipt(stateDir, attempt.id);
    // Journaled but never spawned (no spawn record, the second barrier): no receipt can exist,
    // and the attempt must have been lost before the start barrier.
    if (receipt === null && !existsSync(join(stateDir, "spawns", `${attempt.id}.json`))) {
      if (attempt.status !== "lost")
        throw new Error(`attempt ${attempt.id} was never spawned but is ${attempt.status}`);
      continue;
    }
    if (receipt === null && options.supervisorKilled === true) {
      if (attempt.status !== "lost")
        throw new Error(`attempt ${attempt.id} has no receipt but is ${attempt.status}`);
      continue;
    }
    if (journal === null || receipt === null)
      throw new Error(
        `attempt ${attempt.id}: journal ${journal === null ? "missing" : "present"}, receipt ${receipt === null ? "missing" : "present"}`,
      );
    const facts = {
      status: TERMINAL_ATTEMPT.has(attempt.status),
      exitCode: attempt.exitCode,
      signal: attempt.signal,
      startedAtMs: attempt.startedAtMs,
      finishedAtMs: attempt.finishedAtMs,
    };
    const expected = {
      status: true,
      exitCode: receipt.exitCode,
      signal: receipt.signal,
      startedAtMs: journal.startedAtMs,
      finishedAtMs: receipt.finishedAtMs,
    };
    if (
      JSON.stringify(facts) !== JSON.stringify(expected) ||
      receipt.startedAtMs !== journal.startedAtMs
    ) {
      throw new Error(
        `attempt ${attempt.id} (${attempt.status}) does not match its receipt: ${JSON.stringify(facts)} vs ${JSON.stringify(expected)}`,
      );
    }
  }
  // No journal record belongs to an attempt the store does not know.
  const known = new Set([
    ...detail.attempts.map((attempt) => attempt.id),
    ...(options.otherAttemptIds ?? []),
  ]);
  for (const id of journaled)
    if (!known.has(id))
      throw new Error(`journal record ${id} names no attempt of run ${detail.run.id}`);
}
