/**
 * The queue every single-connection driver (sql.js memory and file, PGlite, Durable Object
 * SQLite) puts its transactions through: a promise chain that runs one task at a time, so an
 * `await` inside one transaction can never let a second one onto the one connection, and a
 * closing state that refuses new work and waits for what is already queued.
 *
 * `serialDriver` is the base the memory, PGlite and Durable Object drivers are built on: their
 * own part is one transaction on the one connection and what closing releases.
 *
 * Isomorphic on purpose: no `node:*` import, because the same queue serves the Worker
 * (workerd) and the browser (sql.js, PGlite) as well as the device.
 */
import { QlrError } from "../src/errors.ts";
import type { SqlDialect, SqlDriver, SqlTx } from "./driver.ts";

export class SerialQueue {
  private tail: Promise<void> = Promise.resolve();
  private closing: Promise<void> | undefined;
  private readonly closedMessage: string;

  /** `closedMessage` is what a task offered after `close()` is refused with (`storage_unavailable`). */
  constructor(closedMessage: string) {
    this.closedMessage = closedMessage;
  }

  /**
   * Runs `task` once every task queued before it has settled. Each caller receives its own
   * outcome; a failed task does not stop the ones behind it. Refused once `close()` was called.
   */
  run<T>(task: () => Promise<T>): Promise<T> {
    if (this.closing !== undefined)
      return Promise.reject(new QlrError("storage_unavailable", this.closedMessage));
    return this.enqueue(task);
  }

  /**
   * Refuses new tasks from now on, waits for the queued ones, then runs `release` (close the
   * connection, the files, the lock) exactly once. Every call returns the same promise.
   */
  close(release: () => Promise<void> | void = () => undefined): Promise<void> {
    this.closing ??= this.enqueue(async () => {
      await release();
    });
    return this.closing;
  }

  private enqueue<T>(task: () => Promise<T>): Promise<T> {
    const result = this.tail.then(task);
    // The chain only orders work, so it swallows each outcome; the caller holds the real one.
    this.tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }
}

export interface SerialDriverParts<D extends SqlDialect, N extends string> {
  readonly dialect: D;
  readonly name: N;
  /** One transaction on the connection; the queue guarantees no other one is running. */
  readonly runTransaction: <T>(fn: (tx: SqlTx) => Promise<T>) => Promise<T>;
  /** Releases the connection once the queued transactions have settled. */
  readonly release?: () => Promise<void> | void;
  /**
   * True when nothing but this driver writes the database (see `SqlDriver.soleWriterTransactions`,
   * which the driver then counts); false by default.
   */
  readonly soleWriter?: boolean;
}

/** A single-connection `SqlDriver`: every transaction goes through one `SerialQueue`. */
export function serialDriver<D extends SqlDialect, N extends string>(
  parts: SerialDriverParts<D, N>,
): SqlDriver & { readonly dialect: D; readonly name: N } {
  const queue = new SerialQueue(`The ${parts.name} driver is closed.`);
  let succeeded = 0;
  return {
    dialect: parts.dialect,
    name: parts.name,
    transaction: <T>(fn: (tx: SqlTx) => Promise<T>): Promise<T> =>
      queue.run(async () => {
        const result = await parts.runTransaction(fn);
        // Inside the queued task: counted before the next transaction begins.
        succeeded += 1;
        return result;
      }),
    get soleWriterTransactions() {
      return parts.soleWriter === true ? succeeded : undefined;
    },
    close: () => queue.close(parts.release),
  };
}
