import { execFile } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { buildDist } from "../support/bundle.ts";
import { callApi } from "../support/cluster-members.ts";
import { isAlive, spawnQlr, stopQlr, type QlrProcess } from "../support/qlr-process.ts";
import { serveArgs, workerArgs } from "../support/qlr-args.ts";
import { waitFor as pollUntil } from "../support/wait.ts";

/**
 * `qlr serve` and `qlr worker` as real processes: a coordinator with remote_worker tasks in
 * pool p1, and a worker leasing them over HTTP and running them with the POSIX launcher.
 * Every wait is bounded; nothing asserts how fast anything is.
 */

const ROOT = resolve(import.meta.dirname, "../..");
const QLR = join(ROOT, "dist/qlr.mjs");
const WAIT_MS = 30_000;

interface AttemptView {
  readonly id: string;
  readonly stepRunId: string | null;
  readonly number: number;
  readonly status: string;
  readonly pid: number | null;
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly stopReason: string | null;
  readonly error: string | null;
}

interface RunDetail {
  readonly run: {
    readonly id: string;
    readonly status: string;
    readonly cancelRequestedAtMs: number | null;
  };
  readonly steps: readonly {
    readonly name: string;
    readonly status: string;
    readonly attemptCount: number;
  }[];
  readonly attempts: readonly AttemptView[];
}

const children: QlrProcess[] = [];
const taskPids = new Set<number>();
let scratch: string;
let serverUrl: string;
let token: string;
let server: QlrProcess;

const WORKER_TOKEN = "remote-worker-e2e-lease-token";

function start(
  name: string,
  args: readonly string[],
  env: Record<string, string> = {},
): QlrProcess {
  // childEnv: the caller's QLR_* settings must not leak into the processes under test.
  const proc = spawnQlr(QLR, name, args, { cwd: scratch, env });
  children.push(proc);
  return proc;
}

/** The shared poll with this file's ceiling; a timeout carries every child's output. */
function waitFor<T>(
  description: string,
  probe: () => Promise<T | null | undefined> | T | null | undefined,
  timeoutMs = WAIT_MS,
): Promise<T> {
  return pollUntil(description, probe, timeoutMs).catch((error: unknown) => {
    const output = children.map(
      (proc) => `--- ${proc.name} stdout\n${proc.stdout}\n--- ${proc.name} stderr\n${proc.stderr}`,
    );
    throw new Error(`${(error as Error).message}\n${output.join("\n")}`, { cause: error });
  });
}

async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const answer = await callApi<T>(serverUrl, token, method, path, body, 10_000);
  if (answer.status < 200 || answer.status > 299)
    throw new Error(`${method} ${path}: ${answer.status} ${JSON.stringify(answer.body)}`);
  return answer.body;
}

function detail(runId: string): Promise<RunDetail> {
  return api<RunDetail>("GET", `/runs/${runId}`);
}

async function startRun(workflow: string): Promise<string> {
  const { run } = await api<{ run: { id: string } }>("POST", "/runs", { package: "e2e", workflow });
  return run.id;
}

async function waitForRun(runId: string, statuses: readonly string[]): Promise<RunDetail> {
  return waitFor(`run ${runId} to be ${statuses.join("|")}`, async () => {
    const current = await detail(runId);
    for (const attempt of current.attempts) if (attempt.pid !== null) taskPids.add(attempt.pid);
    return statuses.includes(current.run.status) ? current : null;
  });
}

async function waitForRunningAttempt(runId: string): Promise<AttemptView> {
  return waitFor(`a running attempt with a pid in run ${runId}`, async () => {
    const current = await detail(runId);
    const running = current.attempts.find(
      (attempt) => attempt.status === "running" && attempt.pid !== null,
    );
    if (running?.pid !== undefined && running.pid !== null) taskPids.add(running.pid);
    return running;
  });
}

async function lines(path: string): Promise<string[]> {
  const text = await readFile(path, "utf8").catch(() => "");
  return text.split("\n").filter((line) => line.length > 0);
}

