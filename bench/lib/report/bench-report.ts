/**
 * The shape of bench/results/latest.json. The child results are read back as the JSON the
 * children wrote; each section's renderer (this folder) names the fields its Markdown uses.
 */
import type { ProfileSummary } from "../cpu-profile.ts";

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
