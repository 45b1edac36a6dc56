/**
 * The runtime's HTTP API views as the tests read them (docs/API.md), shared by the in-process
 * HTTP suites and the device suites' client. Runs, steps and attempts are the dashboard's own
 * views, declared once in runtimes/browser/dashboard/api.ts; the tests add what the dashboard
 * does not read (events, recovery reports).
 */
export type { AttemptView, RunDetail, RunView, StepView } from "../../runtimes/browser/dashboard/api.ts";

export interface EventView {
  readonly seq: number;
  readonly type: string;
  readonly atMs: number;
  readonly stepRunId: string | null;
  readonly attemptId: string | null;
  readonly data: Record<string, unknown>;
}

export interface RecoveryView {
  readonly attemptId: string;
  readonly decision: string;
  readonly reason: string | null;
}
