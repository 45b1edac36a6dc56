import { randomBytes } from "node:crypto";
import { mkdir, readFile } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Prng } from "../../src/sim/prng.ts";
import { TERMINAL_RUN } from "../support/api-client.ts";
import type { EventView, RunDetail } from "../support/api-views.ts";
import { buildBundle, type Bundle } from "../support/bundle.ts";
import { checkClusterHistory, type CheckedRun } from "../support/cluster-history.ts";
import {
  callApi,
  coordinatorMember,
  workerMember,
  describeMembers,
  freeLoopbackPort,
  isAlive as alive,
  killMembers,
  launchMember,
  type ClusterMember as Member,
} from "../support/cluster-members.ts";
import { openPgDriver } from "../../storage/postgres/pg-driver.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { Scratch } from "../support/scratch.ts";
import { countOrphanRows } from "../support/store-dump.ts";
import { waitFor } from "../support/wait.ts";
import { chain, diamond } from "../support/workflow-shapes.ts";

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
 * `QLR_CLUSTER_RUNS` scales it (default 40, 200 under `CI=true`), `QLR_CLUSTER_SEED` replays a seed; a failure
 * names its seed. The steps are tiny (a marker line and a 50 ms sleep, so a kill can still land
 * on a running process) and runs are submitted in concurrent batches: the time goes to the
 * coordinators' transitions and the restarts, which is what the harness is about.
 */