/** The process state letter from /proc/<pid>/stat, or null when there is no such process. */
async function procState(pid: number): Promise<string | null> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => null);
  if (stat === null) return null;
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0] ?? null;
}

function startWorker(
  stateDir: string,
  name: string,
  options: { readonly pool?: string; readonly env?: Record<string, string> } = {},
): QlrProcess {
  return start(name, workerArgs(serverUrl, stateDir, { capacity: 2, pool: options.pool ?? "p1" }), {
    QLR_WORKER_TOKEN: WORKER_TOKEN,
    ...options.env,
  });
}

const TERMINAL_RUN = ["succeeded", "failed", "timed_out", "cancelled", "lost"];

/** Waits for a worker armed with a fault point to have killed itself there. */
async function waitForExit(proc: QlrProcess): Promise<void> {
  await waitFor(`${proc.name} to die at its fault point`, () => (isAlive(proc) ? null : true));
}

/** The run's one attempt once the coordinator records it `starting` (the worker reported the start). */
async function waitForStartingAttempt(runId: string): Promise<AttemptView> {
  return waitFor(`a starting attempt in run ${runId}`, async () =>
    (await detail(runId)).attempts.find((attempt) => attempt.status === "starting"),
  );
}

/** The pid a task wrote beside its marker (`start <pid>`), recorded for the cleanup. */
async function markedPid(file: string): Promise<number> {
  const pid = await waitFor(`the task of ${file} to start`, async () => {
    const line = (await lines(join(markers, file))).find((text) => text.startsWith("start "));
    return line === undefined ? null : Number(line.split(" ")[1]);
  });
  taskPids.add(pid);
  return pid;
}

/**
 * The lost attempt opened a new ready epoch (`ready → ready`, naming it) before the next
 * attempt was claimed, and the next attempt is the one that ran.
 */
async function expectNewEpochAfter(
  runId: string,
  lostAttemptId: string,
  nextAttemptId: string,
): Promise<void> {
  const { events } = await api<{
    events: { type: string; attemptId: string | null; data: Record<string, unknown> }[];
  }>("GET", `/runs/${runId}/events`);
  const epoch = events.findIndex(
    (event) =>
      event.type === "step.status_changed" &&
      event.data.from === "ready" &&
      event.data.to === "ready" &&
      event.data.lostAttemptId === lostAttemptId,
  );
  expect(epoch).toBeGreaterThanOrEqual(0);
  const nextClaimed = events.findIndex((event) => event.attemptId === nextAttemptId);
  expect(nextClaimed).toBeGreaterThan(epoch);
  // Only the next attempt ever reached running.
  expect(
    events
      .filter((event) => event.type === "attempt.status_changed" && event.data.to === "running")
      .map((event) => event.attemptId),
  ).toEqual([nextAttemptId]);
}

async function leaseFiles(stateDir: string): Promise<string[]> {
  return (await readdir(join(stateDir, "leases"))).filter((name) => name.endsWith(".json"));
}

/** A worker forgets a lease once it is settled: its lease file goes. */
async function waitForNoLeaseFiles(stateDir: string): Promise<void> {
  await waitFor(`the lease files in ${stateDir} to be removed`, async () =>
    (await leaseFiles(stateDir)).length === 0 ? true : null,
  );
}

/** The exact process is gone (or an unreaped zombie). */
async function waitForProcessGone(pid: number): Promise<void> {
  await waitFor(`process ${pid} to end`, async () => {
    const state = await procState(pid);
    return state === null || state === "Z" ? true : null;
  });
}

/** Starts a run of the 30 s `long` workflow on the named (live) worker; resolves once it runs. */
async function startLongRunOn(
  workerName: string,
): Promise<{ worker: QlrProcess; runId: string; running: AttemptView; pid: number }> {
  const worker = children.find((proc) => proc.name === workerName)!;
  expect(isAlive(worker)).toBe(true);
  const runId = await startRun("long");
  const running = await waitForRunningAttempt(runId);
  return { worker, runId, running, pid: running.pid! };
}

