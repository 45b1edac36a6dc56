import type { Hono } from "hono";
import type { Coordinator } from "../../src/coordinator.ts";
import type { RunAttempt } from "../../src/model.ts";
import {
  transactAtStoreTime,
  type Clock,
  type IdSource,
  type SecretSource,
  type Store,
  type StoreTx,
} from "../../src/ports.ts";
import type { RetentionPolicy } from "../../src/retention.ts";
import type { Metrics } from "./metrics.ts";
import type { RunWaiters } from "./run-waiters.ts";
import type { LogStream } from "./contract.ts";

/** What a runtime gives the app (app.ts) and its routes (routes/*.ts). */
export interface AppDeps {
  readonly store: Store;
  readonly coordinator: Coordinator;
  readonly clock: Clock;
  readonly ids: IdSource;
  /** Lease secrets for remote workers: the host's cryptographic random source. */
  readonly secrets: SecretSource;
  /** The admin token: every route. */
  readonly token: string;
  /** The remote workers' token: only `/worker/*` (see auth.ts). */
  readonly workerToken?: string | null;
  readonly metrics: Metrics;
  /** Reads the latest attempt log of a step; absent on runtimes that hold no logs. */
  readonly readLog?: (attempt: RunAttempt, maxBytes: number) => Promise<string | null>;
  /**
   * Reads one chunk of one stream of an attempt's log by byte offset (`GET …/log?offset=N`);
   * `complete`: the attempt ended, so a character cut at the end is given as it is. Absent on
   * runtimes that hold no logs.
   */
  readonly readLogChunk?: (
    attempt: RunAttempt,
    stream: LogStream,
    offset: number,
    limitBytes: number,
    complete: boolean,
  ) => Promise<{ text: string; nextOffset: number; sizeBytes: number } | null>;
  /** Recovery decisions that failed closed, shown by `status` and the API. */
  readonly recoveryReport?: () => readonly {
    attemptId: string;
    decision: string;
    reason: string | null;
  }[];
  /**
   * The executor types this runtime can run. A runtime that cannot spawn processes (an edge
   * function) refuses `local_process` tasks at apply time instead of admitting steps that
   * nothing would ever start. Defaults to both.
   */
  readonly supportedExecutors?: readonly ("local_process" | "remote_worker")[];
  /** How long a remote worker's lease lasts without a heartbeat. */
  readonly leaseTtlMs?: number;
  /** The retention this runtime purges by (`GET /info`); null or absent: nothing is purged. */
  readonly retention?: RetentionPolicy | null;
  /** The cadence profile's name, for `GET /info`. */
  readonly profileName?: string;
  /** Extra routes mounted before auth (dashboard assets). */
  readonly mount?: (app: Hono) => void;
  /**
   * Called after a request that may have changed state succeeded (any method but GET and HEAD,
   * answered below 400): a run started or cancelled, a package applied, a worker's report. The
   * runtime runs its cadence at once instead of waiting for the interval.
   */
  readonly onChange?: () => void | Promise<void>;
  /**
   * The long-polls of `GET /runs/:id?wait=…` (run-waiters.ts). A runtime that runs the cadence
   * passes its own and calls `recheck()` after a stage that changed something, so a waiter is
   * answered as soon as its run ends here; absent, the app keeps one that only the fallback
   * re-read (every 250 ms while anything waits) releases.
   */
  readonly runWaiters?: RunWaiters;
}

/** What the routes get from `createApp`: the runtime's deps with the one registry of long-polls filled in. */
export type RouteDeps = AppDeps & { readonly runWaiters: RunWaiters };

/** A write transaction at the store clock's observed now (it never runs backwards). */
export function writeTransaction<T>(
  deps: Pick<AppDeps, "store" | "clock">,
  fn: (tx: StoreTx, nowMs: number) => Promise<T>,
): Promise<T> {
  return transactAtStoreTime(deps.store, deps.clock, fn);
}
