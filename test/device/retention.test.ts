/**
 * Retention on a device, with real processes (`qlr serve` as a child, the POSIX launcher, its
 * supervisors): a purged run's journal records, receipts, stop intents and log files are gone
 * while those of retained runs remain; and the purge stage's crash-safe order holds under a
 * SIGKILL at each of its named fault points: after a restart the database and the state dir
 * agree (no file of an attempt the store no longer has, and every started attempt the store
 * has keeps its journal and receipt).
 *
 * `--retention-runs 1` makes a run purgeable the moment a newer one ends, so no test waits for
 * a clock; every wait polls for a condition with a generous bound.
 */
import { chmod, mkdir, readdir, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { FaultPoint } from "../../src/coordinator.ts";
import { waitFor } from "../support/wait.ts";
import type { Scratch } from "../support/scratch.ts";
import { childEnv, startServe } from "../support/serve-child.ts";
import type { Api } from "../support/api-client.ts";
import type { RunDetail, RunView } from "../support/api-views.ts";
import { spawn } from "node:child_process";
import { useDeviceHarness } from "../support/device-harness.ts";

const device = useDeviceHarness();

const STATE_FILE_DIRS = ["journal", "receipts", "logs", "stops", "work"] as const;

/** The attempt id each state file belongs to, by directory (`logs/<id>.stdout.log` → `<id>`; `work/<id>` is the attempt's work directory). */
async function filesByAttempt(stateDir: string): Promise<Map<string, string[]>> {
  const owners = new Map<string, string[]>();
  for (const dir of STATE_FILE_DIRS) {
    for (const name of await readdir(join(stateDir, dir)).catch(() => [] as string[])) {
      const attemptId = name.replace(/\.(json|stdout\.log|stderr\.log|supervisor\.log)$/, "");
      owners.set(attemptId, [...(owners.get(attemptId) ?? []), `${dir}/${name}`]);
    }
  }
  return owners;
}

async function allRuns(api: Api): Promise<RunDetail[]> {
  const page = await api.call<{ runs: RunView[] }>("GET", "/runs?limit=200");
  return Promise.all(page.body.runs.map((run) => api.run(run.id)));
}

/**
 * Whether the database and the state dir agree: every file belongs to an attempt the store has,
 * and every attempt that crossed the start barrier has its journal record and its receipt.
 * Returns the disagreements (empty when they agree).
 */
async function disagreements(api: Api, stateDir: string): Promise<string[]> {
  const runs = await allRuns(api);
  const attempts = runs.flatMap((detail) => detail.attempts);
  const known = new Set(attempts.map((attempt) => attempt.id));
  const files = await filesByAttempt(stateDir);
  const problems: string[] = [];
  for (const [attemptId, names] of files)
    if (!known.has(attemptId)) problems.push(`orphan files ${names.join(", ")}`);
  for (const attempt of attempts) {
    if (attempt.startedAtMs === null) continue;
    const names = files.get(attempt.id) ?? [];
    if (!names.includes(`journal/${attempt.id}.json`))
      problems.push(`attempt ${attempt.id} lost its journal record`);
    if (!names.includes(`receipts/${attempt.id}.json`))
      problems.push(`attempt ${attempt.id} lost its receipt`);
  }
  return problems;
}

async function manifest(dir: Scratch): Promise<string> {
  const task = dir.task({
    label: "talk",
    then: 'echo "out of $STEP"; echo "err of $STEP" >&2; exit 0',
  });
  return (
    await dir.manifest(
      "keep",
      { talk: task },
      { pair: { steps: { a: { task: "talk" }, b: { task: "talk", needs: ["a"] } } } },
    )
  ).text;
}

async function finishedRun(api: Api): Promise<RunDetail> {
  const run = await api.startWorkflow("keep", "pair");
  const detail = await api.waitTerminal(run.id);
  expect(detail.run.status).toBe("succeeded");
  return detail;
}

describe("retention on a device", { timeout: 90_000 }, () => {
  it("a purged run's journals, receipts, logs and work directories are deleted; those of retained runs remain", async () => {
    const dir = await device.scratch("retention");
    const served = await startServe(device.bundle, dir.stateDir, { retentionRuns: "2" });
    const api = served.api;
    await api.apply(await manifest(dir));
    const oldest = await finishedRun(api);
    const middle = await finishedRun(api);
    // Every attempt left its journal, receipt, both logs and its work directory.
    for (const attempt of [...oldest.attempts, ...middle.attempts])
      expect((await filesByAttempt(dir.stateDir)).get(attempt.id)?.length, attempt.id).toBe(5);
    const newest = await finishedRun(api);
    // The rows go first (404), the files right after that commit: wait for both.
    await waitFor("the oldest run and its files to be purged", async () => {
      if ((await api.call("GET", `/runs/${oldest.run.id}`)).status !== 404) return false;
      const left = await filesByAttempt(dir.stateDir);
      return oldest.attempts.every((attempt) => !left.has(attempt.id));
    });
    const files = await filesByAttempt(dir.stateDir);
    for (const attempt of [...middle.attempts, ...newest.attempts]) {
      expect([...(files.get(attempt.id) ?? [])].sort()).toEqual([
        `journal/${attempt.id}.json`,
        `logs/${attempt.id}.stderr.log`,
        `logs/${attempt.id}.stdout.log`,
        `receipts/${attempt.id}.json`,
        `work/${attempt.id}`,
      ]);
    }
    const log = await api.call<string>("GET", `/runs/${newest.run.id}/steps/a/log`);
    expect(log.body).toContain("out of talk");
    expect(await disagreements(api, dir.stateDir)).toEqual([]);
    const metrics = await api.call<string>("GET", "/metrics");
    expect(metrics.body).toMatch(/^qlr_runs_purged_total 1$/m);
    const info = await api.call<unknown>("GET", "/info");
    expect(info.body).toEqual({
      profile: "standalone",
      retention: { horizonMs: 7 * 86_400_000, maxRuns: 2, idempotencyWindowMs: 7 * 86_400_000 },
    });
  });

  it("start-up removes the temporary files that killed writers left in tmp/, and keeps a live writer's", async () => {
    const dir = await device.scratch("retention-tmp");
    const tmp = join(dir.stateDir, "tmp");
    await mkdir(tmp, { recursive: true, mode: 0o700 });
    await chmod(dir.stateDir, 0o700);
    // A writer that has exited (its pid is free) and one that lives (this test's own process).
    const exited = spawn("true", { stdio: "ignore" });
    const deadPid = await new Promise<number>((resolveExit) =>
      exited.once("exit", () => resolveExit(exited.pid ?? 0)),
    );
    const oldSeconds = (Date.now() - 10 * 60_000) / 1000;
    const stale = [
      `wta:00aa.json.${deadPid}.0123456789ab-1.tmp`,
      `wta:00bb.json.${deadPid}.0123456789ab-2.tmp`,
    ];
    const living = `wta:00cc.json.${process.pid}.ba9876543210-1.tmp`;
    for (const name of [...stale, living]) {
      await writeFile(join(tmp, name), "{}\n", { mode: 0o600 });
      await utimes(join(tmp, name), oldSeconds, oldSeconds);
    }
    const served = await startServe(device.bundle, dir.stateDir);
    expect(await readdir(tmp)).toEqual([living]);
    // Logged before serve prints its address, on another pipe: read once it has arrived.
    await waitFor("the sweep's line on stderr", () =>
      /removed 2 temporary file\(s\) that stopped writers left behind/.test(served.stderr),
    );
  });

  it(
    "qlr serve refuses a bad retention with a usage error and writes nothing",
    { timeout: 30_000 },
    async () => {
      const dir = await device.scratch("retention-bad");
      const cases: [string[], Record<string, string>, RegExp][] = [
        [["--retention", "30s"], {}, /--retention must be from 1m to 3650d, got 30s/],
        [
          ["--retention-runs", "0"],
          {},
          /--retention-runs must be a whole number of runs from 1 to 10000000/,
        ],
        [[], { QLR_RETENTION: "forever" }, /QLR_RETENTION "forever" must look like/],
        [[], { QLR_RETENTION_RUNS: "lots" }, /QLR_RETENTION_RUNS must be a whole number/],
      ];
      for (const [flags, env, message] of cases) {
        const result = await new Promise<{ code: number | null; stderr: string }>((resolveRun) => {
          const child = spawn(
            process.execPath,
            [device.bundle.qlr, "serve", "--state-dir", dir.stateDir, "--port", "0", ...flags],
            { env: childEnv(env), stdio: ["ignore", "pipe", "pipe"] },
          );
          let stderr = "";
          child.stderr.setEncoding("utf8");
          child.stderr.on("data", (chunk: string) => (stderr += chunk));
          child.once("exit", (code) => resolveRun({ code, stderr }));
        });
        expect(result.code, flags.join(" ") || JSON.stringify(env)).toBe(64);
        expect(result.stderr).toMatch(message);
        // Nothing was written: not even the state dir with its token.
        expect(await readdir(dir.root)).toEqual([]);
      }
    },
  );
});

interface PurgeCrash {
  readonly point: FaultPoint;
  /** The files of the purged run's attempts that are left at the moment of the kill. */
  readonly leftAtKill: readonly string[];
}

const CRASHES: readonly PurgeCrash[] = [
  // Rows deleted in one committed transaction, no file touched yet.
  { point: "purge.after_commit", leftAtKill: ["journal", "logs", "logs", "receipts", "work"] },
  // Logs, receipts and the work directory removed and their directories fsynced; the journal record still marks the attempt.
  { point: "purge.discard_before_journal", leftAtKill: ["journal"] },
  // Everything gone; nothing left for the sweep.
  { point: "purge.after_discard", leftAtKill: [] },
];

describe("SIGKILL at each named point of the purge stage", { timeout: 90_000 }, () => {
  for (const crash of CRASHES) {
    it(`${crash.point}: after the restart the database and the state dir agree`, async () => {
      const dir = await device.scratch("retention-crash");
      const dying = await startServe(device.bundle, dir.stateDir, {
        retentionRuns: "1",
        fault: crash.point,
      });
      await dying.api.apply(await manifest(dir));
      const doomed = await finishedRun(dying.api);
      // The next run's end makes the first one purgeable; the purge kills the runtime at the point.
      await dying.api.startWorkflow("keep", "pair");
      const exit = await dying.exited;
      expect(exit.signal).toBe("SIGKILL");
      const files = await filesByAttempt(dir.stateDir);
      for (const attempt of doomed.attempts)
        expect(
          (files.get(attempt.id) ?? []).map((name) => name.split("/")[0]).sort(),
          attempt.id,
        ).toEqual([...crash.leftAtKill]);

      const served = await startServe(device.bundle, dir.stateDir, { retentionRuns: "1" });
      const api = served.api;
      expect((await api.call("GET", `/runs/${doomed.run.id}`)).status).toBe(404);
      // The first cycles sweep the orphans; the second run (the newest) keeps everything.
      const problems = await waitFor("the state dir to agree with the database", async () => {
        const found = await disagreements(api, dir.stateDir);
        return found.length === 0 ? found : null;
      });
      expect(problems).toEqual([]);
      const remaining = await allRuns(api);
      expect(remaining.map((detail) => detail.run.status)).toEqual(["succeeded"]);
      for (const attempt of remaining[0]?.attempts ?? [])
        expect((await filesByAttempt(dir.stateDir)).get(attempt.id)?.length).toBe(5);
    });
  }
});
