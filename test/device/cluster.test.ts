import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, readFile } from "node:fs/promises";
import { createServer } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Prng } from "../../src/sim/prng.ts";
import { TERMINAL_RUN } from "../support/api-client.ts";
import type { EventView, RunDetail } from "../support/api-views.ts";
import { buildBundle, type Bundle } from "../support/bundle.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { Scratch } from "../support/scratch.ts";
import { childEnv } from "../support/serve-child.ts";
import { waitFor } from "../support/wait.ts";

/**
 * The cluster harness: three real `qlr serve --store postgres --profile cluster` and two
 * `qlr worker` processes on one PostgreSQL (a database of its own on the embedded server), a
 * mix of workflows (local and remote steps, idempotent retries and non-idempotent steps,
 * deadlines, cancels), and coordinators and workers SIGKILLed and restarted at seeded random.
 * Then a checker over the whole record:
 * - every run is terminal, and every run that nothing cancelled or timed out succeeded;
 * - every spawn (a marker line `<label> <pid>` each task writes first) is the recorded process
 *   of exactly one attempt, which is settled by its receipt (never `lost`): no (run, step,
 *   epoch) spawned twice, no completion lost;
 * - every non-idempotent step spawned at most once, exactly once when it succeeded;
 * - every run's events are numbered 1..n without a gap;
 * - no API call was answered 409 because the coordinators contended among themselves.
 * `QLR_CLUSTER_RUNS` scales it (default 40), `QLR_CLUSTER_SEED` replays a seed; a failure
 * names its seed.
 */

const RUNS = Number(process.env.QLR_CLUSTER_RUNS ?? 40);
/** Chaos goes on after the last run is submitted until this many members were killed (bounded by CHAOS_TAIL_MS). */
const MIN_KILLS = 6;
const CHAOS_TAIL_MS = 60_000;
const SEED = Number(
  process.env.QLR_CLUSTER_SEED ?? Number.parseInt(randomBytes(4).toString("hex"), 16),
);
const TOKEN = `cluster-admin-${randomBytes(12).toString("hex")}`;
const WORKER_TOKEN = `cluster-worker-${randomBytes(12).toString("hex")}`;
const CONVERGE_MS = Number(process.env.QLR_CLUSTER_CONVERGE_MS ?? 300_000);

interface Member {
  readonly name: string;
  readonly kind: "coordinator" | "worker";
  readonly args: () => string[];
  child: ChildProcess | null;
  exited: Promise<void>;
  output: string;
  restarts: number;
}

