import { QlrError } from "../../src/errors.ts";
import type { SqlParam, SqlRow, SqlTx } from "../driver.ts";
import { sqlExcerpt } from "./errors.ts";

/**
 * The handle a single-connection SQLite driver gives one transaction: each query runs
 * synchronously through `execute`, and once the driver calls `end()` every further query is
 * refused, so work that outlives its transaction (a stray promise) can never write outside it.
 */
export function transactionHandle(
  execute: (sql: string, params: readonly SqlParam[]) => SqlRow[],
  mapError: (error: unknown, sql: string) => Error,
): { readonly tx: SqlTx; end(): void } {
  let open = true;
  const tx: SqlTx = {
    query<R extends SqlRow = SqlRow>(sql: string, params: readonly SqlParam[] = []): Promise<R[]> {
      if (!open)
        return Promise.reject(
          new QlrError(
            "internal",
            `A query ran after its transaction ended (in: ${sqlExcerpt(sql)}).`,
          ),
        );
      try {
        return Promise.resolve(execute(sql, params) as R[]);
      } catch (error) {
        return Promise.reject(mapError(error, sql));
      }
    },
  };
  return {
    tx,
    end() {
      open = false;
    },
  };
}
