/**
 * Property-based fuzzing of the HTTP boundary with fast-check: generated requests that are
 * wrong in some way (bodies, manifests, paths, queries, worker fences, credentials) must each
 * be answered with a clear 4xx error body, write nothing, and leave the server answering.
 *
 * Runs per boundary: `QLR_FUZZ_RUNS` (default 200 here; `npm run fuzz` sets 10000). A failure
 * prints fast-check's seed and path; rerun with `QLR_FUZZ_SEED=<seed>` to reproduce it.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  SQLJS_MEMORY_FACTORY,
  TOKEN,
  WORKER_TOKEN,
  diamondYaml,
  errorOf,
  harnessForBlock,
  type CallOptions,
  type Harness,
  type RunView,
  WORKER_ROUTES,
} from "./support.ts";

const RUNS = Number(process.env.QLR_FUZZ_RUNS ?? "200");
const SEED =
  process.env.QLR_FUZZ_SEED === undefined ? undefined : Number(process.env.QLR_FUZZ_SEED);
/** Ten thousand inputs per boundary take minutes; the budget scales with the runs asked for. */
const TIMEOUT_MS = Math.max(60_000, RUNS * 30);
const ERROR_CODES = new Set([
  "invalid_request",
  "invalid_manifest",
  "unauthorized",
  "not_found",
  "conflict",
  "payload_too_large",
]);

/** A key no schema knows: every object it is added to is invalid (all schemas are strict). */
const unknownKey = fc.stringMatching(/^[a-z]{1,8}$/).map((text) => `zz_${text}`);
const anyText = fc.string({ unit: "binary", maxLength: 64 });
const anyJson = fc.jsonValue({ maxDepth: 3 });

interface Request {
  readonly method: string;
  readonly path: string;
  readonly options: CallOptions;
}

/** A valid manifest object, as the generators' starting point. */
const validManifest = fc
  .record({
    name: fc.stringMatching(/^[a-z][a-z0-9-]{0,10}$/),
    argv: fc
      .array(
        fc.string({ maxLength: 12 }).filter((text) => !text.includes("\u0000")),
        { minLength: 1, maxLength: 3 },
      )
      .filter((argv) => argv[0] !== ""),
    timeoutMs: fc.integer({ min: 1000, max: 60_000 }),
  })
  .map(({ name, argv, timeoutMs }) => ({
    package: `fz-${name}`,
    tasks: { work: { run: argv, timeout: timeoutMs, retry: { max: 0 } } },
    workflows: { flow: { steps: { a: { task: "work" }, b: { task: "work", needs: ["a"] } } } },
  }));

type JsonObject = Record<string, unknown>;

/** One change that makes a valid manifest invalid: an unknown key somewhere, or a wrong value. */
const brokenManifest = fc
  .tuple(
    validManifest,
    fc.constantFrom(
      "root",
      "task",
      "retry",
      "workflow",
      "step",
      "package",
      "timeout",
      "needs",
      "run",
      "cycle",
    ),
    unknownKey,
    anyJson,
  )
  .map(([manifest, where, key, value]) => {
    const copy = JSON.parse(JSON.stringify(manifest)) as JsonObject & {
      tasks: { work: JsonObject & { retry: JsonObject } };
      workflows: { flow: { steps: Record<string, JsonObject> } };
    };
    switch (where) {
      case "root":
        copy[key] = value;
        break;
      case "task":
        copy.tasks.work[key] = value;
        break;
      case "retry":
        copy.tasks.work.retry[key] = value;
        break;
      case "workflow":
        (copy.workflows.flow as unknown as JsonObject)[key] = value;
        break;
      case "step":
        (copy.workflows.flow.steps.a as JsonObject)[key] = value;
        break;
      case "package":
        copy.package = `Bad/${JSON.stringify(value)}`;
        break;
      case "timeout":
        copy.tasks.work.timeout =
          typeof value === "number" ? -Math.abs(value) - 1 : `${JSON.stringify(value)}x`;
        break;
      case "needs":
        (copy.workflows.flow.steps.b as JsonObject).needs = [`missing-${key}`];
        break;
      case "run":
        copy.tasks.work.run = typeof value === "string" ? value : [];
        break;
      case "cycle":
        (copy.workflows.flow.steps.a as JsonObject).needs = ["b"];
        break;
    }
    return copy;
  });

