/**
 * Simulated executors for tests that drive the coordinator over a real store: one whose every
 * attempt succeeds after the same time, and a wrapper that records each launch request (the
 * step context a task's environment is built from).
 */
import type { Clock, Executor, LaunchRequest } from "../../src/ports.ts";
import { Prng } from "../../src/sim/prng.ts";
import { SimulatedExecutor, type SimulatedOutcome } from "../../src/sim/simulated-executor.ts";

/** Every attempt spawns and exits 0 after 100 ms of the clock, unless `outcome` says otherwise. */
export function steadyExecutor(
  clock: Clock,
  seed: number,
  outcome?: (request: LaunchRequest) => SimulatedOutcome | undefined,
): SimulatedExecutor {
  return new SimulatedExecutor({
    clock,
    prng: new Prng(seed),
    failureRate: 0,
    spawnFailureRate: 0,
    minDurationMs: 100,
    maxDurationMs: 100,
    ...(outcome === undefined ? {} : { outcome }),
  });
}

/** `inner`, with every launch request appended to `launches` before it is launched. */
export function recordingExecutor(inner: Executor, launches: LaunchRequest[]): Executor {
  return {
    type: inner.type,
    launch: (request) => {
      launches.push(request);
      return inner.launch(request);
    },
    readReceipt: (attempt) => inner.readReceipt(attempt),
    hasJournal: (attempt) => inner.hasJournal(attempt),
    inspect: (attempt) => inner.inspect(attempt),
    stop: (attempt, reason) => inner.stop(attempt, reason),
  };
}
