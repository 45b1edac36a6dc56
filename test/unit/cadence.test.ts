import { describe, expect, it } from "vitest";
import { Cadence, type CadenceTimers } from "../../runtimes/node/cadence.ts";

/** Timers that only run when the test fires them: what is pending is the assertion. */
class SteppedTimers implements CadenceTimers {
  private next = 1;
  readonly pending = new Map<
    number,
    { readonly kind: "immediate" | "timeout"; readonly delayMs: number; readonly run: () => void }
  >();

  setTimeout(callback: () => void, delayMs: number): unknown {
    const id = this.next++;
    this.pending.set(id, { kind: "timeout", delayMs, run: callback });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this.pending.delete(handle as number);
  }

  setImmediate(callback: () => void): unknown {
    const id = this.next++;
    this.pending.set(id, { kind: "immediate", delayMs: 0, run: callback });
    return id;
  }

  clearImmediate(handle: unknown): void {
    this.pending.delete(handle as number);
  }

  /** What the cadence waits for now: "immediate", "timeout <ms>", or "nothing". */
  waiting(): string {
    const entries = [...this.pending.values()];
    expect(entries.length, "the cadence keeps at most one timer").toBeLessThanOrEqual(1);
    const [entry] = entries;
    if (entry === undefined) return "nothing";
    return entry.kind === "immediate" ? "immediate" : `timeout ${entry.delayMs}`;
  }

  /** Fires the one pending timer. */
  fire(): void {
    const [first] = [...this.pending.entries()];
    if (first === undefined) throw new Error("no timer is pending");
    this.pending.delete(first[0]);
    first[1].run();
  }
}

/** Cycles the test ends by hand, each answering whether the next should follow at once. */
function controlledCycles(): {
  readonly cycle: () => Promise<boolean>;
  readonly started: () => number;
  readonly finish: (again: boolean) => Promise<void>;
} {
  const open: ((again: boolean) => void)[] = [];
  let started = 0;
  return {
    cycle: () =>
      new Promise<boolean>((resolve) => {
        started += 1;
        open.push(resolve);
      }),
    started: () => started,
    finish: async (again) => {
      const resolve = open.shift();
      if (resolve === undefined) throw new Error("no cycle is running");
      resolve(again);
      // The cadence schedules its next cycle in the promise's continuations.
      for (let index = 0; index < 5; index += 1) await Promise.resolve();
    },
  };
}

const INTERVAL_MS = 500;

/** Fires what the cadence waits for and checks that it began cycle number `cycle`. */
function fireInto(
  timers: SteppedTimers,
  cycles: ReturnType<typeof controlledCycles>,
  cycle: number,
): void {
  timers.fire();
  expect(cycles.started()).toBe(cycle);
}

function startedCadence(): {
  readonly timers: SteppedTimers;
  readonly cycles: ReturnType<typeof controlledCycles>;
  readonly cadence: Cadence;
} {
  const timers = new SteppedTimers();
  const cycles = controlledCycles();
  const cadence = new Cadence(cycles.cycle, INTERVAL_MS, timers);
  cadence.start();
  expect(timers.waiting()).toBe("immediate");
  fireInto(timers, cycles, 1);
  return { timers, cycles, cadence };
}

describe("the device's cadence", () => {
  it("follows a cycle that asks for another at once, without waiting for the interval or a timer's turn", async () => {
    const { timers, cycles } = startedCadence();
    expect(timers.waiting()).toBe("nothing");
    await cycles.finish(true);
    expect(timers.waiting()).toBe("immediate");
    fireInto(timers, cycles, 2);
  });

  it("waits the interval after a cycle that asks for nothing", async () => {
    const { timers, cycles } = startedCadence();
    await cycles.finish(false);
    expect(timers.waiting()).toBe(`timeout ${INTERVAL_MS}`);
    fireInto(timers, cycles, 2);
  });

  it("remembers a wake during a cycle, starts no second cycle beside it, and follows at once", async () => {
    const { timers, cycles, cadence } = startedCadence();
    cadence.wake();
    cadence.wake();
    expect(cycles.started()).toBe(1);
    expect(timers.waiting()).toBe("nothing");
    await cycles.finish(false);
    expect(timers.waiting()).toBe("immediate");
    fireInto(timers, cycles, 2);
    // The wake was used up by that cycle: the one after it waits the interval again.
    await cycles.finish(false);
    expect(timers.waiting()).toBe(`timeout ${INTERVAL_MS}`);
  });

  it("replaces the interval's timer with an immediate start when woken between cycles", async () => {
    const { timers, cycles, cadence } = startedCadence();
    await cycles.finish(false);
    expect(timers.waiting()).toBe(`timeout ${INTERVAL_MS}`);
    cadence.wake();
    expect(timers.waiting()).toBe("immediate");
    // Woken again before it starts: still one start pending.
    cadence.wake();
    expect(timers.waiting()).toBe("immediate");
    fireInto(timers, cycles, 2);
  });

  it("starts nothing after stop, even when the cycle in flight asks for another", async () => {
    const { timers, cycles, cadence } = startedCadence();
    cadence.stop();
    cadence.wake();
    await cycles.finish(true);
    expect(timers.waiting()).toBe("nothing");
    expect(cycles.started()).toBe(1);
  });

  it("keeps going after a cycle that fails, at the interval", async () => {
    const timers = new SteppedTimers();
    let calls = 0;
    const cadence = new Cadence(
      () => {
        calls += 1;
        return Promise.reject(new Error("store unavailable"));
      },
      INTERVAL_MS,
      timers,
    );
    cadence.start();
    timers.fire();
    for (let index = 0; index < 5; index += 1) await Promise.resolve();
    expect(calls).toBe(1);
    expect(timers.waiting()).toBe(`timeout ${INTERVAL_MS}`);
  });
});
