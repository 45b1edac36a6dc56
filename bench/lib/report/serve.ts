/** Sections 5 and 6: the real `qlr serve` process's throughput and memory (bench/serve.ts). */
import type { BenchReport } from "./bench-report.ts";
import { LOAD_COLUMN, bold, code, fmt, inMiB, inMiBColumns, int, pushTable } from "./markdown.ts";

interface ServeResult {
  label: string;
  profile: string;
  workflow: string;
  stepsPerRun: number;
  runs: number;
  inFlight: number;
  nodeFlags: string[];
  finished: boolean;
  terminal: number;
  succeeded: number;
  serveExited: { code: number | null; signal: string | null } | null;
  wallMs: number;
  runsPerSecond: number;
  stepsPerSecond: number;
  meanPostRunsMs: number;
  rssMiB: {
    atReady: number | null;
    end: number | null;
    growth: number | null;
    peakSampled: number | null;
    vmHwm: number | null;
  };
  memoryLimit: {
    limitMiB: number | null;
    method: string | null;
    cgroupVersion: string | null;
    peakMiB: number | null;
    anonPeakSampledMiB?: number | null;
    pageCachePeakSampledMiB?: number | null;
    limitHits: number | null;
    oomEvents: number | null;
    oomKills: number | null;
  } | null;
  loadAverage1m?: { before: number; after: number };
}

/** A cell of the memory limit's figures, "–" when the serve process ran without a limit. */
const limitCell =
  (cell: (limit: NonNullable<ServeResult["memoryLimit"]>) => string) =>
  (result: ServeResult): string =>
    result.memoryLimit === null ? "–" : cell(result.memoryLimit);

/** Sections 5 and 6, and how the memory limit was set when one was. */
export function renderServe(report: BenchReport, parts: string[]): void {
  const serve = report.serve as unknown as ServeResult[];
  const throughput = serve.filter((result) => result.label === "throughput");
  pushTable(
    parts,
    "## 5. Real-process step throughput: `node dist/qlr.mjs serve` (sql.js file store), runs started with `POST /runs`, steps run `true`",
    [
      ["profile", (result) => result.profile],
      ["workflow", (result) => `${result.workflow} (${result.stepsPerRun} steps)`],
      ["runs", (result) => int(result.runs)],
      ["succeeded", (result) => int(result.succeeded)],
      ["wall s (first POST → all terminal)", (result) => fmt(result.wallMs / 1000, 1)],
      ["runs/s", (result) => fmt(result.runsPerSecond, 2)],
      ["**steps/s**", (result) => bold(fmt(result.stepsPerSecond, 1))],
      ["POST /runs mean ms", (result) => fmt(result.meanPostRunsMs, 2)],
      ["VmHWM", (result) => inMiB(result.rssMiB.vmHwm)],
      LOAD_COLUMN,
    ],
    throughput,
  );
  const memory = serve.filter((result) => result.label !== "throughput");
  pushTable<ServeResult>(
    parts,
    "## 6. Memory of `qlr serve --profile edge` (two-step `true` runs, at most 50 in flight)",
    [
      ["variant", (result) => result.label],
      [
        "node flags",
        ({ nodeFlags }) => (nodeFlags.length === 0 ? "none" : code(nodeFlags.join(" "))),
      ],
      [
        "runs terminal / succeeded",
        (result) => `${int(result.terminal)} / ${int(result.succeeded)} of ${int(result.runs)}`,
      ],
      ["wall s", (result) => fmt(result.wallMs / 1000, 1)],
      ["steps/s", (result) => fmt(result.stepsPerSecond, 1)],
      ...inMiBColumns(
        (result: ServeResult) => result.rssMiB,
        [
          ["RSS at ready", "atReady"],
          ["RSS end", "end"],
          ["RSS growth", "growth"],
          ["peak RSS sampled", "peakSampled"],
        ],
      ),
      ["**VmHWM**", (result) => bold(inMiB(result.rssMiB.vmHwm))],
      [
        "limit",
        ({ memoryLimit }) =>
          memoryLimit === null
            ? "none"
            : `${fmt(memoryLimit.limitMiB, 0)} MiB (cgroup ${memoryLimit.cgroupVersion ?? "unavailable"})`,
      ],
      ["cgroup peak (anon + page cache)", limitCell((limit) => inMiB(limit.peakMiB))],
      ["cgroup anon peak (sampled)", limitCell((limit) => inMiB(limit.anonPeakSampledMiB))],
      [
        "cgroup page cache peak (sampled)",
        limitCell((limit) => inMiB(limit.pageCachePeakSampledMiB)),
      ],
      ["limit hits (failcnt)", limitCell((limit) => int(limit.limitHits))],
      ["OOM kills", limitCell((limit) => int(limit.oomKills ?? limit.oomEvents))],
      [
        "serve exited",
        (result) => (result.serveExited === null ? "no" : JSON.stringify(result.serveExited)),
      ],
    ],
    memory,
  );
  const method = memory.find(
    (result) => result.memoryLimit?.method !== null && result.memoryLimit?.method !== undefined,
  )?.memoryLimit?.method;
  if (method !== undefined && method !== null)
    parts.push(
      `Memory limit method: ${method}. The cgroup charges every process the serve process starts (supervisors, tasks) and the page cache it reads or dirties (the database and journal files), but not file pages (the node binary) already resident before it joined; the page cache is reclaimable, so the anonymous peak is the figure that decides an OOM.`,
    );
}
