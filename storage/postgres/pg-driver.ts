/**
 * The PostgreSQL dialect on a real server through `pg` (node-postgres): the durable store
 * for the cluster profile. Each transaction checks one client out of a bounded pool, runs
 * SERIALIZABLE with bounded retry (transaction.ts) and gives the client back. The client
 * is kept across the retries of one transaction, so a retry never waits for the pool.
 *
 * Failover. The URL may name several servers, as libpq does:
 * `postgres://user:pw@h1:5432,h2:5432/db?target_session_attrs=read-write`. Connections go to
 * one server at a time; with `read-write` (or `primary`) a new connection is kept only when the
 * server is not read-only (`SHOW transaction_read_only`), so a standby is skipped until it is
 * promoted. A transaction that fails because its server went away or turned out read-only
 * (connection errors, 57P0x, SQLSTATE 25006) before COMMIT was sent applied nothing: the driver
 * moves to the next server and runs it again, with a bounded backoff (`reconnect`), instead of
 * failing the caller during the switch.
 *
 * Round trips. BEGIN goes out with the transaction's first statement (`beginThen`), and a
 * transaction that sent only reads asks nothing before COMMIT (it has no id to settle).
 *
 * Named statements. A connection names the statement texts it sends (`StatementNames`), so the
 * server parses each text once per connection and Bind/Execute follow; the server's parse and
 * plan work competes with the coordinator for the same cores. Names are bounded per connection
 * (count and text bytes); texts beyond the bound go unnamed, as before.
 *
 * Planner costs. The connections start with `random_page_cost` 1.1 (STORE_RANDOM_PAGE_COST):
 * the store reads and updates rows by key, and with the default of 4 the planner scanned whole
 * tables instead of probing their indexes once they held some thousands of rows.
 *
 * A lost COMMIT. Each transaction that may have written records its transaction id
 * (`pg_current_xact_id_if_assigned()`), the timeline and the postmaster's start. When the
 * connection breaks after COMMIT was sent, the driver reconnects and asks `pg_xact_status`:
 * committed (and visible) answers the caller as if the COMMIT answer had arrived, aborted runs
 * the transaction again, and a transaction without an id wrote nothing and runs again too. The
 * server vouches only for ids of its own history: on another entry of the URL, another timeline
 * (a promoted standby) or after a restart the outcome stays unknown, and the caller reads what
 * is durable (its exact-replay path, DESIGN.md §3) instead of trying again blindly.
 */
import {
  Pool,
  types as pgTypes,
  type CustomTypesConfig,
  type PoolClient,
  type QueryConfig,
} from "pg";
import { isQlrError, QlrError } from "../../src/errors.ts";
import type { SqlDriver, SqlRow, SqlTx, TransactionOptions } from "../driver.ts";
import {
  isReadOnlyServer,
  isSerializationFailure,
  isServerSwitchFailure,
  toQlrError,
} from "./errors.ts";
import {
  SHARED_SERVER_SERIALIZABLE_RETRY,
  backoffDelayMs,
  isUnknownCommitOutcome,
  NUMBER_PARSERS,
  unknownCommitOf,
  runSerializableTransaction,
  type PostgresSession,
  type SerializableRetryPolicy,
} from "./transaction.ts";
import { TurnBreaker, type TurnRequest } from "./turn-breaker.ts";
import { beginThen } from "./begin-then.ts";
import {
  carryingTransactionId,
  isCertainlyReadOnly,
  RECORD_TRANSACTION_ID_SQL,
  TRANSACTION_ID_COLUMN,
  TRANSACTION_STATUS_SQL,
  type CommitEvidence,
  type CommitSettlement,
} from "./commit-evidence.ts";
import { parseConnectionTargets, type PgServerTarget } from "./connection-targets.ts";
import { statementNamesOf } from "./statement-names.ts";

