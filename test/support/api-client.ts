/** The device suites' client of a running runtime's HTTP API (views in api-views.ts). */
import type { AttemptView, EventView, RecoveryView, RunDetail, RunView, StepView } from "./api-views.ts";
import { waitFor } from "./wait.ts";

export const TERMINAL_RUN = new Set(["succeeded", "failed", "timed_out", "cancelled", "lost"]);
export const TERMINAL_ATTEMPT = new Set(["succeeded", "failed", "timed_out", "cancelled", "lost"]);

export class Api {
  readonly url: string;
  readonly token: string;

  constructor(url: string, token: string) {
    this.url = url;
    this.token = token;
  }

  async call<T>(method: string, path: string, body?: { text: string; contentType: string }): Promise<{ status: number; body: T }> {
    const response = await fetch(`${this.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${this.token}`, ...(body === undefined ? {} : { "content-type": body.contentType }) },
      ...(body === undefined ? {} : { body: body.text }),
      signal: AbortSignal.timeout(15_000),
    });
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // Plain text (logs, metrics).
    }
    return { status: response.status, body: parsed as T };
  }

  private async ok<T>(method: string, path: string, body?: { text: string; contentType: string }): Promise<T> {
    const answer = await this.call<T>(method, path, body);
    if (answer.status >= 300) throw new Error(`${method} ${path} answered ${answer.status}: ${JSON.stringify(answer.body)}`);
    return answer.body;
  }

  async apply(manifestText: string): Promise<{ package: string; generation: number; changed: boolean }> {
    return this.ok("POST", "/packages", { text: manifestText, contentType: "application/json" });
  }

  async startWorkflow(packageName: string, workflow: string): Promise<RunView> {
    return (await this.ok<{ run: RunView }>("POST", "/runs", { text: JSON.stringify({ package: packageName, workflow }), contentType: "application/json" })).run;
  }

  async cancel(runId: string): Promise<{ status: number; run: RunView }> {
    const answer = await this.call<{ run: RunView }>("POST", `/runs/${runId}/cancel`);
    if (answer.status !== 202) throw new Error(`cancel answered ${answer.status}: ${JSON.stringify(answer.body)}`);
    return { status: answer.status, run: answer.body.run };
  }

  async run(runId: string): Promise<RunDetail> {
    return this.ok("GET", `/runs/${runId}`);
  }

  async events(runId: string): Promise<EventView[]> {
    return (await this.ok<{ events: EventView[] }>("GET", `/runs/${runId}/events`)).events;
  }

  async recovery(): Promise<RecoveryView[]> {
    return (await this.ok<{ recovery: RecoveryView[] }>("GET", "/recovery")).recovery;
  }

  async tick(): Promise<{ stages: { name: string; processed: number; errors: unknown[] }[] }> {
    return (await this.ok<{ report: { stages: { name: string; processed: number; errors: unknown[] }[] } }>("POST", "/tick")).report;
  }

  /** Waits until the run is terminal and returns its detail. */
  async waitTerminal(runId: string, timeoutMs = 30_000): Promise<RunDetail> {
    return waitFor(`run ${runId} to end`, async () => {
      const detail = await this.run(runId);
      return TERMINAL_RUN.has(detail.run.status) ? detail : null;
    }, timeoutMs);
  }

  /** Waits until the named step's latest attempt is running with a pid. */
  async waitStepRunning(runId: string, stepName: string, timeoutMs = 20_000): Promise<{ detail: RunDetail; step: StepView; attempt: AttemptView & { pid: number } }> {
    return waitFor(`step ${stepName} of ${runId} to run`, async () => {
      const detail = await this.run(runId);
      const step = detail.steps.find((candidate) => candidate.name === stepName);
      const attempt = detail.attempts.filter((candidate) => candidate.stepRunId === step?.id).at(-1);
      if (step === undefined || attempt === undefined || attempt.status !== "running" || attempt.pid === null || step.status !== "running") return null;
      return { detail, step, attempt: attempt as AttemptView & { pid: number } };
    }, timeoutMs);
  }
}

export function stepNamed(detail: RunDetail, name: string): StepView {
  const step = detail.steps.find((candidate) => candidate.name === name);
  if (step === undefined) throw new Error(`run ${detail.run.id} has no step ${name}`);
  return step;
}

export function attemptsOf(detail: RunDetail, name: string): AttemptView[] {
  const step = stepNamed(detail, name);
  return detail.attempts.filter((attempt) => attempt.stepRunId === step.id);
}