const manifestRequests: fc.Arbitrary<Request> = fc.oneof(
  brokenManifest.map((manifest) => ({
    method: "POST",
    path: "/packages",
    options: { json: manifest },
  })),
  fc.tuple(brokenManifest, fc.boolean()).map(([manifest, asYaml]) => ({
    method: "POST",
    path: "/packages",
    // The same broken manifest as YAML (JSON is YAML) or as text with a random tail.
    options: {
      body: asYaml ? JSON.stringify(manifest) : `${JSON.stringify(manifest)}\n}`,
      contentType: "application/yaml",
    },
  })),
  anyText.map((text) => ({
    method: "POST",
    path: "/packages",
    options: { body: text, contentType: "application/yaml" },
  })),
  anyJson.map((value) => ({ method: "POST", path: "/packages", options: { json: value } })),
  fc
    .tuple(anyText, fc.stringMatching(/^[a-z]{1,10}\/[a-z0-9.+-]{1,12}$/))
    .filter(
      ([, type]) =>
        !["application/json", "application/yaml", "application/x-yaml", "text/yaml"].includes(type),
    )
    .map(([text, type]) => ({
      method: "POST",
      path: "/packages",
      options: { body: text, contentType: type },
    })),
);

const runRequests: fc.Arbitrary<Request> = fc.oneof(
  anyJson.map((value) => ({ method: "POST", path: "/runs", options: { json: value } })),
  fc
    .record(
      {
        package: fc.oneof(anyText, anyJson),
        workflow: fc.oneof(anyText, anyJson),
        task: fc.oneof(anyText, anyJson),
        idempotencyKey: fc.oneof(anyText, anyJson),
      },
      { requiredKeys: [] },
    )
    .map((body) => ({ method: "POST", path: "/runs", options: { json: body } })),
  anyText.map((text) => ({
    method: "POST",
    path: "/runs",
    options: { body: text, contentType: "application/json" },
  })),
);

/** A path segment: anything, percent-encoded so it stays one segment. */
const segment = fc
  .string({ unit: "binary", minLength: 1, maxLength: 48 })
  .map((text) => encodeURIComponent(text));
/** What the seeded package holds (its name, its workflow and the diamond's steps): found, not refused. */
const SEEDED_NAMES: ReadonlySet<string> = new Set(["seed", "diamond", "a", "b", "c", "d"]);
/** A path segment naming nothing the runtime holds (a one-letter segment may be a step name). */
const unknownSegment = segment.filter((text) => !SEEDED_NAMES.has(text));
const unknownQuery = fc
  .tuple(unknownKey, anyText)
  .map(([key, value]) => `${key}=${encodeURIComponent(value)}`);
const badQueryValue = fc
  .tuple(fc.constantFrom("status", "limit", "cursor", "after"), anyText)
  .filter(([key, value]) => {
    if (key === "status")
      return ![
        "queued",
        "dispatching",
        "running",
        "succeeded",
        "failed",
        "timed_out",
        "cancelled",
        "lost",
      ].includes(value);
    // Only decimal digits are numbers here (an empty value is not 0); limits are 1–200 (runs) or 1–500 (events).
    if (key === "limit") return !/^0*([1-9][0-9]?|1[0-9][0-9]|200)$/.test(value);
    if (key === "cursor") return !/^[A-Za-z0-9][A-Za-z0-9._:-]{0,35}$/.test(value);
    return !/^[0-9]{1,16}$/.test(value);
  });

