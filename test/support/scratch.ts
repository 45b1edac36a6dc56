/**
 * A test's scratch directory (state dir, manifest, marker file, gate files) and the hygiene
 * that ends exactly the processes the test started. Every task a test declares carries
 * `QLR_DEVICE_TEST_TAG=<scratch tag>` in its env (inherited by everything it starts) and every
 * runtime and supervisor names the scratch state dir on its command line, so
 * `Scratch.cleanup()` ends them by pid, and nothing else.
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { POLL_MS } from "./wait.ts";

const TAG_VARIABLE = "QLR_DEVICE_TEST_TAG";

export interface TaskSpec {
  /** The step label the task writes to the marker file. */
  readonly label: string;
  /**
   * What the task does before its marker line (sh syntax), such as a signal trap that must be in
   * place by the time the line shows that the task started. Default: nothing.
   */
  readonly first?: string;
  /** What the task does after writing its marker line (sh syntax). Default: exit 0. */
  readonly then?: string;
  readonly timeout?: string;
  readonly retry?: { max: number; backoff?: string; idempotent: boolean };
}

export interface WorkflowSpec {
  readonly steps: Record<string, { task: string; needs?: string[] }>;
  readonly inputs?: Record<string, Record<string, unknown>>;
  readonly notify?: unknown;
}

export class Scratch {
  readonly root: string;
  readonly tag: string;
  readonly stateDir: string;
  readonly marker: string;

  private constructor(root: string, tag: string) {
    this.root = root;
    this.tag = tag;
    this.stateDir = join(root, "state");
    this.marker = join(root, "spawns.log");
  }

  static async create(name: string): Promise<Scratch> {
    const root = await mkdtemp(join(tmpdir(), `qlr-device-${name}-`));
    return new Scratch(root, randomBytes(8).toString("hex"));
  }

  path(name: string): string {
    return join(this.root, name);
  }

  /** A gate file: a task waiting on it runs until the test opens it (bounded at 60 s). */
  gate(name: string): string {
    return join(this.root, `gate-${name}`);
  }

  async open(gate: string): Promise<void> {
    await writeFile(gate, "open\n");
  }

  /** A task script: `first`, one marker line `<label> <pid>` (the shell's `$$` is the task's pid), then `then`. */
  task(spec: TaskSpec): Record<string, unknown> {
    const script = `${spec.first === undefined ? "" : `${spec.first}\n`}echo "$STEP $$" >> "$MARKER"\n${spec.then ?? "exit 0"}\n`;
    return {
      shell: script,
      env: { STEP: spec.label, MARKER: this.marker, [TAG_VARIABLE]: this.tag },
      ...(spec.timeout === undefined ? {} : { timeout: spec.timeout }),
      ...(spec.retry === undefined ? {} : { retry: spec.retry }),
    };
  }

  /** sh that waits for a gate file (polling, at most 60 s; exit 99 past that), then goes on. */
  static untilGate(gate: string): string {
    return `n=0\nwhile [ ! -e '${gate}' ]; do n=$((n+1)); if [ "$n" -gt 1200 ]; then exit 99; fi; sleep 0.05; done`;
  }

  /** sh that waits for a gate file (polling, at most 60 s), then exits with `code`. */
  static waitForGate(gate: string, code = 0): string {
    return `${Scratch.untilGate(gate)}\nexit ${code}`;
  }

  /** Writes a JSON manifest file and returns its path and text. */
  async manifest(
    packageName: string,
    tasks: Record<string, Record<string, unknown>>,
    workflows: Record<string, WorkflowSpec>,
    extra: { schedules?: Record<string, Record<string, unknown>>; fileName?: string } = {},
  ): Promise<{ file: string; text: string }> {
    const text = JSON.stringify(
      {
        package: packageName,
        tasks,
        workflows,
        ...(extra.schedules === undefined ? {} : { schedules: extra.schedules }),
      },
      null,
      2,
    );
    const file = this.path(extra.fileName ?? `${packageName}.json`);
    await writeFile(file, text);
    return { file, text };
  }

  /** The marker file as `{label, pid}` lines, in spawn order; empty when no task ever ran. */
  async spawns(): Promise<{ label: string; pid: number }[]> {
    let text: string;
    try {
      text = await readFile(this.marker, "utf8");
    } catch {
      return [];
    }
    return text
      .split("\n")
      .filter((line) => line.length > 0)
      .map((line) => {
        const [label, pid] = line.split(" ");
        return { label: label ?? "", pid: Number(pid) };
      });
  }

  async spawnCount(label: string): Promise<number> {
    return (await this.spawns()).filter((spawn) => spawn.label === label).length;
  }

  /**
   * Ends every process this test started that is still alive — runtimes and supervisors (their
   * command line names this scratch dir) and tasks (their env carries this scratch's tag) — by
   * pid with SIGKILL, then removes the directory.
   */
  async cleanup(): Promise<void> {
    await killTagged(this.root, this.tag);
    await rm(this.root, { recursive: true, force: true });
  }
}

async function killTagged(root: string, tag: string): Promise<void> {
  const needle = `${TAG_VARIABLE}=${tag}`;
  for (let round = 0; round < 3; round += 1) {
    const entries = await readdir("/proc").catch(() => [] as string[]);
    let killed = 0;
    for (const entry of entries) {
      if (!/^[0-9]+$/.test(entry)) continue;
      const pid = Number(entry);
      if (pid === process.pid) continue;
      const [cmdline, environ] = await Promise.all([
        readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => ""),
        readFile(`/proc/${pid}/environ`, "utf8").catch(() => ""),
      ]);
      if (!cmdline.includes(root) && !environ.split("\0").includes(needle)) continue;
      try {
        process.kill(pid, "SIGKILL");
        killed += 1;
      } catch {
        // Gone since the listing.
      }
    }
    if (killed === 0) return;
    await sleep(POLL_MS);
  }
}

export async function ensureDir(path: string): Promise<void> {
  if (!existsSync(path)) await mkdir(path, { recursive: true });
}
