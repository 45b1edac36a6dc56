import { TERMINAL_RUN_STATUSES, type Run, type RunAttempt, type StepRun } from "../../src/model.ts";

/**
 * What this memory takes from and gives to one transaction's known rows (`TransactionRows`,
 * which holds this memory and so is not imported here): the runs it knows whole after a commit,
 * and the kept rows of a run lent to it.
 */
export interface KnownRowsOfRuns {
  readonly steps: { rememberOfRun(runId: string, rows: readonly StepRun[]): void };
  readonly attempts: { rememberOfRun(runId: string, rows: readonly RunAttempt[]): void };
  rememberAdmissionsOfRun(runId: string, bodies: ReadonlyMap<string, string>): void;
  knownRuns(): Iterable<[string, Run | null]>;
  wholeRun(runId: string):
    | {
        readonly run: Run;
        readonly steps: readonly StepRun[];
        readonly admissions: ReadonlyMap<string, string>;
        readonly attempts: readonly RunAttempt[] | undefined;
      }
    | undefined;
}

/**
 * The most runs whose steps, receipts and attempts a store keeps across transactions on a
 * shared database. A diamond run's four of each measured 8.2 KB of heap (1,000 runs through the
 * cluster profile on PostgreSQL, the heap after GC with and without them), so this holds about
 * 16 MiB: on a server, where PostgreSQL is used, and the live runs of many pages. Least
 * recently used runs go first; a run that ended is not kept (the stages do not read it again).
 */
export const RUNS_KEPT_BY_VERSION_MAX = 2_048;

interface KeptRun {
  readonly version: number;
  readonly createdAtMs: number;
  readonly steps: readonly StepRun[];
  readonly admissions: ReadonlyMap<string, string>;
  /** Null when the transaction did not know them all, or when one runs on a remote worker. */
  readonly attempts: readonly RunAttempt[] | null;
}

/**
 * A run's steps, admission receipts and attempts kept across transactions where other writers share the
 * database (PostgreSQL, with other coordinators), where `TransactionRows` must start every
 * transaction empty. They are kept under the run row they were committed with, and lent to a
 * later transaction only when it reads the same row again, so a page's preload reads them from
 * the database only for the runs that moved since.
 *
 * Why a run's version stands for them: every write of a step or a receipt comes in a change
 * that moves its run's version by compare-and-set (the change writer refuses any other, see
 * `assertRunMovesWithItsRows`), and only a committed transaction's rows are kept, so one run
 * version names one set of steps and receipts in the database's whole history. The run id
 * with its creation time tells a run from one made again under the same id after a purge.
 * Under SERIALIZABLE the transaction that borrows still reads the run row, so a concurrent
 * writer of any of its steps or receipts (which writes that row too) still conflicts with it.
 * A run's attempts are kept on the same terms while none of them is a remote worker's: a lease
 * extension moves a remote attempt without its run (leases.ts), the one change that may, and
 * a new attempt, remote or not, moves the run like any other insert.
 *
 * Rows are frozen, as `TransactionRows` keeps them, and shared by the transactions that
 * borrow them. A transaction that fails keeps nothing: only `keep` after a commit adds.
 */
export class RunRowsByVersion {
  private readonly runs = new Map<string, KeptRun>();
  private readonly max: number;

  constructor(max = RUNS_KEPT_BY_VERSION_MAX) {
    this.max = max;
  }

  get size(): number {
    return this.runs.size;
  }

  /**
   * Hands `known` the steps and receipts kept with `run`, and its attempts when they were kept,
   * when `run` is the row they were committed with: "attempts too", "steps and receipts", or
   * "none". A kept run of another version is dropped.
   */
  lend(run: Run, known: KnownRowsOfRuns): "attempts too" | "steps and receipts" | "none" {
    const kept = this.runs.get(run.id);
    if (kept === undefined) return "none";
    this.runs.delete(run.id);
    if (kept.version !== run.version || kept.createdAtMs !== run.createdAtMs) return "none";
    this.runs.set(run.id, kept);
    known.steps.rememberOfRun(run.id, kept.steps);
    known.rememberAdmissionsOfRun(run.id, kept.admissions);
    if (kept.attempts === null) return "steps and receipts";
    known.attempts.rememberOfRun(run.id, kept.attempts);
    return "attempts too";
  }

  /**
   * After a commit: keeps every live run `known` holds whole (its row, steps and receipts, and
   * attempts if it can); drops one it found gone or ended.
   */
  keep(known: KnownRowsOfRuns): void {
    for (const [runId, run] of known.knownRuns()) {
      if (run === null || TERMINAL_RUN_STATUSES.has(run.status)) {
        this.runs.delete(runId);
        continue;
      }
      const whole = known.wholeRun(runId);
      if (whole === undefined) continue;
      const attempts = whole.attempts;
      this.runs.delete(runId);
      this.runs.set(runId, {
        version: whole.run.version,
        createdAtMs: whole.run.createdAtMs,
        steps: whole.steps,
        admissions: whole.admissions,
        attempts:
          attempts === undefined || attempts.some((attempt) => attempt.executor === "remote_worker")
            ? null
            : attempts,
      });
    }
    for (const runId of this.runs.keys()) {
      if (this.runs.size <= this.max) break;
      this.runs.delete(runId);
    }
  }
}
