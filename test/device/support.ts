/**
 * The device test harness: REAL processes and REAL files. Each test file builds the `qlr` and
 * supervisor bundles once (`buildBundle` in a `beforeAll`), each test gets its own scratch
 * directory (state dir, manifest, marker file, gate files), starts `qlr serve` as a child
 * process and drives it through the HTTP API or the CLI.
 *
 * Why a private bundle and not `dist/`: test files run in parallel workers and other people
 * run builds and tests on the same checkout; rewriting `dist/qlr.mjs` while another test's
 * child is loading it would tear it. `buildBundle` runs esbuild with exactly the options of
 * `scripts/build.mjs` (and the supervisor through `buildSupervisor`, which that script
 * mirrors) into a temporary directory of its own. Its `node_modules` is a symbolic link to the
 * repository's, so the bundle's external packages resolve exactly as they do from `dist/`, and
 * `supervisor.mjs` sits beside `qlr.mjs`, where the launcher looks for it by default.
 *
 * Hygiene: every task a test declares carries `QLR_DEVICE_TEST_TAG=<scratch tag>` in its env
 * (inherited by everything it starts) and every runtime and supervisor names the scratch state
 * dir on its command line, so `Scratch.cleanup()` ends exactly the processes the test started,
 * by pid, and nothing else.
 */