/** A few hundred under CI (the size the design asks for); fewer by default on a workstation. */
const RUNS = Number(process.env.QLR_CLUSTER_RUNS ?? (process.env.CI === "true" ? 200 : 40));
/** Runs submitted at once; each POST carries its own idempotency key. */
const SUBMIT_BATCH = 8;
/** Chaos goes on after the last run is submitted until this many members were killed (bounded by CHAOS_TAIL_MS). */
const MIN_KILLS = 6;
const CHAOS_TAIL_MS = 60_000;
const SEED = Number(
  process.env.QLR_CLUSTER_SEED ?? Number.parseInt(randomBytes(4).toString("hex"), 16),
);
const TOKEN = `cluster-admin-${randomBytes(12).toString("hex")}`;
const WORKER_TOKEN = `cluster-worker-${randomBytes(12).toString("hex")}`;
const CONVERGE_MS = Number(process.env.QLR_CLUSTER_CONVERGE_MS ?? 300_000);

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
    killMembers(members);
    await scratch?.cleanup();
    await database?.drop();
    await bundle?.cleanup();
  });

  function launch(member: Member): void {
    launchMember(bundle, member, {
      QLR_TOKEN: TOKEN,
      QLR_WORKER_TOKEN: WORKER_TOKEN,
      QLR_DATABASE_URL: database.url,
      QLR_DEVICE_TEST_TAG: scratch.tag,
    });
  }

  const call = <T>(
    url: string,
    method: string,
    path: string,
    body?: unknown,
  ): Promise<{ status: number; body: T }> => callApi<T>(url, TOKEN, method, path, body);

  it("every run converges with exact replay", { timeout: 900_000 }, async () => {
    const prng = new Prng(SEED);
    const context = `seed ${SEED} (replay with QLR_CLUSTER_SEED=${SEED} QLR_CLUSTER_RUNS=${RUNS})`;
    process.stdout.write(`cluster harness: ${context}\n`);
    const markerDir = scratch.path("markers");
    await mkdir(markerDir, { recursive: true });

    // Three coordinators on fixed ports (a restart comes back where clients and workers look).
    for (let index = 0; index < 3; index += 1) {
      const port = await freeLoopbackPort();
      const stateDir = scratch.path(`coordinator-${index}`);
      urls.push(`http://127.0.0.1:${port}`);
      members.push(coordinatorMember(`coordinator-${index}`, port, stateDir));
    }
    for (let index = 0; index < 2; index += 1) {
      const stateDir = scratch.path(`worker-${index}`);
      const coordinatorUrl = urls[index] ?? "";
      members.push(workerMember(`worker-${index}`, coordinatorUrl, stateDir));
    }
    const coordinators = members.filter((member) => member.kind === "coordinator");
    const describeAll = (): string => `${context}\n${describeMembers(members)}`;
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
        once: task("once", "sleep 0.05", { timeout: "2m" }),
        remote_once: task("remote_once", "sleep 0.05", {
          timeout: "2m",
          executor: "remote_worker",
          pool: "p1",
        }),
        // Idempotent and retried: fails when its pid is a multiple of three.
        flaky: task("flaky", "[ $(( $$ % 3 )) -ne 0 ]", {
          timeout: "2m",
          retry: { max: 5, backoff: "100ms", idempotent: true },
        }),
        slow: task("slow", "sleep 30", { timeout: "1s" }),
      },
      {
        diamond: diamond("once"),
        mixed: chain({ a: "once", r: "remote_once", f: "flaky", z: "once" }),
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

    // The turns a coordinator's pages were granted since it started (`qlr_store_turns_total`).
    const grantedTurns = async (url: string): Promise<number> => {
      const response = await fetch(`${url}/metrics`, {
        headers: { authorization: `Bearer ${TOKEN}` },
        signal: AbortSignal.timeout(15_000),
      });
      const text = await response.text();
      expect(response.status, text).toBe(200);
      for (const outcome of ["granted", "wait_ran_out", "skipped"])
        expect(text, url).toMatch(
          new RegExp(`^qlr_store_turns_total\\{outcome="${outcome}"\\} [0-9]+$`, "m"),
        );
      return Number(/^qlr_store_turns_total\{outcome="granted"\} ([0-9]+)$/m.exec(text)?.[1]);
    };
    let grantedBeforeKills = 0;

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
        // Its counters die with it: the turns its pages were granted so far are kept first.
        if (member.kind === "coordinator")
          grantedBeforeKills += await grantedTurns(urls[coordinators.indexOf(member)] ?? "").catch(
            () => 0,
          );
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

    // Submit the runs in concurrent batches, and cancel some of them somewhere in their life.
    const runs: (CheckedRun & { cancelled: boolean })[] = [];
    const workflows = ["diamond", "diamond", "mixed", "mixed", "deadline"];
    for (let first = 0; first < RUNS; first += SUBMIT_BATCH) {
      const batch = Array.from({ length: Math.min(SUBMIT_BATCH, RUNS - first) }, (_, offset) => ({
        index: first + offset,
        workflow: workflows[prng.int(0, workflows.length - 1)] ?? "diamond",
      }));
      const answers = await Promise.all(
        batch.map(({ index, workflow }) =>
          // The idempotency key makes a retry after a killed coordinator safe (it may have committed).
          anyCoordinator<{ run: { id: string } }>("POST", "/runs", {
            package: "cluster",
            workflow,
            idempotencyKey: `cluster-${SEED}-${index}`,
          }),
        ),
      );
      answers.forEach((started, offset) => {
        expect(
          [200, 201],
          `POST /runs answered ${started.status}: ${JSON.stringify(started.body)} (${context})`,
        ).toContain(started.status);
        runs.push({
          id: started.body.run.id,
          workflow: batch[offset]?.workflow ?? "diamond",
          cancelled: false,
        });
      });
      for (let cancel = 0; cancel < batch.length; cancel += 1) {
        if (!prng.chance(0.1)) continue;
        const target = runs[prng.int(0, runs.length - 1)];
        if (target !== undefined) {
          const cancelled = await anyCoordinator<unknown>("POST", `/runs/${target.id}/cancel`);
          if (cancelled.status === 202) target.cancelled = true;
        }
      }
      await sleep(prng.int(50, 400));
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
    ).catch(async (error: unknown) => {
      // Every run still open, not only the first one the last pass stopped at.
      for (const run of runs) {
        if (details.has(run.id) || stuck.has(run.id)) continue;
        const answer = await anyCoordinator<RunDetail>("GET", `/runs/${run.id}`);
        if (answer.status !== 200 || !TERMINAL_RUN.has(answer.body.run.status))
          stuck.set(run.id, answer.body);
      }
      const summary = [...stuck.values()].map(
        (detail) =>
          `${detail.run.id} ${detail.run.status}: ${detail.steps.map((step) => `${step.name}=${step.status}`).join(" ")} | ${detail.attempts.map((attempt) => `${attempt.id.slice(-6)} ${attempt.status} pid=${String(attempt.pid)} ${attempt.error ?? ""}`).join("; ")}`,
      );
      throw new Error(
        `${String(error)}\n${contention.length} calls answered with contention, ${apiFailures.length} transient API failures\n${stuck.size} of ${runs.length} runs stuck:\n${summary.join("\n")}\n${describeAll()}`,
      );
    });

    // The checker.
    const spawnLines = (await readFile(scratch.marker, "utf8").catch(() => ""))
      .split("\n")
      .filter((line) => line.length > 0);
    const events = new Map<string, EventView[]>();
    for (const run of runs)
      events.set(
        run.id,
        (await anyCoordinator<{ events: EventView[] }>("GET", `/runs/${run.id}/events?limit=500`))
          .body.events,
      );
    const problems = checkClusterHistory({
      runs,
      details,
      events,
      spawnLines,
      taskOf: (workflow, step) =>
        workflow === "diamond"
          ? "once"
          : workflow === "deadline"
            ? "slow"
            : ({ a: "once", r: "remote_once", f: "flaky", z: "once" } as Record<string, string>)[
                step
              ],
      nonIdempotent: new Set(["once", "remote_once"]),
      allowedStatuses: (run) =>
        run.cancelled
          ? ["succeeded", "cancelled", "failed", "timed_out"]
          : run.workflow === "deadline"
            ? ["failed", "timed_out"]
            : run.workflow === "mixed"
              ? ["succeeded", "failed"]
              : ["succeeded"],
    });
    const restarts = members.map((member) => `${member.name} ×${member.restarts}`).join(", ");
    process.stdout.write(
      `cluster harness: ${runs.length} runs, ${spawnLines.length} spawns, restarts: ${restarts}, transient API failures ${apiFailures.length}\n`,
    );
    expect(
      contention,
      `API calls answered with the coordinators' own contention (${context})`,
    ).toEqual([]);
    expect(problems, `history check failed (${context})\n${describeAll()}`).toEqual([]);
    // PostgreSQL's schema has no foreign keys for a run's rows (migration 0014): the store's
    // rule keeps them, and three coordinators killed at random must not have broken it.
    const inspector = await openPgDriver({ connectionString: database.url, poolSize: 1 });
    try {
      expect(await inspector.transaction(countOrphanRows), context).toBe(0);
    } finally {
      await inspector.close();
    }
    expect(
      members.reduce((sum, member) => sum + member.restarts, 0),
      context,
    ).toBeGreaterThan(0);

    // Each coordinator shows how its pages fared with their turns; with peers, pages took them
    // (counted over every life of each coordinator: a restart starts its counters at zero).
    let granted = grantedBeforeKills;
    for (const url of urls) granted += await grantedTurns(url);
    expect(granted, `turns granted across the coordinators (${context})`).toBeGreaterThan(0);
  });
});
