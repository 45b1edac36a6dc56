import { randomBytes } from "node:crypto";
import { mkdir, readFile } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
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
  killMembers,
  launchMember,
  type ClusterMember,
} from "../support/cluster-members.ts";
import {
  connectionRefusal,
  startReplicatedPostgres,
  type ReplicatedPostgres,
} from "../support/replicated-postgres.ts";
import { Scratch } from "../support/scratch.ts";
import { waitFor } from "../support/wait.ts";

/**
 * A failover under real processes: two `qlr serve --store postgres --profile cluster` and a
 * `qlr worker` on a primary and a synchronous streaming standby (`remote_apply`,
 * test/support/replicated-postgres.ts), every coordinator given both servers in one
 * `--database-url …?target_session_attrs=read-write`. In the middle of the runs the primary
 * crashes, the standby is promoted (timeline 1 → 2) and the old primary stays down (fenced),
 * while a client keeps starting runs. Then the cluster harness's history checker
 * (test/support/cluster-history.ts) over the whole record: every run succeeded, every
 * non-idempotent step spawned exactly once, no completion lost, events contiguous. What a client
 * saw during the switch is counted: the driver retries inside for about 15 s, so a call waits
 * rather than fails; the only failure the API documents for a switch that outlasts that is
 * `503 storage_unavailable`, and nothing else is allowed.
 */

const TOKEN = `failover-admin-${randomBytes(12).toString("hex")}`;
const WORKER_TOKEN = `failover-worker-${randomBytes(12).toString("hex")}`;
const DATABASE = "qlr_cluster_failover";
const RUNS_BEFORE = 12;
const RUNS_DURING = 6;
/**
 * A client's patience. A call waits for its own transaction's reconnect retry (about 15 s) and
 * for the coordinator's stage transactions ahead of it, each retrying the same way, so a call
 * issued at the crash can take longer than 15 s on a busy machine; it is answered, not failed.
 */
const CLIENT_TIMEOUT_MS = 120_000;

