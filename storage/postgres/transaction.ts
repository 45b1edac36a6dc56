/**
 * What the two PostgreSQL drivers (PGlite and pg) share: one SERIALIZABLE transaction with
 * bounded retry on serialization failure, and the parsers that turn `int8` and `numeric`
 * text into JavaScript numbers.
 *
 * `fn` may run several times: every attempt that the server aborts with a serialization
 * failure (40001) or a deadlock (40P01) is rolled back and `fn` is called again from the
 * start on a fresh transaction. So `fn` must do nothing but read and write through `tx`
 * and compute; a side effect outside the database would happen once per attempt.
 *
 * Only those two SQLSTATEs are retried, because they guarantee that nothing was applied.
 * A connection lost during COMMIT is never retried: the transaction may have committed, and
 * the caller answers that by reading what is durable (DESIGN.md §3), not by a second attempt.
 */
import { QlrError } from "../../src/errors.ts";
import type { SqlParam, SqlRow, SqlTx, TransactionOptions } from "../driver.ts";
import { isSerializationFailure, toQlrError } from "./errors.ts";

/** One statement's outcome as both drivers report it; `command` is the tag, e.g. "COMMIT". */
export interface PostgresStatementResult {
  readonly rows: SqlRow[];
  readonly command: string | undefined;
}

/**
 * One database session (a pg client, or the single PGlite connection) that the caller
 * holds exclusively for the whole transaction, including its retries. `run` throws the
 * driver's raw error; this module maps it.
 */
export interface PostgresSession {
  run(sql: string, params: readonly SqlParam[]): Promise<PostgresStatementResult>;
}

export interface SerializableRetryPolicy {
  /** Attempts in total, the first one included. */
  readonly maxAttempts: number;
  /** The backoff before the second attempt, doubled before each later one. */
  readonly baseDelayMs: number;
  /** The backoff ceiling. */
  readonly maxDelayMs: number;
}

/**
 * Eight attempts with 2, 4, 8 … 100 ms ceilings: the worst case waits about a quarter of a
 * second in total, which is short next to a tick and long enough for a competing short
 * transaction to commit.
 */
export const DEFAULT_SERIALIZABLE_RETRY: SerializableRetryPolicy = {
  maxAttempts: 8,
  baseDelayMs: 2,
  maxDelayMs: 100,
};

/**
 * A server several coordinators share: each runs every stage every cycle, so a transaction
 * meets more competitors, and a client's `POST /runs` must not be answered with their
 * contention. 24 attempts with ceilings up to 250 ms: about three seconds in the worst case,
 * still short next to an HTTP timeout.
 */
export const SHARED_SERVER_SERIALIZABLE_RETRY: SerializableRetryPolicy = {
  maxAttempts: 24,
  baseDelayMs: 2,
  maxDelayMs: 250,
};

export interface SerializableTransactionHooks {
  /**
   * Called when ROLLBACK itself failed, which leaves the session in an unknown state; the
   * pg driver destroys the client instead of returning it to the pool.
   */
  readonly onSessionBroken?: (error: unknown) => void;
  /**
   * Runs inside the transaction after `fn` and before COMMIT; what it returns travels with an
   * unknown COMMIT outcome (`unknownCommitOf`), so the driver can ask the server afterwards
   * whether that transaction committed (the pg driver records its transaction id here). A
   * throw fails the attempt as a throw from `fn` would.
   */
  readonly beforeCommit?: () => Promise<unknown>;
}

/** What is known of a transaction whose COMMIT was sent and whose answer never came. */
export interface UnknownCommit {
  /** What `fn` returned: the transaction's result, should it turn out to have committed. */
  readonly value: unknown;
  /** What `beforeCommit` returned, `undefined` without the hook. */
  readonly evidence: unknown;
}

/** Errors that mean "COMMIT was sent and its answer never came": never to be retried blindly. */
const unknownCommitOutcomes = new WeakMap<object, UnknownCommit>();

/**
 * True when the transaction that raised `error` may have committed: the connection broke after
 * COMMIT was sent (or while it was being sent). Its caller must read the durable state, never run
 * the transaction again as if it had failed.
 */
