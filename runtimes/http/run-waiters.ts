import { TERMINAL_RUN_STATUSES, type Run } from "../../src/model.ts";
import type { Store } from "../../src/ports.ts";

/**
 * Long-polls of one run (`GET /runs/:id?wait=…`, docs/API.md): a request waits here until its
 * run is terminal (or, with `wait=change`, until the run recorded an event after the one the
 * client saw), until its timeout passes, or until the client goes away. Platform-neutral: the
 * Node runtime, the Worker's Durable Object and the browser all serve the same app.
 *
 * A waiter is released by a re-read of its run, never by a timer per run or per workflow:
 * - the runtime calls `recheck()` after a cadence stage that changed something (the local
 *   coordinator's commits end runs), so a run that ends here answers its waiters at once;
 * - while any waiter waits, one fallback re-read runs every `recheckMs`, so a run ended by
 *   another coordinator of a shared PostgreSQL store, a cycle run elsewhere, or a change the
 *   runtime did not announce is still seen within that bound.
 * A re-read is one read transaction for every waiting run together; at most one runs at a
 * time, and a call during one asks for exactly one more after it.
 */

/** The longest a single wait may last; a client that wants longer asks again. */
export const MAX_RUN_WAIT_MS = 30_000;
/** A wait's timeout when the request names none: below the client's default request timeout (15 s). */
export const DEFAULT_RUN_WAIT_MS = 10_000;
/** Requests that may wait at once per runtime; one more is refused (429 `too_many_waiters`). */
export const MAX_RUN_WAITERS = 256;
/** The fallback re-read's period while anything waits. */
export const RUN_WAIT_RECHECK_MS = 250;

/** What a waiter waits for; a terminal run satisfies both. */
export type RunWaitCondition =
  | { readonly kind: "terminal" }
  /** An event after `afterSeq` (the run's `eventSeq` the client last saw). */
  | { readonly kind: "change"; readonly afterSeq: number };

/** Whether `run` satisfies `condition`: terminal, or (for `change`) moved past the seen event. */
export function waitSatisfied(run: Run, condition: RunWaitCondition): boolean {
  if (TERMINAL_RUN_STATUSES.has(run.status)) return true;
  return condition.kind === "change" && run.eventSeq > condition.afterSeq;
}

/** The waiter cap is reached: the caller answers 429 and the client asks again later. */
export class TooManyWaiters extends Error {
  readonly code = "too_many_waiters";
  constructor(readonly limit: number) {
    super(`at most ${limit} requests may wait for runs at once; retry later`);
    this.name = "TooManyWaiters";
  }
}

/** The timers the registry uses: the host's by default; tests may pass their own. */
export interface WaitTimers {
  setTimeout(callback: () => void, delayMs: number): unknown;
  clearTimeout(handle: unknown): void;
}

const hostTimers: WaitTimers = {
  setTimeout: (callback, delayMs) => setTimeout(callback, delayMs),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

interface Waiter {
  readonly runId: string;
  readonly condition: RunWaitCondition;
  readonly release: () => void;
}

export interface RunWaitersOptions {
  readonly maxWaiters?: number;
  readonly recheckMs?: number;
  readonly timers?: WaitTimers;
}

export class RunWaiters {
  private readonly waiting = new Set<Waiter>();
  private readonly maxWaiters: number;
  private readonly recheckMs: number;
  private readonly timers: WaitTimers;
  /** The fallback re-read's timer, set only while something waits. */
  private fallback: unknown = null;
  /** The re-read in progress, and whether another was asked for during it. */
  private reading: Promise<void> | null = null;
  private readAgain = false;
  private closed = false;

  constructor(
    private readonly store: Store,
    options: RunWaitersOptions = {},
  ) {
    this.maxWaiters = options.maxWaiters ?? MAX_RUN_WAITERS;
    this.recheckMs = options.recheckMs ?? RUN_WAIT_RECHECK_MS;
    this.timers = options.timers ?? hostTimers;
  }

  /** Requests waiting now. */
  get size(): number {
    return this.waiting.size;
  }

  /**
   * Resolves when `runId` satisfies `condition` (checked at once, then at each re-read), when
   * `timeoutMs` has passed, when `signal` aborts (the client went away) or when the registry
   * closes; never rejects after it has started waiting. A run that does not exist releases its
   * waiter at the first read (the caller then answers 404). Throws `TooManyWaiters` at the cap.
   */
  wait(
    runId: string,
    condition: RunWaitCondition,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<void> {
    if (this.closed || timeoutMs <= 0 || signal?.aborted === true) return Promise.resolve();
    if (this.waiting.size >= this.maxWaiters) throw new TooManyWaiters(this.maxWaiters);
    return new Promise<void>((resolve) => {
      let timer: unknown = null;
      const release = (): void => {
        if (!this.waiting.delete(waiter)) return;
        if (timer !== null) this.timers.clearTimeout(timer);
        signal?.removeEventListener("abort", release);
        if (this.waiting.size === 0) this.stopFallback();
        resolve();
      };
      const waiter: Waiter = { runId, condition, release };
      this.waiting.add(waiter);
      timer = this.timers.setTimeout(release, timeoutMs);
      signal?.addEventListener("abort", release, { once: true });
      this.startFallback();
      // Registered first, read second: a commit that lands after this read is followed by a
      // re-read (the runtime's or the fallback's), so no end of the run falls between the two.
      void this.recheck();
    });
  }

  /**
   * Re-reads every waiting run in one read transaction and releases the waiters whose
   * condition holds (or whose run is gone). Nothing is read while nothing waits. A read error
   * releases nobody: the fallback reads again.
   */
  recheck(): Promise<void> {
    if (this.waiting.size === 0) return Promise.resolve();
    if (this.reading !== null) {
      this.readAgain = true;
      return this.reading;
    }
    const reading = this.readOnce()
      .catch(() => undefined)
      .then(() => {
        this.reading = null;
        if (this.readAgain) {
          this.readAgain = false;
          return this.recheck();
        }
        return undefined;
      });
    this.reading = reading;
    return reading;
  }

  /** Releases every waiter (each answers its run as it stands) and waits no more: the runtime is stopping. */
  close(): void {
    this.closed = true;
    for (const waiter of [...this.waiting]) waiter.release();
    this.stopFallback();
  }

  private async readOnce(): Promise<void> {
    const runIds = [...new Set([...this.waiting].map((waiter) => waiter.runId))];
    // Bounded: at most `maxWaiters` distinct runs, one row each.
    const runs = await this.store.read(async (tx) => {
      const found = new Map<string, Run | null>();
      for (const runId of runIds) found.set(runId, await tx.getRun(runId));
      return found;
    });
    for (const waiter of [...this.waiting]) {
      if (!runs.has(waiter.runId)) continue;
      const run = runs.get(waiter.runId) ?? null;
      if (run === null || waitSatisfied(run, waiter.condition)) waiter.release();
    }
  }

  private startFallback(): void {
    if (this.fallback !== null || this.closed || this.waiting.size === 0) return;
    const tick = (): void => {
      this.fallback = null;
      if (this.waiting.size === 0 || this.closed) return;
      void this.recheck().then(() => this.startFallback());
    };
    this.fallback = this.timers.setTimeout(tick, this.recheckMs);
  }

  private stopFallback(): void {
    if (this.fallback === null) return;
    this.timers.clearTimeout(this.fallback);
    this.fallback = null;
  }
}
