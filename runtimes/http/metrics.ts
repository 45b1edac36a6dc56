import type { StageReport } from "../../src/coordinator.ts";
import type { RunStatus } from "../../src/model.ts";

/**
 * Upper bounds of the stage-duration histogram, in seconds: a stage takes well under a
 * millisecond on an idle device and seconds when a page of processes starts on a loaded one.
 */
export const STAGE_SECONDS_BUCKETS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
] as const;

interface StageCounters {
  sum: number;
  count: number;
  errors: number;
  processed: number;
  buckets: number[];
}

/**
 * The counters of a `Metrics`, as plain data: a runtime whose memory does not outlive it (a
 * Durable Object is evicted when idle) saves them and restores them into its next instance.
 */
export interface MetricsCounters {
  readonly ticks: number;
  readonly admissions: number;
  readonly purgedRuns: number;
  readonly httpErrors: number;
  readonly stages: Readonly<Record<string, Readonly<StageCounters>>>;
}

const isCount = (value: unknown): value is number =>
  typeof value === "number" && Number.isFinite(value) && value >= 0;

function isStageCounters(value: unknown): value is StageCounters {
  if (typeof value !== "object" || value === null) return false;
  const entry = value as Record<string, unknown>;
  return (
    isCount(entry.sum) &&
    isCount(entry.count) &&
    isCount(entry.errors) &&
    isCount(entry.processed) &&
    Array.isArray(entry.buckets) &&
    entry.buckets.length === STAGE_SECONDS_BUCKETS.length &&
    entry.buckets.every(isCount)
  );
}

/** Saved counters as read back: null when they are not counters of this version (they are then not restored). */
export function parseMetricsCounters(value: unknown): MetricsCounters | null {
  if (typeof value !== "object" || value === null) return null;
  const saved = value as Record<string, unknown>;
  if (
    !isCount(saved.ticks) ||
    !isCount(saved.admissions) ||
    !isCount(saved.purgedRuns) ||
    !isCount(saved.httpErrors)
  )
    return null;
  if (typeof saved.stages !== "object" || saved.stages === null) return null;
  const stages: Record<string, StageCounters> = {};
  for (const [name, entry] of Object.entries(saved.stages)) {
    if (!/^[a-z_]{1,32}$/.test(name) || !isStageCounters(entry)) return null;
    stages[name] = {
      sum: entry.sum,
      count: entry.count,
      errors: entry.errors,
      processed: entry.processed,
      buckets: [...entry.buckets],
    };
  }
  return {
    ticks: saved.ticks,
    admissions: saved.admissions,
    purgedRuns: saved.purgedRuns,
    httpErrors: saved.httpErrors,
    stages,
  };
}

/** The store driver's turns, as `SqlDriver.turns` counts them (storage/driver.ts `TurnCounts`). */
export interface StoreTurnCounts {
  readonly granted: number;
  readonly waitsRunOut: number;
  readonly skipped: number;
}

/**
 * A tiny Prometheus text exposition without a dependency, following its naming conventions
 * (base units in names, `_total` counters, `_seconds` histograms with buckets), kept in
 * fixed-size maps so memory stays flat on a router.
 */
export class Metrics {
  /**
   * @param memory the host's memory figures in bytes by kind (`rss`, `heap_used`, …), read
   * at each scrape; a host without them (a Worker) passes nothing.
   * @param turns how the store driver's pages fared with their turns (a PostgreSQL shared by
   * several coordinators: `SqlDriver.turns`), read at each scrape; undefined for a store
   * without turns, which then shows none.
   */
  constructor(
    private readonly memory: () => Readonly<Record<string, number | null>> = () => ({}),
    private readonly turns: () => StoreTurnCounts | undefined = () => undefined,
  ) {}

  private readonly stageSeconds = new Map<string, StageCounters>();
  private ticks = 0;
  private httpErrors = 0;
  private admissions = 0;
  private purgedRuns = 0;

  /** A copy of every counter (not the gauges, which are read at each scrape). */
  counters(): MetricsCounters {
    const stages: Record<string, StageCounters> = {};
    for (const [name, entry] of this.stageSeconds)
      stages[name] = { ...entry, buckets: [...entry.buckets] };
    return {
      ticks: this.ticks,
      admissions: this.admissions,
      purgedRuns: this.purgedRuns,
      httpErrors: this.httpErrors,
      stages,
    };
  }

  /** Continues from saved counters: what a new instance of the same runtime counted before. */
  restore(saved: MetricsCounters): void {
    this.ticks = saved.ticks;
    this.admissions = saved.admissions;
    this.purgedRuns = saved.purgedRuns;
    this.httpErrors = saved.httpErrors;
    this.stageSeconds.clear();
    for (const [name, entry] of Object.entries(saved.stages))
      this.stageSeconds.set(name, { ...entry, buckets: [...entry.buckets] });
  }