export function isUnknownCommitOutcome(error: unknown): boolean {
  return typeof error === "object" && error !== null && unknownCommitOutcomes.has(error);
}

/** The value and evidence of an unknown COMMIT outcome, `undefined` for any other error. */
export function unknownCommitOf(error: unknown): UnknownCommit | undefined {
  return typeof error === "object" && error !== null ? unknownCommitOutcomes.get(error) : undefined;
}

type AttemptOutcome<T> =
  | { readonly ok: true; readonly value: T }
  | { readonly ok: false; readonly error: unknown; readonly retryable: boolean };

/**
 * Runs `fn` in `BEGIN ISOLATION LEVEL SERIALIZABLE … COMMIT` on `session`, rolling back on a
 * throw and retrying serialization failures up to `policy.maxAttempts` times in total.
 *
 * Errors: a throw from `fn` is rethrown as the same value unless the attempt hit a
 * serialization failure. Driver errors become `QlrError`s (see errors.ts). Exhausted retries
 * become `QlrError("storage_unavailable")` (nothing written, try again) whose cause is the last
 * serialization failure.
 */
export async function runSerializableTransaction<T>(
  session: PostgresSession,
  fn: (tx: SqlTx) => Promise<T>,
  policy: SerializableRetryPolicy = DEFAULT_SERIALIZABLE_RETRY,
  hooks: SerializableTransactionHooks = {},
  options: TransactionOptions = {},
): Promise<T> {
  const maxAttempts = Math.max(1, Math.floor(policy.maxAttempts));
  const begin = options.readOnly === true ? BEGIN_READ_ONLY : BEGIN_SERIALIZABLE;
  let lastSerializationFailure: unknown;
  for (let attempt = 1; attempt <= maxAttempts; attempt += 1) {
    const outcome = await runOneAttempt(session, begin, fn, hooks);
    if (outcome.ok) return outcome.value;
    if (!outcome.retryable) throw outcome.error;
    lastSerializationFailure = outcome.error;
    if (attempt < maxAttempts) await sleep(backoffDelayMs(attempt, policy));
  }
  // Not `conflict`: nothing was decided against the caller, the database was only busy with
  // competing transactions (other coordinators' cadences). A client or worker that reads
  // `conflict` as "settled elsewhere" would drop its request; this one says "try again".
  throw new QlrError(
    "storage_unavailable",
    `a concurrent transaction kept winning: gave up after ${maxAttempts} serializable attempts; nothing was written, try again`,
    {
      cause: lastSerializationFailure,
    },
  );
}

/** Every transaction that may write. */
export const BEGIN_SERIALIZABLE = "BEGIN ISOLATION LEVEL SERIALIZABLE";
/**
 * A transaction that only reads (`TransactionOptions.readOnly`): a snapshot without predicate
 * locks. SERIALIZABLE would make a stage's listing a party to the rw-conflicts of the pages
 * that then write what it read, and an HTTP read one of any writer's.
 */
export const BEGIN_READ_ONLY = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

