import { Hono, type Context } from "hono";
import { bodyLimit } from "hono/body-limit";
import { z } from "zod";
import type { Coordinator } from "../../src/coordinator.ts";
import { isQlrError, QlrError, type QlrErrorCode } from "../../src/errors.ts";
import { isPortableId, PACKAGE_NAME_PATTERN, RESOURCE_NAME_PATTERN } from "../../src/identity.ts";
import { MAX_MANIFEST_BYTES, utf8ByteLength } from "../../src/manifest/limits.ts";
import { parseManifest } from "../../src/manifest/index.ts";
import { RUN_STATUSES, type Run, type RunAttempt, type StepRun } from "../../src/model.ts";
import { applyPackage, cancelRun, getRunDetail, getRunEvents, resolveAttempt, startRun } from "../../src/operations.ts";
import { MAX_RESOLVE_REASON_LENGTH } from "../../src/recovery.ts";
import type { Clock, IdSource, SecretSource, Store } from "../../src/ports.ts";
import { LeaseService } from "../../src/lease-service.ts";
import { isAuthorized } from "./auth.ts";
import type { RetentionPolicy } from "../../src/retention.ts";
import type { Metrics } from "./metrics.ts";
import { mountWorkerRoutes } from "./worker-routes.ts";
import { mountObserveRoutes, type ObserveDeps } from "./observe-routes.ts";

/**
 * The one Hono app every runtime serves (device, server, Worker). It validates every input
 * at the boundary with zod or explicit checks, writes nothing for bad input, and answers
 * errors as `{error: {code, message, details}}` with the status words of the contract.
 */

export const MAX_BODY_BYTES = MAX_MANIFEST_BYTES + 4096;
export const MAX_LIST_LIMIT = 200;
export const MAX_EVENTS_PAGE = 500;
/** The most bytes of log one answer carries, stdout and stderr together (README: 1 MiB). */
export const LOG_ANSWER_MAX_BYTES = 1024 * 1024;

export interface AppDeps {
  readonly store: Store;
  readonly coordinator: Coordinator;
  readonly clock: Clock;
  readonly ids: IdSource;
  /** Lease secrets for remote workers: the host's cryptographic random source. */
  readonly secrets: SecretSource;
  /** The admin token: every route. */
  readonly token: string;
  /** The remote workers' token: only `/worker/*` (see auth.ts). */
  readonly workerToken?: string | null;
  readonly metrics: Metrics;
  /** Reads the latest attempt log of a step; absent on runtimes that hold no logs. */
  readonly readLog?: (attempt: RunAttempt, maxBytes: number) => Promise<string | null>;
  /** Reads a chunk of a step's log by byte offset (`GET …/log?offset=N`); absent on runtimes that hold no logs. */
  readonly readLogChunk?: ObserveDeps["readLogChunk"];
  /** Recovery decisions that failed closed, shown by `status` and the API. */
  readonly recoveryReport?: () => readonly { attemptId: string; decision: string; reason: string | null }[];
  /**
   * The executor types this runtime can run. A runtime that cannot spawn processes (an edge
   * function) refuses `local_process` tasks at apply time instead of admitting steps that
   * nothing would ever start. Defaults to both.
   */
  readonly supportedExecutors?: readonly ("local_process" | "remote_worker")[];
  /** How long a remote worker's lease lasts without a heartbeat. */
  readonly leaseTtlMs?: number;
  /** The retention this runtime purges by (`GET /info`); null or absent: nothing is purged. */
  readonly retention?: RetentionPolicy | null;
  /** The cadence profile's name, for `GET /info`. */
  readonly profileName?: string;
  /** Extra routes mounted before auth (dashboard assets). */
  readonly mount?: (app: Hono) => void;
  /**
   * Called after a request that may have changed state succeeded (any method but GET and HEAD,
   * answered below 400): a run started or cancelled, a package applied, a worker's report. The
   * runtime runs its cadence at once instead of waiting for the interval.
   */
  readonly onChange?: () => void | Promise<void>;
}