import { spawn, execFile, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { buildSupervisor } from "../../runtimes/node/launcher/build-supervisor.ts";

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const TAG_VARIABLE = "QLR_DEVICE_TEST_TAG";
/** Polling interval of every wait in this suite. */
export const POLL_MS = 50;

// ---------------------------------------------------------------------------------------------
// The build

export interface Bundle {
  readonly dir: string;
  readonly qlr: string;
  readonly supervisor: string;
  cleanup(): Promise<void>;
}

/** Builds dist-equivalent `qlr.mjs` and `supervisor.mjs` into a private directory (see the header). */
export async function buildBundle(): Promise<Bundle> {
  const { build } = await import("esbuild");
  const dir = await mkdtemp(join(tmpdir(), "qlr-device-build-"));
  await symlink(join(REPO_ROOT, "node_modules"), join(dir, "node_modules"), "dir");
  const qlr = join(dir, "qlr.mjs");
  // The options of scripts/build.mjs, output path aside.
  await build({
    entryPoints: [join(REPO_ROOT, "runtimes/node/main.ts")],
    outfile: qlr,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    packages: "external",
    banner: { js: "#!/usr/bin/env node" },
    legalComments: "none",
    logLevel: "warning",
  });
  const supervisor = await buildSupervisor(join(dir, "supervisor.mjs"));
  return { dir, qlr, supervisor, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

// ---------------------------------------------------------------------------------------------
// Waiting

/** Polls every 50 ms until the probe returns a value (not null/undefined/false), or fails after the timeout. */
export async function waitFor<T>(description: string, probe: () => Promise<T | null | undefined | false> | T | null | undefined | false, timeoutMs = 20_000): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  let lastError: unknown = null;
  for (;;) {
    try {
      const value = await probe();
      if (value !== null && value !== undefined && value !== false) return value;
    } catch (error) {
      lastError = error;
    }
    if (performance.now() > deadline) {
      const cause = lastError === null ? "" : ` (last error: ${lastError instanceof Error ? lastError.message : JSON.stringify(lastError)})`;
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${description}${cause}`);
    }
    await sleep(POLL_MS);
  }
}

// ---------------------------------------------------------------------------------------------
// /proc

/** The state letter of /proc/<pid>/stat (R, S, Z, …), or null when the pid has no entry. */
export async function procState(pid: number): Promise<string | null> {
  try {
    const text = await readFile(`/proc/${pid}/stat`, "utf8");
    const fields = text.slice(text.lastIndexOf(")") + 1).trim().split(/\s+/);
    return fields[0] ?? null;
  } catch {
    return null;
  }
}

/** True while the pid exists and is not a zombie. */
export async function isRunning(pid: number): Promise<boolean> {
  const state = await procState(pid);
  return state !== null && state !== "Z" && state !== "X";
}

export async function waitUntilGone(pid: number, timeoutMs = 20_000): Promise<void> {
  await waitFor(`pid ${pid} to be gone or a zombie`, async () => !(await isRunning(pid)), timeoutMs);
}

// ---------------------------------------------------------------------------------------------
// Scratch directories, manifests, marker files

export interface TaskSpec {
  /** The step label the task writes to the marker file. */
  readonly label: string;
  /** What the task does after writing its marker line (sh syntax). Default: exit 0. */
  readonly then?: string;
  readonly timeout?: string;
  readonly retry?: { max: number; backoff?: string; idempotent: boolean };
}

export interface WorkflowSpec {
  readonly steps: Record<string, { task: string; needs?: string[] }>;
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

  /** A task script: one marker line `<label> <pid>` (the shell's `$$` is the task's pid), then `then`. */
  task(spec: TaskSpec): Record<string, unknown> {
    const script = `echo "$STEP $$" >> "$MARKER"\n${spec.then ?? "exit 0"}\n`;
    return {
      shell: script,
      env: { STEP: spec.label, MARKER: this.marker, [TAG_VARIABLE]: this.tag },
      ...(spec.timeout === undefined ? {} : { timeout: spec.timeout }),
      ...(spec.retry === undefined ? {} : { retry: spec.retry }),
    };
  }

  /** sh that waits for a gate file (polling, at most 60 s), then exits with `code`. */
  static waitForGate(gate: string, code = 0): string {
    return `n=0\nwhile [ ! -e '${gate}' ]; do n=$((n+1)); if [ "$n" -gt 1200 ]; then exit 99; fi; sleep 0.05; done\nexit ${code}`;
  }

  /** Writes a JSON manifest file and returns its path and text. */
  async manifest(packageName: string, tasks: Record<string, Record<string, unknown>>, workflows: Record<string, WorkflowSpec>): Promise<{ file: string; text: string }> {
    const text = JSON.stringify({ package: packageName, tasks, workflows }, null, 2);
    const file = this.path(`${packageName}.json`);
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
      const [cmdline, environ] = await Promise.all([readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => ""), readFile(`/proc/${pid}/environ`, "utf8").catch(() => "")]);
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

// ---------------------------------------------------------------------------------------------
// State files

export interface JournalFile {
  readonly attemptId: string;
  readonly startedAtMs: number;
  readonly bootId: string;
}

export interface ReceiptFile {
  readonly attemptId: string;
  readonly startedAtMs: number;
  readonly finishedAtMs: number;
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly stopReason: string | null;
  readonly spawnError: string | null;
  readonly mac: string;
}

export function receiptPath(stateDir: string, attemptId: string): string {
  return join(stateDir, "receipts", `${attemptId}.json`);
}

export async function readJournal(stateDir: string, attemptId: string): Promise<JournalFile | null> {
  try {
    return JSON.parse(await readFile(join(stateDir, "journal", `${attemptId}.json`), "utf8")) as JournalFile;
  } catch {
    return null;
  }
}

export async function readReceipt(stateDir: string, attemptId: string): Promise<ReceiptFile | null> {
  try {
    return JSON.parse(await readFile(receiptPath(stateDir, attemptId), "utf8")) as ReceiptFile;
  } catch {
    return null;
  }
}

/** The journal's file names (every attempt that crossed the pre-spawn barrier). */
export async function journalNames(stateDir: string): Promise<string[]> {
  return (await readdir(join(stateDir, "journal")).catch(() => [] as string[])).sort();
}

// ---------------------------------------------------------------------------------------------
// The runtime as a child process

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** A clean environment for a child: no QLR_* settings or NODE_OPTIONS leak in from the test runner. */
export function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (key.startsWith("QLR_") || key === "NODE_OPTIONS") continue;
    env[key] = value;
  }
  return { ...env, ...extra };
}

export class Served {
  readonly child: ChildProcess;
  readonly url: string;
  readonly token: string;
  readonly stateDir: string;
  readonly exited: Promise<Exit>;
  private readonly output: { stdout: string; stderr: string };

  constructor(parts: { child: ChildProcess; url: string; token: string; stateDir: string; exited: Promise<Exit>; output: { stdout: string; stderr: string } }) {
    this.child = parts.child;
    this.url = parts.url;
    this.token = parts.token;
    this.stateDir = parts.stateDir;
    this.exited = parts.exited;
    this.output = parts.output;
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  get stdout(): string {
    return this.output.stdout;
  }

  get stderr(): string {
    return this.output.stderr;
  }

  get api(): Api {
    return new Api(this.url, this.token);
  }

  /** SIGKILL (a power cut, an OOM kill) and wait for the exit. */
  async kill9(): Promise<Exit> {
    this.child.kill("SIGKILL");
    return this.exited;
  }
}

/** Every runtime child of this test file, so `stopAllServed` can end what a failed test left. */
const servedChildren = new Set<ChildProcess>();

export function stopAllServed(): void {
  for (const child of servedChildren) {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  }
  servedChildren.clear();
}

/**
 * Starts `node qlr.mjs serve --state-dir DIR --port 0` and waits for its `qlr serving URL`
 * line. `fault` sets QLR_FAULT_POINT: the runtime SIGKILLs itself when that point is reached.
 */
export async function startServe(bundle: Bundle, stateDir: string, options: { fault?: string; apply?: string[]; profile?: string; tickInterval?: string; retention?: string; retentionRuns?: string } = {}): Promise<Served> {
  const args = [
    bundle.qlr,
    "serve",
    "--state-dir",
    stateDir,
    "--port",
    "0",
    ...(options.profile === undefined ? [] : ["--profile", options.profile]),
    ...(options.tickInterval === undefined ? [] : ["--tick-interval", options.tickInterval]),
    ...(options.retention === undefined ? [] : ["--retention", options.retention]),
    ...(options.retentionRuns === undefined ? [] : ["--retention-runs", options.retentionRuns]),
    ...(options.apply ?? []).flatMap((file) => ["--apply", file]),
  ];
  const child = spawn(process.execPath, args, { env: childEnv(options.fault === undefined ? {} : { QLR_FAULT_POINT: options.fault }), stdio: ["ignore", "pipe", "pipe"] });
  servedChildren.add(child);
  const output = { stdout: "", stderr: "" };
  const exited = new Promise<Exit>((resolveExit) => child.once("exit", (code, signal) => resolveExit({ code, signal })));
  child.stdout?.setEncoding("utf8");
  child.stderr?.setEncoding("utf8");
  child.stderr?.on("data", (chunk: string) => (output.stderr += chunk));
  const url = await new Promise<string>((resolveUrl, rejectUrl) => {
    const timer = setTimeout(() => rejectUrl(new Error(`qlr serve did not print its URL within 30 s\nstdout: ${output.stdout}\nstderr: ${output.stderr}`)), 30_000);
    child.stdout?.on("data", (chunk: string) => {
      output.stdout += chunk;
      const match = /qlr serving (http:\/\/\S+)/.exec(output.stdout);
      if (match?.[1] !== undefined) {
        clearTimeout(timer);
        resolveUrl(match[1]);
      }
    });
    void exited.then((exit) => {
      clearTimeout(timer);
      rejectUrl(new Error(`qlr serve exited (${exit.signal ?? `code ${exit.code}`}) before serving\nstdout: ${output.stdout}\nstderr: ${output.stderr}`));
    });
  });
  const token = (await readFile(join(stateDir, "token"), "utf8")).trim();
  return new Served({ child, url, token, stateDir, exited, output });
}

// ---------------------------------------------------------------------------------------------
// The HTTP API

export interface RunView {
  readonly id: string;
  readonly kind: string;
  readonly status: string;
  readonly package: string;
  readonly target: string;
  readonly createdAtMs: number;
  readonly finishedAtMs: number | null;
  readonly cancelRequestedAtMs: number | null;
}

export interface StepView {
  readonly id: string;
  readonly name: string;
  readonly task: string;
  readonly status: string;
  readonly version: number;
  readonly attemptCount: number;
  readonly startedAtMs: number | null;
  readonly finishedAtMs: number | null;
}

export interface AttemptView {
  readonly id: string;
  readonly stepRunId: string | null;
  readonly number: number;
  readonly status: string;
  readonly executor: string;
  readonly startedAtMs: number | null;
  readonly finishedAtMs: number | null;
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly pid: number | null;
  readonly stopReason: string | null;
  readonly error: string | null;
}

export interface RunDetail {
  readonly run: RunView;
  readonly steps: StepView[];
  readonly attempts: AttemptView[];
}

export interface EventView {
  readonly seq: number;
  readonly type: string;
  readonly atMs: number;
  readonly stepRunId: string | null;
  readonly attemptId: string | null;
  readonly data: Record<string, unknown>;
}

export interface RecoveryView {
  readonly attemptId: string;
  readonly decision: string;
  readonly reason: string | null;
}

export const TERMINAL_RUN = new Set(["succeeded", "failed", "timed_out", "cancelled", "lost"]);
export const TERMINAL_ATTEMPT = new Set(["succeeded", "failed", "timed_out", "cancelled", "lost"]);

export class Api {
  readonly url: string;
  readonly token: string;

  constructor(url: string, token: string) {
    this.url = url;
    this.token = token;
  }

  async call<T>(method: string, path: string, body?: { text: string; contentType: string }): Promise<{ status: number; body: T }> {
    const response = await fetch(`${this.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${this.token}`, ...(body === undefined ? {} : { "content-type": body.contentType }) },
      ...(body === undefined ? {} : { body: body.text }),
      signal: AbortSignal.timeout(15_000),
    });
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // Plain text (logs, metrics).
    }
    return { status: response.status, body: parsed as T };
  }

  private async ok<T>(method: string, path: string, body?: { text: string; contentType: string }): Promise<T> {
    const answer = await this.call<T>(method, path, body);
    if (answer.status >= 300) throw new Error(`${method} ${path} answered ${answer.status}: ${JSON.stringify(answer.body)}`);
    return answer.body;
  }

  async apply(manifestText: string): Promise<{ package: string; generation: number; changed: boolean }> {
    return this.ok("POST", "/packages", { text: manifestText, contentType: "application/json" });
  }

  async startWorkflow(packageName: string, workflow: string): Promise<RunView> {
    return (await this.ok<{ run: RunView }>("POST", "/runs", { text: JSON.stringify({ package: packageName, workflow }), contentType: "application/json" })).run;
  }

  async cancel(runId: string): Promise<{ status: number; run: RunView }> {
    const answer = await this.call<{ run: RunView }>("POST", `/runs/${runId}/cancel`);
    if (answer.status !== 202) throw new Error(`cancel answered ${answer.status}: ${JSON.stringify(answer.body)}`);
    return { status: answer.status, run: answer.body.run };
  }

  async run(runId: string): Promise<RunDetail> {
    return this.ok("GET", `/runs/${runId}`);
  }

  async events(runId: string): Promise<EventView[]> {
    return (await this.ok<{ events: EventView[] }>("GET", `/runs/${runId}/events`)).events;
  }

  async recovery(): Promise<RecoveryView[]> {
    return (await this.ok<{ recovery: RecoveryView[] }>("GET", "/recovery")).recovery;
  }

  async tick(): Promise<{ stages: { name: string; processed: number; errors: unknown[] }[] }> {
    return (await this.ok<{ report: { stages: { name: string; processed: number; errors: unknown[] }[] } }>("POST", "/tick")).report;
  }

  /** Waits until the run is terminal and returns its detail. */
  async waitTerminal(runId: string, timeoutMs = 30_000): Promise<RunDetail> {
    return waitFor(`run ${runId} to end`, async () => {
      const detail = await this.run(runId);
      return TERMINAL_RUN.has(detail.run.status) ? detail : null;
    }, timeoutMs);
  }

  /** Waits until the named step's latest attempt is running with a pid. */
  async waitStepRunning(runId: string, stepName: string, timeoutMs = 20_000): Promise<{ detail: RunDetail; step: StepView; attempt: AttemptView & { pid: number } }> {
    return waitFor(`step ${stepName} of ${runId} to run`, async () => {
      const detail = await this.run(runId);
      const step = detail.steps.find((candidate) => candidate.name === stepName);
      const attempt = detail.attempts.filter((candidate) => candidate.stepRunId === step?.id).at(-1);
      if (step === undefined || attempt === undefined || attempt.status !== "running" || attempt.pid === null || step.status !== "running") return null;
      return { detail, step, attempt: attempt as AttemptView & { pid: number } };
    }, timeoutMs);
  }
}

export function stepNamed(detail: RunDetail, name: string): StepView {
  const step = detail.steps.find((candidate) => candidate.name === name);
  if (step === undefined) throw new Error(`run ${detail.run.id} has no step ${name}`);
  return step;
}

export function attemptsOf(detail: RunDetail, name: string): AttemptView[] {
  const step = stepNamed(detail, name);
  return detail.attempts.filter((attempt) => attempt.stepRunId === step.id);
}

// ---------------------------------------------------------------------------------------------
// The CLI

export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `node qlr.mjs ARGS…` to completion (bounded) and returns its exit code and output. */
export function runCli(bundle: Bundle, args: readonly string[], timeoutMs = 60_000): Promise<CliResult> {
  return new Promise((resolveRun) => {
    execFile(process.execPath, [bundle.qlr, ...args], { env: childEnv(), timeout: timeoutMs, maxBuffer: 4 * 1024 * 1024 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === "number" ? error.code : -1;
      resolveRun({ code, stdout, stderr });
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Exact replay checks shared by the crash and stop tests

/**
 * Every attempt that crossed the pre-spawn barrier (has a journal record) ended exactly as its
 * authenticated receipt says: terminal, the receipt's exit code and signal, and the journal's
 * pre-spawn startedAtMs (ADR-0229 §5) — no lost completion, no completion invented. Attempts
 * without a journal never spawned and must not be running.
 */
export async function expectReceiptsHonoured(stateDir: string, detail: RunDetail): Promise<void> {
  const names = await journalNames(stateDir);
  const journaled = new Set(names.map((name) => name.replace(/\.json$/, "")));
  for (const attempt of detail.attempts) {
    if (!journaled.has(attempt.id)) {
      if (attempt.status === "running" || attempt.status === "starting") throw new Error(`attempt ${attempt.id} is ${attempt.status} without a journal record`);
      continue;
    }
    const journal = await readJournal(stateDir, attempt.id);
    const receipt = await readReceipt(stateDir, attempt.id);
    if (journal === null || receipt === null) throw new Error(`attempt ${attempt.id}: journal ${journal === null ? "missing" : "present"}, receipt ${receipt === null ? "missing" : "present"}`);
    const facts = { status: TERMINAL_ATTEMPT.has(attempt.status), exitCode: attempt.exitCode, signal: attempt.signal, startedAtMs: attempt.startedAtMs, finishedAtMs: attempt.finishedAtMs };
    const expected = { status: true, exitCode: receipt.exitCode, signal: receipt.signal, startedAtMs: journal.startedAtMs, finishedAtMs: receipt.finishedAtMs };
    if (JSON.stringify(facts) !== JSON.stringify(expected) || receipt.startedAtMs !== journal.startedAtMs) {
      throw new Error(`attempt ${attempt.id} (${attempt.status}) does not match its receipt: ${JSON.stringify(facts)} vs ${JSON.stringify(expected)}`);
    }
  }
  // No journal record belongs to an attempt the store does not know.
  const known = new Set(detail.attempts.map((attempt) => attempt.id));
  for (const id of journaled) if (!known.has(id)) throw new Error(`journal record ${id} names no attempt of run ${detail.run.id}`);
}

export async function ensureDir(path: string): Promise<void> {
  if (!existsSync(path)) await mkdir(path, { recursive: true });
}

/** Resolves with the promise's value, or fails after the timeout. */
export async function within<T>(description: string, promise: Promise<T>, timeoutMs: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${description}`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
