/**
 * The HTTP test harness: the real Hono app (`createApp`) over a real SQL store, driven only
 * through `app.request()`. The coordinator runs on a virtual clock with a simulated local
 * executor whose outcomes are decided by each task's argv, so every scenario is exact:
 *
 *   run: [sim, ok]            exits 0 after 1 s
 *   run: [sim, ok, "25000"]   exits 0 after 25 s (the third item is the duration in ms)
 *   run: [sim, fail]          exits 1 after 1 s
 *
 * One harness (store, clock, executor, coordinator, app) serves a whole file per store: PGlite
 * costs ~2 s and ~700 MB to open, so it is opened once. Tests stay apart by using their own
 * package names; the clock only moves forward, so the store clock never regresses.
 */
import type { Hono } from "hono";
import { afterAll, beforeAll } from "vitest";
import { createApp } from "../../runtimes/http/app.ts";
import { Metrics } from "../../runtimes/http/metrics.ts";
import { Coordinator, STAGE_ORDER } from "../../src/coordinator.ts";
import type { RetentionPolicy } from "../../src/retention.ts";
import { PROFILES } from "../../src/profiles.ts";
import { Prng } from "../../src/sim/prng.ts";
import { SimulatedExecutor } from "../../src/sim/simulated-executor.ts";
import { VirtualClock } from "../../src/sim/virtual-clock.ts";
import type { RunAttempt } from "../../src/model.ts";
import type { LaunchRequest } from "../../src/ports.ts";
import type { SqlStore } from "../../storage/sql-store.ts";
import { IN_PROCESS_DRIVERS, openTestStore } from "../support/drivers.ts";
import { SequentialIds, SequentialSecrets } from "../support/fixtures.ts";
import { dumpTables } from "../support/store-dump.ts";
import { diamond, stepLines } from "../support/workflow-shapes.ts";
import type {
  ErrorBody,
  EventView,
  PackageDetailView,
  RunDetail,
  RunView,
  TickReportView,
} from "../../runtimes/http/contract.ts";

export const TOKEN = "test-token";
/** The remote workers' token: valid on /worker/* only. */
export const WORKER_TOKEN = "test-worker-token";
/** 2030-01-01T00:00:00Z: a whole hour, so schedule tests can align to it. */
export const START_MS = Date.UTC(2030, 0, 1, 0, 0, 0);
/** The default simulated task duration. */
export const DEFAULT_TASK_MS = 1000;
/** The standalone profile's timer interval: what one tick step advances the clock by. */
export const TICK_STEP_MS = 500;

export interface StoreFactory {
  readonly name: string;
  open(): Promise<SqlStore>;
}

/** A migrated store on each in-process driver of the one driver list, its clock at START_MS. */
export const STORE_FACTORIES: readonly StoreFactory[] = IN_PROCESS_DRIVERS.map((driver) => ({
  name: driver.name,
  open: () => openTestStore(driver, START_MS),
}));

/** The store of a file that runs on one store only: sql.js in memory, the quickest to open. */
export const SQLJS_MEMORY_FACTORY: StoreFactory = (() => {
  const factory = STORE_FACTORIES.find((candidate) => candidate.name === "sqljs-memory");
  if (factory === undefined) throw new Error("no sqljs-memory store factory");
  return factory;
})();

// ---- response shapes: the contract (runtimes/http/contract.ts) ----

export type {
  ApplyView,
  AttemptView,
  ErrorBody,
  ErrorDetail,
  EventView,
  PackageDetailView,
  PackageHeadView,
  RunDetail,
  RunView,
  ScheduleView,
  StageView,
  StepView,
  TickReportView,
} from "../../runtimes/http/contract.ts";

export const RUN_VIEW_KEYS = [
  "cancelReason",
  "cancelRequestedAtMs",
  "createdAtMs",
  "eventSeq",
  "finishedAtMs",
  "generation",
  "id",
  "idempotencyKey",
  "input",
  "kind",
  "package",
  "rerunOf",
  "scheduleName",
  "status",
  "target",
];
export const STEP_VIEW_KEYS = [
  "attemptCount",
  "finishedAtMs",
  "id",
  "name",
  "needs",
  "output",
  "startedAtMs",
  "status",
  "task",
  "version",
  "waiting",
];
export const ATTEMPT_VIEW_KEYS = [
  "error",
  "executor",
  "exitCode",
  "finishedAtMs",
  "id",
  "number",
  "output",
  "pid",
  "signal",
  "startedAtMs",
  "status",
  "stepRunId",
  "stopReason",
];
export const EVENT_VIEW_KEYS = ["atMs", "attemptId", "data", "seq", "stepRunId", "type"];