  observeStage(stage: StageReport): void {
    const entry = this.stageSeconds.get(stage.name) ?? {
      sum: 0,
      count: 0,
      errors: 0,
      processed: 0,
      buckets: STAGE_SECONDS_BUCKETS.map(() => 0),
    };
    const seconds = stage.durationMs / 1000;
    entry.sum += seconds;
    entry.count += 1;
    STAGE_SECONDS_BUCKETS.forEach((bound, index) => {
      if (seconds <= bound) entry.buckets[index] = (entry.buckets[index] ?? 0) + 1;
    });
    entry.errors += stage.errors.length;
    entry.processed += stage.processed;
    this.stageSeconds.set(stage.name, entry);
    if (stage.name === "admission") this.admissions += stage.processed;
    // The purge stage's processed count is the number of runs it deleted.
    if (stage.name === "purge") this.purgedRuns += stage.processed;
  }

  observeTick(): void {
    this.ticks += 1;
  }

  observeHttpError(): void {
    this.httpErrors += 1;
  }

  /** `runWaiters`: requests waiting in a run long-poll now (run-waiters.ts). */
  render(runsByStatus: Record<RunStatus, number>, runWaiters = 0): string {
    const lines: string[] = [];
    lines.push("# HELP qlr_runs Runs by status.", "# TYPE qlr_runs gauge");
    for (const [status, count] of Object.entries(runsByStatus))
      lines.push(`qlr_runs{status="${status}"} ${count}`);
    lines.push(
      "# HELP qlr_ticks_total Cadence cycles run.",
      "# TYPE qlr_ticks_total counter",
      `qlr_ticks_total ${this.ticks}`,
    );
    lines.push(
      "# HELP qlr_admissions_total Task attempts admitted.",
      "# TYPE qlr_admissions_total counter",
      `qlr_admissions_total ${this.admissions}`,
    );
    lines.push(
      "# HELP qlr_runs_purged_total Terminal runs purged by retention, with everything they owned.",
      "# TYPE qlr_runs_purged_total counter",
      `qlr_runs_purged_total ${this.purgedRuns}`,
    );
    lines.push(
      "# HELP qlr_tick_stage_duration_seconds Time spent per cadence stage.",
      "# TYPE qlr_tick_stage_duration_seconds histogram",
    );
    for (const [stage, entry] of this.stageSeconds) {
      STAGE_SECONDS_BUCKETS.forEach((bound, index) =>
        lines.push(
          `qlr_tick_stage_duration_seconds_bucket{stage="${stage}",le="${bound}"} ${entry.buckets[index] ?? 0}`,
        ),
      );
      lines.push(
        `qlr_tick_stage_duration_seconds_bucket{stage="${stage}",le="+Inf"} ${entry.count}`,
        `qlr_tick_stage_duration_seconds_sum{stage="${stage}"} ${entry.sum}`,
        `qlr_tick_stage_duration_seconds_count{stage="${stage}"} ${entry.count}`,
      );
    }
    lines.push(
      "# HELP qlr_tick_stage_errors_total Errors isolated per cadence stage.",
      "# TYPE qlr_tick_stage_errors_total counter",
    );
    for (const [stage, entry] of this.stageSeconds)
      lines.push(`qlr_tick_stage_errors_total{stage="${stage}"} ${entry.errors}`);
    const memory = Object.entries(this.memory()).filter(
      (entry): entry is [string, number] => entry[1] !== null,
    );
    if (memory.length > 0) {
      lines.push(
        "# HELP qlr_process_memory_bytes Memory of the runtime process by kind (rss, peak_rss, heap_used, heap_total, external, array_buffers, wasm).",
        "# TYPE qlr_process_memory_bytes gauge",
      );
      for (const [kind, bytes] of memory)
        lines.push(`qlr_process_memory_bytes{kind="${kind}"} ${bytes}`);
    }
    const turns = this.turns();
    if (turns !== undefined)
      lines.push(
        "# HELP qlr_store_turns_total Store transactions that wanted their turn on a PostgreSQL shared with other coordinators, by outcome: granted, wait_ran_out (ran without it), skipped (did not ask: a wait ran out shortly before).",
        "# TYPE qlr_store_turns_total counter",
        `qlr_store_turns_total{outcome="granted"} ${turns.granted}`,
        `qlr_store_turns_total{outcome="wait_ran_out"} ${turns.waitsRunOut}`,
        `qlr_store_turns_total{outcome="skipped"} ${turns.skipped}`,
      );
    lines.push(
      "# HELP qlr_http_errors_total HTTP requests answered with an error.",
      "# TYPE qlr_http_errors_total counter",
      `qlr_http_errors_total ${this.httpErrors}`,
    );
    lines.push(
      "# HELP qlr_run_waiters Requests waiting in a run long-poll (GET /runs/:id?wait=...).",
      "# TYPE qlr_run_waiters gauge",
      `qlr_run_waiters ${runWaiters}`,
    );
    return `${lines.join("\n")}\n`;
  }
}
