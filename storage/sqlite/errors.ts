/**
 * Maps SQLite failures to `QlrError` codes at the storage boundary, once for every SQLite
 * driver (sql.js and Durable Object SQLite); each driver only finds the result code name in
 * what it throws. Unique and primary key violations are `conflict`; corruption is
 * `storage_corrupt`; full, I/O, busy, locked, out-of-memory and read-only are
 * `storage_unavailable`; anything else (CHECK, NOT NULL, foreign keys, syntax, misuse) is
 * `internal`. The original error is the `cause`; a `QlrError` passes through unchanged.
 * Isomorphic: the Worker and the browser take it too.
 */
import { errorMessage, isQlrError, QlrError } from "../../src/errors.ts";

const SQL_EXCERPT_CHARS = 160;

const UNAVAILABLE_CODES = [
  "SQLITE_FULL",
  "SQLITE_IOERR",
  "SQLITE_NOMEM",
  "SQLITE_BUSY",
  "SQLITE_LOCKED",
  "SQLITE_CANTOPEN",
  "SQLITE_READONLY",
];

/** The statement on one line and cut to a bounded length, for error messages. */
export function sqlExcerpt(sql: string): string {
  const flat = sql.replace(/\s+/g, " ").trim();
  return flat.length > SQL_EXCERPT_CHARS ? `${flat.slice(0, SQL_EXCERPT_CHARS)}…` : flat;
}

/** `code` is the SQLite result code name the driver found (`SQLITE_CONSTRAINT_UNIQUE`), or "". */
export function mapSqliteError(error: unknown, code: string, sql: string): QlrError {
  if (isQlrError(error)) return error;
  const described = `${errorMessage(error)} (in: ${sqlExcerpt(sql)})`;
  if (code === "SQLITE_CONSTRAINT_UNIQUE" || code === "SQLITE_CONSTRAINT_PRIMARYKEY")
    return new QlrError("conflict", described, { cause: error });
  if (code.startsWith("SQLITE_CORRUPT") || code.startsWith("SQLITE_NOTADB"))
    return new QlrError("storage_corrupt", described, { cause: error });
  if (UNAVAILABLE_CODES.some((prefix) => code.startsWith(prefix)))
    return new QlrError("storage_unavailable", described, { cause: error });
  return new QlrError("internal", described, { cause: error });
}
