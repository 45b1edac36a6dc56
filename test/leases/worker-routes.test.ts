import type { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../../runtimes/http/app.ts";
import { QlrClient, type FetchFunction } from "../../runtimes/http/client.ts";
import { Metrics } from "../../runtimes/http/metrics.ts";
import { Coordinator } from "../../src/coordinator.ts";
import type { Lease } from "../../src/lease-service.ts";
import { PROFILES } from "../../src/profiles.ts";
import { openSqlStore, type SqlStore } from "../../storage/sql-store.ts";
import { MIGRATIONS as SQLITE_MIGRATIONS } from "../../storage/sqlite/migrations.generated.ts";
import { loadSqlJs } from "../../storage/sqljs/node/load.ts";
import { openSqlJsMemoryDriver } from "../../storage/sqljs/memory-driver.ts";
import { exitFacts, SequentialIds, SequentialSecrets, TestClock } from "../support/fixtures.ts";
import { dumpTables } from "../support/store-dump.ts";
import { WORKER_ROUTES } from "../http/support.ts";

/**
 * The `/worker/*` routes through `app.request()` on sql.js: bad input is `400 invalid_request`
 * with nothing written, no token is `401`, a stale fence `409 conflict`, and the happy path
 * answers the documented shapes.
 */

const TOKEN = "worker-routes-test-token";
const TTL_MS = 10_000;

interface Answer {
  readonly status: number;
  readonly body: unknown;
}

interface ErrorBody {
  readonly error: {
    readonly code: string;
    readonly message: string;
    readonly details: readonly { path: string; message: string }[];
  };
}

let store: SqlStore;
let app: Hono;
const clock = new TestClock();

beforeAll(async () => {
  store = await openSqlStore(
    openSqlJsMemoryDriver(await loadSqlJs()),
    SQLITE_MIGRATIONS,
    clock.nowMs(),
  );
  const ids = new SequentialIds("wr");
  const coordinator = new Coordinator({
    store,
    clock,
    ids,
    profile: PROFILES.standalone,
    executors: {},
  });
  app = createApp({
    store,
    coordinator,
    clock,
    ids,
    secrets: new SequentialSecrets(),
    token: TOKEN,
    metrics: new Metrics(),
    leaseTtlMs: TTL_MS,
  });
});
afterAll(async () => {
  await store?.close();
});

async function call(
  path: string,
  init: { body?: string; json?: unknown; authorization?: string | null; method?: string } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  const authorization = init.authorization === undefined ? `Bearer ${TOKEN}` : init.authorization;
  if (authorization !== null) headers.authorization = authorization;
  const body = init.json !== undefined ? JSON.stringify(init.json) : init.body;
  const response = await app.request(path, {
    method: init.method ?? "POST",
    headers,
    ...(body === undefined ? {} : { body }),
  });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // Not JSON: kept as text for the failure message.
  }
  return { status: response.status, body: parsed };
}

async function ok<T>(path: string, json: unknown, status = 200): Promise<T> {
  const answer = await call(path, { json });
  if (answer.status !== status)
    throw new Error(
      `${path}: expected ${status}, got ${answer.status}: ${JSON.stringify(answer.body)}`,
    );
  return answer.body as T;
}

function errorOf(answer: Answer): ErrorBody["error"] {
  const body = answer.body as ErrorBody;
  expect(Object.keys(body)).toEqual(["error"]);
  expect(Object.keys(body.error).sort()).toEqual(["code", "details", "message"]);
  return body.error;
}

/** The answer is `400 invalid_request` (`label` names the case when it is not); its error. */
function invalidRequest(answer: Answer, label: string): ErrorBody["error"] {
  expect(answer.status, label).toBe(400);
  const error = errorOf(answer);
  expect(error.code, label).toBe("invalid_request");
  return error;
}

function dump(): Promise<string> {
  return dumpTables(store.driver);
}

