import type { InputDeclaration, InputValue } from "../run-inputs.ts";

/**
 * The normalized manifest: every default filled in, durations in milliseconds, names as the
 * user wrote them, and every collection an array sorted by name (code-unit order, never
 * locale order) so two spellings of one package normalize to equal values and equal digests.
 */

export type ExecutorKind = "local_process" | "remote_worker";
export type OverlapPolicy = "skip" | "allow";
export type MissedFirePolicy = "skip" | "fire_once";

export interface RetryPolicy {
  /** Retries after the first attempt; 0 means the task runs at most once per run. */
  max: number;
  backoffMs: number;
  /** Only an idempotent task may be retried after it may already have started (DESIGN.md §7). */
  idempotent: boolean;
}

/**
 * Where an alert goes when a run fails, times out or is lost: a webhook (POSTed JSON, signed
 * with HMAC-SHA256 when a secret is given) or, on a device, a local command.
 */
export type NotifierSpec =
  { kind: "webhook"; url: string; secret: string | null } | { kind: "command"; argv: string[] };

export interface TaskSpec {
  name: string;
  /** The exact argv; a `shell:` task is `["/bin/sh", "-c", script]` with `shell: true`. */
  argv: string[];
  shell: boolean;
  timeoutMs: number;
  /** Sorted by variable name. */
  env: Record<string, string>;
  cwd: string | null;
  /** The user the task runs as (name, uid or uid:gid); absent: the runtime's own user. */
  user?: string;
  executor: ExecutorKind;
  /** Set exactly when the executor is `remote_worker`. */
  pool: string | null;
  retry: RetryPolicy;
  /**
   * At most this many attempts of the task live (claimed, starting or running) across all runs
   * of the package; absent: no limit of its own (so older digests are unchanged).
   */
  concurrency?: number;
  /** Alerts for ordinary runs of this task; absent when none (so older digests are unchanged). */
  notify?: NotifierSpec[];
}

export interface StepSpec {
  name: string;
  task: string;
  /** Sorted: the order of `needs` carries no meaning, so it must not change a plan digest. */
  needs: string[];
}

export interface WorkflowSpec {
  name: string;
  description: string | null;
  /** Sorted by name; present only when the workflow declares `inputs:` (so other digests stay as they were). */
  inputs?: InputDeclaration[];
  /** Sorted by name; use `topologicalOrder` for execution order. */
  steps: StepSpec[];
  /** Alerts for runs of this workflow; absent when none. */
  notify?: NotifierSpec[];
}

export interface ScheduleTarget {
  kind: "workflow" | "task";
  name: string;
}

export interface ScheduleSpec {
  name: string;
  cron: string;
  timezone: string;
  target: ScheduleTarget;
  overlap: OverlapPolicy;
  missed: MissedFirePolicy;
  enabled: boolean;
  /** Alerts for the runs this schedule starts; absent when none. */
  notify?: NotifierSpec[];
  /** The input of every run the schedule starts, resolved against the target's declarations; present only when given. */
  input?: Record<string, InputValue>;
}

export interface Manifest {
  package: string;
  description: string | null;
  tasks: TaskSpec[];
  workflows: WorkflowSpec[];
  schedules: ScheduleSpec[];
}

/** One problem in a manifest: a dotted path such as `workflows.pipeline.steps.b.needs[0]`, or `$` for the whole document. */
export interface ManifestIssue {
  path: string;
  message: string;
}

export type ManifestParseResult =
  { ok: true; manifest: Manifest } | { ok: false; issues: ManifestIssue[] };

export type ManifestFormat = "yaml" | "json";
