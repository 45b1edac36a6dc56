import { workerNotificationSender } from "./notification-sender.ts";
import { DurableObject } from "cloudflare:workers";
import type { Hono } from "hono";
import { Coordinator, type TickReport } from "../../src/coordinator.ts";
import { isProfileName, PROFILES, type Profile } from "../../src/profiles.ts";
import { parseRetentionPolicy, type RetentionPolicy } from "../../src/retention.ts";
import { isQlrError, errorMessage } from "../../src/errors.ts";
import {
  openDurableObjectSqliteDriver,
  type DurableObjectSqliteDriver,
} from "../../storage/do-sqlite/driver.ts";
import type { SqlStore } from "../../storage/sql-store.ts";
import { openSqliteStore } from "../../storage/sqlite/store.ts";
import { createApp } from "../http/app.ts";
import { RunWaiters } from "../http/run-waiters.ts";
import { isAuthorized, tokenProblem } from "../http/auth.ts";
import { Metrics, parseMetricsCounters } from "../http/metrics.ts";
import { randomSecrets, uuidv7Ids, workerClock } from "./host.ts";
import type {
  DurableObjectNamespace,
  DurableObjectState,
  WorkerRequest,
  WorkerResponse,
} from "./types.ts";

/** The Worker's bindings (wrangler.toml) and secrets. */
export interface WorkerEnv {
  readonly COORDINATOR: DurableObjectNamespace<CoordinatorObject>;
  /** The API bearer token: `npx wrangler secret put QLR_TOKEN`. Without it every route but /healthz answers 500. */
  readonly QLR_TOKEN?: string;
  /** Optional: the remote workers' token, valid on /worker/* only (`npx wrangler secret put QLR_WORKER_TOKEN`). */
  readonly QLR_WORKER_TOKEN?: string;
  /** `edge` (default), `standalone` or `cluster`: the budgets of one cadence cycle. */
  readonly QLR_PROFILE?: string;
  /** Retention horizon, a duration such as `7d` (default): terminal runs finished longer ago are purged. */
  readonly QLR_RETENTION?: string;
  /** At most this many terminal runs are kept (default 10000). */
  readonly QLR_RETENTION_RUNS?: string;
}

/** The one object that owns the store; the Worker routes everything to the instance of this name. */
export const COORDINATOR_NAME = "coordinator";

interface Runtime {
  readonly store: SqlStore;
  readonly coordinator: Coordinator;
  readonly metrics: Metrics;
  readonly app: Hono;
}

/** The configuration problem that keeps the object from serving, or null. */
export function configurationProblem(
  env: Pick<
    WorkerEnv,
    "QLR_TOKEN" | "QLR_WORKER_TOKEN" | "QLR_PROFILE" | "QLR_RETENTION" | "QLR_RETENTION_RUNS"
  >,
): string | null {
  if (env.QLR_TOKEN === undefined || env.QLR_TOKEN.length === 0)
    return "the QLR_TOKEN secret is not set (npx wrangler secret put QLR_TOKEN)";
  // The same rule as the Node runtime's: a short token can be guessed.
  const adminProblem = tokenProblem(env.QLR_TOKEN);
  if (adminProblem !== null) return `the QLR_TOKEN secret ${adminProblem} (openssl rand -hex 32)`;
  const workerToken = env.QLR_WORKER_TOKEN;
  if (workerToken !== undefined && workerToken !== "") {
    const workerProblem = tokenProblem(workerToken);
    if (workerProblem !== null) return `the QLR_WORKER_TOKEN secret ${workerProblem}`;
    if (workerToken === env.QLR_TOKEN)
      return "the QLR_WORKER_TOKEN secret must differ from QLR_TOKEN";
  }
  if (env.QLR_PROFILE !== undefined && env.QLR_PROFILE !== "" && !isProfileName(env.QLR_PROFILE))
    return `QLR_PROFILE ${JSON.stringify(env.QLR_PROFILE)} is not edge, standalone or cluster`;
  try {
    retentionOf(env);
  } catch (error) {
    if (isQlrError(error, "invalid_request"))
      return error.details.map((detail) => `${detail.path} ${detail.message}`).join("; ");
    throw error;
  }
  return null;
}

