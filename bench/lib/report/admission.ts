/** Section 1 (admission transaction latency, bench/admission.ts) and the CPU profile of its admissions. */
import type { LatencySummary } from "../common.ts";
import type { BenchReport } from "./bench-report.ts";
import {
  LOAD_COLUMN,
  SAMPLED_COLUMNS,
  SQL_COLUMN,
  STORE_COLUMN,
  WIDTH_COLUMN,
  code,
  columnTable,
  fmt,
  int,
  latencyColumns,
  pushTable,
  timingTable,
  type Column,
} from "./markdown.ts";

export interface AdmissionResult {
  store: string;
  engineVersion: string;
  width: number;
  admissions: number;
  rejected: number;
  latency: LatencySummary;
  admissionsPerSecond: number;
  perAdmission: {
    statements: number;
    reads: number;
    writes: number;
    rowsReturned: number;
    bodiesParsed: number;
    bodyCharsParsed: number;
  };
  phasesMs: {
    total: number;
    begin: number;
    statements: number;
    coreAndMapping: number;
    commit: number;
  };
  statements: { sql: string; perAdmission: number; msPerAdmission: number }[];
  file: {
    bytesWrittenPerAdmission: number;
    journalBytesPerAdmission: number;
    checkpointsDuringRun: number;
    admissionsWithCheckpoint: LatencySummary;
    latencyWithoutCheckpoints: LatencySummary;
  } | null;
  components: { name: string; meanMs: number; note: string }[];
  loadAverage1m?: { before: number; after: number };
}

/** The admission phases, each `[header, key of phasesMs]`, in mean ms per admission. */
const ADMISSION_PHASES: readonly (readonly [string, keyof AdmissionResult["phasesMs"]])[] = [
  ["total", "total"],
  ["begin (queue + BEGIN)", "begin"],
  ["statements", "statements"],
  ["core + row mapping (JS)", "coreAndMapping"],
  ["commit (+ journal + fdatasync)", "commit"],
];

/** The store floors and statement experiments shown side by side, by component name. */
const FLOOR_COMPONENTS = [
  "empty transaction",
  "1-row write transaction",
  "admission reads",
  "UPDATE runs, all 18 columns (as apply() does)",
  "UPDATE runs, all columns but id",
  "UPDATE runs, the 4 columns an admission changes",
  "SELECT all step_runs of the run (as admit() does)",
  "SELECT the one step_run being admitted",
];

export function renderAdmission(report: BenchReport, parts: string[]): void {
  const admissions = report.admission as unknown as AdmissionResult[];
  if (admissions.length === 0) return;
  parts.push(
    "## 1. Admission transaction latency (`coordinator.admit`, one transaction each)",
    columnTable<AdmissionResult>(
      [
        STORE_COLUMN,
        WIDTH_COLUMN,
        [
          "timed admissions",
          (result) =>
            int(result.admissions) + (result.rejected > 0 ? ` (${result.rejected} rejected)` : ""),
        ],
        ...latencyColumns((result: AdmissionResult) => result.latency, {
          p50: 3,
          p95: 3,
          p99: 3,
          max: 2,
        }),
        ["admissions/s", (result) => int(result.admissionsPerSecond)],
        [
          "statements/tx",
          ({ perAdmission }) =>
            `${fmt(perAdmission.statements, 0)} (${fmt(perAdmission.reads, 0)} R / ${fmt(perAdmission.writes, 0)} W)`,
        ],
        LOAD_COLUMN,
      ],
      admissions,
    ),
  );
  const file = admissions.filter((result) => result.file !== null);
  pushTable<AdmissionResult>(
    parts,
    "sql.js file store, admissions that triggered a checkpoint vs the rest:",
    [
      WIDTH_COLUMN,
      ["with checkpoint: count", (result) => String(result.file?.checkpointsDuringRun ?? "–")],
      ...latencyColumns((result: AdmissionResult) => result.file?.admissionsWithCheckpoint, {
        p50: 2,
        max: 2,
      }),
      ...latencyColumns(
        (result: AdmissionResult) => result.file?.latencyWithoutCheckpoints,
        { p50: 3 },
        "without: ",
      ),
      ...latencyColumns((result: AdmissionResult) => result.file?.latencyWithoutCheckpoints, {
        p95: 3,
        p99: 3,
      }),
    ],
    file,
  );
  parts.push(
    "Where one admission's time goes (instrumented admissions after the warm-up, mean ms per admission):",
    columnTable<AdmissionResult>(
      [
        STORE_COLUMN,
        WIDTH_COLUMN,
        ...ADMISSION_PHASES.map(([header, phase]): Column<AdmissionResult> => [
          header,
          (result) => fmt(result.phasesMs[phase], 3),
        ]),
        ["rows read", (result) => fmt(result.perAdmission.rowsReturned, 0)],
        [
          "JSON bodies parsed",
          ({ perAdmission }) =>
            `${fmt(perAdmission.bodiesParsed, 0)} (${int(perAdmission.bodyCharsParsed)} chars)`,
        ],
      ],
      admissions,
    ),
  );
  const detailed = admissions.find(
    (result) => result.store === "sqljs-file" && result.width === 64,
  );
  if (detailed !== undefined) {
    parts.push(
      "Statements of one admission on the sql.js file store (64-step workflow), mean ms each:",
      columnTable(
        [SQL_COLUMN, ["ms", (entry) => fmt(entry.msPerAdmission, 4)]],
        detailed.statements,
      ),
    );
    if (detailed.components.length > 0) {
      parts.push(
        "Component micro-timings (each part repeated alone; they overlap and do not add up):",
        timingTable("part", "what", detailed.components),
      );
    }
  }
  const withComponents = admissions.filter(
    (result) => result.width === 64 && result.components.length > 0,
  );
  pushTable<AdmissionResult>(
    parts,
    "Store floors and statement experiments (mean ms; the statement columns time the statement alone inside its own transaction):",
    [
      STORE_COLUMN,
      ...FLOOR_COMPONENTS.map((name): Column<AdmissionResult> => [
        name,
        (result) => fmt(result.components.find((entry) => entry.name === name)?.meanMs, 4),
      ]),
    ],
    withComponents,
  );
}

export function renderCpuProfile(report: BenchReport, parts: string[]): void {
  if (report.profile === null) return;
  const { summary } = report.profile;
  parts.push(
    `### CPU profile of ${int(report.profile.admissions)} sql.js file store admissions (timed section only, ${report.profile.samplingIntervalUs} µs sampling, ${fmt(summary.scopeMs, 0)} ms sampled)`,
  );
  parts.push(
    "Inclusive time of named cost centres (a sample counts for a centre when any frame of its stack belongs to it; centres overlap):",
    columnTable([["cost centre", (centre) => centre.name], ...SAMPLED_COLUMNS], summary.centres),
  );
  parts.push(
    "Top self time:",
    columnTable([["function", (entry) => code(entry.name)], ...SAMPLED_COLUMNS], summary.topSelf),
  );
}
