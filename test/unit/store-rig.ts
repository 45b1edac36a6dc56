import { Coordinator, type CoordinatorDeps } from "../../src/coordinator.ts";
import type { LaunchRequest } from "../../src/ports.ts";
import { PROFILES, type Profile, type ProfileName } from "../../src/profiles.ts";
import type { SimulatedExecutor, SimulatedOutcome } from "../../src/sim/simulated-executor.ts";
import type { SqlStore } from "../../storage/sql-store.ts";
import { driverNamed, openTestStore } from "../support/drivers.ts";
import { SequentialIds, TestClock } from "../support/fixtures.ts";
import { steadyExecutor } from "../support/simulated-executors.ts";
import { T0 } from "./core-fixtures.ts";

/**
 * Where every unit test that drives the coordinator over a real store starts: a fresh in-memory
 * sql.js store (its clock first observed at T0 - 1), the test clock at T0, sequential run ids
 * and the simulated local executor on that clock.
 */
export interface StoreRig {
  readonly clock: TestClock;
  readonly store: SqlStore;
  readonly ids: SequentialIds;
  /** Every attempt spawns and exits 0 after 100 ms of the clock, unless the rig's outcome says otherwise. */
  readonly executor: SimulatedExecutor;
  /**
   * A coordinator under `profile` over the rig's store, clock, ids and local executor; `deps`
   * replace any of them or add the rest (retention, fault points, observers).
   */
  coordinator(profile: ProfileName | Profile, deps?: Partial<CoordinatorDeps>): Coordinator;
}

/** A fresh rig whose executor draws from `seed` and answers launches with `outcome` where it gives one. */
export async function storeRig(
  seed: number,
  outcome?: (request: LaunchRequest) => SimulatedOutcome | undefined,
): Promise<StoreRig> {
  const clock = new TestClock(T0);
  const store = await openTestStore(driverNamed("sqljs-memory"), T0 - 1);
  const ids = new SequentialIds("run");
  const executor = steadyExecutor(clock, seed, outcome);
  return {
    clock,
    store,
    ids,
    executor,
    coordinator: (profile, deps = {}) =>
      new Coordinator({
        store,
        clock,
        ids,
        profile: typeof profile === "string" ? PROFILES[profile] : profile,
        executors: { local_process: executor },
        ...deps,
      }),
  };
}