/** The retention from `[vars]` (QLR_RETENTION, QLR_RETENTION_RUNS), the same defaults and bounds as `qlr serve`. */
export function retentionOf(
  env: Pick<WorkerEnv, "QLR_RETENTION" | "QLR_RETENTION_RUNS">,
): RetentionPolicy {
  return parseRetentionPolicy(
    { horizon: env.QLR_RETENTION, maxRuns: env.QLR_RETENTION_RUNS },
    { horizon: "QLR_RETENTION", maxRuns: "QLR_RETENTION_RUNS" },
  );
}

function profileOf(env: Pick<WorkerEnv, "QLR_PROFILE">): Profile {
  const name = env.QLR_PROFILE === undefined || env.QLR_PROFILE === "" ? "edge" : env.QLR_PROFILE;
  return isProfileName(name) ? PROFILES[name] : PROFILES.edge;
}

function errorResponse(
  status: number,
  code: "internal" | "unauthorized",
  message: string,
): WorkerResponse {
  return toWorkerResponse(Response.json({ error: { code, message, details: [] } }, { status }));
}

/** What a caller learns of a misconfigured Worker: that it is one, and where its operator looks. */
export const NOT_CONFIGURED_MESSAGE =
  "the Worker is not configured; its operator finds the reason in its logs (npx wrangler tail)";

/**
 * The request and response objects are workerd's own; the shared Hono app is typed with the
 * web-standard `Request`/`Response` of the root program and the Durable Object API with
 * workers-types' classes of the same name. These two casts are the one boundary between the
 * two descriptions of the same runtime objects.
 */
function toWebRequest(request: WorkerRequest): Request {
  return request as unknown as Request;
}

function toWorkerResponse(response: Response): WorkerResponse {
  return response as unknown as WorkerResponse;
}

/** The storage key of the saved metric counters (the object's key-value storage, beside its SQL). */
export const METRICS_KEY = "qlr.metrics.counters";

/**
 * The coordinator Durable Object: its SQLite database is the store, `fetch` serves the shared
 * Hono app and `tick()` (RPC, called by the cron trigger) runs one bounded cycle. There are no
 * local executors on the edge: an edge function cannot spawn processes, so `remote_worker`
 * attempts wait `claimed` for remote workers (lease routes) and `local_process` tasks are
 * admitted but never started here.
 *
 * The store opens lazily, once per instance, inside `blockConcurrencyWhile` (migrations run
 * then); a failure to open is answered and retried on the next event.
 */
export class CoordinatorObject extends DurableObject<WorkerEnv> {
  /** The object's one SQL driver; every use of `ctx.storage.sql` goes through it. */
  readonly driver: DurableObjectSqliteDriver;
  private opening: Promise<Runtime> | undefined;

  constructor(ctx: DurableObjectState, env: WorkerEnv) {
    super(ctx, env);
    this.driver = openDurableObjectSqliteDriver(ctx.storage);
  }

  private open(): Promise<Runtime> {
    if (this.opening === undefined) {
      const opening = this.ctx.blockConcurrencyWhile(() => this.build());
      this.opening = opening;
      opening.catch(() => {
        if (this.opening === opening) this.opening = undefined;
      });
    }
    return this.opening;
  }

  private async build(): Promise<Runtime> {
    const store = await openSqliteStore(this.driver, workerClock.nowMs());
    const metrics = new Metrics();
    const saved = parseMetricsCounters(await this.ctx.storage.get(METRICS_KEY));
    if (saved !== null) metrics.restore(saved);
    // configurationProblem() refused a bad value before any request reached here.
    const retention = retentionOf(this.env);
    const profile = profileOf(this.env);
    // Long-polls of runs wait in this object's memory; a cycle here (alarm, cron, POST /tick)
    // that changed something answers them at once, the fallback re-read catches the rest.
    const runWaiters = new RunWaiters(store);
    const coordinator = new Coordinator({
      store,
      clock: workerClock,
      ids: uuidv7Ids,
      profile,
      executors: {},
      elapsedMs: () => performance.now(),
      onStage: (stage) => {
        metrics.observeStage(stage);
        if (stage.processed > 0) void runWaiters.recheck();
      },
      onTick: () => metrics.observeTick(),
      retention,
      notifier: workerNotificationSender,
    });
    const app = createApp({
      store,
      coordinator,
      clock: workerClock,
      ids: uuidv7Ids,
      secrets: randomSecrets,
      token: this.env.QLR_TOKEN ?? "",
      workerToken: this.workerToken(),
      metrics,
      runWaiters,
      supportedExecutors: ["remote_worker"],
      retention,
      profileName: profile.name,
      // A run started or cancelled, a package applied, a worker's report: run a cycle now.
      onChange: () =>
        this.wakeSoon().catch((error: unknown) => {
          // The cron trigger still runs the cadence: a lost wake delays work, it loses nothing.
          console.error(
            `qlr: the alarm could not be set: ${error instanceof Error ? error.message : String(error)}`,
          );
        }),
    });
    return { store, coordinator, metrics, app };
  }