/** Every route of the worker API (bearer worker token, JSON bodies). */
export const WORKER_ROUTES = [
  "/worker/claim",
  "/worker/start",
  "/worker/heartbeat",
  "/worker/complete",
  "/worker/lost",
] as const;

export interface CallOptions {
  /** A value sent as JSON with `content-type: application/json`. */
  readonly json?: unknown;
  /** A raw body; give `contentType` with it (a string body otherwise gets text/plain). */
  readonly body?: string;
  readonly contentType?: string;
  /** The full Authorization header; `null` sends none. Defaults to the right bearer token. */
  readonly authorization?: string | null;
  readonly headers?: Record<string, string>;
}

export interface CallResult {
  readonly status: number;
  readonly contentType: string;
  readonly text: string;
  /** The body parsed as JSON and typed by the caller (the tests check the shapes). */
  json<T>(): T;
}

/** What one test's simulated tasks do, decided by argv (see the file comment). */
export function simulatedOutcome(
  request: LaunchRequest,
): { exitCode: number; durationMs: number; output?: unknown } | undefined {
  const argv = request.definition.execution.argv;
  if (argv[0] !== "sim") return undefined;
  const durationMs = argv[2] === undefined ? DEFAULT_TASK_MS : Number(argv[2]);
  // `["sim", "ok", "1000", "echo"]`: the step's output is its context (step, input, needs), as a task could write it.
  const output =
    argv[3] === "echo"
      ? { step: request.context.step, input: request.context.input, needs: request.context.needs }
      : undefined;
  return {
    exitCode: argv[1] === "fail" ? 1 : 0,
    durationMs,
    ...(output === undefined ? {} : { output }),
  };
}

/** The "log" of a simulated attempt: one line naming it, or null before it was launched. */
export function simulatedLog(executor: SimulatedExecutor, attempt: RunAttempt): string | null {
  const proc = executor.processes.get(attempt.id);
  return proc === undefined ? null : `simulated attempt ${attempt.number} pid ${proc.pid}\n`;
}

/** The simulated log by byte offset (stdout only; the simulated stderr is empty). */
export function simulatedLogChunk(
  executor: SimulatedExecutor,
  attempt: RunAttempt,
  stream: "stdout" | "stderr",
  offset: number,
  limitBytes: number,
): { text: string; nextOffset: number; sizeBytes: number } | null {
  const whole = simulatedLog(executor, attempt);
  if (whole === null) return null;
  const bytes = Buffer.from(stream === "stdout" ? whole : "", "utf8");
  const part = bytes.subarray(
    Math.min(offset, bytes.length),
    Math.min(offset + limitBytes, bytes.length),
  );
  return {
    text: part.toString("utf8"),
    nextOffset: Math.min(offset, bytes.length) + part.length,
    sizeBytes: bytes.length,
  };
}

export class Harness {
  readonly store: SqlStore;
  readonly clock: VirtualClock;
  readonly executor: SimulatedExecutor;
  readonly coordinator: Coordinator;
  readonly metrics: Metrics;
  readonly app: Hono;

  private constructor(store: SqlStore, retention: RetentionPolicy | null) {
    this.store = store;
    this.clock = new VirtualClock(START_MS);
    this.metrics = new Metrics();
    const ids = new SequentialIds("run");
    this.executor = new SimulatedExecutor({
      clock: this.clock,
      prng: new Prng(20_300_101),
      failureRate: 0,
      spawnFailureRate: 0,
      minDurationMs: DEFAULT_TASK_MS,
      maxDurationMs: DEFAULT_TASK_MS,
      outcome: simulatedOutcome,
    });
    this.coordinator = new Coordinator({
      store,
      clock: this.clock,
      ids,
      profile: PROFILES.standalone,
      executors: { local_process: this.executor },
      onStage: (stage) => this.metrics.observeStage(stage),
      onTick: () => this.metrics.observeTick(),
      retention,
    });
    this.app = createApp({
      store,
      coordinator: this.coordinator,
      clock: this.clock,
      ids,
      secrets: new SequentialSecrets(),
      token: TOKEN,
      workerToken: WORKER_TOKEN,
      metrics: this.metrics,
      readLog: (attempt) => Promise.resolve(simulatedLog(this.executor, attempt)),
      readLogChunk: (attempt, stream, offset, limitBytes) =>
        Promise.resolve(simulatedLogChunk(this.executor, attempt, stream, offset, limitBytes)),
      retention,
      profileName: PROFILES.standalone.name,
    });
  }