export interface PgDriverOptions {
  /**
   * `postgres://user:password@host:port/database`, with the usual libpq query options; several
   * `host:port` pairs separated by commas name servers to fail over between, and
   * `target_session_attrs=read-write` (or `primary`) keeps only a server that accepts writes.
   */
  readonly connectionString: string;
  /** Connections held at most; transactions beyond it wait for a free one. Default 4. */
  readonly poolSize?: number;
  /** Server-side limit per statement; unset means the server's own setting. */
  readonly statementTimeoutMs?: number;
  /** How long a new connection may take before the transaction fails. Default 10 s. */
  readonly connectTimeoutMs?: number;
  /** Overrides parts of the serialization-failure retry policy (tests use one attempt). */
  readonly serializableRetry?: Partial<SerializableRetryPolicy>;
  /** Overrides parts of the policy for transactions that lost their server before COMMIT. */
  readonly reconnect?: Partial<SerializableRetryPolicy>;
  /**
   * The planner's `random_page_cost` for the store's own sessions (see
   * STORE_RANDOM_PAGE_COST); null keeps the server's setting. `options` in the URL, or
   * `random_page_cost` in PGOPTIONS, win over it.
   */
  readonly randomPageCost?: number | null;
  /**
   * How long a transaction that asks for a turn (`TransactionOptions.inTurn`) waits for it
   * before it runs without one. Default DEFAULT_TURN_WAIT_MS.
   */
  readonly turnWaitMs?: number;
  /**
   * When the driver stops asking for turns after a wait ran out (turn-breaker.ts). Default: a
   * breaker of its own with DEFAULT_TURN_BREAKER_POLICY on the process's monotonic clock;
   * tests pass one with their own clock, or one shared by two drivers.
   */
  readonly turnBreaker?: TurnBreaker;
}

/**
 * The store's statements read a few rows by key: a page's runs and their steps, attempts and
 * receipts, the rows a multi-row UPDATE names. PostgreSQL's default `random_page_cost` of 4
 * prices an index probe for a disk that seeks, so once a table held some thousands of rows the
 * planner chose a sequential scan of all of them over 100 probes by key (a hash join for the
 * multi-row UPDATEs): ≈ 1 ms of server time per ordinary run in the cluster bench, and more as
 * history grows (docs/PERFORMANCE.md, "PostgreSQL's server time per unit"). The working set of a
 * coordinator's tables is in memory, where a random page costs about what a sequential one
 * does; 1.1 is the usual setting for SSDs and cached data.
 */
export const STORE_RANDOM_PAGE_COST = 1.1;

/**
 * The startup `options` of the store's connections: the planner's page cost (unless null), then
 * PGOPTIONS as `pg` would have sent it alone, so a setting there wins (the last `-c` does).
 */
export function sessionOptions(
  randomPageCost: number | null,
  environment: string | undefined,
): string | undefined {
  if (randomPageCost !== null && !(Number.isFinite(randomPageCost) && randomPageCost > 0))
    throw new QlrError(
      "invalid_request",
      `randomPageCost must be a positive number or null, got ${randomPageCost}`,
    );
  const parts = [
    ...(randomPageCost === null ? [] : [`-c random_page_cost=${randomPageCost}`]),
    ...(environment === undefined || environment.trim() === "" ? [] : [environment.trim()]),
  ];
  return parts.length === 0 ? undefined : parts.join(" ");
}

/**
 * Transactions that lost their server (or reached a read-only one) before COMMIT are run again
 * on the next server, 12 attempts with ceilings from 100 ms up to 2 s: about 15 s in all, which
 * covers a standby's promotion, still short of an HTTP client's patience.
 */
export const DEFAULT_RECONNECT_RETRY: SerializableRetryPolicy = {
  maxAttempts: 12,
  baseDelayMs: 100,
  maxDelayMs: 2_000,
};

/** The pool's sizes and waits. */
const POOL_LIMITS = {
  defaultPoolSize: 4,
  defaultConnectTimeoutMs: 10_000,
  /** Idle connections are closed after this, so a quiet coordinator holds no server slots. */
  idleTimeoutMs: 30_000,
  /**
   * The server ends a session that sits inside a transaction this long, so a stuck process
   * cannot hold row locks forever; our transactions are short and never wait on the network.
   */
  idleInTransactionTimeoutMs: 60_000,
  /** How much longer than the server's statement timeout the client waits for an answer. */
  clientTimeoutMarginMs: 5_000,
} as const;

