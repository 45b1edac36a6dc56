import type { Run, RunAttempt, StepRun } from "../src/model.ts";

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
  private readonly steps = new Map<string, StepRun>();
  /** The ids of a run's steps in `position` order, when this transaction read them all. */
  private readonly stepIdsOfRun = new Map<string, readonly string[]>();
  private readonly attempts = new Map<string, RunAttempt>();
  /** The ids of a run's attempts in `number` order, when this transaction read them all. */
  private readonly attemptIdsOfRun = new Map<string, readonly string[]>();
  /** Receipt bodies as stored (JSON text), parsed on each read as a read from the table is; null: none. */
  private readonly admissions = new Map<string, string | null>();

  run(runId: string): Run | null | undefined {
    return this.runs.get(runId);
  }

  rememberRun(runId: string, run: Run | null): void {
    this.runs.set(runId, run === null ? null : Object.freeze(run));
  }

  step(stepRunId: string): StepRun | undefined {
    return this.steps.get(stepRunId);
  }

  rememberStep(step: StepRun): void {
    this.steps.set(step.id, freezeStep(step));
  }

  /** A step this transaction inserted: the run's list read earlier, if any, is incomplete now. */
  insertedStep(step: StepRun): void {
    this.rememberStep(step);
    this.stepIdsOfRun.delete(step.runId);
  }

  stepsOfRun(runId: string): StepRun[] | undefined {
    return this.listOf(this.stepIdsOfRun.get(runId), this.steps);
  }

  rememberStepsOfRun(runId: string, steps: readonly StepRun[]): void {
    for (const step of steps) this.rememberStep(step);
    this.stepIdsOfRun.set(
      runId,
      steps.map((step) => step.id),
    );
  }

  attempt(attemptId: string): RunAttempt | undefined {
    return this.attempts.get(attemptId);
  }

  rememberAttempt(attempt: RunAttempt): void {
    this.attempts.set(attempt.id, Object.freeze(attempt));
  }

  insertedAttempt(attempt: RunAttempt): void {
    this.rememberAttempt(attempt);
    this.attemptIdsOfRun.delete(attempt.runId);
  }

  attemptsOfRun(runId: string): RunAttempt[] | undefined {
    return this.listOf(this.attemptIdsOfRun.get(runId), this.attempts);
  }

  rememberAttemptsOfRun(runId: string, attempts: readonly RunAttempt[]): void {
    for (const attempt of attempts) this.rememberAttempt(attempt);
    this.attemptIdsOfRun.set(
      runId,
      attempts.map((attempt) => attempt.id),
    );
  }

  admission(key: string): string | null | undefined {
    return this.admissions.get(key);
  }

  rememberAdmission(key: string, body: string | null): void {
    this.admissions.set(key, body);
  }

  /** After a write this class does not follow (a purge): every later read goes to the database. */
  forget(): void {
    this.runs.clear();
    this.steps.clear();
    this.stepIdsOfRun.clear();
    this.attempts.clear();
    this.attemptIdsOfRun.clear();
    this.admissions.clear();
  }

  /** A new array on each call, so a caller that sorts or pushes changes nothing here. */
  private listOf<T>(ids: readonly string[] | undefined, byId: Map<string, T>): T[] | undefined {
    if (ids === undefined) return undefined;
    const found: T[] = [];
    for (const id of ids) {
      const row = byId.get(id);
      if (row === undefined) return undefined;
      found.push(row);
    }
    return found;
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
