import {
  LIVE_ATTEMPT_STATUSES,
  type ExecutorType,
  type Run,
  type RunAttempt,
  type StepRun,
} from "../../src/model.ts";
import type { RunRowsByVersion } from "./run-rows-by-version.ts";

/**
 * The most rows a store remembers across transactions before it forgets them all. A diamond
 * workflow's run and step rows measured about 500 bytes of heap each (a run's input and a
 * step's needs add to that), so this holds about 2 MiB: a small share of a 128 MiB router,
 * and the rows of a few hundred runs in flight. A transaction may pass the cap by what it
 * reads itself (its pages are bounded); the next one starts empty.
 */
export const REMEMBERED_ROWS_MAX = 4_096;

/**
 * The rows of runs, steps, attempts and admission receipts a store's transactions have read or
 * written, the counts of live attempts they took and the store clock's persisted observation,
 * so a second read costs no statement. A stage page commits as one
 * transaction and each of its decisions reads the run, its steps, its attempt and its receipt
 * again; each step then passes five stages (admission, starting, running, completion,
 * frontier), each its own transaction re-reading the same rows. Without this, one step cost 8
 * transactions and 72 statements, most of them the same reads (docs/PERFORMANCE.md §10).
 *
 * Inside one transaction it returns what the database would: the transaction holds the store
 * alone (SQLite `BEGIN IMMEDIATE` under one operation authority) or reads one serializable
 * snapshot (PostgreSQL, whose repeated reads in a transaction return that snapshot plus its own
 * writes). So inside one transaction a row changes only by this transaction's own writes, and
 * every such write goes through `apply` (which records the row as it reads back) or through
 * `purgeRun` (which forgets everything). No compare-and-set loses its expected version, since
 * the version a caller sends is the one the database holds.
 *
 * Across transactions it is kept only where that stays provably true, on a driver that is the
 * sole writer of its database (`SqlDriver.soleWriterTransactions`: sql.js memory and file,
 * PGlite, Durable Object SQLite). `SqlStore` keeps one instance for all its transactions there,
 * under these rules:
 * - Only rows as committed. A transaction that throws (any error: a `conflict`, a driver
 *   error, a commit whose outcome is unknown or whose response was lost) forgets everything,
 *   since rows it remembered may not be in the database; a successful commit keeps them.
 * - A write not made by this store's transactions makes the memory invalid, and is detected
 *   rather than trusted: the driver counts every transaction that succeeds on it (any
 *   caller's: migrations, retention, another store on the same driver, a test's raw
 *   `driver.transaction`) and anything else that reloads its database, and each transaction
 *   forgets everything when that count moved by more than the store's own last transaction.
 *   A transaction of another caller that failed wrote nothing, so it needs no forgetting.
 * - Bounded: past `REMEMBERED_ROWS_MAX` rows, the next transaction starts by forgetting them
 *   all. Dropping all rather than the oldest runs is the simplest rule that is correct; an
 *   active run's rows are read again on its next stage at the cost of one statement each.
 * - Rows are frozen: a decision that tried to change a row it read in place would otherwise
 *   change what the next decision reads.
 * On any other driver (`pg`, where other coordinators write the same database) every
 * transaction, and every retry of one, starts with an empty instance of its own; its `kept`
 * may lend a page's preload the steps and receipts of runs whose row has not moved
 * (`RunRowsByVersion`).
 */
export class TransactionRows {
  /**
   * Where a page's preload may borrow the steps and receipts of runs whose row has not moved
   * since an earlier commit (PostgreSQL, see `RunRowsByVersion`); null where this instance is
   * itself kept across transactions or nothing is.
   */
  readonly kept: RunRowsByVersion | null;
  private readonly runs = new Map<string, Run | null>();
  readonly steps = new RowsOfRuns<StepRun>(freezeStep);
  /** A run's attempts are listed by number, unique per run: a new one numbered past the last extends the list. */
  readonly attempts = new RowsOfRuns<RunAttempt>(
    (attempt) => Object.freeze(attempt),
    (attempt) => attempt.number,
  );
  /**
   * Receipt bodies as stored (JSON text), parsed on each read as a read from the table is;
   * null: none. By run, then by `admissionKey`, so a run's receipts can be handed on whole.
   */
  private readonly admissions = new Map<string, Map<string, string | null>>();
  /** How many keys `admissions` holds over all runs. */
  private admissionCount = 0;
  /**
   * Live attempts by executor, as counted in this transaction and moved by its own attempt
   * writes since (`attemptWritten`): an admission page asks before each admission.
   */
  private readonly liveAttempts = new Map<ExecutorType, number>();
  /** Runs whose every receipt this transaction read: a key of theirs not in `admissions` has none. */
  private readonly admissionsOfRuns = new Set<string>();
  /**
   * The store clock's persisted observation (`qlr_store_clock`, or with the database clock the
   * watermark sequence) as last read or written; undefined: read it. Every transaction that
   * observes the clock reads it, so remembering it saves one statement a transaction.
   */
  observedMs: number | undefined;