/**
 * Per-pool type parsers: int8 and numeric as numbers, everything else as pg's defaults.
 * pg's global `types.setTypeParser` is left alone because it would change every other pg
 * user in the process.
 */
const qlrTypeParsers: CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: "text" | "binary") => {
    if (format === undefined || format === "text") {
      const parser = NUMBER_PARSERS[oid];
      if (parser !== undefined) return parser;
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
  const reconnectPolicy: SerializableRetryPolicy = {
    ...DEFAULT_RECONNECT_RETRY,
    ...options.reconnect,
  };
  const targets = parseConnectionTargets(options.connectionString);
  const startupOptions = sessionOptions(
    options.randomPageCost === undefined ? STORE_RANDOM_PAGE_COST : options.randomPageCost,
    process.env.PGOPTIONS,
  );
  const poolSize = Math.max(1, Math.floor(options.poolSize ?? POOL_LIMITS.defaultPoolSize));
  const turnWaitMs = Math.max(1, Math.floor(options.turnWaitMs ?? DEFAULT_TURN_WAIT_MS));
  const turnBreaker = options.turnBreaker ?? new TurnBreaker();
  const openPool = (server: PgServerTarget): Pool => {
    const pool = new Pool({
      connectionString: server.connectionString,
      max: poolSize,
      connectionTimeoutMillis: options.connectTimeoutMs ?? POOL_LIMITS.defaultConnectTimeoutMs,
      idleTimeoutMillis: POOL_LIMITS.idleTimeoutMs,
      idle_in_transaction_session_timeout: POOL_LIMITS.idleInTransactionTimeoutMs,
      // `options` in the URL replaces these (pg lets the URL's parameters win).
      ...(startupOptions === undefined ? {} : { options: startupOptions }),
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
            query_timeout: options.statementTimeoutMs + POOL_LIMITS.clientTimeoutMarginMs,
          }),
    });
    // An idle client whose connection dies is dropped by the pool, which then emits "error";
    // without a listener that event would crash the process. The next checkout reports the
    // outage as `storage_unavailable`, so nothing is lost by ignoring it here.
    pool.on("error", () => undefined);
    return pool;
  };

  const inFlight = new Set<Promise<unknown>>();
  let closing: Promise<void> | undefined;

  /** Checkout failures that mean "no server takes writes right now" (all down, or standbys). */
  const noWritableServer = new WeakSet<object>();
  const isNoWritableServer = (error: unknown): boolean =>
    typeof error === "object" && error !== null && noWritableServer.has(error);

  /** One pool per server, opened when first used and retired when its server fails us. */
  const pools = new Map<number, Pool>();
  const retiring = new Set<Promise<void>>();
  /** The server the last transaction used: the next one starts there. */
  let current = 0;
  /**
   * The timeline and postmaster start of each connection's server, read with the first
   * transaction id the connection recorded. A server that handed out an id was writing: its
   * timeline changes only when it restarts (a promotion happens to a standby), and a restart
   * ends the connection, so the facts hold for as long as the client lives. Even a stale entry
   * could only make a lost COMMIT unknown (the settle compares them with the server's), never
   * settle it wrongly.
   */
  const serverFacts = new WeakMap<
    PoolClient,
    Pick<CommitEvidence, "timeline" | "postmasterStartedAt">
  >();
  /** Clients proven to be on a server that accepts writes (only with read-write). */
  const verified = new WeakSet<PoolClient>();

  const poolFor = (index: number): Pool => {
    let pool = pools.get(index);
    if (pool === undefined) {
      pool = openPool(targets.servers[index]!);
      pools.set(index, pool);
    }
    return pool;
  };
  /** Drops a server's pool (its idle connections close now, checked-out ones on release). */
  const retire = (index: number, pool: Pool): void => {
    if (pools.get(index) !== pool) return;
    pools.delete(index);
    const ended = pool.end().catch(() => undefined);
    retiring.add(ended);
    void ended.then(() => retiring.delete(ended));
  };

  /** A client on the first server, from `current` on, that answers (and accepts writes when asked). */
  async function checkout(): Promise<{ client: PoolClient; index: number; pool: Pool }> {
    let lastError: unknown;
    let standbyOnly = false;
    for (let tried = 0; tried < targets.servers.length; tried += 1) {
      const index = (current + tried) % targets.servers.length;
      const pool = poolFor(index);
      let client: PoolClient;
      try {
        client = await pool.connect();
      } catch (error) {
        lastError = error;
        if (targets.servers.length > 1) retire(index, pool);
        continue;
      }
      if (targets.requireReadWrite && !verified.has(client)) {
        let readOnly: boolean;
        try {
          const result = await client.query<{ transaction_read_only: string }>(
            "SHOW transaction_read_only",
          );
          readOnly = result.rows[0]?.transaction_read_only !== "off";
        } catch (error) {
          client.release(asError(error));
          lastError = error;
          retire(index, pool);
          continue;
        }
        if (readOnly) {
          client.release(new Error("the server is read-only"));
          lastError = new QlrError(
            "storage_unavailable",
            `${targets.servers[index]!.label} is read-only (a standby) and target_session_attrs asks for read-write`,
          );
          standbyOnly = true;
          retire(index, pool);
          continue;
        }
        verified.add(client);
      }
      current = index;
      return { client, index, pool };
    }
    const failure = toQlrError(lastError);
    // No server answered, or none accepts writes yet (a standby not promoted): worth waiting for.
    if (standbyOnly || isServerSwitchFailure(lastError)) noWritableServer.add(failure);
    throw failure;
  }

  async function runOnClient<T>(
    fn: (tx: SqlTx) => Promise<T>,
    options: TransactionOptions = {},
  ): Promise<T> {
    const { client, index, pool } = await checkout();
    // A checked-out client has no pool listener; a connection that dies between two of our
    // statements would otherwise raise an unhandled "error" event.
    let brokenBy: unknown;
    const onClientError = (error: Error): void => {
      brokenBy ??= error;
    };
    client.on("error", onClientError);
    // The transaction id, read from the first writing statement that returned a row (see
    // `carryingTransactionId`); reset by each BEGIN, so a serializable retry reads its own.
    let transactionId: string | null = null;
    // BEGIN waits to go out with the transaction's first statement, in the same round trip
    // (`beginThen`); a transaction that sends no statement never begins on the server.
    let pendingBegin: string | null = null;
    // Whether a statement of this transaction may have written (see `isCertainlyReadOnly`).
    let mayHaveWritten = false;
    const session: PostgresSession = {
      run: async (sql, params) => {
        if (sql.startsWith("BEGIN")) {
          transactionId = null;
          mayHaveWritten = false;
          pendingBegin = sql;
          return { rows: [], command: "BEGIN" };
        }
        if (pendingBegin !== null && (sql === "COMMIT" || sql === "ROLLBACK")) {
          // Nothing was sent since BEGIN: there is no transaction on the server to end.
          pendingBegin = null;
          return { rows: [], command: sql };
        }
        if (!isCertainlyReadOnly(sql)) mayHaveWritten = true;
        const carrying = transactionId === null ? carryingTransactionId(sql) : null;
        const text = carrying?.sql ?? sql;
        const begin = pendingBegin;
        pendingBegin = null;
        // Several statements in one text go only by the simple protocol, which `beginThen` cannot
        // extend: BEGIN then goes first on its own.
        if (begin !== null && text.includes(";")) await client.query(begin);
        // A text without parameters outside `beginThen` (COMMIT, ROLLBACK, SHOW) keeps the
        // simple protocol: only texts that go by the extended protocol anyway are named.
        const result =
          text.includes(";") || (begin === null && params.length === 0)
            ? await client.query<SqlRow>(text, [...params])
            : await statementNamesOf(client).send(text, (name) =>
                begin === null
                  ? client.query<SqlRow>({
                      text,
                      values: [...params],
                      ...(name === undefined ? {} : { name }),
                    })
                  : beginThen(client, begin, text, params, name),
              );
        if (carrying === null) return { rows: result.rows, command: result.command };
        const rows: SqlRow[] = [];
        for (const row of result.rows) {
          const { [TRANSACTION_ID_COLUMN]: xid, ...rest } = row;
          if (typeof xid === "string") transactionId ??= xid;
          if (carrying.keepRows) rows.push(rest);
        }
        return { rows, command: result.command };
      },
    };
    // Taken before BEGIN, not inside: the snapshot is taken at the transaction's first
    // statement, which must come after the previous holder's COMMIT, or this one would read
    // what that one replaced and fail writing over it.
    let inTurn = false;
    try {
      // A breaker that is open runs the transaction without asking (turn-breaker.ts).
      const turnRequest: TurnRequest | null =
        options.inTurn === true ? turnBreaker.request() : null;
      if (turnRequest !== null && turnRequest !== "skip") {
        try {
          // The server bounds the wait (`lock_timeout`, 55P03): a request abandoned by the
          // client alone would stay queued on the server, holding its connection slot, until
          // the turn came. The client's own limit is only for a server that stopped answering.
          // `query_timeout` per query is honoured by pg's client but missing from its types.
          await client.query({
            text: takeTurnSql(turnWaitMs),
            query_timeout: turnWaitMs + POOL_LIMITS.clientTimeoutMarginMs,
          } as QueryConfig);
          inTurn = true;
          turnBreaker.granted(turnRequest);
        } catch (error) {
          if (!isLockTimeout(error)) {
            // Its answer is lost or the connection failed: this connection must go, and the
            // transaction runs on another one, without a turn.
            turnBreaker.abandoned(turnRequest);
            brokenBy ??= error;
            throw new TurnNotTaken(error);
          }
          turnBreaker.ranOut(turnRequest);
        }
      }
      return await runSerializableTransaction(
        session,
        fn,
        retryPolicy,
        {
          onSessionBroken: (error) => {
            brokenBy ??= error;
          },
          beforeCommit: async (): Promise<CommitEvidence> => {
            // Only reads were sent (or nothing at all): no transaction id can have been assigned,
            // so there is nothing to ask; a lost COMMIT answer then runs the reads again.
            if (!mayHaveWritten)
              return { xid: null, serverIndex: index, timeline: null, postmasterStartedAt: null };
            // The id rode on a writing statement and this connection's server is known: nothing
            // more to ask before COMMIT.
            const server = serverFacts.get(client);
            if (transactionId !== null && server !== undefined)
              return { xid: transactionId, serverIndex: index, ...server };
            try {
              const result = await client.query<{
                xid: string | null;
                timeline: number | null;
                started: string | null;
              }>(RECORD_TRANSACTION_ID_SQL);
              const row = result.rows[0];
              // A server that handed out an id takes writes: its timeline stays until it stops,
              // and its start time with it, which ends this connection too.
              if (row?.xid != null && row.timeline !== null && row.started !== null)
                serverFacts.set(client, {
                  timeline: row.timeline,
                  postmasterStartedAt: row.started,
                });
              return {
                xid: row?.xid ?? null,
                serverIndex: index,
                timeline: row?.timeline ?? null,
                postmasterStartedAt: row?.started ?? null,
              };
            } catch (error) {
              throw toQlrError(error);
            }
          },
        },
        options,
      );
    } catch (error) {
      // Any storage_unavailable outcome may have left the connection half-dead; a fresh one is cheap.
      // Exhausted serialization retries leave a healthy connection behind.
      if (isQlrError(error, "storage_unavailable") && !isSerializationFailure(error))
        brokenBy ??= error;
      // This server went away or is a standby: the next transaction starts at the next one.
      if (targets.servers.length > 1 && isServerSwitchFailure(error)) {
        if (isReadOnlyServer(error) && current === index)
          current = (index + 1) % targets.servers.length;
        retire(index, pool);
      }
      throw error;
    } finally {
      // A broken connection is destroyed below, and the server frees its turn with the session.
      if (inTurn && brokenBy === undefined)
        await client.query(GIVE_TURN_SQL).catch((error: unknown) => {
          brokenBy ??= error;
        });
      client.off("error", onClientError);
      // Passing an error makes the pool destroy the client instead of reusing it.
      client.release(brokenBy === undefined ? undefined : asError(brokenBy));
    }
  }

  /**
   * Asks the server whether a transaction whose COMMIT answer was lost committed. The answer
   * counts only from the server and history the transaction id was taken on: the same entry of
   * the URL, the same timeline, the same postmaster start. After a promotion the new primary may
   * never have seen the id and hand it to another transaction, and after a restart an id whose
   * records never reached the disk may be handed out again, so either answers `unknown`.
   * `in progress` (the backend has not yet noticed its client is gone, or its commit waits
   * for the synchronous standby) is asked again, with the reconnect backoff, as is a server
   * that cannot be reached; when the patience runs out the outcome stays unknown.
   */
  async function settleCommit(evidence: CommitEvidence): Promise<CommitSettlement> {
    if (evidence.xid === null || evidence.timeline === null) return "unknown";
    const maxAttempts = Math.max(1, Math.floor(reconnectPolicy.maxAttempts));
    for (let attempt = 1; attempt <= maxAttempts && closing === undefined; attempt += 1) {
      if (attempt > 1) await sleep(backoffDelayMs(attempt - 1, reconnectPolicy));
      let checkedOut: { client: PoolClient; index: number; pool: Pool };
      try {
        checkedOut = await checkout();
      } catch (error) {
        if (isNoWritableServer(error) || isServerSwitchFailure(error)) continue;
        return "unknown";
      }
      const { client, index, pool } = checkedOut;
      if (index !== evidence.serverIndex) {
        client.release();
        return "unknown";
      }
      let brokenBy: unknown;
      const onClientError = (error: Error): void => {
        brokenBy ??= error;
      };
      client.on("error", onClientError);
      try {
        const result = await client.query<{
          status: string | null;
          visible: boolean;
          timeline: number;
          started: string;
        }>(TRANSACTION_STATUS_SQL, [evidence.xid]);
        const row = result.rows[0];
        if (
          row === undefined ||
          row.timeline !== evidence.timeline ||
          row.started !== evidence.postmasterStartedAt
        )
          return "unknown";
        if (row.status === "committed" && row.visible) return "committed";
        if (row.status === "aborted") return "aborted";
        // Committed but not yet visible to others (a synchronous commit still waiting for the
        // standby), or still in progress: ask again.
        if (row.status === null) return "unknown";
      } catch (error) {
        brokenBy ??= error;
        if (isServerSwitchFailure(error)) {
          if (targets.servers.length > 1) retire(index, pool);
          continue;
        }
        // An id the server calls "in the future" or too old to know (22023): not ours to guess.
        return "unknown";
      } finally {
        client.off("error", onClientError);
        client.release(brokenBy === undefined ? undefined : asError(brokenBy));
      }
    }
    return "unknown";
  }

  /**
   * Runs `fn` again when its server failed it before COMMIT was sent (nothing applied), on the
   * next server, with a bounded backoff. A COMMIT whose answer was lost is settled with the
   * server (`settleCommit`): committed answers the caller with `fn`'s value, aborted (or a
   * transaction that wrote nothing) runs `fn` again, and an outcome the server cannot vouch for
   * goes to the caller as unknown. Every other outcome goes to the caller as it is.
   */
  async function runWithReconnect<T>(
    fn: (tx: SqlTx) => Promise<T>,
    options: TransactionOptions,
  ): Promise<T> {
    const maxAttempts = Math.max(1, Math.floor(reconnectPolicy.maxAttempts));
    let current = options;
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await runOnClient(fn, current);
      } catch (error) {
        // Nothing was sent but the request for a turn: run it at once without one (once only).
        if (error instanceof TurnNotTaken) {
          if (closing !== undefined) throw error.reason;
          current = { ...current, inTurn: false };
          attempt -= 1;
          continue;
        }
        const unknownCommit = unknownCommitOf(error);
        if (unknownCommit !== undefined && attempt < maxAttempts && closing === undefined) {
          const evidence = unknownCommit.evidence as CommitEvidence | undefined;
          // No transaction id: the transaction wrote nothing, so running it again is safe.
          const settled =
            evidence === undefined
              ? "unknown"
              : evidence.xid === null
                ? "aborted"
                : await settleCommit(evidence);
          if (settled === "committed") return unknownCommit.value as T;
          if (settled === "aborted") continue;
          throw error;
        }
        const retryable =
          attempt < maxAttempts &&
          closing === undefined &&
          !isUnknownCommitOutcome(error) &&
          !isSerializationFailure(error) &&
          (isNoWritableServer(error) || isServerSwitchFailure(error));
        if (!retryable) throw error;
        await sleep(backoffDelayMs(attempt, reconnectPolicy));
      }
    }
  }

  const driver: SqlDriver = {
    dialect: "postgres",
    name: "pg",
    get turns() {
      return turnBreaker.turns;
    },
    transaction<T>(fn: (tx: SqlTx) => Promise<T>, options: TransactionOptions = {}): Promise<T> {
      if (closing !== undefined)
        return Promise.reject(new QlrError("storage_unavailable", "the pg driver is closed"));
      const result = runWithReconnect(fn, options);
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
        const open = [...pools.values()];
        pools.clear();
        await Promise.all([...open.map((pool) => pool.end()), ...retiring]);
      })();
      return closing;
    },
  };

  // One pass over the servers, without the reconnect backoff: a wrong URL fails at once.
  let probeError: Error | undefined;
  for (let tried = 0; tried < targets.servers.length; tried += 1) {
    try {
      await runOnClient((tx) => tx.query("SELECT 1"));
      probeError = undefined;
      break;
    } catch (error) {
      probeError = error instanceof Error ? error : toQlrError(error);
      // A server that failed inside the transaction (a standby, say) sends us to the next one.
      if (isNoWritableServer(error) || !isServerSwitchFailure(error)) break;
    }
  }
  if (probeError !== undefined) {
    await driver.close().catch(() => undefined);
    throw probeError;
  }
  return driver;
}

