/**
 * An in-memory SQLite database through sql.js: the store for tests, the browser simulation
 * and anything that may lose its data when the process ends. Isomorphic: the caller passes an
 * initialised `SqlJsStatic` (Node code gets one from `loadSqlJs()` in load.ts).
 */
import type { SqlJsStatic } from "sql.js";
import type { SqlDriver, SqlTx } from "../driver.ts";
import { SerialQueue } from "../serial-queue.ts";
import { SqlJsConnection, runTransaction } from "./connection.ts";
import type { SqlJsConnectionOptions } from "./connection.ts";

export type SqlJsMemoryDriverOptions = SqlJsConnectionOptions;

export interface SqlJsMemoryDriver extends SqlDriver {
  readonly name: "sqljs-memory";
}

export function openSqlJsMemoryDriver(
  SQL: SqlJsStatic,
  options: SqlJsMemoryDriverOptions = {},
): SqlJsMemoryDriver {
  const connection = new SqlJsConnection(new SQL.Database(), { ...options, trackWrites: false });
  const queue = new SerialQueue("The sqljs-memory driver is closed.");

  return {
    dialect: "sqlite",
    name: "sqljs-memory",
    transaction<T>(fn: (tx: SqlTx) => Promise<T>): Promise<T> {
      return queue.run(() => runTransaction(connection, fn));
    },
    close(): Promise<void> {
      return queue.close(() => connection.close());
    },
  };
}
