/**
 * An in-memory SQLite database through sql.js: the store for tests, the browser simulation
 * and anything that may lose its data when the process ends. Isomorphic: the caller passes an
 * initialised `SqlJsStatic` (Node code gets one from `loadSqlJs()` in load.ts).
 */
import type { SqlJsStatic } from "sql.js";
import type { SqlDriver } from "../driver.ts";
import { serialDriver } from "../serial-queue.ts";
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
  const connection = new SqlJsConnection(new SQL.Database(), {
    ...options,
    trackWrites: false,
    sqlJs: SQL,
  });
  return serialDriver({
    dialect: "sqlite",
    name: "sqljs-memory",
    runTransaction: (fn) => runTransaction(connection, fn),
    release: () => connection.close(),
    // The database lives in this process, on this one connection: nothing else can write it.
    soleWriter: true,
  });
}
