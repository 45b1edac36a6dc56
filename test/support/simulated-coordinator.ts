/**
 * A coordinator on a virtual clock that hands every `local_process` attempt to a seeded
 * simulated executor which never fails to spawn: the wiring the benches and the storage
 * workload tests drive a real store with. Free of vitest, so the benches can load it.
 */
import { Coordinator, type CoordinatorDeps } from "../../src/coordinator.ts";
import type { IdSource, Store } from "../../src/ports.ts";
import type { Profile } from "../../src/profiles.ts";
import { Prng } from "../../src/sim/prng.ts";
import { SimulatedExecutor } from "../../src/sim/simulated-executor.ts";
import { VirtualClock } from "../../src/sim/virtual-clock.ts";

export interface SimulatedCoordinatorOptions {
  readonly store: Store;
  readonly ids: IdSource;
  readonly profile: Profile;
  readonly startMs: number;
  /** Seeds the executor's process durations and failures. */
  readonly seed: number;
  /** The share of processes that exit non-zero. */
  readonly failureRate: number;
  readonly minDurationMs: number;
  readonly maxDurationMs: number;
  /** The rest of the coordinator's dependencies (an elapsed-time source, group commit). */
  readonly deps?: Omit<
    Partial<CoordinatorDeps>,
    "store" | "clock" | "ids" | "profile" | "executors"
  >;
}

export interface SimulatedCoordinator {
  readonly clock: VirtualClock;
  readonly executor: SimulatedExecutor;
  readonly coordinator: Coordinator;
}

export function simulatedCoordinator(options: SimulatedCoordinatorOptions): SimulatedCoordinator {
  const clock = new VirtualClock(options.startMs);
  const executor = new SimulatedExecutor({
    clock,
    prng: new Prng(options.seed),
    failureRate: options.failureRate,
    spawnFailureRate: 0,
    minDurationMs: options.minDurationMs,
    maxDurationMs: options.maxDurationMs,
  });
  const coordinator = new Coordinator({
    ...options.deps,
    store: options.store,
    clock,
    ids: options.ids,
    profile: options.profile,
    executors: { local_process: executor },
  });
  return { clock, executor, coordinator };
}