async function tick(): Promise<void> {
  const { report } = await ok<{ report: { stages: { name: string; errors: unknown[] }[] } }>(
    "/tick",
    {},
  );
  for (const stage of report.stages)
    if (stage.errors.length > 0)
      throw new Error(`stage ${stage.name}: ${JSON.stringify(stage.errors)}`);
}

/** Applies a package with one remote task in `pool`, starts a one-step workflow run and admits it. */
async function admittedRun(packageName: string, pool: string, script = "true"): Promise<string> {
  const yaml = `package: ${packageName}
tasks:
  work:
    run: ["sh", "-c", "${script}"]
    timeout: 60s
    executor: remote_worker
    pool: ${pool}
workflows:
  flow:
    steps:
      a: { task: work }
`;
  const response = await app.request("/packages", {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/yaml" },
    body: yaml,
  });
  expect(response.status).toBe(201);
  const { run } = await ok<{ run: { id: string } }>(
    "/runs",
    { package: packageName, workflow: "flow" },
    201,
  );
  await tick();
  return run.id;
}

async function claim(workerId: string, pool: string): Promise<Lease> {
  const { leases } = await ok<{ leases: Lease[] }>("/worker/claim", {
    workerId,
    pool,
    capacity: 1,
  });
  expect(leases).toHaveLength(1);
  return leases[0]!;
}

/**
 * A one-step run of package `name` whose attempt worker-1 claimed from pool `pool-<name>` and
 * reported `starting`, 10 ms ago: the state in which a lost report may carry `neverSpawned`.
 */
async function startingLease(name: string) {
  const runId = await admittedRun(name, `pool-${name}`);
  const fenceNow = fenceFor(await claim("worker-1", `pool-${name}`), "worker-1");
  await ok("/worker/start", { ...fenceNow, phase: "starting" });
  clock.advance(10);
  return { runId, fenceNow };
}

/** The fence a worker presents for `lease`: the attempt, the worker and the lease's version and secret. */
function fenceFor(lease: Lease, workerId: string) {
  return {
    attemptId: lease.attemptId,
    workerId,
    leaseVersion: lease.leaseVersion,
    leaseSecret: lease.leaseSecret,
  };
}

type WorkerRoute = (typeof WORKER_ROUTES)[number];
/** The routes that act on a leased attempt, so carry its fence: every one but claim. */
const FENCED_ROUTES = WORKER_ROUTES.filter((route) => route !== "/worker/claim");

/** A valid body for each route, for a given fence: the bad-input cases are variations of it. */
function validBodies(fence: {
  attemptId: string;
  workerId: string;
  leaseVersion: number;
  leaseSecret: string;
}): Record<WorkerRoute, Record<string, unknown>> {
  const nowMs = clock.nowMs();
  return {
    "/worker/claim": { workerId: fence.workerId, pool: "pool-bad", capacity: 1 },
    "/worker/start": {
      ...fence,
      phase: "running",
      handle: {
        pid: 4242,
        processStartTicks: "123456",
        bootId: "b7c1d2e3-aaaa",
        startedAtMs: nowMs,
      },
    },
    "/worker/heartbeat": { ...fence },
    "/worker/complete": {
      ...fence,
      startedAtMs: nowMs,
      finishedAtMs: nowMs + 5,
      exitCode: 0,
      signal: null,
      stopReason: null,
      spawnError: null,
    },
    // With the never-spawned fact: a stale fence must be refused with it too.
    "/worker/lost": { ...fence, reason: "the process is gone", neverSpawned: true },
  };
}

const NON_PORTABLE = [
  "",
  ".hidden",
  "../etc/passwd",
  "a/b",
  "a\\b",
  "has space",
  "nul\u0000byte",
  "x".repeat(37),
  "ü-not-ascii",
  "-leading-dash",
];