const STATUS_OF: Record<QlrErrorCode, 400 | 401 | 404 | 409 | 413 | 500 | 503> = {
  invalid_request: 400,
  invalid_manifest: 400,
  invalid_identity: 400,
  limit_exceeded: 400,
  payload_too_large: 413,
  unauthorized: 401,
  not_found: 404,
  conflict: 409,
  illegal_transition: 409,
  clock_regression: 503,
  schema_too_new: 500,
  storage_corrupt: 500,
  storage_locked: 503,
  storage_unavailable: 503,
  integrity: 500,
  internal: 500,
};

function publicCode(code: QlrErrorCode): string {
  switch (code) {
    case "invalid_identity":
    case "limit_exceeded":
      return "invalid_request";
    case "illegal_transition":
      return "conflict";
    case "unauthorized":
    case "not_found":
    case "conflict":
    case "payload_too_large":
    case "invalid_request":
    case "invalid_manifest":
      return code;
    default:
      return "internal";
  }
}

function fail(code: QlrErrorCode, message: string, details: { path: string; message: string }[] = []): never {
  throw new QlrError(code, message, { details });
}

function zodDetails(error: z.ZodError): { path: string; message: string }[] {
  const pathOf = (segments: readonly PropertyKey[]): string => (segments.length === 0 ? "$" : segments.map(String).join("."));
  // An unknown field is named by its own path, one detail per field, as manifest issues are.
  return error.issues.flatMap((issue) =>
    issue.code === "unrecognized_keys" ? issue.keys.map((key) => ({ path: pathOf([...issue.path, key]), message: "unknown field" })) : [{ path: pathOf(issue.path), message: issue.message }],
  );
}

/** The media type of the request without parameters, lower-case; "" when absent. */
function mediaType(c: Context): string {
  return (c.req.header("content-type") ?? "").split(";")[0]?.trim().toLowerCase() ?? "";
}

const startRunBody = z
  .object({
    package: z.string().regex(PACKAGE_NAME_PATTERN),
    workflow: z.string().regex(RESOURCE_NAME_PATTERN).optional(),
    task: z.string().regex(RESOURCE_NAME_PATTERN).optional(),
    idempotencyKey: z.string().min(1).max(128).regex(/^[\x20-\x7e]+$/).optional(),
  })
  .strict()
  .refine((body) => (body.workflow === undefined) !== (body.task === undefined), { message: "exactly one of workflow or task", path: ["workflow"] });

const resolveBody = z
  .object({
    as: z.literal("lost"),
    // Printable text on one line: it is shown in events, `qlr status` and the dashboard.
    reason: z
      .string()
      .min(1)
      .max(MAX_RESOLVE_REASON_LENGTH)
      .refine((text) => [...text].every((char) => char.charCodeAt(0) >= 0x20 && char.charCodeAt(0) !== 0x7f), "must be printable text on one line"),
  })
  .strict();

/**
 * A whole number in a query string: decimal digits only. `Number()` alone would read "" and
 * " 5" as numbers, so an empty `after=` silently meant 0.
 */
function wholeNumberText(min: number, max: number): z.ZodType<number, string> {
  return z
    .string()
    .regex(/^[0-9]{1,16}$/, "must be a whole number (decimal digits only)")
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));
}

const listQuery = z
  .object({
    status: z.enum(RUN_STATUSES).optional(),
    limit: wholeNumberText(1, MAX_LIST_LIMIT).default(50),
    cursor: z.string().refine(isPortableId, "cursor must be a run id").optional(),
  })
  .strict();

const eventsQuery = z.object({ after: wholeNumberText(0, Number.MAX_SAFE_INTEGER).default(0), limit: wholeNumberText(1, MAX_EVENTS_PAGE).default(MAX_EVENTS_PAGE) }).strict();

function runId(c: Context): string {
  const id = c.req.param("id") ?? "";
  if (!isPortableId(id)) fail("invalid_request", "run id must be a portable identity", [{ path: "id", message: "not a portable identity" }]);
  return id;
}

function queryObject(c: Context): Record<string, string> {
  const url = new URL(c.req.url);
  const out: Record<string, string> = {};
  for (const [key, value] of url.searchParams) out[key] = value;
  return out;
}

async function readJson(c: Context): Promise<unknown> {
  const contentType = mediaType(c);
  if (contentType !== "application/json" && contentType !== "") fail("invalid_request", `unsupported content-type ${contentType}; use application/json`, [{ path: "content-type", message: "unsupported" }]);
  const text = await c.req.text();
  try {
    return JSON.parse(text) as unknown;
  } catch {
    fail("invalid_request", "the body is not valid JSON", [{ path: "$", message: "malformed JSON" }]);
  }
}