async function runOneAttempt<T>(
  session: PostgresSession,
  begin: string,
  fn: (tx: SqlTx) => Promise<T>,
  hooks: SerializableTransactionHooks,
): Promise<AttemptOutcome<T>> {
  try {
    await session.run(begin, []);
  } catch (error) {
    return { ok: false, error: toQlrError(error), retryable: false };
  }

  // The first statement error is remembered even when `fn` catches it: PostgreSQL aborts
  // the transaction on any statement error, so that error decides what the attempt means.
  let firstStatementError: unknown;
  const tx: SqlTx = {
    query: async <R extends SqlRow = SqlRow>(
      sql: string,
      params: readonly SqlParam[] = [],
    ): Promise<R[]> => {
      try {
        const result = await session.run(sql, params);
        return result.rows as R[];
      } catch (error) {
        firstStatementError ??= error;
        throw toQlrError(error);
      }
    },
  };

  let value: T;
  let evidence: unknown;
  try {
    value = await fn(tx);
    // After a swallowed statement error the transaction is aborted: COMMIT will answer ROLLBACK
    // (below), and a statement now would only fail with 25P02 and hide the first error.
    if (hooks.beforeCommit !== undefined && firstStatementError === undefined)
      evidence = await hooks.beforeCommit();
  } catch (error) {
    const rolledBack = await rollbackQuietly(session, hooks);
    // A session whose ROLLBACK failed cannot carry another attempt.
    const retryable =
      rolledBack && (isSerializationFailure(error) || isSerializationFailure(firstStatementError));
    return { ok: false, error, retryable };
  }

  let commit: PostgresStatementResult;
  try {
    commit = await session.run("COMMIT", []);
  } catch (error) {
    // A serialization failure can surface at COMMIT; the server has rolled back then.
    if (isSerializationFailure(error))
      return { ok: false, error: toQlrError(error), retryable: true };
    const mapped = toQlrError(error);
    if (mapped.code !== "storage_unavailable")
      return { ok: false, error: mapped, retryable: false };
    const unknown = new QlrError(
      "storage_unavailable",
      "the connection failed during COMMIT: the transaction may or may not have been applied",
      { cause: error },
    );
    unknownCommitOutcomes.set(unknown, { value, evidence });
    return { ok: false, error: unknown, retryable: false };
  }

  // COMMIT of an aborted transaction answers ROLLBACK instead of failing. That happens
  // when `fn` caught a statement error and returned normally: nothing was written.
  if (commit.command === "ROLLBACK") {
    if (isSerializationFailure(firstStatementError))
      return { ok: false, error: toQlrError(firstStatementError), retryable: true };
    return {
      ok: false,
      error: new QlrError(
        "internal",
        "the transaction was rolled back because a statement in it failed and the error was caught; nothing was written",
        {
          cause: firstStatementError,
        },
      ),
      retryable: false,
    };
  }
  return { ok: true, value };
}

/** Returns false when ROLLBACK failed; the session is then reported through the hook. */
async function rollbackQuietly(
  session: PostgresSession,
  hooks: SerializableTransactionHooks,
): Promise<boolean> {
  try {
    await session.run("ROLLBACK", []);
    return true;
  } catch (error) {
    // The caller's error is the one worth reporting, so the ROLLBACK error only goes to the hook.
    hooks.onSessionBroken?.(error);
    return false;
  }
}

/** Exponential backoff with jitter in the upper half, so competing retries spread out. */
export function backoffDelayMs(failedAttempts: number, policy: SerializableRetryPolicy): number {
  const ceilingMs = Math.min(
    policy.maxDelayMs,
    policy.baseDelayMs * 2 ** Math.max(0, failedAttempts - 1),
  );
  return ceilingMs / 2 + (Math.random() * ceilingMs) / 2;
}

function sleep(delayMs: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, delayMs));
}

/**
 * `int8` as a JavaScript number. Values beyond ±2^53 − 1 would silently lose precision, so
 * they fail the statement instead (the domain's integers, epoch milliseconds included,
 * stay far below that).
 */
function parseInt8(text: string): number {
  const value = Number(text);
  if (!Number.isSafeInteger(value)) {
    throw new QlrError(
      "internal",
      `an int8 value is outside the safe JavaScript integer range: ${text}`,
    );
  }
  return value;
}

/**
 * `numeric` as a JavaScript number, so `sum(int8)` and `avg(…)` answer the same type on
 * both drivers. Integral values beyond ±2^53 − 1 fail like int8; fractional values are
 * rounded to the nearest double, as a JavaScript caller expects; `NaN` and `±Infinity`
 * map to their JavaScript twins.
 */
function parseNumeric(text: string): number {
  const value = Number(text);
  if (/^-?\d+(\.0+)?$/.test(text) && !Number.isSafeInteger(value)) {
    throw new QlrError(
      "internal",
      `a numeric value is outside the safe JavaScript integer range: ${text}`,
    );
  }
  return value;
}

/** The text parsers both drivers install, by PostgreSQL type oid: `int8` and `numeric` as numbers. */
export const NUMBER_PARSERS: Readonly<Record<number, (text: string) => number>> = {
  20: parseInt8,
  1700: parseNumeric,
};
