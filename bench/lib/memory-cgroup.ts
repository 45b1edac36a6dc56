/**
 * A fresh memory cgroup with a limit for a bench's serve process: cgroup v2 (`memory.max`,
 * under this process's own cgroup), else cgroup v1 (`memory.limit_in_bytes`). Every process
 * the serve process starts (one supervisor per attempt, the task's process) is charged to it
 * too; its peak and OOM counters are read at the end.
 */
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export interface MemoryCgroup {
  readonly version: "v2" | "v1";
  readonly path: string;
  /** Its `cgroup.procs`: a process that writes its pid here joins it. */
  readonly procsPath: string;
  addPid(pid: number): void;
  read(): {
    peakBytes: number | null;
    oomEvents: number | null;
    oomKills: number | null;
    limitHits: number | null;
  };
  pids(): number[];
  /** Anonymous memory (heap, stacks) and page cache charged to the cgroup now, bytes. */
  usage(): { anonBytes: number; fileBytes: number };
  remove(): void;
}

function statField(path: string, key: string): number {
  try {
    return Number(
      new RegExp(`^${key} (\\d+)$`, "m").exec(readFileSync(path, "utf8"))?.[1] ?? Number.NaN,
    );
  } catch {
    return Number.NaN;
  }
}

/** The pids in a cgroup (its `cgroup.procs`, the same file in v1 and v2). */
function cgroupPids(path: string): number[] {
  return readFileSync(join(path, "cgroup.procs"), "utf8")
    .split("\n")
    .filter((line) => line !== "")
    .map(Number);
}

/**
 * The cgroup at `path`: what both versions share, with what each reads its own way (its
 * counters, and the `memory.stat` keys of anonymous memory and page cache).
 */
function cgroupAt(
  path: string,
  version: MemoryCgroup["version"],
  statKeys: { readonly anon: string; readonly file: string },
  read: MemoryCgroup["read"],
): MemoryCgroup {
  const procsPath = join(path, "cgroup.procs");
  return {
    version,
    path,
    procsPath,
    addPid: (pid) => writeFileSync(procsPath, String(pid)),
    read,
    pids: () => cgroupPids(path),
    usage: () => ({
      anonBytes: statField(join(path, "memory.stat"), statKeys.anon),
      fileBytes: statField(join(path, "memory.stat"), statKeys.file),
    }),
    remove: () => rmdirSync(path),
  };
}

/** A fresh memory cgroup under this process's own one, or null with the reason. */
export function createMemoryCgroup(
  limitBytes: number,
  name = `qlr-bench-${process.pid}`,
): { cgroup: MemoryCgroup | null; why: string } {
  const own = readFileSync("/proc/self/cgroup", "utf8");
  const attempts: string[] = [];
  // cgroup v2: a unified hierarchy whose root lists the memory controller.
  for (const mount of ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]) {
    const controllers = join(mount, "cgroup.controllers");
    if (!existsSync(controllers)) continue;
    if (!readFileSync(controllers, "utf8").split(/\s+/).includes("memory")) {
      attempts.push(`${mount}: cgroup v2 without the memory controller`);
      continue;
    }
    const relative = /^0::(.*)$/m.exec(own)?.[1] ?? "/";
    const path = join(mount, relative, name);
    try {
      mkdirSync(path);
      writeFileSync(join(path, "memory.max"), String(limitBytes));
      if (existsSync(join(path, "memory.swap.max")))
        writeFileSync(join(path, "memory.swap.max"), "0");
      const cgroup = cgroupAt(path, "v2", { anon: "anon", file: "file" }, () => {
        const events = readFileSync(join(path, "memory.events"), "utf8");
        const count = (key: string): number | null => {
          const match = new RegExp(`^${key} (\\d+)$`, "m").exec(events);
          return match?.[1] === undefined ? null : Number(match[1]);
        };
        const peakPath = join(path, "memory.peak");
        return {
          peakBytes: existsSync(peakPath) ? Number(readFileSync(peakPath, "utf8")) : null,
          oomEvents: count("oom"),
          oomKills: count("oom_kill"),
          limitHits: count("max"),
        };
      });
      return { cgroup, why: `cgroup v2 at ${path} (memory.max=${limitBytes}, memory.swap.max=0)` };
    } catch (error) {
      attempts.push(`${path}: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  // cgroup v1: the memory hierarchy.
  const relative = /^\d+:memory:(.*)$/m.exec(own)?.[1];
  const mount = "/sys/fs/cgroup/memory";
  if (relative !== undefined && existsSync(mount)) {
    const path = join(mount, relative, name);
    try {
      mkdirSync(path);
      writeFileSync(join(path, "memory.limit_in_bytes"), String(limitBytes));
      // memsw = memory + swap: the same limit means no swap to escape to.
      if (existsSync(join(path, "memory.memsw.limit_in_bytes")))
        writeFileSync(join(path, "memory.memsw.limit_in_bytes"), String(limitBytes));
      const cgroup = cgroupAt(path, "v1", { anon: "total_rss", file: "total_cache" }, () => {
        const oomControl = readFileSync(join(path, "memory.oom_control"), "utf8");
        const oomKill = /^oom_kill (\d+)$/m.exec(oomControl)?.[1];
        return {
          peakBytes: Number(readFileSync(join(path, "memory.max_usage_in_bytes"), "utf8")),
          oomEvents: null,
          oomKills: oomKill === undefined ? null : Number(oomKill),
          limitHits: Number(readFileSync(join(path, "memory.failcnt"), "utf8")),
        };
      });
      return {
        cgroup,
        why: `cgroup v1 at ${path} (memory.limit_in_bytes = memory.memsw.limit_in_bytes = ${limitBytes}; cgroup v2 has no memory controller here: ${attempts.join("; ") || "not mounted"})`,
      };
    } catch (error) {
      attempts.push(`${path}: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  return {
    cgroup: null,
    why: `no writable memory cgroup: ${attempts.join("; ") || "no cgroup mount"}`,
  };
}

/**
 * Removes the cgroup once it is empty: the kernel lets it go only a moment after its last
 * process has exited, so the removal is tried again for up to 4 s. A cgroup still busy then is
 * left behind (it holds no memory once its processes are gone).
 */
export async function removeWhenEmpty(cgroup: MemoryCgroup): Promise<void> {
  for (let tries = 0; tries < 40; tries += 1) {
    try {
      cgroup.remove();
      return;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}
