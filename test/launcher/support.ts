import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll } from "vitest";
import { buildSupervisor } from "../../runtimes/node/launcher/build-supervisor.ts";
import {
  loadOrCreateReceiptKey,
  PosixLauncher,
  readProcStat,
  type LaunchSpec,
  type ProcessHandle,
  type ReceiptReading,
} from "../../runtimes/node/launcher/index.ts";

/** A scratch directory per test file: the supervisor bundle and one state dir per test live in it. */
export async function makeScratch(
  prefix: string,
): Promise<{ dir: string; supervisorPath: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), `qlr-${prefix}-`));
  const supervisorPath = await buildSupervisor(join(dir, "supervisor.mjs"));
  return { dir, supervisorPath, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

export type Scratch = Awaited<ReturnType<typeof makeScratch>>;

/**
 * The scratch directory of one test file: made before its first test, removed after its last.
 * The fields are filled in by then, so tests read them as usual.
 */
export function useScratch(prefix: string): Scratch {
  const scratch = {} as Scratch;
  beforeAll(async () => {
    Object.assign(scratch, await makeScratch(prefix));
  });
  afterAll(async () => {
    await scratch.cleanup();
  });
  return scratch;
}

export function newAttemptId(): string {
  return `wta:${randomBytes(16).toString("hex")}`;
}

export async function newLauncher(
  scratch: { dir: string; supervisorPath: string },
  options: { graceMs?: number; procRoot?: string; stateDir?: string } = {},
): Promise<{ launcher: PosixLauncher; stateDir: string; hmacKey: Uint8Array }> {
  const { stateDir: givenStateDir, ...launcherOptions } = options;
  const stateDir = givenStateDir ?? (await mkdtemp(join(scratch.dir, "state-")));
  const hmacKey = await loadOrCreateReceiptKey(stateDir);
  const launcher = new PosixLauncher({
    stateDir,
    hmacKey,
    nowMs: () => Date.now(),
    supervisorPath: scratch.supervisorPath,
    ...launcherOptions,
  });
  return { launcher, stateDir, hmacKey };
}

/** A launcher whose state directory's supervisor is up: one `true` launched and its receipt read. */
export async function newLauncherWithSupervisor(
  scratch: { dir: string; supervisorPath: string },
  options: { stateDir?: string } = {},
): Promise<{ launcher: PosixLauncher; stateDir: string; hmacKey: Uint8Array }> {
  const started = await newLauncher(scratch, options);
  const warmUp = newAttemptId();
  await started.launcher.launch(shellSpec("true", { attemptId: warmUp, argv: ["true"] }));
  await waitForReceipt(started.launcher, warmUp);
  return started;
}

export function shellSpec(script: string, overrides: Partial<LaunchSpec> = {}): LaunchSpec {
  return {
    attemptId: newAttemptId(),
    argv: ["sh", "-c", script],
    env: {},
    cwd: null,
    logMaxBytes: 1024 * 1024,
    ...overrides,
  };
}

/** Polls every 20 ms until the probe returns a value, or fails after the timeout. */
export async function waitFor<T>(
  description: string,
  probe: () => Promise<T | null | undefined>,
  timeoutMs = 15_000,
): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== null && value !== undefined) return value;
    if (performance.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${description}`);
    await sleep(20);
  }
}

export async function waitForReceipt(
  launcher: PosixLauncher,
  attemptId: string,
  timeoutMs = 15_000,
): Promise<Exclude<ReceiptReading, { status: "none" }>> {
  return waitFor(
    `the receipt of ${attemptId}`,
    async () => {
      const reading = await launcher.readReceipt(attemptId);
      return reading.status === "none" ? null : reading;
    },
    timeoutMs,
  );
}

/** Test hygiene: ends whatever a failed test left running, by exact identity only. */
export async function killIfStillRunning(
  launcher: PosixLauncher,
  handles: readonly ProcessHandle[],
): Promise<void> {
  for (const handle of handles) {
    if ((await launcher.inspect(handle)).state !== "running") continue;
    try {
      process.kill(-handle.pid, "SIGKILL");
    } catch {
      // Already gone between the inspection and the kill.
    }
  }
}

/** True once the pid has no /proc entry or is a zombie (exited, waiting for its parent to reap it). */
export async function isGoneOrZombie(pid: number): Promise<true | null> {
  const reading = await readProcStat(pid);
  return reading.kind !== "present" || reading.stat.state === "Z" ? true : null;
}
