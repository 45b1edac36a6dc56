/**
 * Section 4 (memory of the sql.js file store in-process, bench/memory.ts) and 4b (the real
 * `qlr serve --profile edge` process, bench/lib/edge-device.ts).
 */
import type { BenchReport } from "./bench-report.ts";
import {
  bold,
  columnTable,
  compositionTable,
  fmt,
  inMiB,
  inMiBColumns,
  int,
  mib,
  pushTable,
  timingTable,
  type Column,
} from "./markdown.ts";

interface MemoryResult {
  label: string;
  runs: number;
  steps: number;
  ticks: number;
  finished: boolean;
  succeeded: number;
  wallMs: number;
  rssMiB: {
    processStart: number;
    afterOpen: number;
    afterRunStarts: number;
    end: number;
    peakSampled: number;
    vmHwm: number | null;
    growthDuringDrive: number;
    growthFromProcessStart: number;
  };
  endUsageMiB: { heapUsed: number; heapTotal: number; external: number; arrayBuffers: number };
  database: { snapshotBytes: number; journalBytes: number } | null;
  tickMsFirstTenth?: number;
  tickMsLastTenth?: number;
  written?: { driverBytesPerStep: number; checkpoints: number; commitsPerStep: number } | null;
  statementExperimentsAtEnd?: { name: string; meanMs: number; note: string }[];
}

export function renderMemory(report: BenchReport, parts: string[]): void {
  const memory = report.memory as unknown as MemoryResult[];
  pushTable<MemoryResult>(
    parts,
    "## 4. Memory: sql.js file store, edge profile, simulated executor",
    [
      ["node flags", (result) => result.label],
      [
        "runs / steps",
        (result) =>
          `${int(result.runs)} / ${int(result.steps)}${result.succeeded === result.runs ? "" : ` (${result.succeeded} succeeded)`}`,
      ],
      ["ticks", (result) => int(result.ticks)],
      ...inMiBColumns(
        (result: MemoryResult) => result.rssMiB,
        [
          ["RSS at process start", "processStart"],
          ["after open", "afterOpen"],
          ["after run starts", "afterRunStarts"],
          ["end", "end"],
          ["peak (sampled)", "peakSampled"],
        ],
      ),
      ["VmHWM", (result) => bold(inMiB(result.rssMiB.vmHwm))],
      ["growth during drive", (result) => inMiB(result.rssMiB.growthDuringDrive)],
      ["heap used end", (result) => inMiB(result.endUsageMiB.heapUsed)],
      ["arrayBuffers end", (result) => inMiB(result.endUsageMiB.arrayBuffers)],
      [
        "tick ms first/last tenth",
        (result) => `${fmt(result.tickMsFirstTenth, 2)} / ${fmt(result.tickMsLastTenth, 2)}`,
      ],
      ["database", (result) => mib(result.database?.snapshotBytes)],
      [
        "bytes written per step (checkpoints)",
        ({ written }) =>
          written === undefined || written === null
            ? "–"
            : `${int(written.driverBytesPerStep)} B (${written.checkpoints})`,
      ],
    ],
    memory,
  );

  const withExperiments = memory.find(
    (result) => (result.statementExperimentsAtEnd?.length ?? 0) > 0,
  );
  if (withExperiments?.statementExperimentsAtEnd !== undefined) {
    parts.push(
      `The same statement experiments on the memory bench's final database (${int(withExperiments.runs)} runs, ${mib(withExperiments.database?.snapshotBytes)}):`,
      timingTable("statement", "context", withExperiments.statementExperimentsAtEnd),
    );
  }
}

interface DeviceMemoryResult {
  bareNode: Record<string, number | null> | null;
  importSteps: {
    label: string;
    rssMiB: number | null;
    vmHwmMiB: number | null;
    heapUsedMiB: number;
    externalMiB: number;
  }[];
  floors: {
    label: string;
    proc: Record<string, number | null> | null;
    metrics: Record<string, number | null>;
  }[];
  history: {
    runs: number;
    succeeded: number;
    seedSeconds: number;
    snapshotMiB: number | null;
    snapshotBytesPerRun: number;
    composition?: {
      vacuumedBytes: number;
      tables: { table: string; rows: number; bytes: number; bytesPerRun: number }[];
    };
    durationS: number;
    variants: {
      label: string;
      readyS: number;
      windowS: number;
      runsFinishedInWindow: number;
      atReady: {
        proc: Record<string, number | null> | null;
        metrics: Record<string, number | null>;
      };
      beforeStop: {
        proc: Record<string, number | null> | null;
        metrics: Record<string, number | null>;
      };
      growthDuringWindowMiB: number | null;
      vmHwmBeforeStopMiB: number | null;
      vmHwmAtExitMiB: number | null;
      rssMiBByTenthOfWindow: (number | null)[];
    }[];
  };
}

