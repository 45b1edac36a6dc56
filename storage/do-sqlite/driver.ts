/**
 * The `SqlDriver` over a SQLite-backed Durable Object's own database (`ctx.storage.sql`).
 * Isomorphic TypeScript with no Workers import: the storage is taken structurally, so a real
 * `DurableObjectStorage` fits and the module typechecks and bundles anywhere.
 *
 * Atomicity. DO SQL refuses `BEGIN`, `COMMIT`, `ROLLBACK`, `SAVEPOINT` and `RELEASE`
 * statements; transactions come only from the storage API. `transactionSync(fn)` needs a
 * synchronous callback, but `SqlDriver.transaction(fn)` takes an async `fn`. In a SQLite-backed
 * object, the async `ctx.storage.transaction(closure)` opens a savepoint on the object's one
 * SQLite connection for as long as the closure's promise is pending, and covers every
 * `sql.exec` made meanwhile: when the closure rejects, all of them are rolled back (across
 * awaits, including real macrotask waits), when it resolves they are kept. So one driver
 * transaction is exactly one `storage.transaction(async () => fn(tx))`, and `tx.query` runs
 * the statement synchronously through `sql.exec` and returns an already-settled promise.
 * test/worker/do-sqlite-driver.test.ts proves it in workerd: writes before and after an
 * await vanish when `fn` throws, a failing statement rolls back its whole transaction, and
 * schema changes roll back too.
 *
 * Isolation. workerd already serialises `storage.transaction` calls, but a plain `sql.exec`
 * made while one is pending would land inside its savepoint. This driver therefore runs
 * every query inside a transaction and puts every transaction through its own serial queue,
 * so an `await` inside one transaction never lets another one (or a stray read) interleave.
 * Nothing else in the object may use `ctx.storage.sql`.
 *
 * Durability is the Durable Object's: writes are committed before the object's output gate
 * lets the response (or any other outgoing message) leave.
 *
 * Rows are plain objects. Values: DO SQL returns integers as JavaScript numbers (exact up to
 * 2^53, which epoch milliseconds and counters never exceed) and binds every JS number as a
 * REAL; INTEGER-affinity columns store integral REALs as INTEGERs, so what comes back is an
 * integer. Non-finite numbers and integers beyond 2^53 are refused before they are bound.
 */
import { errorMessage, QlrError } from "../../src/errors.ts";
import type { SqlDriver, SqlParam, SqlRow, SqlTx } from "../driver.ts";
import { serialDriver } from "../serial-queue.ts";
import { mapSqliteError, sqlExcerpt } from "../sqlite/errors.ts";
import { transactionHandle } from "../sqlite/transaction-handle.ts";

/** The part of `DurableObjectStorage` (SQLite-backed) the driver uses. */
export interface DurableObjectSqlStorage {
  readonly sql: {
    exec(query: string, ...bindings: unknown[]): { toArray(): unknown[] };
  };
  transaction<T>(closure: (txn: unknown) => Promise<T>): Promise<T>;
}

export interface DurableObjectSqliteDriver extends SqlDriver {
  readonly dialect: "sqlite";
  readonly name: "do-sqlite";
}

export function openDurableObjectSqliteDriver(
  storage: DurableObjectSqlStorage,
): DurableObjectSqliteDriver {
  function exec(sql: string, params: readonly SqlParam[]): SqlRow[] {
    for (const param of params) {
      if (
        typeof param === "number" &&
        (!Number.isFinite(param) || (Number.isInteger(param) && !Number.isSafeInteger(param)))
      ) {
        throw new QlrError(
          "internal",
          `The number ${param} cannot be stored faithfully (in: ${sqlExcerpt(sql)}).`,
        );
      }
    }
    const text = singleStatement(sql);
    try {
      return storage.sql.exec(text, ...params).toArray() as SqlRow[];
    } catch (error) {
      throw mapDurableObjectSqlError(error, sql);
    }
  }

  async function run<T>(fn: (tx: SqlTx) => Promise<T>): Promise<T> {
    const handle = transactionHandle(exec, (error, sql) =>
      error instanceof Error ? error : mapDurableObjectSqlError(error, sql),
    );
    // `fn`'s own rejection passes through untouched; anything else (the savepoint's release or
    // rollback failing) is the storage's error and is mapped.
    const fnFailure: { error?: unknown; failed: boolean } = { failed: false };
    try {
      return await storage.transaction(async () => {
        try {
          return await fn(handle.tx);
        } catch (error) {
          fnFailure.failed = true;
          fnFailure.error = error;
          throw error;
        }
      });
    } catch (error) {
      if (fnFailure.failed && error === fnFailure.error) throw error;
      throw mapDurableObjectSqlError(error, "(transaction)");
    } finally {
      handle.end();
    }
  }

  // The object's database needs no closing; waiting for the queue is all there is.
  // Nothing else in the object uses `ctx.storage.sql` (above), and only the object reaches its database.
  return serialDriver({
    dialect: "sqlite",
    name: "do-sqlite",
    runTransaction: run,
    soleWriter: true,
  });
}