export function runView(run: Run): Record<string, unknown> {
  return {
    id: run.id,
    kind: run.kind,
    status: run.status,
    package: run.package,
    generation: run.generation,
    target: run.target,
    createdAtMs: run.createdAtMs,
    finishedAtMs: run.finishedAtMs,
    cancelRequestedAtMs: run.cancelRequestedAtMs,
    idempotencyKey: run.idempotencyKey,
    scheduleName: run.scheduleName,
  };
}

function stepView(step: StepRun): Record<string, unknown> {
  return { id: step.id, name: step.name, task: step.task, needs: step.needs, status: step.status, version: step.version, attemptCount: step.attemptCount, startedAtMs: step.startedAtMs, finishedAtMs: step.finishedAtMs };
}

function attemptView(attempt: RunAttempt): Record<string, unknown> {
  return {
    id: attempt.id,
    stepRunId: attempt.stepRunId,
    number: attempt.number,
    status: attempt.status,
    executor: attempt.executor,
    startedAtMs: attempt.startedAtMs,
    finishedAtMs: attempt.finishedAtMs,
    exitCode: attempt.exitCode,
    signal: attempt.signal,
    pid: attempt.pid,
    stopReason: attempt.stopReason,
    error: attempt.error,
  };
}

export function createApp(deps: AppDeps): Hono {
  const app = new Hono();
  const { store, clock } = deps;
  const write = <T>(fn: (tx: Parameters<Parameters<Store["transaction"]>[0]>[0], nowMs: number) => Promise<T>): Promise<T> =>
    store.transaction(async (tx) => fn(tx, await tx.observe(clock.nowMs())));

  app.onError((error, c) => {
    deps.metrics.observeHttpError();
    if (isQlrError(error)) {
      return c.json({ error: { code: publicCode(error.code), message: error.message, details: error.details } }, STATUS_OF[error.code]);
    }
    return c.json({ error: { code: "internal", message: "internal error", details: [] } }, 500);
  });
  app.notFound((c) => c.json({ error: { code: "not_found", message: `no route ${c.req.method} ${new URL(c.req.url).pathname}`, details: [] } }, 404));

  app.get("/healthz", (c) => c.json({ ok: true }));
  deps.mount?.(app);

  app.use("*", async (c, next) => {
    if (!isAuthorized(c.req.header("authorization"), new URL(c.req.url).pathname, { admin: deps.token, worker: deps.workerToken ?? null })) {
      deps.metrics.observeHttpError();
      return c.json({ error: { code: "unauthorized", message: "a valid bearer token is required", details: [] } }, 401);
    }
    await next();
  });
  if (deps.onChange !== undefined) {
    const onChange = deps.onChange;
    app.use("*", async (c, next) => {
      await next();
      // Awaited, so a wake that writes (a Durable Object's alarm) is in place before the answer leaves.
      if (c.req.method !== "GET" && c.req.method !== "HEAD" && c.res.status < 400) await onChange();
    });
  }
  app.use(
    "*",
    bodyLimit({
      maxSize: MAX_BODY_BYTES,
      onError: (c) => c.json({ error: { code: "payload_too_large", message: `the body exceeds ${MAX_BODY_BYTES} bytes`, details: [] } }, 413),
    }),
  );

  app.post("/tick", async (c) => {
    const report = await deps.coordinator.tick();
    return c.json({ report });
  });

  app.post("/packages", async (c) => {
    const contentType = mediaType(c);
    // Decoded from bytes rather than `text()`: some runtimes (workerd) warn when a YAML body is
    // read as text, and a manifest is UTF-8 whatever its media type says.
    const text = new TextDecoder("utf-8").decode(await c.req.arrayBuffer());
    // The body is the manifest: one over the manifest limit is a payload too large, whatever its format.
    if (text.length > MAX_MANIFEST_BYTES || utf8ByteLength(text) > MAX_MANIFEST_BYTES) fail("payload_too_large", `the manifest exceeds ${MAX_MANIFEST_BYTES} bytes`);
    let result;
    if (contentType === "application/yaml" || contentType === "application/x-yaml" || contentType === "text/yaml") {
      result = parseManifest(text, "yaml");
    } else if (contentType === "application/json" || contentType === "") {
      result = parseManifest(text, "json");
    } else {
      fail("invalid_request", `unsupported content-type ${contentType}; use application/json or application/yaml`, [{ path: "content-type", message: "unsupported" }]);
    }
    if (!result.ok) fail("invalid_manifest", `the manifest has ${result.issues.length} problem(s)`, result.issues);
    const supported = deps.supportedExecutors ?? ["local_process", "remote_worker"];
    // A command notifier runs on the runtime's own host, like a local_process task.
    if (!supported.includes("local_process")) {
      const commands = [...result.manifest.tasks.map((item) => ["tasks", item] as const), ...result.manifest.workflows.map((item) => ["workflows", item] as const), ...result.manifest.schedules.map((item) => ["schedules", item] as const)].flatMap(([section, item]) =>
        (item.notify ?? []).flatMap((notifier, index) => (notifier.kind === "command" ? [{ path: `${section}.${item.name}.notify[${index}].command`, message: "a command notifier runs only on a device (qlr serve); use a webhook here" }] : [])),
      );
      if (commands.length > 0) fail("invalid_manifest", "this runtime cannot run command notifiers", commands);
    }
    const unsupported = result.manifest.tasks.filter((task) => !supported.includes(task.executor));
    if (unsupported.length > 0) {
      fail(
        "invalid_manifest",
        `this runtime cannot run ${unsupported[0]?.executor ?? ""} tasks`,
        unsupported.map((task) => ({ path: `tasks.${task.name}.executor`, message: `${task.executor} is not available here; use one of ${supported.join(", ")}` })),
      );
    }
    const applied = await write((tx, nowMs) => applyPackage(tx, result.manifest, nowMs));
    return c.json(applied, applied.changed ? 201 : 200);
  });

  app.get("/packages", async (c) => {
    const packages = await store.transaction(async (tx) => tx.listPackageHeads(MAX_LIST_LIMIT));
    return c.json({ packages });
  });

  app.get("/packages/:name", async (c) => {
    const name = c.req.param("name");
    if (!PACKAGE_NAME_PATTERN.test(name)) fail("invalid_request", "package name is not valid", [{ path: "name", message: "invalid" }]);
    const found = await store.transaction(async (tx) => {
      const head = await tx.getPackageHead(name);
      if (head === null) return null;
      const generations = await tx.listGenerations(name, 50);
      const current = await tx.getGeneration(name, head.generation);
      const schedules = await tx.getSchedules(name);
      return { head, generations, manifest: current?.manifest ?? null, schedules };
    });
    if (found === null) fail("not_found", `package ${name} is not applied`);
    return c.json({
      package: found.head,
      generations: found.generations,
      workflows: found.manifest?.workflows ?? [],
      tasks: (found.manifest?.tasks ?? []).map((task) => ({ name: task.name, executor: task.executor, timeoutMs: task.timeoutMs })),
      schedules: found.schedules.map((schedule) => ({ name: schedule.name, cron: schedule.spec.cron, timezone: schedule.spec.timezone, target: schedule.spec.target, overlap: schedule.spec.overlap, nextFireAtMs: schedule.nextFireAtMs, lastFireAtMs: schedule.lastFireAtMs, missedFires: schedule.missedFires, skippedOverlaps: schedule.skippedOverlaps })),
    });
  });

  app.post("/runs", async (c) => {
    const parsed = startRunBody.safeParse(await readJson(c));
    if (!parsed.success) fail("invalid_request", "the run request is not valid", zodDetails(parsed.error));
    const body = parsed.data;
    const target = body.workflow !== undefined ? ({ kind: "workflow", name: body.workflow } as const) : ({ kind: "task", name: body.task ?? "" } as const);
    const started = await write((tx, nowMs) => startRun(tx, { package: body.package, target, idempotencyKey: body.idempotencyKey ?? null, scheduleName: null, runId: deps.ids.runId() }, nowMs));
    return c.json({ run: runView(started.run) }, started.created ? 201 : 200);
  });

  app.get("/runs", async (c) => {
    const parsed = listQuery.safeParse(queryObject(c));
    if (!parsed.success) fail("invalid_request", "the query is not valid", zodDetails(parsed.error));
    const { status, limit, cursor } = parsed.data;
    const runs = await store.transaction(async (tx) => tx.listRuns({ status: status ?? null, cursor: cursor ?? null, limit: limit + 1 }));
    const page = runs.slice(0, limit);
    return c.json({ runs: page.map(runView), nextCursor: runs.length > limit ? (page[page.length - 1]?.id ?? null) : null });
  });

  app.get("/runs/:id", async (c) => {
    const id = runId(c);
    const detail = await store.transaction(async (tx) => getRunDetail(tx, id));
    return c.json({ run: runView(detail.run), steps: detail.steps.map(stepView), attempts: detail.attempts.map(attemptView) });
  });

  app.get("/runs/:id/events", async (c) => {
    const id = runId(c);
    const parsed = eventsQuery.safeParse(queryObject(c));
    if (!parsed.success) fail("invalid_request", "the query is not valid", zodDetails(parsed.error));
    const events = await store.transaction(async (tx) => getRunEvents(tx, id, parsed.data.after, parsed.data.limit));
    return c.json({ events: events.map((event) => ({ seq: event.seq, type: event.type, atMs: event.atMs, stepRunId: event.stepRunId, attemptId: event.attemptId, data: event.data })) });
  });

  app.post("/runs/:id/cancel", async (c) => {
    const id = runId(c);
    const run = await write((tx, nowMs) => cancelRun(tx, id, nowMs));
    return c.json({ run: runView(run) }, 202);
  });

  app.post("/attempts/:id/resolve", async (c) => {
    const id = c.req.param("id") ?? "";
    if (!isPortableId(id)) fail("invalid_request", "attempt id must be a portable identity", [{ path: "id", message: "not a portable identity" }]);
    const parsed = resolveBody.safeParse(await readJson(c));
    if (!parsed.success) fail("invalid_request", "the resolution is not valid", zodDetails(parsed.error));
    const attempt = await write((tx, nowMs) => resolveAttempt(tx, id, parsed.data, nowMs));
    return c.json({ attempt: attemptView(attempt) });
  });

  mountObserveRoutes(app, { store, clock, ...(deps.readLogChunk === undefined ? {} : { readLogChunk: deps.readLogChunk }) });

  app.get("/runs/:id/steps/:name/log", async (c) => {
    const id = runId(c);
    const name = c.req.param("name");
    if (!RESOURCE_NAME_PATTERN.test(name)) fail("invalid_request", "step name is not valid", [{ path: "name", message: "invalid" }]);
    const detail = await store.transaction(async (tx) => getRunDetail(tx, id));
    const step = detail.steps.find((candidate) => candidate.name === name);
    const targetStepId = detail.run.kind === "ordinary" ? null : step?.id;
    if (detail.run.kind === "workflow" && step === undefined) fail("not_found", `run ${id} has no step ${name}`);
    const latest = detail.attempts.filter((attempt) => attempt.stepRunId === (targetStepId ?? null)).at(-1);
    if (latest === undefined || deps.readLog === undefined) fail("not_found", `step ${name} has no log yet`);
    const text = await deps.readLog(latest, LOG_ANSWER_MAX_BYTES);
    if (text === null) fail("not_found", `step ${name} has no log yet`);
    return c.text(text, 200, { "content-type": "text/plain; charset=utf-8" });
  });

  mountWorkerRoutes(app, new LeaseService({ store, clock, secrets: deps.secrets, ...(deps.leaseTtlMs === undefined ? {} : { ttlMs: deps.leaseTtlMs }) }));

  app.get("/info", (c) => {
    const retention = deps.retention ?? null;
    return c.json({
      profile: deps.profileName ?? null,
      // The idempotency window is the horizon: a key whose run was purged starts a new run.
      retention: retention === null ? null : { horizonMs: retention.horizonMs, maxRuns: retention.maxRuns, idempotencyWindowMs: retention.horizonMs },
    });
  });

  app.get("/recovery", (c) => c.json({ recovery: deps.recoveryReport?.() ?? [] }));

  app.get("/metrics", async (c) => {
    const counts = await store.transaction(async (tx) => tx.countRunsByStatus());
    return c.text(deps.metrics.render(counts), 200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
  });

  return app;
}