/** What `/proc/<pid>/status` and the process's own `GET /metrics` said at one moment. */
interface ProcessSnapshot {
  proc: Record<string, number | null> | null;
  metrics: Record<string, number | null>;
}

const SNAPSHOT_COLUMNS: readonly Column<ProcessSnapshot>[] = [
  ["VmRSS", ({ proc }) => inMiB(proc?.rss)],
  ["VmHWM", ({ proc }) => bold(inMiB(proc?.vmHwm))],
  [
    "anonymous / file-backed",
    ({ proc }) => `${fmt(proc?.rssAnon, 1)} / ${fmt(proc?.rssFile, 1)} MiB`,
  ],
  [
    "V8 heap used / total",
    ({ metrics }) => `${fmt(metrics.heap_used, 1)} / ${fmt(metrics.heap_total, 1)} MiB`,
  ],
  ["external (incl. WASM and ArrayBuffers)", ({ metrics }) => inMiB(metrics.external)],
  ["ArrayBuffers (the database image)", ({ metrics }) => inMiB(metrics.array_buffers)],
  ["sql.js WASM memory (reserved)", ({ metrics }) => inMiB(metrics.wasm)],
];

export function renderDeviceMemory(report: BenchReport, parts: string[]): void {
  const device = report.memoryDevice as unknown as DeviceMemoryResult | null;
  if (device === null) return;
  parts.push("## 4b. Memory of `qlr serve --profile edge` (the real process): floor and history");
  parts.push(
    `A bare \`node\` waiting on a timer: VmRSS ${fmt(device.bareNode?.rss, 1)} MiB (anonymous ${fmt(device.bareNode?.rssAnon, 1)}, file-backed ${fmt(device.bareNode?.rssFile, 1)}: the node binary's own pages).`,
  );
  parts.push(
    "What the floor is made of: one Node process importing the runtime's packages one after another (cumulative; the first import also pays for Node's ES module loader).",
    columnTable(
      [
        ["step", (step) => step.label],
        ...inMiBColumns(
          (step: DeviceMemoryResult["importSteps"][number]) => step,
          [
            ["VmRSS", "rssMiB"],
            ["VmHWM", "vmHwmMiB"],
            ["heap used", "heapUsedMiB"],
            ["external", "externalMiB"],
          ],
        ),
      ],
      device.importSteps,
    ),
  );
  parts.push(
    "The floor: an empty state dir, the package applied, HTTP listening, no run yet (1 s after ready); from `/proc/<pid>/status` and the process's own `GET /metrics`.",
    columnTable([["", (floor) => floor.label], ...SNAPSHOT_COLUMNS], device.floors),
  );
  const history = device.history;
  parts.push(
    `With history: ${int(history.runs)} finished runs (half one-task runs, half two-step workflows; seeded in ${fmt(history.seedSeconds, 0)} s), a snapshot of ${fmt(history.snapshotMiB, 1)} MiB (${int(history.snapshotBytesPerRun)} B per run), opened by \`qlr serve --profile edge\` with a task scheduled every second and the workflow every 2 s for ${fmt(history.durationS, 0)} s, then SIGTERM (whose checkpoint exports the whole database once more).`,
  );
  if (history.composition !== undefined) {
    parts.push(
      `What the history holds (VACUUMed copy, ${mib(history.composition.vacuumedBytes)}; each table with its indexes):`,
      compositionTable(history.composition.tables, "bytes per run", (share) => share.bytesPerRun),
    );
  }
  parts.push(
    columnTable(
      [
        ["variant", (variant) => variant.label],
        ["ready s", (variant) => fmt(variant.readyS, 2)],
        ["runs finished in the window", (variant) => int(variant.runsFinishedInWindow)],
        ["VmRSS at ready", ({ atReady }) => inMiB(atReady.proc?.rss)],
        ["VmRSS before stop", ({ beforeStop }) => inMiB(beforeStop.proc?.rss)],
        ["growth in the window", (variant) => inMiB(variant.growthDuringWindowMiB)],
        ["**VmHWM before stop**", (variant) => bold(inMiB(variant.vmHwmBeforeStopMiB))],
        ["**VmHWM at exit**", (variant) => bold(inMiB(variant.vmHwmAtExitMiB))],
        ["heap used at ready", ({ atReady }) => inMiB(atReady.metrics.heap_used)],
        ["ArrayBuffers at ready", ({ atReady }) => inMiB(atReady.metrics.array_buffers)],
        ["WASM at ready", ({ atReady }) => inMiB(atReady.metrics.wasm)],
      ],
      history.variants,
    ),
  );
}
