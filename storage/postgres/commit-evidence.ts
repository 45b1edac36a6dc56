/**
 * A lost COMMIT's evidence (pg-driver.ts, "A lost COMMIT"): what a transaction records before
 * COMMIT, the statements that read it or carry it on a write, and the question asked after the
 * answer was lost.
 */

/** What a transaction records just before COMMIT, to ask about it should the answer be lost. */
export interface CommitEvidence {
  /** `pg_current_xact_id_if_assigned()`: `null` when the transaction wrote nothing. */
  readonly xid: string | null;
  /** The entry of the URL the transaction ran on. */
  readonly serverIndex: number;
  /** The timeline the server wrote WAL on; a promotion starts a new one. */
  readonly timeline: number | null;
  /** `pg_postmaster_start_time()`: a restart may hand an unflushed id out again. */
  readonly postmasterStartedAt: string | null;
}

export type CommitSettlement = "committed" | "aborted" | "unknown";

/** The timeline from the name of the WAL file being written (its first eight hex digits). */
export const CURRENT_TIMELINE_SQL =
  "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int";

/**
 * One round trip before COMMIT. `_if_assigned` keeps a read-only transaction without an id
 * (asking for one would make it write a commit record and, with a synchronous standby, wait
 * for it); the rest is read only when there is an id.
 */
export const RECORD_TRANSACTION_ID_SQL = `SELECT x.xid::text AS xid,
  CASE WHEN x.xid IS NULL THEN NULL ELSE ${CURRENT_TIMELINE_SQL} END AS timeline,
  CASE WHEN x.xid IS NULL THEN NULL ELSE pg_postmaster_start_time()::text END AS started
FROM (SELECT pg_current_xact_id_if_assigned() AS xid) AS x`;

/** The column a writing statement carries the transaction id back in; never one of the store's. */
export const TRANSACTION_ID_COLUMN = "qlr_commit_xid";
const TRANSACTION_ID_RETURNED = `pg_current_xact_id_if_assigned()::text AS ${TRANSACTION_ID_COLUMN}`;
/**
 * INSERT and UPDATE only: a store DELETE is a purge of all of a run's rows of one table, and
 * returning a row for each of them to carry one id costs more than the round trip it saves.
 */
const WRITING_STATEMENT = /^\s*(?:INSERT|UPDATE)\b/i;
const RETURNING_CLAUSE = /\bRETURNING\b/i;

/**
 * A writing statement rewritten to return the transaction id it has just been assigned, so the
 * commit evidence rides on a round trip the transaction makes anyway instead of its own before
 * COMMIT (a write assigns the id before its RETURNING list is computed; the id is the top-level
 * one even inside a savepoint). A statement with its own RETURNING list gets one more column,
 * stripped from the rows the caller sees; one without gets a RETURNING list whose rows the
 * caller never sees. Null for anything else (reads, several statements in one text): the
 * evidence is then read before COMMIT as before. Only a statement that starts with INSERT
 * or UPDATE qualifies: a RETURNING there can only be its own trailing clause.
 */
export function carryingTransactionId(sql: string): { sql: string; keepRows: boolean } | null {
  if (!WRITING_STATEMENT.test(sql) || sql.includes(";")) return null;
  const statement = sql.trimEnd();
  if (RETURNING_CLAUSE.test(statement))
    return { sql: `${statement}, ${TRANSACTION_ID_RETURNED}`, keepRows: true };
  return { sql: `${statement} RETURNING ${TRANSACTION_ID_RETURNED}`, keepRows: false };
}

/**
 * A SELECT that cannot make the server assign a transaction id: no row locks, no sequence
 * writes (`setval` and `nextval` take an id to log their change). Anything else (INSERT,
 * UPDATE, DELETE, a WITH that may hold a data-modifying statement) counts as a write. A SELECT
 * of a function that itself writes would be misread; the store's statements call none, and
 * this driver serves only the store (and its tests).
 */
const READ_STATEMENT = /^\s*SELECT\b/i;
const ASSIGNS_TRANSACTION_ID =
  /\b(?:setval|nextval)\b|\bFOR\s+(?:UPDATE|NO\s+KEY\s+UPDATE|SHARE|KEY\s+SHARE)\b/i;

/** True when `sql` only reads (see READ_STATEMENT); false whenever in doubt. */
export function isCertainlyReadOnly(sql: string): boolean {
  return READ_STATEMENT.test(sql) && !ASSIGNS_TRANSACTION_ID.test(sql) && !sql.includes(";");
}

/** Asked on a fresh connection, outside a transaction, after a COMMIT answer was lost. */
export const TRANSACTION_STATUS_SQL = `SELECT pg_xact_status($1::xid8) AS status,
  pg_visible_in_snapshot($1::xid8, pg_current_snapshot()) AS visible,
  ${CURRENT_TIMELINE_SQL} AS timeline,
  pg_postmaster_start_time()::text AS started`;