  /** A harness over a fresh store; `retention` null (the default) keeps every run, as most scenarios need. */
  static async open(
    factory: StoreFactory,
    options: { retention?: RetentionPolicy | null } = {},
  ): Promise<Harness> {
    return new Harness(await factory.open(), options.retention ?? null);
  }

  close(): Promise<void> {
    return this.store.close();
  }

  async call(method: string, path: string, options: CallOptions = {}): Promise<CallResult> {
    const headers: Record<string, string> = { ...options.headers };
    const authorization =
      options.authorization === undefined ? `Bearer ${TOKEN}` : options.authorization;
    if (authorization !== null) headers.authorization = authorization;
    let body: string | undefined = options.body;
    if (options.json !== undefined) {
      body = JSON.stringify(options.json);
      headers["content-type"] = "application/json";
    }
    if (options.contentType !== undefined) headers["content-type"] = options.contentType;
    const response = await this.app.request(path, {
      method,
      headers,
      ...(body === undefined ? {} : { body }),
    });
    const text = await response.text();
    return {
      status: response.status,
      contentType: response.headers.get("content-type") ?? "",
      text,
      json<T>(): T {
        return JSON.parse(text) as T;
      },
    };
  }

  /** A call that must answer `status`; returns the typed JSON body. */
  async expectJson<T>(
    status: number,
    method: string,
    path: string,
    options: CallOptions = {},
  ): Promise<T> {
    const result = await this.call(method, path, options);
    if (result.status !== status)
      throw new Error(
        `${method} ${path}: expected ${status}, got ${result.status}: ${result.text}`,
      );
    return result.json<T>();
  }

  applyYaml(yaml: string): Promise<CallResult> {
    return this.call("POST", "/packages", { body: yaml, contentType: "application/yaml" });
  }

  async startRun(body: Record<string, unknown>): Promise<RunView> {
    return (await this.expectJson<{ run: RunView }>(201, "POST", "/runs", { json: body })).run;
  }

  runDetail(id: string): Promise<RunDetail> {
    return this.expectJson<RunDetail>(200, "GET", `/runs/${id}`);
  }

  async events(id: string, query = ""): Promise<EventView[]> {
    return (
      await this.expectJson<{ events: EventView[] }>(200, "GET", `/runs/${id}/events${query}`)
    ).events;
  }

  async packageDetail(name: string): Promise<PackageDetailView> {
    return this.expectJson<PackageDetailView>(200, "GET", `/packages/${name}`);
  }

  async tick(): Promise<TickReportView> {
    const { report } = await this.expectJson<{ report: TickReportView }>(200, "POST", "/tick");
    // A stage error would mean the scenario is not what the test thinks it is.
    for (const stage of report.stages) {
      if (stage.errors.length > 0)
        throw new Error(
          `tick stage ${stage.name} reported errors: ${JSON.stringify(stage.errors)}`,
        );
    }
    return report;
  }

  /**
   * Ticks until `predicate` holds, advancing the virtual clock by `stepMs` after each tick
   * that did not satisfy it. Bounded: throws after `maxTicks`. Returns the ticks taken.
   */
  async tickUntil(
    predicate: () => Promise<boolean>,
    maxTicks = 60,
    stepMs = TICK_STEP_MS,
  ): Promise<number> {
    for (let ticks = 1; ticks <= maxTicks; ticks += 1) {
      await this.tick();
      if (await predicate()) return ticks;
      this.clock.advance(stepMs);
    }
    throw new Error(`the condition did not hold within ${maxTicks} ticks`);
  }

