import type {
  ApplyView,
  AttemptAnswer,
  ClaimAnswer,
  ClaimRequest,
  ErrorBody,
  ErrorDetail,
  EventPage,
  LeaseCompleteRequest,
  LeaseControlView,
  LeaseFenceRequest,
  LeaseLostRequest,
  LeaseStartAnswer,
  LeaseStartRequest,
  LogChunkView,
  LogStream,
  NotificationPage,
  NotificationQuery,
  OverviewAnswer,
  PackageDetailView,
  PackageList,
  RecoveryList,
  RerunRequest,
  ResolveRequest,
  RunAnswer,
  RunDetail,
  RunListQuery,
  RunPage,
  RunWaitQuery,
  RuntimeInfo,
  StartRunRequest,
  TickAnswer,
  WorkerCompletionView,
} from "./contract.ts";

/**
 * The one client of the HTTP contract (contract.ts): fetch-based and platform-neutral, used by
 * the CLI, the remote worker, the dashboard and the tests. A non-2xx answer throws an
 * `ApiError` with the contract's error code and details; a runtime that cannot be reached
 * throws one with status 0 and code `unreachable`.
 */

/** A body as bytes on the wire: a manifest is sent as it was written (YAML or JSON). */
export interface RawBody {
  readonly text: string;
  readonly contentType: string;
}

export type FetchFunction = (input: string, init: RequestInit) => Promise<Response>;

export interface ClientOptions {
  /** The runtime's URL, e.g. `http://127.0.0.1:8787`; "" resolves paths against the page (the dashboard behind a proxy prefix). */
  readonly baseUrl: string;
  readonly token: string;
  /** Each request's bound; a runtime that does not answer in time counts as unreachable. */
  readonly timeoutMs?: number;
  /** Another transport with fetch's signature (an in-process app's `request`); defaults to the global fetch. */
  readonly fetch?: FetchFunction;
  /** The page's cache mode; browsers otherwise may answer a poll from their cache. */
  readonly cache?: RequestCache;
  /** Appended to the message of an unreachable error, e.g. how to start the runtime. */
  readonly unreachableHint?: string;
}

export const DEFAULT_REQUEST_TIMEOUT_MS = 15_000;
/** The runtime's wait when a long-poll names no timeout (run-waiters.ts `DEFAULT_RUN_WAIT_MS`). */
const DEFAULT_SERVER_WAIT_MS = 10_000;

export class ApiError extends Error {
  /** The HTTP status; 0 when the runtime could not be reached. */
  readonly status: number;
  readonly code: string;
  readonly details: readonly ErrorDetail[];
  constructor(status: number, code: string, message: string, details: readonly ErrorDetail[] = []) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** The runtime refused the credentials (401). */
export function isUnauthorized(error: unknown): error is ApiError {
  return error instanceof ApiError && error.status === 401;
}

/** The runtime could not be reached at all (no answer, or none in time). */
export function isUnreachable(error: unknown): error is ApiError {
  return error instanceof ApiError && error.status === 0;
}

function jsonBody(value: unknown): RawBody {
  return { text: JSON.stringify(value), contentType: "application/json" };
}

/** Path segments are encoded, so an id or a step name can never reach another route. */
function segment(value: string): string {
  return encodeURIComponent(value);
}

export class QlrClient {
  readonly baseUrl: string;
  private readonly options: ClientOptions;

  constructor(options: ClientOptions) {
    this.options = options;
    this.baseUrl =
      options.baseUrl === "" || options.baseUrl.endsWith("/")
        ? options.baseUrl
        : `${options.baseUrl}/`;
  }

  /** The URL of a contract path (`runs/…`, without a leading slash). */
  url(path: string): string {
    return `${this.baseUrl}${path.replace(/^\//, "")}`;
  }

