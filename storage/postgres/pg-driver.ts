/**
 * The PostgreSQL dialect on a real server through `pg` (node-postgres): the durable store
 * for the cluster profile. Each transaction checks one client out of a bounded pool, runs
 * SERIALIZABLE with bounded retry (transaction.ts) and gives the client back. The client
 * is kept across the retries of one transaction, so a retry never waits for the pool.
 */
import { Pool, types as pgTypes, type CustomTypesConfig, type PoolClient } from "pg";
import { isQlrError, QlrError } from "../../src/errors.ts";
import type { SqlDriver, SqlRow, SqlTx } from "../driver.ts";
import { isSerializationFailure, toQlrError } from "./errors.ts";
import {
  SHARED_SERVER_SERIALIZABLE_RETRY,
  parseInt8,
  parseNumeric,
  runSerializableTransaction,
  type PostgresSession,
  type SerializableRetryPolicy,
} from "./transaction.ts";

export interface PgDriverOptions {
  /** `postgres://user:password@host:port/database`, with the usual libpq query options. */
  readonly connectionString: string;
  /** Connections held at most; transactions beyond it wait for a free one. Default 4. */
  readonly poolSize?: number;
  /** Server-side limit per statement; unset means the server's own setting. */
  readonly statementTimeoutMs?: number;
  /** How long a new connection may take before the transaction fails. Default 10 s. */
  readonly connectTimeoutMs?: number;
  /** Overrides parts of the serialization-failure retry policy (tests use one attempt). */
  readonly serializableRetry?: Partial<SerializableRetryPolicy>;
}

const DEFAULT_POOL_SIZE = 4;
const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
/** Idle connections are closed after this, so a quiet coordinator holds no server slots. */
const IDLE_TIMEOUT_MS = 30_000;
/**
 * The server ends a session that sits inside a transaction this long, so a stuck process
 * cannot hold row locks forever; our transactions are short and never wait on the network.
 */
const IDLE_IN_TRANSACTION_TIMEOUT_MS = 60_000;

/** How much longer than the server's statement timeout the client waits for an answer. */
const CLIENT_TIMEOUT_MARGIN_MS = 5_000;

const INT8_OID = 20;
const NUMERIC_OID = 1700;

/**
 * Per-pool type parsers: int8 and numeric as numbers, everything else as pg's defaults.
 * pg's global `types.setTypeParser` is left alone because it would change every other pg
 * user in the process.
 */
const qlrTypeParsers: CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: "text" | "binary") => {
    if (format === undefined || format === "text") {
      if (oid === INT8_OID) return parseInt8;
      if (oid === NUMERIC_OID) return parseNumeric;
    }
    return pgTypes.getTypeParser(oid, format) as (text: string) => unknown;
  }) as CustomTypesConfig["getTypeParser"],
};

/**
 * Opens the pool and proves the server answers, so a wrong URL or a down server fails here
 * with `storage_unavailable` rather than on the first transaction.
 */
export async function openPgDriver(options: PgDriverOptions): Promise<SqlDriver> {
  const retryPolicy: SerializableRetryPolicy = {
    ...SHARED_SERVER_SERIALIZABLE_RETRY,
    ...options.serializableRetry,
  };
  const pool = new Pool({
    connectionString: options.connectionString,
    max: Math.max(1, Math.floor(options.poolSize ?? DEFAULT_POOL_SIZE)),
    connectionTimeoutMillis: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    idleTimeoutMillis: IDLE_TIMEOUT_MS,
    idle_in_transaction_session_timeout: IDLE_IN_TRANSACTION_TIMEOUT_MS,
    application_name: "qlr",
    types: qlrTypeParsers,
    // TCP keepalive notices a peer that vanished without closing the connection.
    keepAlive: true,
    ...(options.statementTimeoutMs === undefined
      ? {}
      : {
          statement_timeout: options.statementTimeoutMs,
          // The client gives up a little later than the server, for when the server's
          // cancellation never arrives because the network is gone.
          query_timeout: options.statementTimeoutMs + CLIENT_TIMEOUT_MARGIN_MS,
        }),
  });
  // An idle client whose connection dies is dropped by the pool, which then emits "error";
  // without a listener that event would crash the process. The next checkout reports the
  // outage as `storage_unavailable`, so nothing is lost by ignoring it here.
  pool.on("error", () => undefined);

  const inFlight = new Set<Promise<unknown>>();
  let closing: Promise<void> | undefined;

  async function runOnClient<T>(fn: (tx: SqlTx) => Promise<T>): Promise<T> {
    let client: PoolClient;
    try {
      client = await pool.connect();
    } catch (error) {
      throw toQlrError(error);
    }
    // A checked-out client has no pool listener; a connection that dies between two of our
    // statements would otherwise raise an unhandled "error" event.
    let brokenBy: unknown;
    const onClientError = (error: Error): void => {
      brokenBy ??= error;
    };
    client.on("error", onClientError);
    const session: PostgresSession = {
      run: async (sql, params) => {
        const result = await client.query<SqlRow>(sql, [...params]);
        return { rows: result.rows, command: result.command };
      },
    };
    try {
      return await runSerializableTransaction(session, fn, retryPolicy, {
        onSessionBroken: (error) => {
          brokenBy ??= error;
        },
      });
    } catch (error) {
      // Any storage_unavailable outcome may have left the connection half-dead; a fresh one is cheap.
      // Exhausted serialization retries leave a healthy connection behind.
      if (isQlrError(error, "storage_unavailable") && !isSerializationFailure(error))
        brokenBy ??= error;
      throw error;
    } finally {
      client.off("error", onClientError);
      // Passing an error makes the pool destroy the client instead of reusing it.
      client.release(brokenBy === undefined ? undefined : asError(brokenBy));
    }
  }

  const driver: SqlDriver = {
    dialect: "postgres",
    name: "pg",
    transaction<T>(fn: (tx: SqlTx) => Promise<T>): Promise<T> {
      if (closing !== undefined)
        return Promise.reject(new QlrError("storage_unavailable", "the pg driver is closed"));
      const result = runOnClient(fn);
      const settled = result.then(
        () => undefined,
        () => undefined,
      );
      inFlight.add(settled);
      void settled.then(() => inFlight.delete(settled));
      return result;
    },
    close(): Promise<void> {
      closing ??= (async () => {
        await Promise.all(inFlight);
        await pool.end();
      })();
      return closing;
    },
  };

  try {
    await driver.transaction((tx) => tx.query("SELECT 1"));
  } catch (error) {
    await pool.end().catch(() => undefined);
    throw error;
  }
  return driver;
}

function asError(value: unknown): Error {
  return value instanceof Error ? value : new Error(String(value));
}
