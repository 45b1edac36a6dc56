import type { StageReport } from "../../src/coordinator.ts";
import type { RunStatus } from "../../src/model.ts";

/**
 * A tiny Prometheus text exposition without a dependency: counters and a per-stage duration
 * summary (sum and count), kept in fixed-size maps so memory stays flat on a router.
 */
export class Metrics {
  private readonly stageSeconds = new Map<string, { sum: number; count: number; errors: number; processed: number }>();
  private ticks = 0;
  private httpErrors = 0;
  private admissions = 0;
  private purgedRuns = 0;

  observeStage(stage: StageReport): void {
    const entry = this.stageSeconds.get(stage.name) ?? { sum: 0, count: 0, errors: 0, processed: 0 };
    entry.sum += stage.durationMs / 1000;
    entry.count += 1;
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

  render(runsByStatus: Record<RunStatus, number>): string {
    const lines: string[] = [];
    lines.push("# HELP qlr_runs Runs by status.", "# TYPE qlr_runs gauge");
    for (const [status, count] of Object.entries(runsByStatus)) lines.push(`qlr_runs{status="${status}"} ${count}`);
    lines.push("# HELP qlr_ticks_total Cadence cycles run.", "# TYPE qlr_ticks_total counter", `qlr_ticks_total ${this.ticks}`);
    lines.push("# HELP qlr_admissions_total Task attempts admitted.", "# TYPE qlr_admissions_total counter", `qlr_admissions_total ${this.admissions}`);
    lines.push("# HELP qlr_runs_purged_total Terminal runs purged by retention, with everything they owned.", "# TYPE qlr_runs_purged_total counter", `qlr_runs_purged_total ${this.purgedRuns}`);
    lines.push("# HELP qlr_tick_stage_seconds Time spent per cadence stage.", "# TYPE qlr_tick_stage_seconds summary");
    for (const [stage, entry] of this.stageSeconds) {
      lines.push(`qlr_tick_stage_seconds_sum{stage="${stage}"} ${entry.sum}`, `qlr_tick_stage_seconds_count{stage="${stage}"} ${entry.count}`);
    }
    lines.push("# HELP qlr_tick_stage_errors_total Errors isolated per cadence stage.", "# TYPE qlr_tick_stage_errors_total counter");
    for (const [stage, entry] of this.stageSeconds) lines.push(`qlr_tick_stage_errors_total{stage="${stage}"} ${entry.errors}`);
    lines.push("# HELP qlr_http_errors_total HTTP requests answered with an error.", "# TYPE qlr_http_errors_total counter", `qlr_http_errors_total ${this.httpErrors}`);
    return `${lines.join("\n")}\n`;
  }
}