function readRequests(finishedRunId: () => string): fc.Arbitrary<Request> {
  return fc.oneof(
    fc
      .array(unknownQuery, { minLength: 1, maxLength: 3 })
      .map((query) => ({ method: "GET", path: `/runs?${query.join("&")}`, options: {} })),
    badQueryValue
      .filter(([key]) => key !== "after")
      .map(([key, value]) => ({
        method: "GET",
        path: `/runs?${key}=${encodeURIComponent(value)}`,
        options: {},
      })),
    badQueryValue
      .filter(([key]) => key === "after" || key === "limit")
      .map(([key, value]) => ({
        method: "GET",
        path: `/runs/${finishedRunId()}/events?${key}=${encodeURIComponent(value)}`,
        options: {},
      })),
    segment.map((id) => ({ method: "GET", path: `/runs/${id}`, options: {} })),
    segment.map((id) => ({ method: "GET", path: `/runs/${id}/events`, options: {} })),
    segment.map((id) => ({ method: "POST", path: `/runs/${id}/cancel`, options: {} })),
    fc
      .tuple(segment, segment)
      .map(([id, name]) => ({ method: "GET", path: `/runs/${id}/steps/${name}/log`, options: {} })),
    unknownSegment.map((name) => ({
      method: "GET",
      path: `/runs/${finishedRunId()}/steps/${name}/log`,
      options: {},
    })),
    unknownSegment.map((name) => ({ method: "GET", path: `/packages/${name}`, options: {} })),
    fc
      .tuple(
        fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH"),
        fc.array(segment, { minLength: 1, maxLength: 4 }),
      )
      .map(([method, parts]) => ({ method, path: `/zz/${parts.join("/")}`, options: {} })),
  );
}

function workerRequests(attemptIds: () => readonly string[]): fc.Arbitrary<Request> {
  const fenceLike = fc.record({
    attemptId: fc.oneof(
      fc.constantFrom(...attemptIds()),
      fc.stringMatching(/^wta:[0-9a-f]{32}$/),
      anyText,
    ),
    workerId: fc.oneof(fc.stringMatching(/^w-[a-z0-9]{1,8}$/), anyText),
    leaseVersion: fc.oneof(fc.integer({ min: 1, max: 5 }), anyJson),
    leaseSecret: fc.oneof(fc.stringMatching(/^[A-Za-z0-9_-]{16,40}$/), anyText),
  });
  const phase = fc.record(
    {
      phase: fc.constantFrom("starting", "running"),
      handle: fc.option(
        fc.record({
          pid: fc.integer({ min: 1, max: 4_000_000 }),
          processStartTicks: fc.stringMatching(/^[0-9]{1,8}$/),
          bootId: fc.stringMatching(/^[a-z0-9-]{1,20}$/),
          startedAtMs: fc.nat(),
        }),
        { nil: undefined },
      ),
    },
    { requiredKeys: ["phase"] },
  );
  const times = fc.record({
    startedAtMs: fc.nat(),
    finishedAtMs: fc.nat(),
    exitCode: fc.option(fc.integer({ min: 0, max: 255 })),
    signal: fc.constant(null),
    stopReason: fc.constant(null),
    spawnError: fc.constant(null),
  });
  return fc.oneof(
    fc
      .tuple(fc.constantFrom(...WORKER_ROUTES), anyJson)
      .map(([path, value]) => ({ method: "POST", path, options: { json: value } })),
    fc.tuple(fc.constantFrom(...WORKER_ROUTES), anyText).map(([path, text]) => ({
      method: "POST",
      path,
      options: { body: text, contentType: "application/json" },
    })),
    // Claims with one unknown field: the only claim that could be valid is refused by its shape.
    fc
      .tuple(fc.record({ workerId: anyText, pool: anyText, capacity: anyJson }), unknownKey)
      .map(([body, key]) => ({
        method: "POST",
        path: "/worker/claim",
        options: { json: { ...body, [key]: 1 } },
      })),
    // Fences of attempts that exist (local ones, so never a live lease) or not, with any secret.
    fc.tuple(fenceLike, phase).map(([fence, extra]) => ({
      method: "POST",
      path: "/worker/start",
      options: { json: { ...fence, ...extra } },
    })),
    fenceLike.map((fence) => ({
      method: "POST",
      path: "/worker/heartbeat",
      options: { json: fence },
    })),
    fc.tuple(fenceLike, times).map(([fence, facts]) => ({
      method: "POST",
      path: "/worker/complete",
      options: { json: { ...fence, ...facts } },
    })),
    fc.tuple(fenceLike, anyText).map(([fence, reason]) => ({
      method: "POST",
      path: "/worker/lost",
      options: { json: { ...fence, reason } },
    })),
  );
}