/**
 * The turn of `TransactionOptions.inTurn`: a session-level advisory lock, so that it is held
 * from before BEGIN to after COMMIT (a transaction-level one would be taken inside the
 * transaction, after its snapshot). The key is fixed: the store's own database is the scope.
 * A connection that dies frees it with its session.
 */
export const TURN_LOCK_KEY = 7_210_227;
/**
 * One simple query, so one implicit transaction: `SET LOCAL` bounds this wait alone, and the
 * session-level lock outlives that transaction (session locks ignore transaction ends).
 */
const takeTurnSql = (waitMs: number): string =>
  `SET LOCAL lock_timeout = ${Math.floor(waitMs)}; SELECT pg_advisory_lock(${TURN_LOCK_KEY})`;
/** `lock_not_available`: the turn was not granted within `lock_timeout`. */
const isLockTimeout = (error: unknown): boolean =>
  typeof error === "object" && error !== null && (error as { code?: unknown }).code === "55P03";
const GIVE_TURN_SQL = `SELECT pg_advisory_unlock(${TURN_LOCK_KEY})`;
/**
 * How long a transaction waits for its turn before it runs without one: pages last
 * milliseconds, so only a holder that stopped (SIGSTOP, a frozen VM) makes anyone wait this
 * long, and then the driver's breaker keeps its transactions from asking again for a while
 * (turn-breaker.ts): the stopped holder costs one such wait per pause, not one per page.
 */
export const DEFAULT_TURN_WAIT_MS = 2_000;

/** The turn was not granted within the wait (or its request failed): nothing else was sent. */
class TurnNotTaken extends Error {
  readonly reason: unknown;
  constructor(reason: unknown) {
    super("the transaction's turn was not granted in time", { cause: reason });
    this.reason = reason;
  }
}

function sleep(delayMs: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, delayMs));
}

function asError(value: unknown): Error {
  return value instanceof Error ? value : new Error(String(value));
}
