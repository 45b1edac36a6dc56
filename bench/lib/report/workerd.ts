/** Section 8: `POST /tick` in workerd (bench/workerd.ts). */
import type { LatencySummary } from "../common.ts";
import type { BenchReport } from "./bench-report.ts";
import { columnTable, fmt, int, latencyColumns } from "./markdown.ts";

interface WorkerdResult {
  runs: number;
  ticks: number;
  readyMs: number;
  admissionsDuringTicks: number;
  runStart: LatencySummary;
  tick: LatencySummary;
  firstTickMs: number;
  diamonds?: number;
  diamond?: LatencySummary;
}

/** Section 8, when the workerd bench ran. */
export function renderWorkerd(report: BenchReport, parts: string[]): void {
  const workerd = report.workerd as unknown as WorkerdResult | null;
  if (workerd !== null) {
    parts.push(
      "## 8. `POST /tick` in workerd (Miniflare, dist/worker/index.js, SQLite-backed Durable Object)",
      columnTable(
        [
          ["runs started", (result) => int(result.runs)],
          ["ticks", (result) => int(result.ticks)],
          ["admissions during the ticks", (result) => int(result.admissionsDuringTicks)],
          ["first tick ms", (result) => fmt(result.firstTickMs, 2)],
          ...latencyColumns((result: WorkerdResult) => result.tick, {
            p50: 2,
            p95: 2,
            p99: 2,
            max: 2,
          }),
          ...latencyColumns((result: WorkerdResult) => result.runStart, { p50: 2 }, "POST /runs "),
        ],
        [workerd],
      ),
    );
    if (workerd.diamond !== undefined)
      parts.push(
        `A four-step diamond of remote_worker \`true\` leased by a real \`qlr worker\`, no cron and no \`/tick\` (the object's alarm alone), \`POST /runs\` → \`succeeded\` over ${int(workerd.diamonds ?? 0)} runs one at a time: p50 ${fmt(workerd.diamond.p50Ms, 0)} ms, p95 ${fmt(workerd.diamond.p95Ms, 0)} ms, max ${fmt(workerd.diamond.maxMs, 0)} ms.`,
      );
  }
}
