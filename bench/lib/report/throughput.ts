/** Section 3: end-to-end throughput on the simulated executor (bench/throughput.ts). */
import type { LatencySummary } from "../common.ts";
import type { BenchReport } from "./bench-report.ts";
import {
  LOAD_COLUMN,
  STORE_COLUMN,
  columnTable,
  fmt,
  int,
  latencyColumns,
  pushTable,
  type Column,
} from "./markdown.ts";

interface DriveFigures {
  ticks: number;
  finished: boolean;
  succeeded: number;
  stageErrors: number;
  wallMs: number;
  perSecond: number;
  /** Process CPU inside the ticks per unit, ms (absent in results written before it was measured). */
  cpuMsPerUnit?: number;
  tick: LatencySummary;
}

interface ThroughputResult {
  store: string;
  profile: string;
  workflow: DriveFigures & { runs: number; steps: number; runStartsPerSecond: number };
  ordinary: (DriveFigures & { runs: number; runStartsPerSecond: number }) | null;
  loadAverage1m?: { before: number; after: number };
}

/** One measured drive: the columns the workflow and the ordinary tables of section 3 share. */
type DriveRow = DriveFigures & { store: string; runs: number; runStartsPerSecond: number };
/** A row of section 3's workflow table: the result with its workflow drive's figures beside it. */
type WorkflowRow = Omit<ThroughputResult, "workflow"> & ThroughputResult["workflow"];
const TICKS_COLUMN: Column<DriveRow> = ["ticks", (drive) => int(drive.ticks)];
const TICK_WALL_COLUMN: Column<DriveRow> = [
  "wall s (in tick)",
  (drive) => fmt(drive.wallMs / 1000, 2),
];
const RUN_STARTS_COLUMN: Column<DriveRow> = [
  "run starts/s",
  (drive) => fmt(drive.runStartsPerSecond, 0),
];
/** Process CPU per step or run inside the ticks: robust where wall time is not (a shared machine). */
const CPU_PER_UNIT_COLUMN: Column<DriveRow> = [
  "CPU ms/unit",
  (drive) => (drive.cpuMsPerUnit === undefined ? "–" : fmt(drive.cpuMsPerUnit, 2)),
];
const perSecondColumn = (header: string): Column<DriveRow> => [
  header,
  (drive) => fmt(drive.perSecond, 0),
];

export function renderThroughput(report: BenchReport, parts: string[]): void {
  const throughput = report.throughput as unknown as ThroughputResult[];
  if (throughput.length === 0) return;
  parts.push(
    "## 3. End-to-end throughput, simulated executor, virtual clock",
    columnTable(
      [
        STORE_COLUMN,
        ["profile", (result) => result.profile],
        [
          "diamond runs",
          (result) =>
            int(result.runs) +
            (result.succeeded === result.runs ? "" : ` (${result.succeeded} succeeded)`),
        ],
        ["steps", (result) => int(result.steps)],
        TICKS_COLUMN,
        TICK_WALL_COLUMN,
        perSecondColumn("steps/s"),
        CPU_PER_UNIT_COLUMN,
        ...latencyColumns(
          (result: WorkflowRow) => result.tick,
          { p50: 2, p95: 2, max: 1 },
          "tick ",
        ),
        RUN_STARTS_COLUMN,
        LOAD_COLUMN,
      ],
      // The run's own store name wins over the drive's statement figures, also named `store`.
      throughput.map(({ workflow, ...result }) => ({ ...workflow, ...result })),
    ),
  );
  const ordinary = throughput.flatMap((result) =>
    result.ordinary === null ? [] : [{ ...result.ordinary, store: result.store }],
  );
  pushTable<DriveRow>(
    parts,
    "Ordinary runs (one task each), cluster profile:",
    [
      STORE_COLUMN,
      ["runs", (drive) => int(drive.runs)],
      TICKS_COLUMN,
      TICK_WALL_COLUMN,
      perSecondColumn("runs/s"),
      CPU_PER_UNIT_COLUMN,
      ...latencyColumns((drive: DriveRow) => drive.tick, { p50: 2 }, "tick "),
      RUN_STARTS_COLUMN,
    ],
    ordinary,
  );
}
