import { Cron } from "croner";
import { QlrError } from "./errors.ts";
import type { ScheduleSpec } from "./manifest/types.ts";

/**
 * Cron schedules (with time zone and seconds) evaluated by croner, never by a hand-written
 * parser. Evaluation is pure: the caller passes the reference time. Missed fires after
 * downtime are bounded and explicit: `skip` fires nothing for them, `fire_once` fires one run
 * for all of them; never a storm.
 */

/** How fire times that passed unnoticed (downtime, a slow cadence) are judged and counted. */
export const MISSED_FIRES = {
  /** A fire is on time when it is noticed within this long of its due time. */
  defaultGraceMs: 60_000,
  /** Counting missed fire times stops here; the count says "at least" beyond it. */
  maxCount: 1000,
} as const;

export interface ScheduleState {
  readonly package: string;
  readonly name: string;
  readonly generation: number;
  readonly spec: ScheduleSpec;
  readonly nextFireAtMs: number | null;
  readonly lastFireAtMs: number | null;
  readonly lastRunId: string | null;
  readonly missedFires: number;
  readonly skippedOverlaps: number;
  readonly version: number;
}

export function nextFireAfter(
  spec: Pick<ScheduleSpec, "cron" | "timezone">,
  afterMs: number,
): number | null {
  try {
    const cron = new Cron(spec.cron, { timezone: spec.timezone, paused: true });
    // A Date built from an explicit instant is deterministic; the ambient clock is never read.
    const next = cron.nextRun(new Date(afterMs));
    return next === null ? null : next.getTime();
  } catch (error) {
    throw new QlrError(
      "invalid_manifest",
      `schedule cron ${JSON.stringify(spec.cron)} cannot be evaluated: ${(error as Error).message}`,
      { cause: error },
    );
  }
}

export type ScheduleDecision =
  | { readonly kind: "idle" }
  | {
      readonly kind: "fire";
      readonly dueAtMs: number;
      readonly missed: number;
      readonly next: ScheduleState;
    }
  | {
      readonly kind: "skip";
      readonly reason: "overlap" | "missed";
      readonly missed: number;
      readonly next: ScheduleState;
    };

/**
 * Decides one due schedule. `lastRunLive` says whether the run of its previous fire is still
 * working (overlap policy). The returned state always moves `nextFireAtMs` past `nowMs`.
 */
export function decideSchedule(
  state: ScheduleState,
  nowMs: number,
  lastRunLive: boolean,
  graceMs: number = MISSED_FIRES.defaultGraceMs,
): ScheduleDecision {
  if (!state.spec.enabled || state.nextFireAtMs === null || state.nextFireAtMs > nowMs)
    return { kind: "idle" };
  // Count the fire times that came due up to now (bounded), keeping the latest one.
  let dueAtMs = state.nextFireAtMs;
  let count = 1;
  let cursor = nextFireAfter(state.spec, dueAtMs);
  while (cursor !== null && cursor <= nowMs && count < MISSED_FIRES.maxCount) {
    dueAtMs = cursor;
    count += 1;
    cursor = nextFireAfter(state.spec, cursor);
  }
  const nextFireAtMs = nextFireAfter(state.spec, nowMs);
  const late = nowMs - dueAtMs > graceMs;
  const missed = late ? count : count - 1;
  const base = {
    ...state,
    nextFireAtMs,
    missedFires: state.missedFires + missed,
    version: state.version + 1,
  };
  if (late && state.spec.missed === "skip")
    return { kind: "skip", reason: "missed", missed, next: base };
  if (state.spec.overlap === "skip" && lastRunLive) {
    return {
      kind: "skip",
      reason: "overlap",
      missed,
      next: { ...base, skippedOverlaps: state.skippedOverlaps + 1 },
    };
  }
  return { kind: "fire", dueAtMs, missed, next: { ...base, lastFireAtMs: dueAtMs } };
}

export function initialScheduleState(
  packageName: string,
  generation: number,
  spec: ScheduleSpec,
  nowMs: number,
  previous: ScheduleState | null,
): ScheduleState {
  // Re-applying a package keeps the schedule's history; the next fire is recomputed from now.
  return {
    package: packageName,
    name: spec.name,
    generation,
    spec,
    nextFireAtMs: spec.enabled ? nextFireAfter(spec, nowMs) : null,
    lastFireAtMs: previous?.lastFireAtMs ?? null,
    lastRunId: previous?.lastRunId ?? null,
    missedFires: previous?.missedFires ?? 0,
    skippedOverlaps: previous?.skippedOverlaps ?? 0,
    version: (previous?.version ?? 0) + 1,
  };
}