  /**
   * One request; throws only when the runtime cannot be reached. `timeoutMs` replaces the
   * client's bound for this request (a long-poll outlasts it).
   */
  async send(method: string, path: string, body?: RawBody, timeoutMs?: number): Promise<Response> {
    const fetchFn =
      this.options.fetch ?? ((input: string, init: RequestInit) => fetch(input, init));
    try {
      return await fetchFn(this.url(path), {
        method,
        headers: {
          authorization: `Bearer ${this.options.token}`,
          ...(body === undefined ? {} : { "content-type": body.contentType }),
        },
        ...(body === undefined ? {} : { body: body.text }),
        ...(this.options.cache === undefined ? {} : { cache: this.options.cache }),
        signal: AbortSignal.timeout(
          timeoutMs ?? this.options.timeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
        ),
      });
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      const where = this.baseUrl === "" ? "the runtime" : `the runtime at ${this.baseUrl}`;
      throw new ApiError(
        0,
        "unreachable",
        `cannot reach ${where}: ${reason}${this.options.unreachableHint === undefined ? "" : ` ${this.options.unreachableHint}`}`,
      );
    }
  }

  private async ok(
    method: string,
    path: string,
    body?: RawBody,
    timeoutMs?: number,
  ): Promise<Response> {
    const response = await this.send(method, path, body, timeoutMs);
    if (response.ok) return response;
    const payload = (await response.json().catch(() => null)) as Partial<ErrorBody> | null;
    throw new ApiError(
      response.status,
      payload?.error?.code ?? `http_${response.status}`,
      payload?.error?.message ?? (response.statusText || `HTTP ${response.status}`),
      payload?.error?.details ?? [],
    );
  }

  /** A JSON answer typed by the contract; throws `ApiError` on any status but 2xx. */
  async json<T>(method: string, path: string, body?: RawBody): Promise<T> {
    return (await (await this.ok(method, path, body)).json()) as T;
  }

  /** A text answer (a log, the metrics); throws `ApiError` on any status but 2xx. */
  async text(path: string): Promise<string> {
    return (await this.ok("GET", path)).text();
  }

  // ---- packages ----

  apply(manifest: RawBody): Promise<ApplyView> {
    return this.json("POST", "packages", manifest);
  }

  packages(): Promise<PackageList> {
    return this.json("GET", "packages");
  }

  packageDetail(name: string): Promise<PackageDetailView> {
    return this.json("GET", `packages/${segment(name)}`);
  }

  // ---- runs ----

  startRun(request: StartRunRequest): Promise<RunAnswer> {
    return this.json("POST", "runs", jsonBody(request));
  }

  listRuns(query: RunListQuery = {}): Promise<RunPage> {
    const search = new URLSearchParams();
    if (query.status !== undefined && query.status !== null) search.set("status", query.status);
    if (query.limit !== undefined) search.set("limit", String(query.limit));
    if (query.cursor !== undefined && query.cursor !== null) search.set("cursor", query.cursor);
    const text = search.toString();
    return this.json("GET", text === "" ? "runs" : `runs?${text}`);
  }

  run(id: string): Promise<RunDetail> {
    return this.json("GET", `runs/${segment(id)}`);
  }

  /**
   * A long-poll of one run (`GET /runs/:id?wait=…`): the detail once the run is terminal (or,
   * with `change`, has an event after `after`), or as it stands when the timeout passed. The
   * request's own bound is the wait's plus the client's usual one. A runtime at its waiter cap
   * answers 429 (`too_many_waiters`); an older runtime ignores the wait and answers at once.
   */
  async waitRun(id: string, query: RunWaitQuery): Promise<RunDetail> {
    const search = new URLSearchParams({ wait: query.wait });
    if (query.after !== undefined) search.set("after", String(query.after));
    if (query.timeoutMs !== undefined) search.set("timeoutMs", String(query.timeoutMs));
    const waitMs = query.timeoutMs ?? DEFAULT_SERVER_WAIT_MS;
    const response = await this.ok(
      "GET",
      `runs/${segment(id)}?${search.toString()}`,
      undefined,
      waitMs + (this.options.timeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS),
    );
    return (await response.json()) as RunDetail;
  }

  events(id: string, page: { after?: number; limit?: number } = {}): Promise<EventPage> {
    const search = new URLSearchParams();
    if (page.after !== undefined) search.set("after", String(page.after));
    if (page.limit !== undefined) search.set("limit", String(page.limit));
    const text = search.toString();
    return this.json("GET", `runs/${segment(id)}/events${text === "" ? "" : `?${text}`}`);
  }

  rerun(id: string, request: RerunRequest = {}): Promise<RunAnswer> {
    return this.json("POST", `runs/${segment(id)}/rerun`, jsonBody(request));
  }