/** Credentials that are not the admin token (and not the worker token outside /worker/). */
const badCredentials: fc.Arbitrary<Request> = fc
  .tuple(
    fc.oneof(
      anyText.filter((text) => /^[\t\x20-\x7e]*$/.test(text)).map((text) => `Bearer ${text}`),
      anyText.filter((text) => /^[\t\x20-\x7e]*$/.test(text)),
      fc.constant(`Bearer ${WORKER_TOKEN}`),
      fc.constant(`Basic ${TOKEN}`),
      fc.constant(`Bearer ${TOKEN}x`),
      fc.constant(`Bearer ${TOKEN.slice(1)}`),
    ),
    fc.constantFrom<[string, string]>(
      ["POST", "/tick"],
      ["GET", "/runs"],
      ["GET", "/packages"],
      ["GET", "/metrics"],
      ["POST", "/packages"],
      ["GET", "/recovery"],
    ),
  )
  .filter(
    ([authorization]) =>
      authorization.trim() !== `Bearer ${TOKEN}` &&
      !/^bearer +test-token$/i.test(authorization.trim()),
  )
  .map(([authorization, [method, path]]) => ({
    method,
    path,
    options: {
      authorization,
      ...(method === "POST"
        ? { body: diamondYaml("intruder"), contentType: "application/yaml" }
        : {}),
    },
  }));

describe("fuzzing the HTTP boundary", () => {
  let h: Harness;
  let baseline: string;
  let finished: RunView;
  let attemptIds: string[] = [];

  harnessForBlock(SQLJS_MEMORY_FACTORY, async (opened) => {
    h = opened;
    const detail = await h.succeededDiamond("seed");
    finished = detail.run;
    attemptIds = detail.attempts.map((attempt) => attempt.id);
    baseline = await h.dump();
  });

  /** Every input: a 4xx with a clear error body, nothing written; after the run, the server still answers. */
  async function assertRejected(request: Request): Promise<void> {
    const result = await h.call(request.method, request.path, request.options);
    const where = `${request.method} ${request.path} → ${result.status} ${result.text.slice(0, 300)}`;
    expect(result.status, where).toBeGreaterThanOrEqual(400);
    expect(result.status, where).toBeLessThan(500);
    expect(result.contentType, where).toMatch(/^application\/json/);
    const error = errorOf(result);
    expect(ERROR_CODES.has(error.code), where).toBe(true);
    expect(await h.dump(), where).toBe(baseline);
  }

  async function assertAlive(): Promise<void> {
    expect((await h.call("GET", "/healthz")).status).toBe(200);
    const runs = await h.call("GET", "/runs?limit=5");
    expect(runs.status).toBe(200);
    expect(await h.dump()).toBe(baseline);
  }

  const boundaries: [string, () => fc.Arbitrary<Request>][] = [
    ["manifests on POST /packages", () => manifestRequests],
    ["bodies on POST /runs", () => runRequests],
    ["paths and queries", () => readRequests(() => finished.id)],
    ["worker routes and fences", () => workerRequests(() => attemptIds)],
    ["credentials", () => badCredentials],
  ];

  it.each(boundaries)(
    `%s: ${RUNS} generated inputs, each a clear 4xx that writes nothing`,
    async (_name, arbitrary) => {
      await fc.assert(
        fc.asyncProperty(arbitrary(), async (request) => assertRejected(request)),
        { numRuns: RUNS, ...(SEED === undefined ? {} : { seed: SEED }) },
      );
      await assertAlive();
    },
    TIMEOUT_MS,
  );
});