/** Resolves once the run ended `status` with one attempt only, which matches `attempt`. */
async function waitForOneAttemptRun(
  runId: string,
  status: string,
  attempt: Partial<AttemptView>,
): Promise<RunDetail> {
  const done = await waitForRun(runId, TERMINAL_RUN);
  expect(done.run.status).toBe(status);
  expect(done.attempts).toHaveLength(1);
  expect(done.attempts[0]).toMatchObject(attempt);
  return done;
}

/** Resolves once the run succeeded in one attempt (the given one), so its step ran once. */
async function waitForSuccessInOneAttempt(runId: string, attemptId: string): Promise<RunDetail> {
  const done = await waitForOneAttemptRun(runId, "succeeded", {
    id: attemptId,
    status: "succeeded",
    exitCode: 0,
    error: null,
  });
  expect(done.steps[0]).toMatchObject({ status: "succeeded", attemptCount: 1 });
  return done;
}

/** Cancels a run; resolves once it ended cancelled, its one attempt stopped by the cancel. */
async function cancelRun(runId: string, attemptId: string): Promise<RunDetail> {
  await api("POST", `/runs/${runId}/cancel`);
  return waitForOneAttemptRun(runId, "cancelled", {
    id: attemptId,
    status: "cancelled",
    stopReason: "cancel",
  });
}

async function runEvents(
  runId: string,
): Promise<{ type: string; attemptId: string | null; data: Record<string, unknown> }[]> {
  return (
    await api<{
      events: { type: string; attemptId: string | null; data: Record<string, unknown> }[];
    }>("GET", `/runs/${runId}/events`)
  ).events;
}

let markers: string;

beforeAll(async () => {
  await buildDist(110_000);
  scratch = await mkdtemp(join(tmpdir(), "qlr-remote-e2e-"));
  markers = join(scratch, "markers");
  const append = (file: string, text: string): string => `echo ${text} >> ${join(markers, file)}`;
  await promisify(execFile)("mkdir", ["-p", markers]);
  const manifest = `package: e2e
tasks:
  first:
    run: ["sh", "-c", "${append("two", "a")}"]
    timeout: 30s
    executor: remote_worker
    pool: p1
  second:
    run: ["sh", "-c", "${append("two", "b")}"]
    timeout: 30s
    executor: remote_worker
    pool: p1
  slow:
    run: ["sh", "-c", "${append("slow", "start")}; sleep 2; ${append("slow", "end")}"]
    timeout: 60s
    executor: remote_worker
    pool: p1
  long:
    run: ["sh", "-c", "${append("long", "start")}; sleep 30; ${append("long", "end")}"]
    timeout: 120s
    executor: remote_worker
    pool: p1
  never_spawned:
    run: ["sh", "-c", "${append("never_spawned", "ran")}"]
    timeout: 30s
    executor: remote_worker
    pool: p2
  handleless:
    run: ["sh", "-c", "${append("handleless", "start $$")}; sleep 2; ${append("handleless", "end")}"]
    timeout: 60s
    executor: remote_worker
    pool: p2
  handleless_long:
    run: ["sh", "-c", "${append("handleless_long", "start $$")}; sleep 30; ${append("handleless_long", "end")}"]
    timeout: 120s
    executor: remote_worker
    pool: p2
workflows:
  never_spawned:
    steps:
      n: { task: never_spawned }
  handleless:
    steps:
      h: { task: handleless }
  handleless_long:
    steps:
      h: { task: handleless_long }
  two:
    steps:
      a: { task: first }
      b: { task: second, needs: [a] }
  slow:
    steps:
      s: { task: slow }
  long:
    steps:
      l: { task: long }
      after: { task: first, needs: [l] }
`;
  const manifestPath = join(scratch, "e2e.yaml");
  await writeFile(manifestPath, manifest);
  const stateDir = join(scratch, "server");
  // Workers authenticate with a worker token from the environment, as the README shows; it
  // opens the lease routes only.
  const workerTokenFile = join(scratch, "worker.token");
  await writeFile(workerTokenFile, `${WORKER_TOKEN}\n`, { mode: 0o600 });
  server = start(
    "server",
    serveArgs(stateDir, manifestPath, { extra: ["--worker-token-file", workerTokenFile] }),
  );
  serverUrl = await waitFor("the server to listen", () => {
    if (!isAlive(server)) throw new Error(`qlr serve exited: ${server.stderr}`);
    return /qlr serving (http:\/\/127\.0\.0\.1:\d+)/.exec(server.stdout)?.[1];
  });
  token = (await readFile(join(stateDir, "token"), "utf8")).trim();
}, 120_000);