  /** Ticks until the run is in one of `statuses` (default: any terminal status). */
  async runUntil(
    id: string,
    statuses: readonly string[] = ["succeeded", "failed", "timed_out", "cancelled", "lost"],
    maxTicks = 60,
  ): Promise<RunDetail> {
    await this.tickUntil(
      async () => statuses.includes((await this.runDetail(id)).run.status),
      maxTicks,
    );
    return this.runDetail(id);
  }

  /** Moves the clock forward to the next multiple of `periodMs` (strictly later), plus `offsetMs`. */
  alignClock(periodMs: number, offsetMs = 0): number {
    const next = (Math.floor(this.clock.nowMs() / periodMs) + 1) * periodMs + offsetMs;
    this.clock.set(next);
    return next;
  }

  /** Every run in the store, through GET /runs keyset pages. */
  async allRuns(limit = 200): Promise<RunView[]> {
    const runs: RunView[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 1000; page += 1) {
      const query: string =
        cursor === null ? `?limit=${limit}` : `?limit=${limit}&cursor=${cursor}`;
      const body: { runs: RunView[]; nextCursor: string | null } = await this.expectJson(
        200,
        "GET",
        `/runs${query}`,
      );
      runs.push(...body.runs);
      cursor = body.nextCursor;
      if (cursor === null) return runs;
    }
    throw new Error("GET /runs did not end");
  }

  async runsOf(packageName: string): Promise<RunView[]> {
    return (await this.allRuns()).filter((run) => run.package === packageName);
  }

  /** Every row of every table, in a fixed order, as one comparable text. */
  async dump(): Promise<string> {
    return dumpTables(this.store.driver);
  }

  /** Applies the diamond as `packageName` and runs it to the end, which must be success. */
  async succeededDiamond(packageName: string, idempotencyKey?: string): Promise<RunDetail> {
    const applied = await this.applyYaml(diamondYaml(packageName));
    if (applied.status !== 201) throw new Error(`apply ${packageName}: ${applied.text}`);
    const run = await this.startRun({
      package: packageName,
      workflow: "diamond",
      ...(idempotencyKey === undefined ? {} : { idempotencyKey }),
    });
    const detail = await this.runUntil(run.id);
    if (detail.run.status !== "succeeded")
      throw new Error(`the ${packageName} diamond ended ${detail.run.status}`);
    return detail;
  }
}

/**
 * One harness over `factory` for the enclosing describe block: opened before its tests and
 * handed to `use` (which keeps it, and may seed it), closed after them.
 */
export function harnessForBlock(
  factory: StoreFactory,
  use: (h: Harness) => void | Promise<void>,
  options: { retention?: RetentionPolicy | null } = {},
): void {
  let opened: Harness | undefined;
  beforeAll(async () => {
    opened = await Harness.open(factory, options);
    await use(opened);
  });
  afterAll(async () => {
    await opened?.close();
  });
}

export { STAGE_ORDER };

/** A small YAML manifest builder: each test gets its own package. */
export function yamlManifest(packageName: string, body: string): string {
  return `package: ${packageName}\n${body}`;
}

/**
 * A package with one workflow, `diamond` (a → b, a → c, {b, c} → d): each step runs `work`, or
 * each its own task of those `tasks.yaml` declares (the lines under `tasks:`, two spaces in).
 */
export function diamondYaml(
  packageName: string,
  tasks: { readonly yaml: string; readonly ofStep: Parameters<typeof diamond>[0] } = {
    yaml: '  work:\n    run: ["sim", "ok"]\n    timeout: 30s',
    ofStep: "work",
  },
): string {
  return yamlManifest(
    packageName,
    `tasks:
${tasks.yaml}
workflows:
  diamond:
    steps:
${stepLines(diamond(tasks.ofStep))}
`,
  );
}

/** Error bodies have exactly {error: {code, message, details}}; returns the error. */
export function errorOf(result: CallResult): ErrorBody["error"] {
  const body = result.json<ErrorBody>();
  if (typeof body !== "object" || body === null || Object.keys(body).join() !== "error")
    throw new Error(`not an error body: ${result.text}`);
  const keys = Object.keys(body.error).sort().join();
  if (keys !== "code,details,message") throw new Error(`error keys are ${keys}: ${result.text}`);
  if (
    typeof body.error.message !== "string" ||
    body.error.message === "" ||
    !Array.isArray(body.error.details)
  )
    throw new Error(`malformed error body: ${result.text}`);
  return body.error;
}
