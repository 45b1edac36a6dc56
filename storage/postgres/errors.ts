/**
 * Maps what the PostgreSQL drivers throw (pg's and PGlite's `DatabaseError`, Node socket
 * errors, pg's own connection messages) to `QlrError` codes at the storage boundary, so no
 * driver type leaks above `storage/`. The original error always travels as `cause`.
 *
 * Messages name the constraint or SQLSTATE but never the offending values: a message can
 * reach an HTTP client, while `cause` stays on the server side for logs.
 */
import { isQlrError, QlrError } from "../../src/errors.ts";

/** `serialization_failure` and `deadlock_detected`: the server rolled back, a retry is safe. */
const RETRYABLE_SQLSTATES: ReadonlySet<string> = new Set(["40001", "40P01"]);

/**
 * Node socket error codes that mean the server cannot be reached or the connection broke.
 * They are all upper-case like a SQLSTATE, which is why `sqlStateOf` also demands a
 * `severity` field before it reads `code` as a SQLSTATE.
 */
const CONNECTION_ERROR_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "EHOSTDOWN",
  "ENETUNREACH",
  "ENETDOWN",
  "ENOTFOUND",
  "EAI_AGAIN",
]);

/** pg reports these conditions with a plain `Error` and no code, so the message is all there is. */
const CONNECTION_ERROR_MESSAGES: readonly RegExp[] = [
  /^Connection terminated/,
  /timeout exceeded when trying to connect/,
  /Client has encountered a connection error and is not queryable/,
  /Client was closed and is not queryable/,
  /Cannot use a pool after calling end on the pool/,
  /^Query read timeout$/,
];

/** The deepest `cause` chain followed; real chains are one or two links long. */
const MAX_CAUSE_DEPTH = 8;

/**
 * The five-character SQLSTATE of a server error, or `undefined`. Both pg and PGlite raise
 * `DatabaseError` objects carrying `code` and `severity`; Node socket errors carry `code`
 * but no `severity`.
 */
export function sqlStateOf(error: unknown): string | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const candidate = error as { code?: unknown; severity?: unknown };
  if (typeof candidate.code !== "string" || typeof candidate.severity !== "string")
    return undefined;
  return /^[0-9A-Z]{5}$/.test(candidate.code) ? candidate.code : undefined;
}

/** True when `error` or an error in its `cause` chain (followed `MAX_CAUSE_DEPTH` deep) passes `test`. */
function inCauseChain(error: unknown, test: (link: unknown) => boolean): boolean {
  let link: unknown = error;
  for (let depth = 0; depth < MAX_CAUSE_DEPTH && link !== undefined && link !== null; depth += 1) {
    if (test(link)) return true;
    link = typeof link === "object" ? (link as { cause?: unknown }).cause : undefined;
  }
  return false;
}

/**
 * True when `error`, or any error in its `cause` chain, is a serialization failure or a
 * deadlock. The chain is followed because `tx.query` hands the caller a mapped `QlrError`
 * whose cause is the server's error, and the caller usually rethrows that.
 */
export function isSerializationFailure(error: unknown): boolean {
  return inCauseChain(error, (link) => {
    const state = sqlStateOf(link);
    return state !== undefined && RETRYABLE_SQLSTATES.has(state);
  });
}

/**
 * True when `error`, or any error in its `cause` chain, says this server cannot take the
 * transaction now but another may: the connection broke or could not be made, the server is
 * shutting down or starting (57P0x), or it is a read-only standby (25006). During a failover
 * these are what a client sees until it reaches the promoted server.
 */
export function isServerSwitchFailure(error: unknown): boolean {
  return inCauseChain(error, (link) => isConnectionFailure(link) || isReadOnlyServer(link));
}

/** SQLSTATE 25006 (`read_only_sql_transaction`): a write reached a standby, or a read-only session. */
export function isReadOnlyServer(error: unknown): boolean {
  return inCauseChain(error, (link) => {
    const state = sqlStateOf(link);
    // A standby also refuses the SERIALIZABLE a transaction begins with (0A000, "hot standby").
    return state === "25006" || (state === "0A000" && /hot standby/i.test(messageOf(link)));
  });
}