/**
 * DO SQL runs every statement of a text (`exec("A; B")` executes both), so a text with more
 * than one statement is refused here, before anything runs. The scan skips string literals,
 * quoted identifiers and comments; a trailing `;` followed only by white space and comments is
 * cut off (DO SQL itself rejects a text whose last part holds no statement). A text with a
 * `;` inside `CREATE TRIGGER … BEGIN … END` is refused as well: the schema uses no triggers.
 */
export function singleStatement(sql: string): string {
  const length = sql.length;
  let index = 0;
  while (index < length) {
    const char = sql[index];
    if (char === "'" || char === '"' || char === "`") {
      index = skipQuoted(sql, index, char);
    } else if (char === "[") {
      const end = sql.indexOf("]", index + 1);
      index = end < 0 ? length : end + 1;
    } else if (char === "-" && sql[index + 1] === "-") {
      const end = sql.indexOf("\n", index + 2);
      index = end < 0 ? length : end + 1;
    } else if (char === "/" && sql[index + 1] === "*") {
      const end = sql.indexOf("*/", index + 2);
      index = end < 0 ? length : end + 2;
    } else if (char === ";") {
      if (!onlyTrivia(sql.slice(index + 1))) {
        throw new QlrError(
          "internal",
          `One statement per query: text follows the first statement (in: ${sqlExcerpt(sql)}).`,
        );
      }
      return sql.slice(0, index);
    } else {
      index += 1;
    }
  }
  return sql;
}

function skipQuoted(sql: string, start: number, quote: string): number {
  let index = start + 1;
  while (index < sql.length) {
    if (sql[index] === quote) {
      if (sql[index + 1] === quote) {
        index += 2;
        continue;
      }
      return index + 1;
    }
    index += 1;
  }
  return sql.length;
}

/** True when the text holds only white space, comments and semicolons. */
function onlyTrivia(text: string): boolean {
  let rest = text;
  for (;;) {
    rest = rest.replace(/^[\s;]+/, "");
    if (rest.startsWith("--")) {
      const end = rest.indexOf("\n");
      rest = end < 0 ? "" : rest.slice(end + 1);
    } else if (rest.startsWith("/*")) {
      const end = rest.indexOf("*/");
      rest = end < 0 ? "" : rest.slice(end + 2);
    } else {
      return rest.length === 0;
    }
  }
}

/**
 * The SQLite result code named in a DO SQL error. workerd throws plain `Error`s whose message
 * ends with the primary code and, when there is one, the extended code:
 * `UNIQUE constraint failed: t.name: SQLITE_CONSTRAINT (extended: SQLITE_CONSTRAINT_UNIQUE)`.
 */
export function sqliteCodeOf(error: unknown): string {
  const message = errorMessage(error);
  return (
    /\(extended: (SQLITE_[A-Z_]+)\)/.exec(message)?.[1] ??
    /\b(SQLITE_[A-Z_]+)\b/.exec(message)?.[1] ??
    ""
  );
}

/** Maps an error thrown by DO SQL to a `QlrError` by the rule every SQLite driver shares (storage/sqlite/errors.ts). */
export function mapDurableObjectSqlError(error: unknown, sql: string): QlrError {
  return mapSqliteError(error, sqliteCodeOf(error), sql);
}
