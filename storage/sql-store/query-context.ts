import {
  ATTEMPT_STATUSES,
  type AttemptStatus,
  type ExecutorType,
  LIVE_ATTEMPT_STATUSES,
} from "../../src/model.ts";
import { QlrError } from "../../src/errors.ts";
import { MAX_STORE_PAGE } from "../../src/ports.ts";
import type { SqlDialect, SqlParam, SqlRow } from "../driver.ts";
import type * as rows from "../rows.ts";
import { arrayLiteral } from "./column-arrays.ts";
import type { TransactionRows } from "./transaction-rows.ts";

/**
 * What a store transaction gives the files that write its statements (one file a subject:
 * runs, packages, notifications, …), and the ways of writing a statement they share. Every
 * statement goes through `q`, which first writes whatever the change writer holds for the
 * tables the statement names, so no statement of the transaction misses it.
 */
export interface QueryContext {
  readonly dialect: SqlDialect;
  /** Rows this transaction, or on a sole-writer driver an earlier one, read or wrote (see `TransactionRows`). */
  readonly known: TransactionRows;
  /** Sends one statement, written with `?` placeholders, in this transaction. */
  q<R extends SqlRow>(sql: string, params?: readonly SqlParam[]): Promise<R[]>;
}

/** Upper bound on any list the store returns in one call: the contract's. */
export const MAX_PAGE = MAX_STORE_PAGE;

export function cap(limit: number): number {
  if (!Number.isInteger(limit) || limit < 1) return 1;
  return Math.min(limit, MAX_PAGE);
}

/** The most values one statement binds: Durable Object SQLite refuses more than 100. */
export const MAX_BOUND_PARAMETERS = 96;
/**
 * A list of text keys to look rows up by: `where(column)` is "`column` is one of them", `IN (?,
 * …)` on SQLite; on PostgreSQL `= ANY(…)` of one text array parameter, so the text and its one
 * parameter stay the same whatever the number of keys (the server parses one short statement
 * instead of one placeholder a key). The parameters are built once for every column the list
 * is matched against. Either form is planned at each use: see storage/postgres/statement-names.ts.
 */
export function keyList(
  tx: QueryContext,
  keys: readonly string[],
): { readonly params: SqlParam[]; where(column: string): string } {
  if (tx.dialect === "postgres")
    return {
      params: [arrayLiteral(keys, "text")],
      where: (column) => `${column} = ANY(CAST(? AS TEXT[]))`,
    };
  const marks = keys.map(() => "?").join(", ");
  return { params: [...keys], where: (column) => `${column} IN (${marks})` };
}

/** `INSERT INTO table (columns) VALUES (?, …)`: one placeholder a column. */
export function insertSql(table: string, columns: readonly string[]): string {
  return `INSERT INTO ${table} (${columns.join(", ")}) VALUES (${columns.map(() => "?").join(", ")})`;
}

/** `column = ?, …` of an UPDATE: one placeholder a column, in the columns' order. */
export function assignmentsSql(columns: readonly string[]): string {
  return columns.map((column) => `${column} = ?`).join(", ");
}

const EXECUTOR_TYPES: ReadonlySet<string> = new Set<ExecutorType>([
  "local_process",
  "remote_worker",
]);
const ATTEMPT_STATUS_SET: ReadonlySet<string> = new Set<string>(ATTEMPT_STATUSES);

/**
 * A closed enum value written into the SQL text as a literal instead of a parameter. SQLite
 * compiles a statement again whenever a parameter its plan compared with a partial index's
 * condition is bound anew (storage/sqljs/statement-runner.ts); an executor type or an attempt
 * status in the text keeps such a listing compiled. Only the enum's own values pass, so no
 * caller's text ever reaches the SQL.
 */
export function executorLiteral(executor: ExecutorType): string {
  return enumLiteral(executor, EXECUTOR_TYPES, "executor type");
}

export function attemptStatusLiteral(status: AttemptStatus): string {
  return enumLiteral(status, ATTEMPT_STATUS_SET, "attempt status");
}

function enumLiteral(value: string, allowed: ReadonlySet<string>, what: string): string {
  if (!allowed.has(value))
    throw new QlrError("internal", `${JSON.stringify(value)} is not a known ${what}.`);
  return `'${value}'`;
}

/**
 * The live attempt statuses as a SQL list: the statuses `TransactionRows.attemptWritten` follows
 * a remembered count through, so the count read and the count kept agree.
 */
export const LIVE_STATUSES_SQL = [...LIVE_ATTEMPT_STATUSES]
  .map((status) => `'${status}'`)
  .join(", ");

/**
 * A compare-and-set UPDATE (its `RETURNING` names the row it wrote): anything but exactly one
 * row means the row moved on, and the transaction fails with `conflict`, nothing written.
 */
export async function updateOne(
  tx: QueryContext,
  sql: string,
  params: readonly SqlParam[],
  moved: () => string,
): Promise<void> {
  const updated = await tx.q(sql, params);
  if (updated.length !== 1) throw new QlrError("conflict", `${moved()}; nothing written`);
}

/** The rows of one table, read whole: `rest` is what follows `FROM <table>`. */
export async function select<T>(
  tx: QueryContext,
  table: rows.RowTable<T>,
  rest: string,
  params: readonly SqlParam[],
): Promise<T[]> {
  const found = await tx.q(`SELECT ${table.columns.join(", ")} FROM ${table.name} ${rest}`, params);
  return found.map((row) => table.read(row));
}

export async function selectOne<T>(
  tx: QueryContext,
  table: rows.RowTable<T>,
  rest: string,
  params: readonly SqlParam[],
): Promise<T | null> {
  return (await select(tx, table, rest, params))[0] ?? null;
}

/**
 * One page of a table newest first. Keyset on (created_at_ms, id) descending: stable while
 * rows are inserted. Each `equals` entry filters on its column; a null value does not.
 */
export async function newestFirst<T>(
  tx: QueryContext,
  table: rows.RowTable<T>,
  equals: Readonly<Record<string, SqlParam>>,
  cursor: string | null,
  limit: number,
): Promise<T[]> {
  const conditions: string[] = [];
  const params: SqlParam[] = [];
  for (const [column, value] of Object.entries(equals)) {
    if (value === null) continue;
    conditions.push(`${column} = ?`);
    params.push(value);
  }
  if (cursor !== null) {
    const createdAtOfCursor = `(SELECT created_at_ms FROM ${table.name} WHERE id = ?)`;
    conditions.push(
      `(created_at_ms < ${createdAtOfCursor} OR (created_at_ms = ${createdAtOfCursor} AND id < ?))`,
    );
    params.push(cursor, cursor, cursor);
  }
  const where = conditions.length === 0 ? "" : `WHERE ${conditions.join(" AND ")}`;
  return select(tx, table, `${where} ORDER BY created_at_ms DESC, id DESC LIMIT ?`, [
    ...params,
    limit,
  ]);
}