/** True when the error means the connection is gone or could not be made. */
export function isConnectionFailure(error: unknown): boolean {
  const state = sqlStateOf(error);
  if (state !== undefined)
    return state.startsWith("08") || state === "57P01" || state === "57P02" || state === "57P03";
  if (typeof error !== "object" || error === null) return false;
  const candidate = error as { code?: unknown; message?: unknown };
  if (typeof candidate.code === "string" && CONNECTION_ERROR_CODES.has(candidate.code)) return true;
  const message = typeof candidate.message === "string" ? candidate.message : "";
  return CONNECTION_ERROR_MESSAGES.some((pattern) => pattern.test(message));
}

/**
 * Maps any error raised by a driver operation to a `QlrError`. A `QlrError` passes through
 * untouched, so mapping twice is harmless.
 */
export function toQlrError(error: unknown): QlrError {
  if (isQlrError(error)) return error;
  if (isConnectionFailure(error)) {
    return new QlrError(
      "storage_unavailable",
      "PostgreSQL is unreachable or the connection was lost",
      { cause: error },
    );
  }
  const state = sqlStateOf(error);
  if (state === undefined) {
    return new QlrError("internal", "the PostgreSQL driver failed", { cause: error });
  }
  const constraint = constraintOf(error);
  const constraintText = constraint === undefined ? "" : ` (constraint ${constraint})`;

  if (RETRYABLE_SQLSTATES.has(state)) {
    return new QlrError("conflict", `a concurrent transaction won; SQLSTATE ${state}`, {
      cause: error,
    });
  }
  if (state === "23505") {
    return new QlrError("conflict", `duplicate: the row already exists${constraintText}`, {
      cause: error,
    });
  }
  // A foreign key or exclusion violation means another transaction created or removed the
  // row this one depends on: a race over state, reported like a duplicate.
  if (state === "23503" || state === "23P01") {
    return new QlrError(
      "conflict",
      `the referenced state changed${constraintText}; SQLSTATE ${state}`,
      { cause: error },
    );
  }
  // NOT NULL, CHECK and the rest of class 23: the row breaks a rule the schema declares,
  // so the request that produced it was invalid, not the storage.
  if (state.startsWith("23")) {
    return new QlrError(
      "invalid_request",
      `the row breaks a schema rule${constraintText}; SQLSTATE ${state}`,
      { cause: error },
    );
  }
  if (state === "55P03") {
    return new QlrError("storage_locked", "a lock could not be obtained in time; SQLSTATE 55P03", {
      cause: error,
    });
  }
  if (state === "XX001" || state === "XX002") {
    return new QlrError("storage_corrupt", `PostgreSQL reports corrupted data; SQLSTATE ${state}`, {
      cause: error,
    });
  }
  if (isUnavailableState(state) || isReadOnlyServer(error)) {
    return new QlrError(
      "storage_unavailable",
      `PostgreSQL cannot serve the request now; SQLSTATE ${state}`,
      { cause: error },
    );
  }
  return new QlrError("internal", `PostgreSQL rejected a statement; SQLSTATE ${state}`, {
    cause: error,
  });
}

/**
 * SQLSTATEs that say the server, not the statement, is the problem: out of resources
 * (53), a cancelled or timed-out statement (57014), shutdown (57P0x), I/O trouble (58),
 * bad credentials (28), a missing database (3D000), a read-only standby (25006) and a
 * statement whose completion is unknown (40003).
 */
function isUnavailableState(state: string): boolean {
  return (
    state.startsWith("53") ||
    state.startsWith("57") ||
    state.startsWith("58") ||
    state.startsWith("28") ||
    state === "3D000" ||
    state === "25006" ||
    state === "40003"
  );
}

function messageOf(error: unknown): string {
  const message = (error as { message?: unknown }).message;
  return typeof message === "string" ? message : "";
}

function constraintOf(error: unknown): string | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const constraint = (error as { constraint?: unknown }).constraint;
  return typeof constraint === "string" && constraint.length > 0 ? constraint : undefined;
}
