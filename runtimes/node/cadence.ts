/**
 * The timers a cadence uses. The device passes Node's; tests pass their own and step them, so
 * what follows what is asserted without waiting for any of it.
 */
export interface CadenceTimers {
  setTimeout(callback: () => void, delayMs: number): unknown;
  clearTimeout(handle: unknown): void;
  setImmediate(callback: () => void): unknown;
  clearImmediate(handle: unknown): void;
}

export const nodeTimers: CadenceTimers = {
  setTimeout: (callback, delayMs) => setTimeout(callback, delayMs),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
  setImmediate: (callback) => setImmediate(callback),
  clearImmediate: (handle) => clearImmediate(handle as ReturnType<typeof setImmediate>),
};

/**
 * The device's cadence (docs/ARCHITECTURE.md §3): one timer, one cycle at a time. A cycle that
 * asks for another (it filled a budget, or recorded a completion the frontier must act on), or
 * during which something woke the cadence, is followed at once; otherwise the next one waits
 * the interval. A wake between cycles replaces the interval's timer with an immediate start.
 *
 * "At once" is `setImmediate`, not a zero timer: it runs when the event loop has handled the
 * I/O already in hand, whereas a timer runs only on the loop's next turn, after it has polled
 * for more (each request that arrived meanwhile is served first, and under a client polling
 * for a run's status that added a request's time to every hop from one cycle to the next).
 */
export class Cadence {
  private pending: { readonly immediate: boolean; readonly handle: unknown } | null = null;
  /** A cycle is running now (between its start and its report). */
  private running = false;
  /** Something happened while a cycle ran: the next one starts at once. */
  private wakeRequested = false;
  private stopped = false;

  /** `cycle` resolves true when the next cycle should follow at once. */
  constructor(
    private readonly cycle: () => Promise<boolean>,
    private readonly intervalMs: number,
    private readonly timers: CadenceTimers = nodeTimers,
  ) {}

  /** Starts the first cycle at once. */
  start(): void {
    this.schedule(true);
  }

  /**
   * Runs the next cycle now instead of at the end of the interval: a run was started or
   * cancelled, a worker reported, a task ended. During a cycle the wake is remembered and the
   * next cycle follows it at once. No timer per run or per process.
   */
  wake(): void {
    if (this.stopped) return;
    if (this.running) {
      this.wakeRequested = true;
      return;
    }
    if (this.pending !== null && !this.pending.immediate) {
      this.cancel();
      this.schedule(true);
    }
  }

  /** No cycle starts after this; one in flight finishes (its owner waits for it). */
  stop(): void {
    this.stopped = true;
    this.cancel();
  }

  private schedule(atOnce: boolean): void {
    if (this.stopped) return;
    const run = (): void => {
      this.pending = null;
      this.running = true;
      this.wakeRequested = false;
      void this.cycle()
        .catch(() => false)
        .then((again) => {
          this.running = false;
          this.schedule(again || this.wakeRequested);
        });
    };
    this.pending = atOnce
      ? { immediate: true, handle: this.timers.setImmediate(run) }
      : { immediate: false, handle: this.timers.setTimeout(run, this.intervalMs) };
  }

  private cancel(): void {
    if (this.pending === null) return;
    if (this.pending.immediate) this.timers.clearImmediate(this.pending.handle);
    else this.timers.clearTimeout(this.pending.handle);
    this.pending = null;
  }
}