describe("real coordinators and a worker through a promotion of the standby", () => {
  let bundle: Bundle;
  let scratch: Scratch;
  let cluster: ReplicatedPostgres;
  const members: ClusterMember[] = [];

  beforeAll(async () => {
    bundle = await buildBundle();
    scratch = await Scratch.create("cluster-failover");
    cluster = await startReplicatedPostgres({ user: "qlr_cluster_failover" });
    const admin = new pg.Client({ connectionString: cluster.urlOf(cluster.primary) });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${DATABASE}`);
    await admin.end();
  }, 300_000);
  afterAll(async () => {
    killMembers(members);
    await Promise.all(members.map((member) => member.exited));
    await cluster?.stop();
    await scratch?.cleanup();
    await bundle?.cleanup();
  });

  it(
    "every run converges with exact replay and clients see no undocumented failure",
    { timeout: 900_000 },
    async () => {
      const databaseUrl = cluster.multiHostUrl(DATABASE);
      const env = {
        QLR_TOKEN: TOKEN,
        QLR_WORKER_TOKEN: WORKER_TOKEN,
        QLR_DATABASE_URL: databaseUrl,
        QLR_DEVICE_TEST_TAG: scratch.tag,
      };
      await mkdir(scratch.path("markers"), { recursive: true });
      const urls: string[] = [];
      for (let index = 0; index < 2; index += 1) {
        const port = await freeLoopbackPort();
        const stateDir = scratch.path(`coordinator-${index}`);
        urls.push(`http://127.0.0.1:${port}`);
        members.push(coordinatorMember(`coordinator-${index}`, port, stateDir));
      }
      members.push(workerMember("worker-0", urls[1] ?? "", scratch.path("worker-0")));
      const describeAll = (): string => describeMembers(members);
      const call = <T>(url: string, method: string, path: string, body?: unknown) =>
        callApi<T>(url, TOKEN, method, path, body, CLIENT_TIMEOUT_MS);
      const healthy = async (url: string): Promise<boolean> =>
        (await call(url, "GET", "/healthz").catch(() => ({ status: 0 }))).status === 200;

      // The first coordinator migrates the database; the others start once it serves.
      launchMember(bundle, members[0]!, env);
      await waitFor(`coordinator-0 serves\n${describeAll()}`, () => healthy(urls[0]!), 120_000);
      for (const member of members.slice(1)) launchMember(bundle, member, env);
      await waitFor(`coordinator-1 serves\n${describeAll()}`, () => healthy(urls[1]!), 120_000);

      const task = (label: string, then: string, extra: Record<string, unknown> = {}) => ({
        ...scratch.task({ label, then }),
        timeout: "5m",
        ...extra,
      });
      const manifest = await scratch.manifest(
        "failover",
        {
          once: task("once", "sleep 0.3"),
          remote_once: task("remote_once", "sleep 0.3", {
            executor: "remote_worker",
            pool: "p1",
          }),
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
              z: { task: "once", needs: ["r"] },
            },
          },
        },
      );
      const applied = await call<unknown>(urls[0]!, "POST", "/packages", JSON.parse(manifest.text));
      expect(applied.status, JSON.stringify(applied.body)).toBeLessThan(300);

      // Every answer a client got, by status; a call that got no answer at all is counted too.
      const answers = new Map<string, number>();
      const undocumented: string[] = [];
      const runs: CheckedRun[] = [];
      let submitted = 0;
      let slowestCallMs = 0;
      async function startRun(workflow: string): Promise<void> {
        const index = submitted;
        submitted += 1;
        const url = urls[index % urls.length]!;
        // A client retries a call that failed with its idempotency key, as the API asks.
        for (let attempt = 1; attempt <= 20; attempt += 1) {
          const sentAt = performance.now();
          const answer = await call<{ run: { id: string }; error?: { code: string } }>(
            url,
            "POST",
            "/runs",
            { package: "failover", workflow, idempotencyKey: `failover-${index}` },
          ).catch((error: unknown) => ({ status: 0, body: { error: { code: String(error) } } }));
          const key = `${answer.status}${answer.status >= 400 ? ` ${answer.body.error?.code ?? ""}` : ""}`;
          answers.set(key, (answers.get(key) ?? 0) + 1);
          slowestCallMs = Math.max(slowestCallMs, Math.round(performance.now() - sentAt));
          if (answer.status === 200 || answer.status === 201) {
            const { run } = answer.body as { run: { id: string } };
            runs.push({ id: run.id, workflow, cancelled: false });
            return;
          }
          if (!(answer.status === 503 && answer.body.error?.code === "storage_unavailable"))
            undocumented.push(
              `POST /runs answered ${answer.status} ${JSON.stringify(answer.body)}`,
            );
          await sleep(500);
        }
        throw new Error(`POST /runs never succeeded\n${describeAll()}`);
      }
      for (let index = 0; index < RUNS_BEFORE; index += 1)
        await startRun(index % 3 === 2 ? "mixed" : "diamond");

      const detailOf = async (runId: string): Promise<RunDetail | undefined> => {
        for (const url of urls) {
          const answer = await call<RunDetail>(url, "GET", `/runs/${runId}`).catch(() => undefined);
          if (answer?.status === 200) return answer.body;
        }
        return undefined;
      };
      // In the middle of the runs: some steps done, some runs not finished.
      await waitFor(
        `some steps succeeded while runs are still open\n${describeAll()}`,
        async () => {
          const details = await Promise.all(runs.map((run) => detailOf(run.id)));
          const succeededSteps = details
            .flatMap((detail) => detail?.attempts ?? [])
            .filter((attempt) => attempt.status === "succeeded").length;
          return succeededSteps >= 6;
        },
        300_000,
        250,
      );
      expect(await cluster.timelineOf(cluster.primary)).toBe(1);

      await cluster.crashPrimary();
      // A client keeps starting runs while no server accepts writes and after the promotion.
      const during = (async () => {
        for (let index = 0; index < RUNS_DURING; index += 1)
          await startRun(index % 2 === 0 ? "mixed" : "diamond");
      })();
      const promotingSince = performance.now();
      expect(await cluster.promoteStandby()).toBe(2);
      const promotionMs = Math.round(performance.now() - promotingSince);
      await during;

      // The old primary is fenced: it is down, and nothing can write to it.
      expect(await connectionRefusal(cluster.urlOf(cluster.primary, DATABASE))).toBe(
        "ECONNREFUSED",
      );

      const details = new Map<string, RunDetail>();
      await waitFor(
        `every run terminal after the promotion\n${describeAll()}`,
        async () => {
          for (const run of runs) {
            if (details.has(run.id)) continue;
            const detail = await detailOf(run.id);
            if (detail === undefined || !TERMINAL_RUN.has(detail.run.status)) return false;
            details.set(run.id, detail);
          }
          return true;
        },
        300_000,
        500,
      );
      const events = new Map<string, EventView[]>();
      for (const run of runs) {
        const answer = await call<{ events: EventView[] }>(
          urls[0]!,
          "GET",
          `/runs/${run.id}/events?limit=500`,
        );
        events.set(run.id, answer.body.events);
      }
      const spawnLines = (await readFile(scratch.marker, "utf8"))
        .split("\n")
        .filter((line) => line.length > 0);
      const problems = checkClusterHistory({
        runs,
        details,
        events,
        spawnLines,
        taskOf: (workflow, step) => (workflow === "mixed" && step === "r" ? "remote_once" : "once"),
        nonIdempotent: new Set(["once", "remote_once"]),
        allowedStatuses: () => ["succeeded"],
      });
      process.stdout.write(
        `cluster failover: ${runs.length} runs, ${spawnLines.length} spawns, promotion ${promotionMs} ms, slowest POST /runs ${slowestCallMs} ms, client answers ${JSON.stringify(Object.fromEntries(answers))}\n`,
      );
      expect(problems, describeAll()).toEqual([]);
      expect(runs).toHaveLength(RUNS_BEFORE + RUNS_DURING);
      expect(undocumented).toEqual([]);
      // Both coordinators lived through the switch: a store error never ends the process.
      for (const member of members) expect(member.child?.exitCode ?? null, member.name).toBeNull();
    },
  );
});