  private workerToken(): string | null {
    return this.env.QLR_WORKER_TOKEN === undefined || this.env.QLR_WORKER_TOKEN === ""
      ? null
      : this.env.QLR_WORKER_TOKEN;
  }

  /**
   * Configuration first (its detail goes to the log, never to the caller: the caller is not
   * authenticated, since no valid token exists yet), then authentication, then the store: an
   * unauthenticated caller never causes a store open and never reads a store error.
   */
  override async fetch(request: WorkerRequest): Promise<WorkerResponse> {
    const pathname = new URL(request.url).pathname;
    const isHealth = pathname === "/healthz";
    const problem = configurationProblem(this.env);
    if (problem !== null && !isHealth) {
      console.error(`qlr: ${problem}`);
      return errorResponse(503, "internal", NOT_CONFIGURED_MESSAGE);
    }
    const authenticated =
      problem === null &&
      isAuthorized(request.headers.get("authorization"), pathname, {
        admin: this.env.QLR_TOKEN ?? "",
        worker: this.workerToken(),
      });
    if (!authenticated && !isHealth)
      return errorResponse(401, "unauthorized", "a valid bearer token is required");
    let runtime: Runtime;
    try {
      runtime = await this.open();
    } catch (error) {
      const detail = errorMessage(error);
      console.error(`qlr: the store could not be opened: ${detail}`);
      return errorResponse(
        503,
        "internal",
        authenticated ? `the store could not be opened: ${detail}` : "the store is unavailable",
      );
    }
    const response = await runtime.app.fetch(toWebRequest(request));
    // A request that may have changed state (a `POST /tick` among them) saves the counters too.
    if (request.method !== "GET" && request.method !== "HEAD") await this.saveMetrics(runtime);
    return toWorkerResponse(response);
  }

  /**
   * The counters live in the object's memory, which an idle object loses: they are saved in its
   * storage (one small key) at the end of each cycle and after each writing request, and restored
   * when the object is built again. What a read-only request counted since (an error answer of a
   * GET) is lost with the memory; the gauges are read from the store at each scrape.
   */
  private async saveMetrics(runtime: Runtime): Promise<void> {
    await this.ctx.storage.put(METRICS_KEY, runtime.metrics.counters());
  }

  /** One bounded cadence cycle (the cron trigger's call); the same report `POST /tick` answers. */
  async tick(): Promise<TickReport> {
    const problem = configurationProblem(this.env);
    if (problem !== null) throw new Error(problem);
    const runtime = await this.open();
    const report = await runtime.coordinator.tick();
    await this.saveMetrics(runtime);
    if (report.more || report.followUp) await this.wakeSoon();
    return report;
  }

  /**
   * The object's alarm is its event-driven cadence: the minute cron is only the fallback. A
   * cycle that left work behind (`more`) or recorded an outcome the next cycle acts on
   * (`followUp`) sets the alarm again, so a workflow moves cycle after cycle without waiting
   * for the cron; a cycle with nothing left lets the alarm lapse. One alarm per object, and the
   * coordinator runs one cycle at a time, as on a device.
   */
  override async alarm(): Promise<void> {
    await this.tick();
  }

  /** Sets the alarm to now, unless one is already due sooner. */
  private async wakeSoon(): Promise<void> {
    const nowMs = workerClock.nowMs();
    const current = await this.ctx.storage.getAlarm();
    if (current === null || current > nowMs) await this.ctx.storage.setAlarm(nowMs);
  }
}