  cancel(id: string): Promise<RunAnswer> {
    return this.json("POST", `runs/${segment(id)}/cancel`);
  }

  /** The latest attempt log of a step (of the task, for a task run), stdout then stderr. */
  log(runId: string, step: string): Promise<string> {
    return this.text(`runs/${segment(runId)}/steps/${segment(step)}/log`);
  }

  /** One bounded chunk of one stream of a step's log from a byte offset (`qlr logs -f`, the dashboard). */
  logChunk(
    runId: string,
    step: string,
    query: { offset: number; stream?: LogStream; limit?: number; attempt?: string | null },
  ): Promise<LogChunkView> {
    const search = new URLSearchParams({ offset: String(query.offset) });
    if (query.stream !== undefined) search.set("stream", query.stream);
    if (query.limit !== undefined) search.set("limit", String(query.limit));
    if (query.attempt !== undefined && query.attempt !== null) search.set("attempt", query.attempt);
    return this.json(
      "GET",
      `runs/${segment(runId)}/steps/${segment(step)}/log?${search.toString()}`,
    );
  }

  // ---- watching ----

  notifications(query: NotificationQuery = {}): Promise<NotificationPage> {
    const search = new URLSearchParams();
    if (query.run !== undefined && query.run !== null) search.set("run", query.run);
    if (query.state !== undefined && query.state !== null) search.set("state", query.state);
    if (query.limit !== undefined) search.set("limit", String(query.limit));
    if (query.cursor !== undefined && query.cursor !== null) search.set("cursor", query.cursor);
    const text = search.toString();
    return this.json("GET", text === "" ? "notifications" : `notifications?${text}`);
  }

  overview(hours?: number): Promise<OverviewAnswer> {
    return this.json("GET", hours === undefined ? "overview" : `overview?hours=${hours}`);
  }

  // ---- attempts ----

  resolve(attemptId: string, request: ResolveRequest): Promise<AttemptAnswer> {
    return this.json("POST", `attempts/${segment(attemptId)}/resolve`, jsonBody(request));
  }

  // ---- system ----

  tick(): Promise<TickAnswer> {
    return this.json("POST", "tick");
  }

  info(): Promise<RuntimeInfo> {
    return this.json("GET", "info");
  }

  recovery(): Promise<RecoveryList> {
    return this.json("GET", "recovery");
  }

  metrics(): Promise<string> {
    return this.text("metrics");
  }

  // ---- remote workers ----

  claim(request: ClaimRequest): Promise<ClaimAnswer> {
    return this.json("POST", "worker/claim", jsonBody(request));
  }

  leaseStart(request: LeaseStartRequest): Promise<LeaseStartAnswer> {
    return this.json("POST", "worker/start", jsonBody(request));
  }

  leaseHeartbeat(request: LeaseFenceRequest): Promise<LeaseControlView> {
    return this.json("POST", "worker/heartbeat", jsonBody(request));
  }

  leaseComplete(request: LeaseCompleteRequest): Promise<WorkerCompletionView> {
    return this.json("POST", "worker/complete", jsonBody(request));
  }

  /**
   * A coordinator older than the never-spawned evidence refuses the field as unknown (400); the
   * report is then sent again without it, so a worker of this version can settle its leases
   * there during a rolling upgrade. That coordinator fails the step as it always did for a
   * lost attempt: the step does not run again, which is the safe reading of the older contract.
   */
  async leaseLost(request: LeaseLostRequest): Promise<WorkerCompletionView> {
    try {
      return await this.json("POST", "worker/lost", jsonBody(request));
    } catch (error) {
      if (request.neverSpawned !== true || !refusedAsUnknownField(error, "neverSpawned"))
        throw error;
      const { neverSpawned: _refused, ...older } = request;
      return this.json("POST", "worker/lost", jsonBody(older));
    }
  }
}

/** The answer refused the request only because it does not know `field` (an older runtime). */
function refusedAsUnknownField(error: unknown, field: string): boolean {
  return (
    error instanceof ApiError &&
    error.status === 400 &&
    error.code === "invalid_request" &&
    error.details.length > 0 &&
    error.details.every((detail) => detail.path === field && detail.message === "unknown field")
  );
}
