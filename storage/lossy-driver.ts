/**
 * A driver wrapper that can lose the next commit response: the transaction commits, then the
 * caller sees an error, as when a connection resets after COMMIT was sent. The seeded
 * simulation (on Node and in the simulation page) and the store and lease contracts use it to
 * prove that a lost response is answered by reading the durable outcome, never by writing
 * twice. Isomorphic: no `node:*` import, so the browser bundle can take it.
 */
import type { SqlDriver, SqlTx, TransactionOptions } from "./driver.ts";

export interface LossyDriver {
  /** The wrapped driver; use it for every transaction that may lose its response. */
  readonly driver: SqlDriver;
  /** Makes the next transaction that commits throw after its COMMIT. */
  arm(): void;
  /** Forgets an armed loss that no transaction has taken yet. */
  disarm(): void;
}

export const LOST_COMMIT_RESPONSE_MESSAGE =
  "connection reset after COMMIT was sent (simulated lost commit response)";

export function lossyDriver(inner: SqlDriver): LossyDriver {
  let armed = false;
  return {
    arm: () => {
      armed = true;
    },
    disarm: () => {
      armed = false;
    },
    driver: {
      dialect: inner.dialect,
      name: inner.name,
      close: () => inner.close(),
      // The inner driver counts a commit whose response is then lost: it did commit.
      get soleWriterTransactions() {
        return inner.soleWriterTransactions;
      },
      async transaction<T>(
        fn: (tx: SqlTx) => Promise<T>,
        options?: TransactionOptions,
      ): Promise<T> {
        const result = await inner.transaction(fn, options);
        if (armed) {
          armed = false;
          throw new Error(LOST_COMMIT_RESPONSE_MESSAGE);
        }
        return result;
      },
    },
  };
}