describe("worker routes", () => {
  let fence: { attemptId: string; workerId: string; leaseVersion: number; leaseSecret: string };

  beforeAll(async () => {
    await admittedRun("bad-input", "pool-bad");
    const lease = await claim("worker-1", "pool-bad");
    fence = fenceFor(lease, "worker-1");
    // Started, so that a valid body on any route would have written something.
    await ok("/worker/start", { ...fence, phase: "starting" });
  });

  /** Runs `check` on every worker route with that route's valid body; the store must not change. */
  async function onEveryRouteWritingNothing(
    check: (route: WorkerRoute, valid: Record<string, unknown>) => Promise<void>,
  ): Promise<void> {
    const before = await dump();
    const bodies = validBodies(fence);
    for (const route of WORKER_ROUTES) await check(route, bodies[route]);
    expect(await dump()).toBe(before);
  }

  it("malformed JSON is 400 invalid_request on every route, with nothing written", async () => {
    await onEveryRouteWritingNothing(async (route) => {
      for (const body of [
        "",
        "{",
        '{"workerId": "w",}',
        "[1, 2",
        "undefined",
        "{'a': 1}",
        "\u0000",
      ]) {
        const answer = await call(route, { body });
        const error = invalidRequest(answer, `${route} ${JSON.stringify(body)}`);
        expect(error.details.length).toBeGreaterThan(0);
      }
    });
  });

  it("bodies that are not objects, unknown fields and missing fields are 400 invalid_request naming the path, with nothing written", async () => {
    await onEveryRouteWritingNothing(async (route, valid) => {
      for (const json of [null, 42, "text", [], [valid], true]) {
        const answer = await call(route, { json });
        invalidRequest(answer, `${route} ${JSON.stringify(json)}`);
      }
      for (const extra of [
        { extra: 1 },
        { leaseExpiresAtMs: clock.nowMs() + 1_000_000 },
        { status: "succeeded" },
      ]) {
        const answer = await call(route, { json: { ...valid, ...extra } });
        const error = invalidRequest(answer, `${route} + ${JSON.stringify(extra)}`);
        // Each unknown field is named by its own path, as everywhere else in the API.
        expect(error.details).toContainEqual({
          path: Object.keys(extra)[0]!,
          message: "unknown field",
        });
      }
      // A `__proto__` key from JSON.parse is an own, unknown field too.
      const proto = await call(route, {
        body: `${JSON.stringify(valid).slice(0, -1)}, "__proto__": {"admin": true}}`,
      });
      expect(proto.status, `${route} __proto__`).toBe(400);
      expect(errorOf(proto).details).toContainEqual({
        path: "__proto__",
        message: "unknown field",
      });
      for (const key of Object.keys(valid)) {
        // Optional fields: a body without one is valid.
        if (route === "/worker/start" && key === "handle") continue;
        if (route === "/worker/lost" && key === "neverSpawned") continue;
        const missing = Object.fromEntries(Object.entries(valid).filter(([name]) => name !== key));
        const answer = await call(route, { json: missing });
        const error = invalidRequest(answer, `${route} without ${key}`);
        expect(error.details.map((detail) => detail.path)).toContain(key);
      }
    });
  });

  it("non-portable ids are 400 invalid_request on every route, with nothing written", async () => {
    await onEveryRouteWritingNothing(async (route, valid) => {
      const idFields = Object.keys(valid).filter(
        (key) => key === "attemptId" || key === "workerId" || key === "pool",
      );
      expect(idFields.length).toBeGreaterThan(0);
      for (const field of idFields) {
        for (const bad of NON_PORTABLE) {
          const answer = await call(route, { json: { ...valid, [field]: bad } });
          const error = invalidRequest(answer, `${route} ${field}=${JSON.stringify(bad)}`);
          expect(error.details.map((detail) => detail.path)).toContain(field);
        }
      }
    });
  });

  it("wrong types and out-of-range values are 400 invalid_request, with nothing written", async () => {
    const before = await dump();
    const bodies = validBodies(fence);
    const wrong: Record<WorkerRoute, Record<string, unknown[]>> = {
      "/worker/claim": {
        workerId: [1, null, ["w"]],
        pool: [7, null, {}],
        capacity: ["1", -1, 1.5, 65, null, true, Number.MAX_SAFE_INTEGER],
      },
      "/worker/start": {
        attemptId: [1, null],
        workerId: [false],
        leaseVersion: ["1", 0, -1, 1.5, null, 1e12],
        phase: ["begun", "", null, 1, "RUNNING"],
        handle: [
          "4242",
          42,
          null,
          [],
          { pid: "4242", processStartTicks: "1", bootId: "b", startedAtMs: 1 },
          { pid: 0, processStartTicks: "1", bootId: "b", startedAtMs: 1 },
          { pid: 1, processStartTicks: "12a", bootId: "b", startedAtMs: 1 },
          { pid: 1, processStartTicks: "1", bootId: "../x", startedAtMs: 1 },
          { pid: 1, processStartTicks: "1", bootId: "b", startedAtMs: -1 },
          { pid: 1, processStartTicks: "1", bootId: "b", startedAtMs: 1, extra: 1 },
          { pid: 1, processStartTicks: "1", bootId: "b" },
        ],
      },
      "/worker/heartbeat": {
        attemptId: [[]],
        workerId: [{}],
        leaseVersion: ["1", 0, 2.5, false],
        leaseSecret: [null, 1, "", "short", "has space in it, sixteen+", "x".repeat(129)],
      },
      "/worker/complete": {
        leaseVersion: ["x"],
        startedAtMs: ["1", -1, 1.5, null],
        finishedAtMs: [null, "now", -5],
        exitCode: ["0", 256, -2, 1.5],
        signal: ["sigterm", 15, "SIG TERM", "SIGVERYVERYLONGNAME"],
        stopReason: ["kill", "", 1],
        spawnError: [42, "x".repeat(1025)],
      },
      "/worker/lost": {
        leaseVersion: [null],
        reason: ["", null, 7, "x".repeat(513)],
        neverSpawned: ["true", 1, null, {}],
      },
    };
    for (const route of WORKER_ROUTES) {
      for (const [field, values] of Object.entries(wrong[route])) {
        for (const value of values) {
          const answer = await call(route, { json: { ...bodies[route], [field]: value } });
          const error = invalidRequest(answer, `${route} ${field}=${JSON.stringify(value)}`);
          expect(
            error.details.some(
              (detail) => detail.path === field || detail.path.startsWith(`${field}.`),
            ),
            `${route} ${field}: ${JSON.stringify(error.details)}`,
          ).toBe(true);
        }
      }
    }
    // phase running without its handle is refused too.
    const noHandle = await call("/worker/start", { json: { ...fence, phase: "running" } });
    expect(noHandle.status).toBe(400);
    expect(errorOf(noHandle).code).toBe("invalid_request");
    expect(await dump()).toBe(before);
  });

  it("no token, a wrong token or another scheme is 401 on every route, with nothing written", async () => {
    await onEveryRouteWritingNothing(async (route, valid) => {
      for (const authorization of [
        null,
        "",
        "Bearer",
        "Bearer ",
        `Bearer ${TOKEN}x`,
        `Bearer ${TOKEN.slice(0, -1)}`,
        `Basic ${TOKEN}`,
        TOKEN,
      ]) {
        const answer = await call(route, { json: valid, authorization });
        expect(answer.status, `${route} ${JSON.stringify(authorization)}`).toBe(401);
        expect(errorOf(answer).code).toBe("unauthorized");
      }
      // Even malformed input is unauthorized first.
      const malformed = await call(route, { body: "{", authorization: null });
      expect(malformed.status).toBe(401);
    });
  });

  it("a stale fence is 409 conflict on start, heartbeat, complete and lost, with nothing written; an unknown attempt is 404", async () => {
    await admittedRun("stale-routes", "pool-stale-routes");
    const old = await claim("worker-old", "pool-stale-routes");
    clock.advance(TTL_MS);
    const current = await claim("worker-new", "pool-stale-routes");
    expect(current).toMatchObject({ attemptId: old.attemptId, leaseVersion: 2 });
    const stale = [
      {
        attemptId: old.attemptId,
        workerId: "worker-old",
        leaseVersion: 1,
        leaseSecret: old.leaseSecret,
      },
      {
        attemptId: old.attemptId,
        workerId: "worker-old",
        leaseVersion: 2,
        leaseSecret: current.leaseSecret,
      },
      {
        attemptId: old.attemptId,
        workerId: "worker-new",
        leaseVersion: 1,
        leaseSecret: current.leaseSecret,
      },
      {
        attemptId: old.attemptId,
        workerId: "worker-new",
        leaseVersion: 3,
        leaseSecret: current.leaseSecret,
      },
      // The current holder and version, as events publish them, without the lease's secret.
      {
        attemptId: old.attemptId,
        workerId: "worker-new",
        leaseVersion: 2,
        leaseSecret: old.leaseSecret,
      },
      {
        attemptId: old.attemptId,
        workerId: "worker-new",
        leaseVersion: 2,
        leaseSecret: "guessed-secret-0123456789",
      },
    ];
    const probe = async (): Promise<void> => {
      const before = await dump();
      for (const staleFence of stale) {
        const bodies = validBodies(staleFence);
        for (const route of FENCED_ROUTES) {
          const answer = await call(route, { json: bodies[route] });
          expect(answer.status, `${route} ${JSON.stringify(staleFence)}`).toBe(409);
          expect(errorOf(answer).code).toBe("conflict");
          // Generic: the answer names neither the holder nor its version.
          expect(JSON.stringify(errorOf(answer))).not.toMatch(/worker-new|worker-old|version/);
        }
        const starting = await call("/worker/start", {
          json: { ...staleFence, phase: "starting" },
        });
        expect(starting.status).toBe(409);
      }
      expect(await dump()).toBe(before);
    };
    await probe();
    const fenceNow = {
      attemptId: current.attemptId,
      workerId: "worker-new",
      leaseVersion: 2,
      leaseSecret: current.leaseSecret,
    };
    expect(await ok("/worker/start", { ...fenceNow, phase: "starting" })).toEqual({
      status: "starting",
      leaseExpiresAtMs: clock.nowMs() + TTL_MS,
    });
    await probe();

    const before = await dump();
    const unknown = {
      attemptId: "wta:00000000000000000000000000000000",
      workerId: "worker-new",
      leaseVersion: 1,
      leaseSecret: current.leaseSecret,
    };
    for (const route of FENCED_ROUTES) {
      const answer = await call(route, { json: validBodies(unknown)[route] });
      expect(answer.status, route).toBe(404);
      expect(errorOf(answer).code).toBe("not_found");
    }
    expect(await dump()).toBe(before);
  });

  it("the happy path answers the documented shapes; a repeated completion is replayed and a late lost report is 409", async () => {
    const runId = await admittedRun("happy-routes", "pool-happy-routes");
    const lease = await claim("worker-1", "pool-happy-routes");
    expect(Object.keys(lease).sort()).toEqual([
      "attemptId",
      "context",
      "execution",
      "leaseExpiresAtMs",
      "leaseSecret",
      "leaseVersion",
      "runId",
      "stepRunId",
      "taskRevision",
    ]);
    expect(lease).toMatchObject({
      runId,
      leaseVersion: 1,
      leaseExpiresAtMs: clock.nowMs() + TTL_MS,
      execution: {
        executor: "remote_worker",
        pool: "pool-happy-routes",
        argv: ["sh", "-c", "true"],
      },
    });
    const fenceNow = {
      attemptId: lease.attemptId,
      workerId: "worker-1",
      leaseVersion: 1,
      leaseSecret: lease.leaseSecret,
    };
    // Worker times the coordinator's clock makes impossible: a clear 400 naming the field.
    for (const [startedAtMs, finishedAtMs, path] of [
      [clock.nowMs() + 60_000, clock.nowMs() + 60_001, "startedAtMs"],
      [clock.nowMs(), clock.nowMs() - 1, "finishedAtMs"],
      [0, clock.nowMs(), "startedAtMs"],
    ] as const) {
      const answer = await call("/worker/complete", {
        json: {
          ...fenceNow,
          startedAtMs,
          finishedAtMs,
          exitCode: 0,
          signal: null,
          stopReason: null,
          spawnError: null,
        },
      });
      expect(answer.status, JSON.stringify(errorOf(answer))).toBe(400);
      expect(errorOf(answer)).toMatchObject({ code: "invalid_request", details: [{ path }] });
      expect(errorOf(answer).message).toMatch(/implausible worker time/);
    }
    expect(await ok("/worker/start", { ...fenceNow, phase: "starting" })).toEqual({
      status: "starting",
      leaseExpiresAtMs: clock.nowMs() + TTL_MS,
    });
    const startedAtMs = clock.nowMs();
    clock.advance(5);
    expect(
      await ok("/worker/start", {
        ...fenceNow,
        phase: "running",
        handle: { pid: 4242, processStartTicks: "123456", bootId: "b7c1d2e3-aaaa", startedAtMs },
      }),
    ).toEqual({ status: "running", leaseExpiresAtMs: clock.nowMs() + TTL_MS });
    clock.advance(1_000);
    expect(await ok("/worker/heartbeat", fenceNow)).toEqual({
      action: "continue",
      leaseExpiresAtMs: clock.nowMs() + TTL_MS,
    });
    clock.advance(1_000);
    const facts = exitFacts(startedAtMs, clock.nowMs());
    const complete = (output: unknown) =>
      ok("/worker/complete", { ...fenceNow, ...facts, output, outputError: null });
    expect(await complete({ rows: 3 })).toEqual({ status: "succeeded", replayed: false });
    const before = await dump();
    // A repeated completion (a lost answer) never records a second output, even a different one.
    expect(await complete({ rows: 4 })).toEqual({ status: "succeeded", replayed: true });
    expect(await dump()).toBe(before);
    // The stored output is the first one (as the dump writes a text column).
    expect(before).toContain(JSON.stringify(JSON.stringify({ rows: 3 })).slice(1, -1));
    const late = await call("/worker/lost", { json: { ...fenceNow, reason: "late" } });
    expect(late.status).toBe(409);
    expect(errorOf(late).code).toBe("conflict");
    const beat = await call("/worker/heartbeat", { json: fenceNow });
    expect(beat.status).toBe(409);
    expect(await dump()).toBe(before);
    await tick();
    const detail = await app.request(`/runs/${runId}`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(((await detail.json()) as { run: { status: string } }).run.status).toBe("succeeded");
  });

  it("a never-spawned lost report from the lease's holder opens a new ready epoch for a starting attempt, and is 409 with nothing written on a running one", async () => {
    const { runId, fenceNow } = await startingLease("never-spawned-routes");
    expect(
      await ok("/worker/lost", {
        ...fenceNow,
        reason: "journaled but never spawned",
        neverSpawned: true,
      }),
    ).toEqual({ status: "lost", replayed: false });
    await tick();
    const detail = async (): Promise<{
      run: { status: string };
      steps: { status: string; attemptCount: number }[];
      attempts: { id: string; status: string; error: string | null }[];
    }> => {
      const response = await app.request(`/runs/${runId}`, {
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      return (await response.json()) as Awaited<ReturnType<typeof detail>>;
    };
    const afterLost = await detail();
    expect(afterLost.steps.map((step) => [step.status, step.attemptCount])).toEqual([["ready", 0]]);
    expect(afterLost.attempts.map((attempt) => attempt.status)).toEqual(["lost", "claimed"]);
    expect(afterLost.attempts[0]!.error).toBe("worker worker-1: journaled but never spawned");

    // The new epoch's attempt runs; the fact is refused on it once its process is on record.
    const next = await claim("worker-1", "pool-never-spawned-routes");
    expect(next.attemptId).toBe(afterLost.attempts[1]!.id);
    const nextFence = fenceFor(next, "worker-1");
    await ok("/worker/start", { ...nextFence, phase: "starting" });
    const startedAtMs = clock.nowMs();
    await ok("/worker/start", {
      ...nextFence,
      phase: "running",
      handle: { pid: 4243, processStartTicks: "123457", bootId: "b7c1d2e3-aaaa", startedAtMs },
    });
    const before = await dump();
    const refused = await call("/worker/lost", {
      json: { ...nextFence, reason: "never spawned", neverSpawned: true },
    });
    expect(refused.status).toBe(409);
    expect(errorOf(refused)).toMatchObject({ code: "conflict" });
    expect(errorOf(refused).message).toMatch(/is running/);
    expect(await dump()).toBe(before);
    clock.advance(10);
    await ok("/worker/complete", { ...nextFence, ...exitFacts(startedAtMs, clock.nowMs()) });
    await tick();
    const done = await detail();
    expect(done.run.status).toBe("succeeded");
    expect(done.steps.map((step) => [step.status, step.attemptCount])).toEqual([["succeeded", 1]]);
  });

  it("a worker's never-spawned report reaches a coordinator that predates the field: refused as unknown, it is sent again without it; any other refusal is not", async () => {
    // An older coordinator is the real routes without the field: its strict schema refused the
    // body, naming the field as unknown beside any other problem, and wrote nothing. Here the
    // field goes to the real routes under a name they do not know, and the answer names it back.
    const sent: Record<string, unknown>[] = [];
    const unknownToday = "neverSpawnedUnknownHere";
    const olderCoordinator: FetchFunction = async (input, init) => {
      const { neverSpawned, ...body } = JSON.parse(init.body as string) as Record<string, unknown>;
      sent.push(neverSpawned === undefined ? body : { ...body, neverSpawned });
      const path = new URL(input).pathname;
      if (neverSpawned === undefined) return app.request(path, init);
      const answer = await app.request(path, {
        ...init,
        body: JSON.stringify({ ...body, [unknownToday]: neverSpawned }),
      });
      return new Response((await answer.text()).replaceAll(unknownToday, "neverSpawned"), {
        status: answer.status,
        headers: answer.headers,
      });
    };
    const client = new QlrClient({
      baseUrl: "http://coordinator.test",
      token: TOKEN,
      fetch: olderCoordinator,
    });
    const { runId, fenceNow } = await startingLease("never-spawned-older");
    expect(
      await client.leaseLost({
        ...fenceNow,
        reason: "journaled but never spawned",
        neverSpawned: true,
      }),
    ).toEqual({ status: "lost", replayed: false });
    expect(sent.map((body) => "neverSpawned" in body)).toEqual([true, false]);
    // Settled as that coordinator settles a lost attempt: the step fails and is not run again.
    await tick();
    const response = await app.request(`/runs/${runId}`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    const settled = (await response.json()) as {
      steps: { status: string }[];
      attempts: { status: string }[];
    };
    expect(settled.steps.map((step) => step.status)).toEqual(["failed"]);
    expect(settled.attempts.map((attempt) => attempt.status)).toEqual(["lost"]);

    // Without the field, or refused for anything else, a report is sent once and its error stands.
    sent.length = 0;
    const stale = client.leaseLost({
      ...fenceNow,
      leaseVersion: fenceNow.leaseVersion + 1,
      reason: "gone again",
    });
    await expect(stale).rejects.toMatchObject({ status: 409, code: "conflict" });
    expect(sent).toHaveLength(1);
    sent.length = 0;
    const malformed = client.leaseLost({ ...fenceNow, reason: "", neverSpawned: true });
    await expect(malformed).rejects.toMatchObject({ status: 400, code: "invalid_request" });
    expect(sent).toHaveLength(1);
  });

  it("only POST is routed", async () => {
    for (const route of WORKER_ROUTES) {
      const answer = await call(route, { method: "GET" });
      expect(answer.status, route).toBe(404);
    }
  });
});
