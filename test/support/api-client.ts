/**
 * The device suites' client of a running runtime's HTTP API: the one client (`client`), with
 * the shapes these suites read (arrays rather than pages), raw calls and waits.
 */
import { expect } from "vitest";
import { TERMINAL_ATTEMPT_STATUSES, TERMINAL_RUN_STATUSES } from "../../src/model.ts";
import { QlrClient } from "../../runtimes/http/client.ts";
import type {
  ApplyView,
  AttemptView,
  EventView,
  RecoveryView,
  RunDetail,
  RunView,
  StepView,
  TickReportView,
} from "../../runtimes/http/contract.ts";
import { waitFor } from "./wait.ts";

export const TERMINAL_RUN: ReadonlySet<string> = TERMINAL_RUN_STATUSES;
export const TERMINAL_ATTEMPT: ReadonlySet<string> = TERMINAL_ATTEMPT_STATUSES;

export class Api {
  readonly url: string;
  readonly token: string;
  readonly client: QlrClient;

  constructor(url: string, token: string) {
    this.url = url;
    this.token = token;
    this.client = new QlrClient({ baseUrl: url, token });
  }

  /** Any call, whatever its status: the body parsed as JSON when it is JSON, else the text. */
  async call<T>(
    method: string,
    path: string,
    body?: { text: string; contentType: string },
  ): Promise<{ status: number; body: T }> {
    const response = await this.client.send(method, path, body);
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // Plain text (logs, metrics).
    }
    return { status: response.status, body: parsed as T };
  }

  apply(manifestText: string): Promise<ApplyView> {
    return this.client.apply({ text: manifestText, contentType: "application/json" });
  }

  async startWorkflow(packageName: string, workflow: string): Promise<RunView> {
    return (await this.client.startRun({ package: packageName, workflow })).run;
  }

  /** Cancels; a cancel is accepted (202) or throws. */
  async cancel(runId: string): Promise<{ status: number; run: RunView }> {
    const answer = await this.call<{ run: RunView }>(
      "POST",
      `runs/${encodeURIComponent(runId)}/cancel`,
    );
    if (answer.status !== 202)
      throw new Error(`cancel answered ${answer.status}: ${JSON.stringify(answer.body)}`);
    return { status: answer.status, run: answer.body.run };
  }

  run(runId: string): Promise<RunDetail> {
    return this.client.run(runId);
  }

  async events(runId: string): Promise<EventView[]> {
    return [...(await this.client.events(runId)).events];
  }

  async recovery(): Promise<RecoveryView[]> {
    return [...(await this.client.recovery()).recovery];
  }

  async tick(): Promise<TickReportView> {
    return (await this.client.tick()).report;
  }

  /** Waits until the run is terminal and returns its detail. */
  async waitTerminal(runId: string, timeoutMs = 30_000): Promise<RunDetail> {
    return waitFor(
      `run ${runId} to end`,
      async () => {
        const detail = await this.run(runId);
        return TERMINAL_RUN_STATUSES.has(detail.run.status) ? detail : null;
      },
      timeoutMs,
    );
  }

  /** Waits until the named step's latest attempt is running with a pid. */
  async waitStepRunning(
    runId: string,
    stepName: string,
    timeoutMs = 20_000,
  ): Promise<{ detail: RunDetail; step: StepView; attempt: AttemptView & { pid: number } }> {
    return waitFor(
      `step ${stepName} of ${runId} to run`,
      async () => {
        const detail = await this.run(runId);
        const step = detail.steps.find((candidate) => candidate.name === stepName);
        const attempt = detail.attempts
          .filter((candidate) => candidate.stepRunId === step?.id)
          .at(-1);
        if (
          step === undefined ||
          attempt === undefined ||
          attempt.status !== "running" ||
          attempt.pid === null ||
          step.status !== "running"
        )
          return null;
        return { detail, step, attempt: attempt as AttemptView & { pid: number } };
      },
      timeoutMs,
    );
  }
}

export function stepNamed(detail: RunDetail, name: string): StepView {
  const step = detail.steps.find((candidate) => candidate.name === name);
  if (step === undefined) throw new Error(`run ${detail.run.id} has no step ${name}`);
  return step;
}

/**
 * A chain a → b cancelled while `a` ran: the run and both steps end cancelled, and `a`'s one
 * attempt is cancelled for the cancel (and matches `attempt`, e.g. its id and pid).
 */
export function expectCancelledWhileFirstRan(
  detail: RunDetail,
  attempt: Partial<AttemptView>,
): void {
  expect(detail.run.status).toBe("cancelled");
  expect(detail.steps.map((step) => [step.name, step.status])).toEqual([
    ["a", "cancelled"],
    ["b", "cancelled"],
  ]);
  expect(detail.attempts).toHaveLength(1);
  expect(detail.attempts[0]).toMatchObject({
    ...attempt,
    status: "cancelled",
    stopReason: "cancel",
  });
}

export function attemptsOf(detail: RunDetail, name: string): AttemptView[] {
  const step = stepNamed(detail, name);
  return detail.attempts.filter((attempt) => attempt.stepRunId === step.id);
}