  constructor(kept: RunRowsByVersion | null = null) {
    this.kept = kept;
  }

  run(runId: string): Run | null | undefined {
    return this.runs.get(runId);
  }

  rememberRun(runId: string, run: Run | null): void {
    this.runs.set(runId, run === null ? null : Object.freeze(run));
  }

  admission(runId: string, key: string): string | null | undefined {
    const body = this.admissions.get(runId)?.get(key);
    if (body === undefined && this.admissionsOfRuns.has(runId)) return null;
    return body;
  }

  /** Every receipt of `runId`, as read in this transaction (its later inserts go through `rememberAdmission`). */
  rememberAdmissionsOfRun(runId: string, bodies: ReadonlyMap<string, string>): void {
    for (const [key, body] of bodies) this.rememberAdmission(runId, key, body);
    this.admissionsOfRuns.add(runId);
  }

  /**
   * The run's row, its steps in order and every receipt of it (bodies by key), when this
   * transaction knows all three, with its attempts in order when it knows them all: what
   * `RunRowsByVersion` keeps once it commits.
   */
  wholeRun(runId: string):
    | {
        readonly run: Run;
        readonly steps: StepRun[];
        readonly admissions: Map<string, string>;
        readonly attempts: RunAttempt[] | undefined;
      }
    | undefined {
    const run = this.runs.get(runId);
    const steps = this.steps.ofRun(runId);
    if (run === undefined || run === null || steps === undefined) return undefined;
    if (!this.admissionsOfRuns.has(runId)) return undefined;
    const admissions = new Map<string, string>();
    for (const [key, body] of this.admissions.get(runId) ?? [])
      if (body !== null) admissions.set(key, body);
    return { run, steps, admissions, attempts: this.attempts.ofRun(runId) };
  }

  /** The runs whose row this transaction knows, by id (null: read and found gone). */
  knownRuns(): IterableIterator<[string, Run | null]> {
    return this.runs.entries();
  }

  /**
   * True when the run, its steps, its attempts and every receipt of it are known: a page's
   * preload skips it. A run known only by its row (its lists gone stale after an insert) is
   * read whole again, so no later read of its receipts costs a statement of its own.
   */
  knowsWholeRun(runId: string): boolean {
    return (
      this.runs.has(runId) &&
      this.steps.ofRun(runId) !== undefined &&
      this.attempts.ofRun(runId) !== undefined &&
      this.admissionsOfRuns.has(runId)
    );
  }

  rememberAdmission(runId: string, key: string, body: string | null): void {
    let ofRun = this.admissions.get(runId);
    if (ofRun === undefined) {
      ofRun = new Map();
      this.admissions.set(runId, ofRun);
    }
    if (!ofRun.has(key)) this.admissionCount += 1;
    ofRun.set(key, body);
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

  /** How many rows are remembered (runs, steps, attempts, receipts, "none" answers included). */
  get size(): number {
    return this.runs.size + this.steps.size + this.attempts.size + this.admissionCount;
  }

  /** After a write this class does not follow (a purge, a failed transaction, a write by another caller): every later read goes to the database. */
  forget(): void {
    this.runs.clear();
    this.steps.forget();
    this.attempts.forget();
    this.admissions.clear();
    this.admissionCount = 0;
    this.admissionsOfRuns.clear();
    this.liveAttempts.clear();
    this.observedMs = undefined;
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
  /**
   * The key the table lists a run's rows by (`ORDER BY` it), when it is unique within a run;
   * undefined: an insert always makes the run's list stale.
   */
  private readonly listedBy: ((row: T) => number) | undefined;

  constructor(freeze: (row: T) => T, listedBy?: (row: T) => number) {
    this.freeze = freeze;
    this.listedBy = listedBy;
  }

  get(id: string): T | undefined {
    return this.byId.get(id);
  }

  get size(): number {
    return this.byId.size;
  }

  remember(row: T): void {
    this.byId.set(row.id, this.freeze(row));
  }

  /**
   * A row this transaction inserted. The run's list read earlier, if any, is incomplete now,
   * unless the new row sorts after every row in it: then the database would list it last, and
   * the list is extended. Each stage of a step inserts its attempt after reading the run whole,
   * so without this the next stage read the whole run again (4 statements a run, with the
   * receipts' ids derived again).
   */
  inserted(row: T): void {
    this.remember(row);
    const ids = this.idsOfRun.get(row.runId);
    if (ids !== undefined && this.listedBy !== undefined) {
      const lastId = ids.at(-1);
      const last = lastId === undefined ? undefined : this.byId.get(lastId);
      if (
        lastId === undefined ||
        (last !== undefined && this.listedBy(last) < this.listedBy(row))
      ) {
        this.idsOfRun.set(row.runId, [...ids, row.id]);
        return;
      }
    }
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
