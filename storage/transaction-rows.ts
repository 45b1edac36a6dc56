import {
  LIVE_ATTEMPT_STATUSES,
  type ExecutorType,
  type Run,
  type RunAttempt,
  type StepRun,
} from "../src/model.ts";

/**
 * The rows of runs, steps, attempts and admission receipts one store transaction has already
 * read or written, so a second read of the same row in the same transaction costs no
 * statement. A stage page commits as one transaction and each of its decisions reads the run,
 * its steps, its attempt and its receipt again: without this, one step cost 8 transactions and
 * 72 statements, most of them the same reads (docs/PERFORMANCE.md §10).
 *
 * Why it returns what the database would: the transaction holds the store alone (SQLite
 * `BEGIN IMMEDIATE` under one operation authority) or reads one serializable snapshot
 * (PostgreSQL, whose repeated reads in a transaction return that snapshot plus its own
 * writes). So inside one transaction a row changes only by this transaction's own writes, and
 * every such write goes through `apply` (which records the row as it reads back) or through
 * `purgeRun` (which forgets everything). A transaction that fails is thrown away with its
 * rows; a retried one (PostgreSQL's serialization retries, a page gone item by item) starts
 * empty. Nothing outlives the transaction: this is not a cache across transactions, and no
 * compare-and-set loses its expected version, since the version a caller sends is the one the
 * database holds in this transaction.
 *
 * Rows are frozen: a decision that tried to change a row it read in place would otherwise
 * change what the next decision reads.
 */
export class TransactionRows {
  private readonly runs = new Map<string, Run | null>();
  readonly steps = new RowsOfRuns<StepRun>(freezeStep);
  readonly attempts = new RowsOfRuns<RunAttempt>((attempt) => Object.freeze(attempt));
  /** Receipt bodies as stored (JSON text), parsed on each read as a read from the table is; null: none. */
  private readonly admissions = new Map<string, string | null>();
  /**
   * Live attempts by executor, as counted in this transaction and moved by its own attempt
   * writes since (`attemptWritten`): an admission page asks before each admission.
   */
  private readonly liveAttempts = new Map<ExecutorType, number>();
  /** Runs whose every receipt this transaction read: a key of theirs not in `admissions` has none. */
  private readonly admissionsOfRuns = new Set<string>();

  run(runId: string): Run | null | undefined {
    return this.runs.get(runId);
  }

  rememberRun(runId: string, run: Run | null): void {
    this.runs.set(runId, run === null ? null : Object.freeze(run));
  }

  admission(runId: string, key: string): string | null | undefined {
    const body = this.admissions.get(key);
    if (body === undefined && this.admissionsOfRuns.has(runId)) return null;
    return body;
  }

  /** Every receipt of `runId`, as read in this transaction (its later inserts go through `rememberAdmission`). */
  rememberAdmissionsOfRun(runId: string, bodies: ReadonlyMap<string, string>): void {
    for (const [key, body] of bodies) this.admissions.set(key, body);
    this.admissionsOfRuns.add(runId);
  }

  rememberAdmission(key: string, body: string | null): void {
    this.admissions.set(key, body);
  }

  liveAttemptsOf(executor: ExecutorType): number | undefined {
    return this.liveAttempts.get(executor);
  }

  rememberLiveAttempts(executor: ExecutorType, count: number): void {
    this.liveAttempts.set(executor, count);
  }

  /** An attempt inserted (`before` null) or updated: a count taken earlier follows it in or out of the live statuses. */
  attemptWritten(before: RunAttempt | null, after: RunAttempt): void {
    const live = (attempt: RunAttempt | null): number =>
      attempt !== null && LIVE_ATTEMPT_STATUSES.has(attempt.status) ? 1 : 0;
    const counted = this.liveAttempts.get(after.executor);
    if (counted === undefined) return;
    // The executor of an attempt never changes; a `before` of another executor would be counted apart.
    if (before !== null && before.executor !== after.executor) {
      this.liveAttempts.delete(before.executor);
      this.liveAttempts.delete(after.executor);
      return;
    }
    this.liveAttempts.set(after.executor, counted + live(after) - live(before));
  }

  /** After a write this class does not follow (a purge): every later read goes to the database. */
  forget(): void {
    this.runs.clear();
    this.steps.forget();
    this.attempts.forget();
    this.admissions.clear();
    this.admissionsOfRuns.clear();
    this.liveAttempts.clear();
  }
}

/**
 * Rows of one table that each belong to a run (steps, attempts): by id, and each run's whole
 * list in the table's order when this transaction read it all.
 */
/** A row that belongs to one run. */
export interface RowOfRun {
  readonly id: string;
  readonly runId: string;
}

export class RowsOfRuns<T extends RowOfRun> {
  private readonly byId = new Map<string, T>();
  /** The ids of a run's rows in the table's order, when this transaction read them all. */
  private readonly idsOfRun = new Map<string, readonly string[]>();
  private readonly freeze: (row: T) => T;

  constructor(freeze: (row: T) => T) {
    this.freeze = freeze;
  }

  get(id: string): T | undefined {
    return this.byId.get(id);
  }

  remember(row: T): void {
    this.byId.set(row.id, this.freeze(row));
  }

  /** A row this transaction inserted: the run's list read earlier, if any, is incomplete now. */
  inserted(row: T): void {
    this.remember(row);
    this.idsOfRun.delete(row.runId);
  }

  /** A new array on each call, so a caller that sorts or pushes changes nothing here. */
  ofRun(runId: string): T[] | undefined {
    const ids = this.idsOfRun.get(runId);
    if (ids === undefined) return undefined;
    const found: T[] = [];
    for (const id of ids) {
      const row = this.byId.get(id);
      if (row === undefined) return undefined;
      found.push(row);
    }
    return found;
  }

  rememberOfRun(runId: string, rows: readonly T[]): void {
    for (const row of rows) this.remember(row);
    this.idsOfRun.set(
      runId,
      rows.map((row) => row.id),
    );
  }

  forget(): void {
    this.byId.clear();
    this.idsOfRun.clear();
  }
}

function freezeStep(step: StepRun): StepRun {
  Object.freeze(step.needs);
  return Object.freeze(step);
}

/** The key of one admission receipt: the step version it admits. */
export function admissionKey(runId: string, stepRunId: string, stepRunVersion: number): string {
  return `${runId}\u0000${stepRunId}\u0000${stepRunVersion}`;
}
