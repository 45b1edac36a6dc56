/**
 * The history checker of the crash matrix: after a run ended on a state dir that lived through
 * SIGKILLs, its whole history (the store's attempts and events, the launcher's journal,
 * spawn records and receipts, and the marker file every task appends to when it really runs)
 * must be an exact replay:
 *
 * - the run and every step ended as expected;
 * - no step spawned more often than expected (the marker file counts real process starts), and
 *   every recorded pid is one of those processes;
 * - no lost completion: every journaled attempt ended exactly as its authenticated receipt says;
 * - one admission per attempt: one `workflow.task_attempt_admitted` event per attempt, naming it;
 * - one terminal transition per attempt, and every attempt terminal;
 * - stop intents once: at most one `attempt.stop_requested` per attempt, as many as expected;
 * - events contiguous: seq 1..n without a gap or a repeat;
 * - nothing left running: every process the tasks started is gone.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { expect } from "vitest";
import { type Api, TERMINAL_ATTEMPT } from "./api-client.ts";
import type { EventView, RunDetail } from "./api-views.ts";
import { waitUntilGone } from "./proc.ts";
import type { Scratch } from "./scratch.ts";
import { expectReceiptsHonoured } from "./state-files.ts";

export interface ReplayExpectation {
  readonly run: string;
  /** Step name → final status. */
  readonly steps: Readonly<Record<string, string>>;
  /** Marker label → how many real processes it started (absent labels: none). */
  readonly spawns: Readonly<Record<string, number>>;
  /** Other runs on the same state dir (a rerun's original): their processes and files are theirs. */
  readonly otherRuns?: readonly RunDetail[];
  /**
   * How many stop intents the run recorded (`attempt.stop_requested` for cancel and shutdown,
   * `workflow.task_timeout_requested` for a deadline); default 0.
   */
  readonly stopRequests?: number;
  /** The resident supervisor was SIGKILLed: a spawned attempt may end `lost` without a receipt. */
  readonly supervisorKilled?: boolean;
}

/** One line per attempt: step, number, status, exit, signal, stop reason and error. */
function describeAttempts(detail: RunDetail): string {
  const stepNames = new Map(detail.steps.map((step) => [step.id, step.name]));
  const lines = detail.attempts.map(
    (attempt) =>
      `${stepNames.get(attempt.stepRunId ?? "") ?? "?"}#${attempt.number} ${attempt.status} exit=${attempt.exitCode} signal=${attempt.signal} stop=${attempt.stopReason} error=${attempt.error ?? "-"}`,
  );
  return `run ${detail.run.id} ${detail.run.status}; attempts:\n${lines.join("\n")}`;
}

const STOP_EVENTS: ReadonlySet<string> = new Set([
  "attempt.stop_requested",
  "workflow.task_timeout_requested",
]);

/** Checks the run's full history against the rules above; returns its events for case-specific checks. */
export async function expectExactReplay(
  dir: Scratch,
  api: Api,
  detail: RunDetail,
  expected: ReplayExpectation,
): Promise<EventView[]> {
  // A wrong ending names every attempt's story, so a failure seen once can be explained.
  const story = describeAttempts(detail);
  expect(detail.run.status, story).toBe(expected.run);
  expect(Object.fromEntries(detail.steps.map((step) => [step.name, step.status])), story).toEqual(
    expected.steps,
  );

  // Real process starts, per label, against the expectation; each recorded pid is one of them.
  const spawns = await dir.spawns();
  const counted: Record<string, number> = {};
  for (const spawn of spawns) counted[spawn.label] = (counted[spawn.label] ?? 0) + 1;
  expect(counted).toEqual(expected.spawns);
  const spawnedPids = new Set(spawns.map((spawn) => spawn.pid));
  for (const attempt of detail.attempts)
    if (attempt.pid !== null) expect(spawnedPids.has(attempt.pid)).toBe(true);
  // As many attempts with a spawn record (the supervisor's record right before the spawn) as
  // real starts of the run's steps: no process without an attempt, no attempt spawned twice.
  const withSpawnRecord = detail.attempts.filter((attempt) =>
    existsSync(join(dir.stateDir, "spawns", `${attempt.id}.json`)),
  );
  const otherAttempts = (expected.otherRuns ?? []).flatMap((other) => other.attempts);
  const spawnedByOtherRuns = otherAttempts.filter((attempt) =>
    existsSync(join(dir.stateDir, "spawns", `${attempt.id}.json`)),
  ).length;
  expect(withSpawnRecord).toHaveLength(spawns.length - spawnedByOtherRuns);

  await expectReceiptsHonoured(dir.stateDir, detail, {
    supervisorKilled: expected.supervisorKilled === true,
    otherAttemptIds: otherAttempts.map((attempt) => attempt.id),
  });

  const events = await allEvents(api, detail.run.id);
  // Contiguous from 1.
  expect(events.map((event) => event.seq)).toEqual(events.map((_, index) => index + 1));
  // One admission per attempt, naming it.
  const admitted = events
    .filter((event) => event.type === "workflow.task_attempt_admitted")
    .map((event) => event.attemptId);
  expect([...admitted].sort()).toEqual(detail.attempts.map((attempt) => attempt.id).sort());
  for (const attempt of detail.attempts) {
    expect(TERMINAL_ATTEMPT.has(attempt.status)).toBe(true);
    const terminal = events.filter(
      (event) =>
        event.attemptId === attempt.id &&
        event.type === "attempt.status_changed" &&
        TERMINAL_ATTEMPT.has(String(event.data.to)),
    );
    expect(terminal.map((event) => event.data.to)).toEqual([attempt.status]);
  }
  // Stop intents once.
  const stops = events.filter((event) => STOP_EVENTS.has(event.type));
  expect(new Set(stops.map((event) => event.attemptId)).size).toBe(stops.length);
  expect(stops).toHaveLength(expected.stopRequests ?? 0);

  for (const spawn of spawns) await waitUntilGone(spawn.pid);
  return events;
}

/** Every event of the run, paged. */
async function allEvents(api: Api, runId: string): Promise<EventView[]> {
  const events: EventView[] = [];
  for (;;) {
    const page = await api.client.events(runId, { after: events.at(-1)?.seq ?? 0, limit: 500 });
    events.push(...page.events);
    if (page.events.length < 500) return events;
  }
}
