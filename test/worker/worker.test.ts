/**
 * The Worker end to end inside workerd: the fetch entry forwards to the coordinator Durable
 * Object, the cron trigger's `scheduled` handler runs one cycle with the edge budgets, and
 * remote_worker steps are admitted (a `claimed` attempt) and wait for a remote worker.
 */
import { createScheduledController, runDurableObjectAlarm, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import worker from "../../runtimes/worker/index.ts";
import {
  configurationProblem,
  COORDINATOR_NAME,
  CoordinatorObject,
  NOT_CONFIGURED_MESSAGE,
  retentionOf,
} from "../../runtimes/worker/coordinator-object.ts";
import type { DurableObjectStub, WorkerRequest } from "../../runtimes/worker/types.ts";
import { STAGE_ORDER } from "../../src/coordinator.ts";
import { exitFacts } from "../support/fixtures.ts";
import { freshObject, inObject, testEnv, token, workerToken } from "./support.ts";

const BASE = "https://qlr.test";

function call(
  path: string,
  init: { method?: string; body?: string; contentType?: string; auth?: string | null } = {},
): Promise<Response> {
  const headers: Record<string, string> = {};
  const auth = init.auth === undefined ? `Bearer ${token()}` : init.auth;
  if (auth !== null) headers.authorization = auth;
  if (init.contentType !== undefined) headers["content-type"] = init.contentType;
  return SELF.fetch(`${BASE}${path}`, {
    method: init.method ?? "GET",
    headers,
    ...(init.body === undefined ? {} : { body: init.body }),
  }) as unknown as Promise<Response>;
}

async function json<T>(response: Response): Promise<T> {
  return (await response.json()) as T;
}

/** The named coordinator object the Worker routes every request to. */
function coordinatorStub(): DurableObjectStub<never> {
  return testEnv.COORDINATOR.get(
    testEnv.COORDINATOR.idFromName(COORDINATOR_NAME),
  ) as unknown as DurableObjectStub<never>;
}

/**
 * Runs the object's alarm until none is set (each cycle may set it again), bounded. workerd
 * also fires a due alarm by itself, so an alarm may already have run, or be running, when this
 * is called: what the tests check is where the run ends up, polled by `runReaches`.
 */
async function drainAlarms(): Promise<void> {
  for (let round = 0; round < 50; round += 1) {
    if (!(await runDurableObjectAlarm(coordinatorStub()))) return;
  }
  throw new Error("the object's alarm kept setting itself for 50 cycles");
}

/** Polls the run (draining alarms between reads) until `reached` holds; bounded, never a fixed sleep. */
async function runReaches(
  runId: string,
  description: string,
  reached: (detail: RunDetail) => boolean,
): Promise<RunDetail> {
  let last: RunDetail | null = null;
  for (let round = 0; round < 100; round += 1) {
    await drainAlarms();
    last = await json<RunDetail>(await call(`/runs/${runId}`));
    if (reached(last)) return last;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`run ${runId} did not reach ${description}: ${JSON.stringify(last)}`);
}

/** The cron trigger's invocation: the handler awaits the whole cycle (no waitUntil work is left). */
async function runScheduled(): Promise<void> {
  await worker.scheduled(
    createScheduledController({ cron: "* * * * *", scheduledTime: Date.now() }),
    testEnv,
  );
}

interface RunDetail {
  run: { id: string; kind: string; status: string; package: string; generation: number };
  steps: { id: string; name: string; status: string; version: number; attemptCount: number }[];
  attempts: {
    id: string;
    stepRunId: string | null;
    number: number;
    status: string;
    executor: string;
    startedAtMs: number | null;
    finishedAtMs: number | null;
    exitCode: number | null;
    pid: number | null;
  }[];
}

const MANIFEST = `
package: edge-demo
tasks:
  fetch:
    run: ["sh", "-c", "echo fetched"]
    timeout: 30s
    executor: remote_worker
    pool: default
  report:
    run: ["sh", "-c", "echo report"]
    timeout: 10s
    executor: remote_worker
    pool: default
workflows:
  pipeline:
    steps:
      a: { task: fetch }
      b: { task: report, needs: [a] }
`;

/**
 * Plays a remote worker for one run: claims (at most `capacity` at a time), starts and completes
 * each of its leases with exit 0, letting the object's alarms run between rounds, until
 * `steps` attempts completed or 20 rounds passed. Answers the completed attempt ids.
 */
async function workRemoteSteps(
  runId: string,
  workerId: string,
  capacity: number,
  steps: number,
): Promise<string[]> {
  const asWorker = `Bearer ${workerToken()}`;
  const completed: string[] = [];
  for (let round = 0; round < 20 && completed.length < steps; round += 1) {
    await drainAlarms();
    const claim = await call("/worker/claim", {
      method: "POST",
      body: JSON.stringify({ workerId, pool: "default", capacity }),
      contentType: "application/json",
      auth: asWorker,
    });
    expect(claim.status).toBe(200);
    const { leases } = await json<{
      leases: { attemptId: string; leaseVersion: number; leaseSecret: string; runId: string }[];
    }>(claim);
    for (const lease of leases.filter((item) => item.runId === runId)) {
      const fence = {
        attemptId: lease.attemptId,
        workerId,
        leaseVersion: lease.leaseVersion,
        leaseSecret: lease.leaseSecret,
      };
      const startedAtMs = Date.now();
      const start = await call("/worker/start", {
        method: "POST",
        body: JSON.stringify({ ...fence, phase: "starting" }),
        contentType: "application/json",
        auth: asWorker,
      });
      expect(start.status, await start.clone().text()).toBe(200);
      const finished = await call("/worker/complete", {
        method: "POST",
        body: JSON.stringify({ ...fence, ...exitFacts(startedAtMs, Date.now()) }),
        contentType: "application/json",
        auth: asWorker,
      });
      expect(finished.status, await finished.clone().text()).toBe(200);
      completed.push(lease.attemptId);
    }
  }
  return completed;
}

describe("the Worker", () => {
  it("GET /healthz answers 200 without a token", async () => {
    const response = await call("/healthz", { auth: null });
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ ok: true });
  });

  it("a missing or wrong token is 401 and writes nothing", async () => {
    for (const auth of [null, "Bearer wrong-token", `Basic ${token()}`]) {
      const response = await call("/runs", { auth });
      expect(response.status, String(auth)).toBe(401);
      expect(await json<{ error: { code: string } }>(response)).toMatchObject({
        error: { code: "unauthorized" },
      });
    }
    const apply = await call("/packages", {
      method: "POST",
      body: MANIFEST.replace("edge-demo", "unauthorized-pkg"),
      contentType: "application/yaml",
      auth: "Bearer nope",
    });
    expect(apply.status).toBe(401);
    expect((await call("/packages/unauthorized-pkg")).status).toBe(404);
  });

  it("apply → run: the object's alarm admits the first step at once, without the cron; more cron cycles move nothing while no worker claims", async () => {
    const applied = await call("/packages", {
      method: "POST",
      body: MANIFEST,
      contentType: "application/yaml",
    });
    expect(applied.status).toBe(201);
    expect(await applied.json()).toMatchObject({
      package: "edge-demo",
      generation: 1,
      changed: true,
    });

    const started = await call("/runs", {
      method: "POST",
      body: JSON.stringify({ package: "edge-demo", workflow: "pipeline" }),
      contentType: "application/json",
    });
    expect(started.status).toBe(201);
    const { run } = await json<{ run: { id: string; status: string; kind: string } }>(started);
    expect(run).toMatchObject({ kind: "workflow", status: "running" });

    // The start set the alarm; its cycles are the event-driven cadence. No cron has run.
    const afterFirst = await runReaches(
      run.id,
      "a claimed attempt for a",
      (detail) => detail.attempts.length === 1,
    );
    expect(afterFirst.run.status).toBe("running");
    const [stepA, stepB] = afterFirst.steps;
    expect(stepA).toMatchObject({ name: "a", status: "ready", attemptCount: 0 });
    expect(stepB).toMatchObject({ name: "b", status: "pending", attemptCount: 0 });
    expect(afterFirst.attempts).toHaveLength(1);
    expect(afterFirst.attempts[0]).toMatchObject({
      stepRunId: stepA!.id,
      number: 1,
      status: "claimed",
      executor: "remote_worker",
      startedAtMs: null,
      finishedAtMs: null,
      exitCode: null,
      pid: null,
    });

    // The cron trigger: no remote worker exists, so the claim just waits; nothing else moves.
    await runScheduled();
    await runScheduled();
    const afterMore = await json<RunDetail>(await call(`/runs/${run.id}`));
    expect(afterMore.steps).toEqual(afterFirst.steps);
    expect(afterMore.attempts).toEqual(afterFirst.attempts);

    const events = await json<{ events: { seq: number; type: string }[] }>(
      await call(`/runs/${run.id}/events?after=0`),
    );
    expect(events.events.map((event) => event.seq)).toEqual(
      events.events.map((_, index) => index + 1),
    );
  });

  it("a remote diamond finishes on worker reports and the object's alarm alone, with no cron cycle", async () => {
    const diamond = MANIFEST.replace("edge-demo", "edge-diamond").replace(
      "      a: { task: fetch }\n      b: { task: report, needs: [a] }",
      "      a: { task: fetch }\n      b: { task: report, needs: [a] }\n      c: { task: report, needs: [a] }\n      d: { task: fetch, needs: [b, c] }",
    );
    expect(
      (await call("/packages", { method: "POST", body: diamond, contentType: "application/yaml" }))
        .status,
    ).toBe(201);
    const started = await call("/runs", {
      method: "POST",
      body: JSON.stringify({ package: "edge-diamond", workflow: "pipeline" }),
      contentType: "application/json",
    });
    const { run } = await json<{ run: { id: string } }>(started);
    const completed = await workRemoteSteps(run.id, "edge-worker", 4, 4);
    const detail = await runReaches(
      run.id,
      "succeeded",
      (current) => current.run.status === "succeeded",
    );
    expect(detail.steps.map((step) => [step.name, step.status, step.attemptCount])).toEqual([
      ["a", "succeeded", 1],
      ["b", "succeeded", 1],
      ["c", "succeeded", 1],
      ["d", "succeeded", 1],
    ]);
    expect(completed).toHaveLength(4);
  });

  it("GET /runs/:id?wait=… answers as the run stands after its timeout, refuses bad parameters, and answers terminal once workers finish the run", async () => {
    const manifest = MANIFEST.replace("edge-demo", "edge-wait");
    expect(
      (await call("/packages", { method: "POST", body: manifest, contentType: "application/yaml" }))
        .status,
    ).toBe(201);
    const started = await call("/runs", {
      method: "POST",
      body: JSON.stringify({ package: "edge-wait", workflow: "pipeline" }),
      contentType: "application/json",
    });
    const { run } = await json<{ run: { id: string } }>(started);
    const timedOut = await call(`/runs/${run.id}?wait=terminal&timeoutMs=20`);
    expect(timedOut.status).toBe(200);
    const standing = await json<RunDetail & { run: { eventSeq: number } }>(timedOut);
    expect(standing.run.status).toBe("running");
    expect(standing.run.eventSeq).toBeGreaterThan(0);
    const bad = await call(`/runs/${run.id}?wait=terminal&timeoutMs=30001`);
    expect(bad.status).toBe(400);
    expect((await json<{ error: { code: string } }>(bad)).error.code).toBe("invalid_request");
    // A request waits while the remote worker runs both steps; it answers once the run ended.
    const waiting = call(`/runs/${run.id}?wait=terminal&timeoutMs=30000`);
    expect(await workRemoteSteps(run.id, "wait-worker", 2, 2)).toHaveLength(2);
    await drainAlarms();
    const answered = await waiting;
    expect(answered.status).toBe(200);
    expect((await json<RunDetail>(answered)).run.status).toBe("succeeded");
  });

  it("POST /tick answers the tick report with the edge profile", async () => {
    const response = await call("/tick", { method: "POST" });
    expect(response.status).toBe(200);
    const { report } = await json<{
      report: {
        profile: string;
        stages: { name: string; processed: number; errors: unknown[]; more: boolean }[];
        more: boolean;
        durationMs: number;
      };
    }>(response);
    expect(report.profile).toBe("edge");
    // The order itself is pinned by the coordinator's unit test: the Worker runs all of it.
    expect(report.stages.map((stage) => stage.name)).toEqual([...STAGE_ORDER]);
    for (const stage of report.stages) expect(stage.errors, stage.name).toEqual([]);
    expect(typeof report.more).toBe("boolean");
    expect(report.durationMs).toBeGreaterThanOrEqual(0);
    const metrics = await call("/metrics");
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toMatch(/^qlr_ticks_total [1-9]\d*$/m);
  });

  it("the counters outlive the object's memory: a new instance on the same storage continues them", async () => {
    const stub = freshObject();
    const scrape = async (object: CoordinatorObject): Promise<string> => {
      const response = await object.fetch(
        new Request(`${BASE}/metrics`, {
          headers: { authorization: `Bearer ${token()}` },
        }) as unknown as WorkerRequest,
      );
      return response.text();
    };
    const outcome = await inObject(stub, async (instance, state) => {
      await instance.tick();
      await instance.tick();
      const before = await scrape(instance);
      // An evicted object is built again from its storage: a second instance stands for it.
      const after = await scrape(new CoordinatorObject(state, testEnv));
      return { before, after };
    });
    const ticksOf = (text: string): string | undefined =>
      /^qlr_ticks_total (\d+)$/m.exec(text)?.[1];
    const admissionCountOf = (text: string): string | undefined =>
      /^qlr_tick_stage_duration_seconds_count\{stage="admission"\} (\d+)$/m.exec(text)?.[1];
    expect(ticksOf(outcome.before)).toBe("2");
    expect(ticksOf(outcome.after)).toBe("2");
    expect(admissionCountOf(outcome.after)).toBe("2");
  });

  it("refuses to serve without a token secret of at least 16 characters, or with an unknown profile", () => {
    const long = "a-token-of-twenty-chars";
    expect(configurationProblem({ QLR_TOKEN: long })).toBeNull();
    expect(configurationProblem({ QLR_TOKEN: long, QLR_PROFILE: "standalone" })).toBeNull();
    expect(
      configurationProblem({ QLR_TOKEN: long, QLR_WORKER_TOKEN: "another-token-of-20" }),
    ).toBeNull();
    expect(configurationProblem({})).toMatch(/QLR_TOKEN/);
    expect(configurationProblem({ QLR_TOKEN: "" })).toMatch(/QLR_TOKEN/);
    expect(configurationProblem({ QLR_TOKEN: "t" })).toMatch(/QLR_TOKEN.*16/);
    expect(configurationProblem({ QLR_TOKEN: "fifteen-chars!!" })).toMatch(/QLR_TOKEN.*16/);
    expect(configurationProblem({ QLR_TOKEN: long, QLR_WORKER_TOKEN: "short" })).toMatch(
      /QLR_WORKER_TOKEN/,
    );
    expect(configurationProblem({ QLR_TOKEN: long, QLR_WORKER_TOKEN: long })).toMatch(/differ/);
    expect(configurationProblem({ QLR_TOKEN: long, QLR_PROFILE: "huge" })).toMatch(/QLR_PROFILE/);
  });

  it("a misconfigured Worker answers 503 without the reason, before any store is opened", async () => {
    const stub = freshObject();
    for (const QLR_TOKEN of [undefined, "", "short"]) {
      const outcome = await inObject(stub, async (_instance, state) => {
        const object = new CoordinatorObject(state, { ...testEnv, QLR_TOKEN });
        const response = await object.fetch(
          new Request(`${BASE}/runs`, {
            headers: { authorization: `Bearer ${QLR_TOKEN ?? "x"}` },
          }) as unknown as WorkerRequest,
        );
        const tables = object.driver.transaction((tx) =>
          tx.query("SELECT COUNT(*) AS count FROM sqlite_master WHERE type = 'table'"),
        );
        return { status: response.status, body: await response.json(), tables: await tables };
      });
      expect(outcome.status, String(QLR_TOKEN)).toBe(503);
      expect(outcome.body).toEqual({
        error: { code: "internal", message: NOT_CONFIGURED_MESSAGE, details: [] },
      });
      expect(JSON.stringify(outcome.body)).not.toContain("QLR_TOKEN");
      expect(outcome.tables).toEqual([{ count: 0 }]);
    }
  });

  it("authenticates before it opens the store: an unauthenticated request leaves a fresh object's database empty", async () => {
    const stub = freshObject();
    const outcome = await inObject(stub, async (instance) => {
      const response = await instance.fetch(
        new Request(`${BASE}/runs`, {
          headers: { authorization: "Bearer not-the-token-at-all" },
        }) as unknown as WorkerRequest,
      );
      const tables = await instance.driver.transaction((tx) =>
        tx.query("SELECT COUNT(*) AS count FROM sqlite_master WHERE type = 'table'"),
      );
      return { status: response.status, body: await response.json(), tables };
    });
    expect(outcome.status).toBe(401);
    expect(outcome.body).toMatchObject({ error: { code: "unauthorized" } });
    expect(outcome.tables).toEqual([{ count: 0 }]);
  });

  it("the worker token opens /worker/* only; the admin token opens everything", async () => {
    const claim = JSON.stringify({ workerId: "w-edge", pool: "nobody-uses-this", capacity: 1 });
    const asWorker = await call("/worker/claim", {
      method: "POST",
      body: claim,
      contentType: "application/json",
      auth: `Bearer ${workerToken()}`,
    });
    expect(asWorker.status).toBe(200);
    expect(await asWorker.json()).toEqual({ leases: [] });
    const asAdmin = await call("/worker/claim", {
      method: "POST",
      body: claim,
      contentType: "application/json",
    });
    expect(asAdmin.status).toBe(200);
    for (const [method, path] of [
      ["GET", "/runs"],
      ["POST", "/tick"],
      ["GET", "/packages"],
      ["GET", "/metrics"],
      ["POST", "/packages"],
    ] as const) {
      const response = await call(path, {
        method,
        auth: `Bearer ${workerToken()}`,
        ...(method === "POST"
          ? { body: MANIFEST.replace("edge-demo", "by-worker"), contentType: "application/yaml" }
          : {}),
      });
      expect(response.status, `${method} ${path}`).toBe(401);
    }
    expect((await call("/packages/by-worker")).status).toBe(404);
  });

  it("reads the retention from [vars] with the defaults of qlr serve, and refuses a bad one", async () => {
    expect(retentionOf({})).toEqual({ horizonMs: 7 * 86_400_000, maxRuns: 10_000 });
    expect(retentionOf({ QLR_RETENTION: "36h", QLR_RETENTION_RUNS: "500" })).toEqual({
      horizonMs: 36 * 3_600_000,
      maxRuns: 500,
    });
    expect(
      configurationProblem({ QLR_TOKEN: "a-token-of-16-chars-or-more", QLR_RETENTION: "30s" }),
    ).toMatch(/QLR_RETENTION must be from 1m to 3650d/);
    expect(
      configurationProblem({ QLR_TOKEN: "a-token-of-16-chars-or-more", QLR_RETENTION_RUNS: "0" }),
    ).toMatch(/QLR_RETENTION_RUNS must be a whole number of runs/);
    // The deployed object serves the policy of wrangler.toml's [vars].
    const info = await call("/info");
    expect(info.status).toBe(200);
    expect(await info.json()).toEqual({
      profile: "edge",
      retention: {
        horizonMs: 7 * 86_400_000,
        maxRuns: 10_000,
        idempotencyWindowMs: 7 * 86_400_000,
      },
    });
  });
});
