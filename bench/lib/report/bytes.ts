/** Section 2: bytes written by the sql.js file store (bench/bytes.ts). */
import type { BenchReport } from "./bench-report.ts";
import {
  SQL_COLUMN,
  columnTable,
  compositionTable,
  fmt,
  int,
  kib,
  mib,
  table,
} from "./markdown.ts";

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

export function renderBytes(report: BenchReport, parts: string[]): void {
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
