import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, type TestContext } from "vitest";
import { buildSupervisor } from "../../runtimes/node/launcher/build-supervisor.ts";
import {
  loadOrCreateReceiptKey,
  PosixLauncher,
  readProcStat,
  type LaunchSpec,
  type ProcessHandle,
  type ReceiptReading,
} from "../../runtimes/node/launcher/index.ts";
import { waitFor as pollUntil } from "../support/wait.ts";

/**
 * Whether scratch supervisors get the native spawner beside them (the default, as a build with a
 * C compiler has). QLR_TEST_SPAWNER=0 runs a suite on the Node spawn fallback instead.
 */
export const NATIVE_SPAWNER_BY_DEFAULT = process.env.QLR_TEST_SPAWNER !== "0";

/** Skips a test that needs root (`user:` switches to another uid), saying why, when not root. */
export function skipUnlessRoot(context: TestContext, why: string): void {
  const uid = process.getuid?.() ?? -1;
  if (uid === 0) return;
  console.log("skipped: %s, and this test runs as uid %d", why, uid);
  context.skip();
}

/** A scratch directory per test file: the supervisor bundle and one state dir per test live in it. */
export async function makeScratch(
  prefix: string,
  options: { spawner?: boolean } = {},
): Promise<{ dir: string; supervisorPath: string; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), `qlr-${prefix}-`));
  const supervisorPath = await buildSupervisor(join(dir, "supervisor.mjs"), {
    spawner: options.spawner ?? NATIVE_SPAWNER_BY_DEFAULT,
  });
  return { dir, supervisorPath, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

export type Scratch = Awaited<ReturnType<typeof makeScratch>>;

/**
 * The scratch directory of one test file: made before its first test, removed after its last.
 * The fields are filled in by then, so tests read them as usual.
 */
export function useScratch(prefix: string, options: { spawner?: boolean } = {}): Scratch {
  const scratch = {} as Scratch;
  beforeAll(async () => {
    Object.assign(scratch, await makeScratch(prefix, options));
  });
  afterAll(async () => {
    await scratch.cleanup();
  });
  return scratch;
}

export function newAttemptId(): string {
  return `wta:${randomBytes(16).toString("hex")}`;
}

/**
 * A launcher on a fresh state dir in the scratch folder (or the one given). With
 * `supervisorUp`, the state dir's supervisor is up before it is returned: one `true` launched
 * and its receipt read.
 */
export async function newLauncher(
  scratch: { dir: string; supervisorPath: string },
  options: {
    graceMs?: number;
    procRoot?: string;
    stateDir?: string;
    supervisorUp?: boolean;
    lowMemory?: boolean;
  } = {},
): Promise<{ launcher: PosixLauncher; stateDir: string; hmacKey: Uint8Array }> {
  const { stateDir: givenStateDir, supervisorUp = false, ...launcherOptions } = options;
  const stateDir = givenStateDir ?? (await mkdtemp(join(scratch.dir, "state-")));
  const hmacKey = await loadOrCreateReceiptKey(stateDir);
  const launcher = new PosixLauncher({
    stateDir,
    hmacKey,
    nowMs: () => Date.now(),
    supervisorPath: scratch.supervisorPath,
    ...launcherOptions,
  });
  if (supervisorUp) {
    const warmUp = newAttemptId();
    await launcher.launch(shellSpec("true", { attemptId: warmUp, argv: ["true"] }));
    await waitForReceipt(launcher, warmUp);
  }
  return { launcher, stateDir, hmacKey };
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

/** The shared poll at the launcher suites' pace: every 20 ms, giving up after 15 s unless told. */
export function waitFor<T>(
  description: string,
  probe: () => Promise<T | null | undefined>,
  timeoutMs = 15_000,
): Promise<T> {
  return pollUntil(description, probe, timeoutMs, 20);
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

/**
 * The supervisor of a running task and, with the native spawner, the spawner between them
 * (task → qlr-spawner → qlr-supervisor; with Node's spawn the task's parent is the supervisor).
 */
export async function supervisorOfTask(
  taskPid: number,
): Promise<{ supervisorPid: number; spawnerPid: number | null }> {
  const task = await readProcStat(taskPid);
  if (task.kind !== "present") throw new Error(`task ${taskPid} is not in /proc`);
  const parentPid = task.stat.parentPid;
  const parentCommand = await readFile(`/proc/${parentPid}/cmdline`, "utf8");
  if (parentCommand.startsWith("qlr-supervisor"))
    return { supervisorPid: parentPid, spawnerPid: null };
  if (!parentCommand.split("\0")[0]?.endsWith("/qlr-spawner"))
    throw new Error(`task ${taskPid}'s parent is neither the supervisor nor the spawner`);
  const spawner = await readProcStat(parentPid);
  if (spawner.kind !== "present") throw new Error("the spawner is gone");
  return { supervisorPid: spawner.stat.parentPid, spawnerPid: parentPid };
}
