/// <reference lib="dom" />
/**
 * The dashboard's only way to the runtime: the public HTTP API (DESIGN.md §6) with the bearer
 * token. Paths are relative, so the dashboard also works behind a proxy under a prefix.
 */

export interface RunView {
  readonly id: string;
  readonly kind: "ordinary" | "workflow";
  readonly status: string;
  readonly package: string;
  readonly generation: number;
  readonly target: string;
  readonly createdAtMs: number;
  readonly finishedAtMs: number | null;
  readonly cancelRequestedAtMs: number | null;
  readonly idempotencyKey: string | null;
  readonly scheduleName: string | null;
}

export interface StepView {
  readonly id: string;
  readonly name: string;
  readonly task: string;
  readonly needs: readonly string[];
  readonly status: string;
  readonly version: number;
  readonly attemptCount: number;
  readonly startedAtMs: number | null;
  readonly finishedAtMs: number | null;
}

export interface AttemptView {
  readonly id: string;
  readonly stepRunId: string | null;
  readonly number: number;
  readonly status: string;
  readonly executor: string;
  readonly startedAtMs: number | null;
  readonly finishedAtMs: number | null;
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly pid: number | null;
  readonly stopReason: string | null;
  readonly error: string | null;
}

export interface RunDetail {
  readonly run: RunView;
  readonly steps: readonly StepView[];
  readonly attempts: readonly AttemptView[];
}

export interface PackageHead {
  readonly package: string;
  readonly generation: number;
  readonly manifestDigest: string;
  readonly updatedAtMs: number;
}

export interface PackageDetail {
  readonly package: PackageHead;
  readonly generations: readonly { readonly generation: number; readonly manifestDigest: string; readonly createdAtMs: number }[];
  readonly workflows: readonly { readonly name: string; readonly description: string | null; readonly steps: readonly { readonly name: string; readonly task: string; readonly needs: readonly string[] }[] }[];
  readonly tasks: readonly { readonly name: string; readonly executor: string; readonly timeoutMs: number }[];
  readonly schedules: readonly {
    readonly name: string;
    readonly cron: string;
    readonly timezone: string;
    readonly target: { readonly kind: string; readonly name: string };
    readonly overlap: string;
    readonly nextFireAtMs: number | null;
    readonly lastFireAtMs: number | null;
    readonly missedFires: number;
    readonly skippedOverlaps: number;
  }[];
}

/** `GET /info`: the runtime's profile and retention (null: it purges nothing). */
export interface RuntimeInfo {
  readonly profile: string | null;
  readonly retention: { readonly horizonMs: number; readonly maxRuns: number; readonly idempotencyWindowMs: number } | null;
}

/** The runtime refused the token (401): the page goes back to the token form. */
export class Unauthorized extends Error {
  constructor() {
    super("the runtime rejected the token");
    this.name = "Unauthorized";
  }
}

export class ApiFailure extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.name = "ApiFailure";
    this.status = status;
    this.code = code;
  }
}

const REQUEST_TIMEOUT_MS = 15_000;

export class Api {
  private readonly token: string;

  constructor(token: string) {
    this.token = token;
  }

  private async request(method: string, path: string, body?: unknown): Promise<Response> {
    let response: Response;
    try {
      response = await fetch(path, {
        method,
        cache: "no-store",
        headers: { authorization: `Bearer ${this.token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
    } catch (error) {
      throw new ApiFailure(0, "unreachable", `cannot reach the runtime (${error instanceof Error ? error.message : String(error)})`);
    }
    if (response.status === 401) throw new Unauthorized();
    if (!response.ok) {
      const payload = (await response.json().catch(() => null)) as { error?: { code?: string; message?: string } } | null;
      throw new ApiFailure(response.status, payload?.error?.code ?? `http_${response.status}`, payload?.error?.message ?? response.statusText);
    }
    return response;
  }

  async json<T>(method: string, path: string, body?: unknown): Promise<T> {
    return (await (await this.request(method, path, body)).json()) as T;
  }

  async text(path: string): Promise<string> {
    return (await this.request("GET", path)).text();
  }

  listRuns(status: string | null, cursor: string | null, limit = 50): Promise<{ runs: RunView[]; nextCursor: string | null }> {
    const query = new URLSearchParams({ limit: String(limit) });
    if (status !== null) query.set("status", status);
    if (cursor !== null) query.set("cursor", cursor);
    return this.json("GET", `runs?${query.toString()}`);
  }

  run(id: string): Promise<RunDetail> {
    return this.json("GET", `runs/${encodeURIComponent(id)}`);
  }

  cancel(id: string): Promise<{ run: RunView }> {
    return this.json("POST", `runs/${encodeURIComponent(id)}/cancel`);
  }

  start(packageName: string, target: { kind: "workflow" | "task"; name: string }): Promise<{ run: RunView }> {
    return this.json("POST", "runs", { package: packageName, [target.kind]: target.name });
  }

  log(id: string, step: string): Promise<string> {
    return this.text(`runs/${encodeURIComponent(id)}/steps/${encodeURIComponent(step)}/log`);
  }

  info(): Promise<RuntimeInfo> {
    return this.json("GET", "info");
  }

  packages(): Promise<{ packages: PackageHead[] }> {
    return this.json("GET", "packages");
  }

  packageDetail(name: string): Promise<PackageDetail> {
    return this.json("GET", `packages/${encodeURIComponent(name)}`);
  }
}