async function freePort(): Promise<number> {
  return new Promise((resolvePort, rejectPort) => {
    const server = createServer();
    server.once("error", rejectPort);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

function alive(member: Member): boolean {
  return (
    member.child !== null && member.child.exitCode === null && member.child.signalCode === null
  );
}

describe("three coordinators and two workers on one PostgreSQL, SIGKILLed at random", () => {
  let bundle: Bundle;
  let database: TestDatabase;
  let scratch: Scratch;
  const members: Member[] = [];
  const urls: string[] = [];

  beforeAll(async () => {
    bundle = await buildBundle();
    database = await createTestDatabase();
    scratch = await Scratch.create("cluster");
  });
  afterAll(async () => {
    for (const member of members) if (alive(member)) member.child?.kill("SIGKILL");
    await scratch?.cleanup();
    await database?.drop();
    await bundle?.cleanup();
  });

  function launch(member: Member): void {
    const child = spawn(process.execPath, [bundle.qlr, ...member.args()], {
      env: childEnv({
        QLR_TOKEN: TOKEN,
        QLR_WORKER_TOKEN: WORKER_TOKEN,
        QLR_DATABASE_URL: database.url,
        QLR_DEVICE_TEST_TAG: scratch.tag,
      }),
      stdio: ["ignore", "pipe", "pipe"],
    });
    member.child = child;
    member.exited = new Promise((resolveExit) => child.once("exit", () => resolveExit()));
    const keep = (text: string): void => {
      // The tail is enough to explain a failure; a long soak must not grow without bound.
      member.output = (member.output + text).slice(-20_000);
    };
    child.stdout?.setEncoding("utf8").on("data", keep);
    child.stderr?.setEncoding("utf8").on("data", keep);
  }

  async function call<T>(
    url: string,
    method: string,
    path: string,
    body?: unknown,
  ): Promise<{ status: number; body: T }> {
    const response = await fetch(`${url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${TOKEN}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(15_000),
    });
    const text = await response.text();
    return { status: response.status, body: (text.length > 0 ? JSON.parse(text) : null) as T };
  }

  it("every run converges with exact replay", { timeout: 900_000 }, async () => {
    const prng = new Prng(SEED);
    const context = `seed ${SEED} (replay with QLR_CLUSTER_SEED=${SEED} QLR_CLUSTER_RUNS=${RUNS})`;
    process.stdout.write(`cluster harness: ${context}\n`);
    const markerDir = scratch.path("markers");
    await mkdir(markerDir, { recursive: true });

    // Three coordinators on fixed ports (a restart comes back where clients and workers look).
    for (let index = 0; index < 3; index += 1) {
      const port = await freePort();
      const stateDir = scratch.path(`coordinator-${index}`);
      urls.push(`http://127.0.0.1:${port}`);
      members.push({
        name: `coordinator-${index}`,
        kind: "coordinator",
        args: () => [
          "serve",
          "--store",
          "postgres",
          "--profile",
          "cluster",
          "--host",
          "127.0.0.1",
          "--port",
          String(port),
          "--state-dir",
          stateDir,
        ],
        child: null,
        exited: Promise.resolve(),
        output: "",
        restarts: 0,
      });
    }
    for (let index = 0; index < 2; index += 1) {
      const stateDir = scratch.path(`worker-${index}`);
      const coordinatorUrl = urls[index] ?? "";
      members.push({
        name: `worker-${index}`,
        kind: "worker",
        args: () => [
          "worker",
          "--coordinator",
          coordinatorUrl,
          "--pool",
          "p1",
          "--capacity",
          "4",
          "--state-dir",
          stateDir,
        ],
        child: null,
        exited: Promise.resolve(),
        output: "",
        restarts: 0,
      });
    }
    const coordinators = members.filter((member) => member.kind === "coordinator");
    const describeAll = (): string =>
      `${context}\n${members.map((member) => `--- ${member.name} (restarts ${member.restarts})\n${member.output.slice(-4_000)}`).join("\n")}`;
    const healthy = async (url: string): Promise<boolean> => {
      try {
        return (await call(url, "GET", "/healthz")).status === 200;
      } catch {
        return false;
      }
    };
    // The first coordinator migrates the database; the others start once it serves.
    launch(coordinators[0] as Member);
    await waitFor(`coordinator-0 serves\n${describeAll()}`, () => healthy(urls[0] ?? ""), 60_000);
    for (const member of members.slice(1)) launch(member);
    for (const url of urls)
      await waitFor(`${url} serves\n${describeAll()}`, () => healthy(url), 60_000);

    const task = (
      label: string,
      then: string,
      extra: Record<string, unknown> = {},
    ): Record<string, unknown> => ({ ...scratch.task({ label, then }), ...extra });
    const manifest = await scratch.manifest(
      "cluster",
      {
        once: task("once", "sleep 0.2", { timeout: "2m" }),
        remote_once: task("remote_once", "sleep 0.2", {
          timeout: "2m",
          executor: "remote_worker",
          pool: "p1",
        }),
        // Idempotent and retried: fails when its pid is a multiple of three.
        flaky: task("flaky", "sleep 0.1; [ $(( $$ % 3 )) -ne 0 ]", {
          timeout: "2m",
          retry: { max: 5, backoff: "100ms", idempotent: true },
        }),
        slow: task("slow", "sleep 30", { timeout: "1s" }),
      },
      {
        diamond: {
          steps: {
            a: { task: "once" },
            b: { task: "once", needs: ["a"] },
            c: { task: "once", needs: ["a"] },
            d: { task: "once", needs: ["b", "c"] },
          },
        },
        mixed: {
          steps: {
            a: { task: "once" },
            r: { task: "remote_once", needs: ["a"] },
            f: { task: "flaky", needs: ["r"] },
            z: { task: "once", needs: ["f"] },
          },
        },
        deadline: { steps: { s: { task: "slow" } } },
      },
    );
    const applied = await call<unknown>(urls[0] ?? "", "POST", "/packages", {
      ...JSON.parse(manifest.text),
    });
    expect(applied.status, JSON.stringify(applied.body)).toBeLessThan(300);

    // API calls go to a random coordinator; one that is down (connection refused) is skipped.
    const contention: string[] = [];
    const apiFailures: string[] = [];
    async function anyCoordinator<T>(
      method: string,
      path: string,
      body?: unknown,
    ): Promise<{ status: number; body: T }> {
      for (let round = 0; round < 60; round += 1) {
        const url = urls[prng.int(0, urls.length - 1)] ?? "";
        try {
          const answer = await call<T>(url, method, path, body);
          if (answer.status === 409 && JSON.stringify(answer.body).includes("concurrent"))
            contention.push(`${method} ${path}: ${JSON.stringify(answer.body)}`);
          if (answer.status >= 500 || answer.status === 503) {
            apiFailures.push(
              `${method} ${path} on ${url}: ${answer.status} ${JSON.stringify(answer.body)}`,
            );
            await sleep(100);
            continue;
          }
          return answer;
        } catch {
          // Killed or restarting: another coordinator answers.
          await sleep(100);
        }
      }
      throw new Error(`${method} ${path}: no coordinator answered\n${describeAll()}`);
    }

    // Chaos: SIGKILL one member at seeded random and start it again on the same state dir.
    let chaos = true;
    let kills = 0;
    const chaosLoop = (async () => {
      while (chaos) {
        await sleep(prng.int(1_500, 4_000));
        if (!chaos) break;
        const member = members[prng.int(0, members.length - 1)] as Member;
        // At least one coordinator stays up, so the API always answers somewhere.
        if (member.kind === "coordinator" && coordinators.filter(alive).length < 2) continue;
        if (!alive(member)) continue;
        member.child?.kill("SIGKILL");
        kills += 1;
        await member.exited;
        await sleep(prng.int(200, 1_500));
        member.restarts += 1;
        launch(member);
        if (member.kind === "coordinator") {
          const url = urls[coordinators.indexOf(member)] ?? "";
          // A restart recovers its attempts first (two inspections each): slow on two busy cores.
          await waitFor(
            `${member.name} serves again\n${describeAll()}`,
            () => healthy(url),
            180_000,
          );
        }
      }
    })();

    // Submit the runs, a few at a time, and cancel some of them somewhere in their life.
    const runs: { id: string; workflow: string; cancelled: boolean }[] = [];
    const workflows = ["diamond", "diamond", "mixed", "mixed", "deadline"];
    for (let index = 0; index < RUNS; index += 1) {
      const workflow = workflows[prng.int(0, workflows.length - 1)] ?? "diamond";
      // The idempotency key makes a retry after a killed coordinator safe (it may have committed).
      const started = await anyCoordinator<{ run: { id: string } }>("POST", "/runs", {
        package: "cluster",
        workflow,
        idempotencyKey: `cluster-${SEED}-${index}`,
      });
      expect(
        [200, 201],
        `POST /runs answered ${started.status}: ${JSON.stringify(started.body)} (${context})`,
      ).toContain(started.status);
      const entry = { id: started.body.run.id, workflow, cancelled: false };
      runs.push(entry);
      if (prng.chance(0.1)) {
        const target = runs[prng.int(0, runs.length - 1)];
        if (target !== undefined) {
          const cancelled = await anyCoordinator<unknown>("POST", `/runs/${target.id}/cancel`);
          if (cancelled.status === 202) target.cancelled = true;
        }
      }
      if (index % 4 === 3) await sleep(prng.int(50, 400));
    }
    const tailUntil = performance.now() + CHAOS_TAIL_MS;
    while (kills < MIN_KILLS && performance.now() < tailUntil) await sleep(250);
    chaos = false;
    await chaosLoop;
    for (const member of members) {
      if (!alive(member)) launch(member);
    }

    // Converge: every run terminal (bounded, generous: two busy cores).
    const details = new Map<string, RunDetail>();
    const stuck = new Map<string, RunDetail>();
    await waitFor(
      "every run terminal",
      async () => {
        for (const run of runs) {
          if (details.has(run.id)) continue;
          const answer = await anyCoordinator<RunDetail>("GET", `/runs/${run.id}`);
          if (answer.status === 200 && TERMINAL_RUN.has(answer.body.run.status)) {
            details.set(run.id, answer.body);
            stuck.delete(run.id);
          } else {
            stuck.set(run.id, answer.body);
            return false;
          }
        }
        return true;
      },
      CONVERGE_MS,
      500,
    ).catch((error: unknown) => {
      const summary = [...stuck.values()].map(
        (detail) =>
          `${detail.run.id} ${detail.run.status}: ${detail.steps.map((step) => `${step.name}=${step.status}`).join(" ")} | ${detail.attempts.map((attempt) => `${attempt.id.slice(-6)} ${attempt.status} pid=${String(attempt.pid)} ${attempt.error ?? ""}`).join("; ")}`,
      );
      throw new Error(`${String(error)}\nstuck:\n${summary.join("\n")}\n${describeAll()}`);
    });

    // The checker.
    const spawnLines = (await readFile(scratch.marker, "utf8").catch(() => ""))
      .split("\n")
      .filter((line) => line.length > 0);
    const spawns = spawnLines.map((line) => ({
      label: line.split(" ")[0] ?? "",
      pid: Number(line.split(" ")[1]),
    }));
    const spawnsByPid = new Map<number, number>();
    for (const spawned of spawns)
      spawnsByPid.set(spawned.pid, (spawnsByPid.get(spawned.pid) ?? 0) + 1);
    const problems: string[] = [];
    const attemptsByPid = new Map<number, { runId: string; attemptId: string; status: string }[]>();
    // An attempt settled from its receipt before its running transition was recorded keeps an
    // unknown process identity (pid null); each such attempt may account for one spawn of its task.
    const unknownIdentity = new Map<string, number>();
    const nonIdempotent = new Set(["once", "remote_once"]);
    const taskOf = (workflow: string, step: string): string | undefined =>
      workflow === "diamond"
        ? "once"
        : workflow === "deadline"
          ? "slow"
          : ({ a: "once", r: "remote_once", f: "flaky", z: "once" } as Record<string, string>)[
              step
            ];
    for (const run of runs) {
      const detail = details.get(run.id) as RunDetail;
      const expected = run.cancelled
        ? ["succeeded", "cancelled", "failed", "timed_out"]
        : run.workflow === "deadline"
          ? ["failed", "timed_out"]
          : run.workflow === "mixed"
            ? ["succeeded", "failed"]
            : ["succeeded"];
      if (!expected.includes(detail.run.status))
        problems.push(
          `run ${run.id} (${run.workflow}${run.cancelled ? ", cancelled" : ""}) ended ${detail.run.status}`,
        );
      for (const attempt of detail.attempts) {
        if (attempt.pid !== null)
          attemptsByPid.set(attempt.pid, [
            ...(attemptsByPid.get(attempt.pid) ?? []),
            { runId: run.id, attemptId: attempt.id, status: attempt.status },
          ]);
        if (!["succeeded", "failed", "timed_out", "cancelled", "lost"].includes(attempt.status))
          problems.push(`attempt ${attempt.id} of run ${run.id} is ${attempt.status}`);
        if (attempt.status === "lost" && attempt.pid !== null)
          problems.push(
            `attempt ${attempt.id} of run ${run.id} ran (pid ${attempt.pid}) and was settled lost: its completion was lost`,
          );
        const step = detail.steps.find((candidate) => candidate.id === attempt.stepRunId);
        const task = step === undefined ? undefined : taskOf(run.workflow, step.name);
        if (attempt.pid === null && attempt.status !== "lost" && task !== undefined)
          unknownIdentity.set(task, (unknownIdentity.get(task) ?? 0) + 1);
      }
      for (const step of detail.steps) {
        const task = taskOf(run.workflow, step.name);
        const attempts = detail.attempts.filter((attempt) => attempt.stepRunId === step.id);
        const spawned = attempts.filter(
          (attempt) => attempt.pid !== null && (spawnsByPid.get(attempt.pid) ?? 0) > 0,
        ).length;
        const unknown = attempts.filter(
          (attempt) => attempt.pid === null && attempt.status !== "lost",
        ).length;
        if (task !== undefined && nonIdempotent.has(task)) {
          if (spawned + unknown > 1)
            problems.push(
              `non-idempotent step ${step.name} of run ${run.id} has ${spawned} spawns and ${unknown} settled attempts of unknown identity`,
            );
          if (step.status === "succeeded" && spawned + unknown !== 1)
            problems.push(
              `non-idempotent step ${step.name} of run ${run.id} succeeded with ${spawned} spawns and ${unknown} of unknown identity`,
            );
        }
      }
      const events = (
        await anyCoordinator<{ events: EventView[] }>("GET", `/runs/${run.id}/events?limit=500`)
      ).body.events;
      events.forEach((event, index) => {
        if (event.seq !== index + 1)
          problems.push(`run ${run.id}: event ${index + 1} has seq ${event.seq}`);
      });
      if (events.length === 0) problems.push(`run ${run.id} has no events`);
    }
    const unmatched = new Map<string, number>();
    for (const [pid, count] of spawnsByPid) {
      const owners = attemptsByPid.get(pid) ?? [];
      if (count > 1) problems.push(`pid ${pid} spawned ${count} marker lines`);
      if (owners.length > 1)
        problems.push(
          `spawn pid ${pid} is the process of ${owners.length} attempts: ${JSON.stringify(owners)}`,
        );
      else if (owners[0]?.status === "lost")
        problems.push(`spawn pid ${pid} belongs to a lost attempt ${owners[0].attemptId}`);
      else if (owners.length === 0) {
        const label = spawns.find((spawned) => spawned.pid === pid)?.label ?? "";
        unmatched.set(label, (unmatched.get(label) ?? 0) + 1);
      }
    }
    for (const [label, count] of unmatched) {
      if (count > (unknownIdentity.get(label) ?? 0))
        problems.push(
          `${count} spawns of ${label} match no recorded process, but only ${unknownIdentity.get(label) ?? 0} settled attempts of ${label} have an unknown identity`,
        );
    }
    const restarts = members.map((member) => `${member.name} ×${member.restarts}`).join(", ");
    process.stdout.write(
      `cluster harness: ${runs.length} runs, ${spawnLines.length} spawns, restarts: ${restarts}, transient API failures ${apiFailures.length}\n`,
    );
    expect(
      contention,
      `API calls answered with the coordinators' own contention (${context})`,
    ).toEqual([]);
    expect(problems, `history check failed (${context})\n${describeAll()}`).toEqual([]);
    expect(
      members.reduce((sum, member) => sum + member.restarts, 0),
      context,
    ).toBeGreaterThan(0);
  });
});
