import { env, runInDurableObject } from "cloudflare:test";
import type { CoordinatorObject, WorkerEnv } from "../../runtimes/worker/coordinator-object.ts";
import type { DurableObjectState, DurableObjectStub } from "../../runtimes/worker/types.ts";
import type { SqlDriver, SqlTx } from "../../storage/driver.ts";
import type { DriverFactory } from "../support/drivers.ts";

/** The test Worker's bindings: wrangler.toml's plus `QLR_TOKEN` and `QLR_WORKER_TOKEN` from test/worker/vitest.config.ts. */
export const testEnv = env as WorkerEnv;

export function token(): string {
  const value = testEnv.QLR_TOKEN;
  if (value === undefined || value === "")
    throw new Error("QLR_TOKEN binding missing from the test config");
  return value;
}

export function workerToken(): string {
  const value = testEnv.QLR_WORKER_TOKEN;
  if (value === undefined || value === "")
    throw new Error("QLR_WORKER_TOKEN binding missing from the test config");
  return value;
}

/** A stub of a brand-new coordinator object: its own empty SQLite database. */
export function freshObject(): DurableObjectStub<CoordinatorObject> {
  return testEnv.COORDINATOR.get(testEnv.COORDINATOR.newUniqueId());
}

/** Runs `callback` inside the object (same isolate), with the instance and its state. */
export function inObject<R>(
  stub: DurableObjectStub<CoordinatorObject>,
  callback: (instance: CoordinatorObject, state: DurableObjectState) => R | Promise<R>,
): Promise<R> {
  return runInDurableObject<CoordinatorObject, R>(
    stub as unknown as DurableObjectStub<never>,
    callback,
  );
}

/**
 * The driver of a fresh coordinator object, used from test code: every transaction (and
 * `close`) runs inside the object through `runInDurableObject`, on the object's own
 * `do-sqlite` driver, so it has the object's storage and its transaction queue. The object's
 * store is opened lazily by `fetch`/`tick`, which these tests never call, so the database
 * starts empty.
 */
export function freshObjectDriver(): SqlDriver {
  const stub = freshObject();
  return {
    dialect: "sqlite",
    name: "do-sqlite",
    transaction<T>(fn: (tx: SqlTx) => Promise<T>): Promise<T> {
      return inObject(stub, (instance) => instance.driver.transaction(fn));
    },
    close(): Promise<void> {
      return inObject(stub, (instance) => instance.driver.close());
    },
  };
}

/** The Durable Object entry of the driver list (test/support/drivers.ts has the Node ones). */
export const DO_SQLITE: DriverFactory = {
  name: "do-sqlite",
  open: () => Promise.resolve(freshObjectDriver()),
};