afterAll(async () => {
  for (const proc of children.filter((item) => item !== server)) await stopQlr(proc, "SIGKILL");
  if (server !== undefined) await stopQlr(server, "SIGTERM");
  // Task processes a failed test may have left: only the exact pids this file saw, and only while they are still our sleeps.
  for (const pid of taskPids) {
    const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
    if (!cmdline.includes("sleep") && !cmdline.includes(scratch ?? "\u0000")) continue;
    try {
      process.kill(-pid, "SIGKILL");
    } catch {
      // Already gone.
    }
  }
  if (scratch !== undefined) await rm(scratch, { recursive: true, force: true });
}, 60_000);

describe("qlr worker against qlr serve", () => {
  const workerState = (): string => join(scratch, "worker");

  it("runs a two-step remote workflow to success, each step spawned exactly once", async () => {
    startWorker(workerState(), "worker-1");
    const runId = await startRun("two");
    const done = await waitForRun(runId, TERMINAL_RUN);
    expect(done.run.status).toBe("succeeded");
    expect(done.steps.map((step) => [step.name, step.status, step.attemptCount])).toEqual([
      ["a", "succeeded", 1],
      ["b", "succeeded", 1],
    ]);
    expect(done.attempts.map((attempt) => [attempt.status, attempt.exitCode])).toEqual([
      ["succeeded", 0],
      ["succeeded", 0],
    ]);
    expect(await lines(join(markers, "two"))).toEqual(["a", "b"]);
    // The worker forgets settled leases.
    await waitForNoLeaseFiles(workerState());
  }, 60_000);

  it("a SIGKILLed worker restarted on its state dir re-adopts the lease and reports the completion from the receipt, with no second spawn", async () => {
    const first = children.find((proc) => proc.name === "worker-1")!;
    expect(isAlive(first)).toBe(true);
    const runId = await startRun("slow");
    const running = await waitForRunningAttempt(runId);
    first.child.kill("SIGKILL");
    await first.exited;
    // The task runs on under its supervisor while no worker exists.
    expect(await lines(join(markers, "slow"))).toContain("start");

    const second = startWorker(workerState(), "worker-2");
    const done = await waitForSuccessInOneAttempt(runId, running.id);
    expect(done.attempts[0]!.pid).toBe(running.pid);
    expect(await lines(join(markers, "slow"))).toEqual(["start", "end"]);
    expect(second.stderr).toContain(`re-adopted lease of ${running.id}`);
    await waitForNoLeaseFiles(workerState());
    // Still exactly one spawn after the worker settled it.
    await sleep(500);
    expect(await lines(join(markers, "slow"))).toEqual(["start", "end"]);
  }, 60_000);

  it("cancelling a run whose remote step runs stops the exact process and everything ends cancelled", async () => {
    const { runId, running, pid } = await startLongRunOn("worker-2");
    expect(await procState(pid)).not.toBeNull();
    await waitFor("the long task to start", async () =>
      (await lines(join(markers, "long"))).includes("start") ? true : null,
    );

    const done = await cancelRun(runId, running.id);
    expect(done.steps.map((step) => [step.name, step.status])).toEqual([
      ["l", "cancelled"],
      ["after", "cancelled"],
    ]);
    // The exact process is gone (or an unreaped zombie), long before its 30 s sleep would end.
    await waitForProcessGone(pid);
    expect(await lines(join(markers, "long"))).toEqual(["start"]);
    const events = await runEvents(runId);
    expect(
      events.some(
        (event) =>
          event.type === "attempt.stop_requested" &&
          event.attemptId === running.id &&
          event.data.reason === "cancel",
      ),
    ).toBe(true);
    expect(events.some((event) => event.type === "workflow.task_timeout_requested")).toBe(false);
  }, 60_000);

  it("a lease file the coordinator does not know (a reused state dir) does not wedge the worker", async () => {
    await stopQlr(
      children.find((proc) => proc.name === "worker-2")!,
      "SIGTERM",
    );
    const stateDir = join(scratch, "worker-reused");
    const workerId = "w-reused-0001";
    const unknownAttempt = "wta:0123456789abcdef0123456789abcdef";
    await promisify(execFile)("mkdir", ["-p", join(stateDir, "leases")]);
    await writeFile(join(stateDir, "worker-id"), `${workerId}\n`);
    const lease = {
      attemptId: unknownAttempt,
      leaseVersion: 1,
      leaseSecret: "secret-from-another-coordinator-01",
      leaseExpiresAtMs: 0,
      runId: "run-from-elsewhere",
      stepRunId: null,
      taskRevision: "qltd:v1:1:x",
      execution: {
        executor: "remote_worker",
        pool: "p1",
        argv: ["true"],
        env: {},
        timeoutMs: 1000,
        shell: false,
      },
    };
    await writeFile(
      join(stateDir, "leases", `${unknownAttempt}.json`),
      JSON.stringify({ lease, workerId, handle: null }),
    );
    const worker = startWorker(stateDir, "worker-3");
    const before = await lines(join(markers, "two"));
    const runId = await startRun("two");
    const done = await waitForRun(runId, TERMINAL_RUN);
    expect(done.run.status).toBe("succeeded");
    expect(await lines(join(markers, "two"))).toEqual([...before, "a", "b"]);
    expect(worker.stderr).toContain(unknownAttempt);
    // The unknown lease is dropped rather than retried forever.
    await waitFor("the unknown lease file to be removed", async () =>
      (await readdir(join(stateDir, "leases"))).includes(`${unknownAttempt}.json`) ? null : true,
    );
  }, 60_000);

  // Pool p2: only the workers these cases start lease its tasks, so the fault lands on them.
  describe("a worker killed between its journal and persisting the handle", () => {
    const handlelessState = (): string => join(scratch, "worker-handleless");
    // A case that fails must not leave its pool-p2 worker to lease the next case's run.
    afterEach(async () => {
      for (const proc of children.filter((item) => item.name.startsWith("p2-")))
        if (isAlive(proc)) await stopQlr(proc, "SIGKILL");
    });

    /**
     * Starts a pool-p2 worker armed to die at `faultPoint`, then a run of `workflow` for it to
     * lease; resolves once that worker is dead, with the run's attempt left `starting`.
     */
    async function killAWorkerAt(
      faultPoint: string,
      workflow: string,
      stateDir = handlelessState(),
    ): Promise<{ runId: string; starting: AttemptView }> {
      const armed = startWorker(stateDir, `p2-${workflow}`, {
        pool: "p2",
        env: { QLR_FAULT_POINT: faultPoint },
      });
      const runId = await startRun(workflow);
      await waitForExit(armed);
      return { runId, starting: await waitForStartingAttempt(runId) };
    }
    /** The killed worker's state dir, served again by a worker without the fault. */
    const restartWorker = (workflow: string, stateDir = handlelessState()): QlrProcess =>
      startWorker(stateDir, `p2-${workflow}-restarted`, { pool: "p2" });

    it("SIGKILLed after the journal, before any supervisor was asked: restarted, it proves the task never spawned and reports it so; the step runs exactly once in a new epoch and the run succeeds", async () => {
      const stateDir = join(scratch, "worker-after-journal");
      const { runId, starting } = await killAWorkerAt(
        "launch.after_journal",
        "never_spawned",
        stateDir,
      );
      expect(starting.pid).toBeNull();
      // The window: journaled, no spawn record, the lease file without a handle.
      await readFile(join(stateDir, "journal", `${starting.id}.json`));
      const leaseFile = JSON.parse(
        await readFile(join(stateDir, "leases", `${starting.id}.json`), "utf8"),
      ) as { handle: unknown };
      expect(leaseFile.handle).toBeNull();

      const restarted = restartWorker("never_spawned", stateDir);
      const done = await waitForRun(runId, TERMINAL_RUN);
      // Provably never spawned, the attempt is lost before the start barrier: its step gets a
      // new ready epoch, whose own attempt runs the task once.
      expect(done.run.status).toBe("succeeded");
      expect(done.attempts).toHaveLength(2);
      expect(done.attempts[0]).toMatchObject({ id: starting.id, status: "lost", pid: null });
      expect(done.attempts[0]!.error).toContain("never spawned");
      expect(done.attempts[1]).toMatchObject({ status: "succeeded", exitCode: 0, error: null });
      expect(done.attempts[1]!.id).not.toBe(starting.id);
      expect(done.steps.map((step) => [step.name, step.status, step.attemptCount])).toEqual([
        ["n", "succeeded", 1],
      ]);
      await expectNewEpochAfter(runId, starting.id, done.attempts[1]!.id);
      expect(await lines(join(markers, "never_spawned"))).toEqual(["ran"]);
      expect(restarted.stderr).toContain(`re-adopted lease of ${starting.id}`);
      await waitForNoLeaseFiles(stateDir);
      // The supervisor refuses the settled id from now on: the lost attempt still never ran.
      expect(await lines(join(markers, "never_spawned"))).toEqual(["ran"]);
      await stopQlr(restarted, "SIGKILL");
    }, 90_000);

    it("SIGKILLed after the spawn, before the handle reached the lease file: restarted, it keeps the lease and completes from the receipt, one spawn", async () => {
      const { runId, starting } = await killAWorkerAt("worker.after_spawn", "handleless");
      expect(starting.pid).toBeNull();
      await markedPid("handleless");

      const restarted = restartWorker("handleless");
      await waitForSuccessInOneAttempt(runId, starting.id);
      expect((await lines(join(markers, "handleless"))).map((line) => line.split(" ")[0])).toEqual([
        "start",
        "end",
      ]);
      expect(restarted.stderr).toContain(`re-adopted lease of ${starting.id}`);
      expect(restarted.stderr).not.toContain("lost");
      await waitForNoLeaseFiles(handlelessState());
      await stopQlr(restarted, "SIGKILL");
    }, 90_000);

    it("SIGKILLed after the spawn, then the run is cancelled: the restarted worker stops the exact process through its supervisor and the attempt ends cancelled", async () => {
      const { runId, starting } = await killAWorkerAt("worker.after_spawn", "handleless_long");
      const pid = await markedPid("handleless_long");

      const restarted = restartWorker("handleless_long");
      // The supervisor names the exact process; the coordinator records it running, so the
      // cancel reaches it (a `starting` attempt waits for its start to be settled).
      await waitFor(`attempt ${starting.id} to run as pid ${pid}`, async () =>
        (await detail(runId)).attempts.find(
          (attempt) => attempt.status === "running" && attempt.pid === pid,
        ),
      );
      expect(restarted.stderr).toContain(`re-adopted lease of ${starting.id}`);
      expect(restarted.stderr).toContain(`recovered the process handle of ${starting.id}`);
      const done = await cancelRun(runId, starting.id);
      expect(done.attempts[0]!.pid).toBe(pid);
      // The exact process is gone (or an unreaped zombie), long before its 30 s sleep would end.
      await waitForProcessGone(pid);
      expect(
        (await lines(join(markers, "handleless_long"))).map((line) => line.split(" ")[0]),
      ).toEqual(["start"]);
      await stopQlr(restarted, "SIGKILL");
    }, 90_000);

    it("a launch that fails after the journal, in the same life and with the supervisor alive: the supervisor settles it never spawned, the worker reports it so, and the new epoch runs once", async () => {
      // The state dir of the cases above: its resident supervisor is alive, so the answer
      // comes from its settle, which also refuses the id from then on.
      const armed = startWorker(handlelessState(), "p2-worker-throw-after-journal", {
        pool: "p2",
        env: { QLR_FAULT_POINT: "launch.after_journal", QLR_FAULT_ACTION: "throw" },
      });
      const ranBefore = await lines(join(markers, "never_spawned"));
      const runId = await startRun("never_spawned");
      const done = await waitForRun(runId, TERMINAL_RUN);
      // The fault fails the first launch only: the new epoch's attempt runs in the same life.
      expect(done.run.status).toBe("succeeded");
      expect(done.attempts).toHaveLength(2);
      expect(done.attempts[0]).toMatchObject({ status: "lost", pid: null });
      expect(done.attempts[0]!.error).toContain("never spawned");
      expect(done.attempts[1]).toMatchObject({ status: "succeeded", exitCode: 0 });
      expect(done.steps.map((step) => [step.name, step.status, step.attemptCount])).toEqual([
        ["n", "succeeded", 1],
      ]);
      await expectNewEpochAfter(runId, done.attempts[0]!.id, done.attempts[1]!.id);
      expect(await lines(join(markers, "never_spawned"))).toEqual([...ranBefore, "ran"]);
      expect(isAlive(armed)).toBe(true);
      expect(armed.stderr).toContain("injected fault at launch.after_journal");
      await stopQlr(armed, "SIGKILL");
    }, 90_000);

    it("refuses a fault point qlr worker does not have, naming the ones it has", async () => {
      const refused = startWorker(join(scratch, "worker-bad-fault"), "p2-worker-bad-fault", {
        pool: "p2",
        env: { QLR_FAULT_POINT: "dispatch.after_spawn" },
      });
      const code = await refused.exited;
      expect(code).not.toBe(0);
      expect(refused.stderr).toContain("launch.after_journal, worker.after_spawn");
    }, 30_000);
  });

  // Last: it stops the server (and reads the outcome from a restarted one).
  it("stopping the server while a remote step runs: the worker's heartbeat carries the shutdown stop, the exact process is gone, and the attempt ends cancelled with stop reason shutdown, once", async () => {
    const { worker, runId, running, pid } = await startLongRunOn("worker-3");
    // SIGTERM: the server stops in order, answering its worker's lease calls meanwhile.
    server.child.kill("SIGTERM");
    const exitCode = await Promise.race([server.exited, sleep(60_000).then(() => "hung")]);
    expect(exitCode).toBe(0);
    // The exact process is gone (or an unreaped zombie), long before its 30 s sleep would end.
    await waitForProcessGone(pid);
    expect(worker.stderr).not.toContain(`lease of ${running.id} lost`);

    // The record, read from the same state dir by a restarted server.
    server = start("server-restarted", [
      "serve",
      "--state-dir",
      join(scratch, "server"),
      "--port",
      "0",
      "--worker-token-file",
      join(scratch, "worker.token"),
    ]);
    serverUrl = await waitFor("the restarted server to listen", () => {
      if (!isAlive(server)) throw new Error(`qlr serve exited: ${server.stderr}`);
      return /qlr serving (http:\/\/127\.0\.0\.1:\d+)/.exec(server.stdout)?.[1];
    });
    const done = await detail(runId);
    expect(done.attempts).toHaveLength(1);
    expect(done.attempts[0]).toMatchObject({
      id: running.id,
      status: "cancelled",
      stopReason: "shutdown",
      pid,
    });
    // A shutdown stop is step-scoped: the step failed, the run did not get a cancel intent.
    expect(done.steps.map((step) => [step.name, step.status])).toEqual([
      ["l", "failed"],
      ["after", "skipped"],
    ]);
    expect(done.run).toMatchObject({ status: "failed", cancelRequestedAtMs: null });
    const events = await runEvents(runId);
    expect(
      events
        .filter((event) => event.type === "attempt.stop_requested")
        .map((event) => [event.attemptId, event.data.reason]),
    ).toEqual([[running.id, "shutdown"]]);
    // Spawned once, never finished its sleep.
    expect((await lines(join(markers, "long"))).filter((line) => line === "end")).toEqual([]);
  }, 150_000);
});
