/**
 * The sqljs-file store under simulated power loss. A SIGKILL keeps the page cache; a power
 * cut does not: the simulated machine (fixtures/power-cut-fs.ts) drops, keeps or tears every
 * write, length change and directory entry that was not synced, page by page and in any order.
 *
 * A deterministic workload through the real SqlStore (migrations, a package, runs started
 * between ticks, admission, dispatch, completion, explicit and automatic checkpoints, the
 * closing checkpoint) runs once to record a digest of the whole database after every commit,
 * and the number of mutating file calls it makes. Each seed picks one of those calls and the
 * fate of every unsynced change at a power cut just before it; a quarter of the seeds also cut
 * the power again inside the recovery that follows (the open itself, or the close after it).
 * After the last cut the store must open (a power cut inside the contract is no damage), hold
 * exactly the state after some commit between the last acknowledged one and the one in flight
 * (nothing acknowledged lost, nothing half applied), and some seeds then checkpoint, close and
 * reopen to the same state.
 *
 * Scale: QLR_POWERCUT_SEEDS (default 1000, about a minute; .ci/run runs 5000). A failure prints its seed; QLR_POWERCUT_SEED=<n>
 * replays that seed alone.
 */
import type { SqlJsStatic } from "sql.js";
import { beforeAll, describe, expect, it } from "vitest";
import { errorMessage } from "../../src/errors.ts";
import { openSqlJsFileDriver } from "../../storage/sqljs/node/file-driver.ts";
import { loadSqlJs } from "../../storage/sqljs/node/load.ts";
import { PowerCutFs, fsError, seededRandom, powerCutSeeds } from "./fixtures/power-cut-fs.ts";
import { WORKLOAD_DB_PATH, databaseDigest, runStoreWorkload } from "./fixtures/store-workload.ts";
import type { AcknowledgingDriver } from "./fixtures/store-workload.ts";

const SEEDS = { base: 0x50_43_00_00, defaultCount: 1000 } as const;
const WORKLOAD_RUNS = 6;
/** Seeds whose recovery is cut again, and the mutating calls into the recovery where the cut may land. */
const RECOVERY_CUT = { share: 0.25, span: 14 } as const;
const REOPEN_SHARE = 0.15;
const SUITE_TIMEOUT_MS = 20 * 60_000;

interface CutPoint {
  readonly machine: PowerCutFs;
  /** The last sequence whose transaction had returned to its caller. */
  readonly acknowledged: number;
  /** The highest sequence that may have reached the journal (the one in flight). */
  readonly highest: number;
}

let SQL: SqlJsStatic;
const digests = new Map<number, string>();
let totalMutations = 0;

beforeAll(async () => {
  SQL = await loadSqlJs();
  const machine = new PowerCutFs();
  const outcome = await runStoreWorkload(SQL, machine, {
    runs: WORKLOAD_RUNS,
    onOpen: (driver) => {
      void databaseDigest(driver.inner).then(({ sequence, digest }) =>
        digests.set(sequence, digest),
      );
    },
    onCommit: async (driver) => {
      const { sequence, digest } = await databaseDigest(driver);
      digests.set(sequence, digest);
    },
  });
  expect(outcome.terminalRuns).toBe(WORKLOAD_RUNS);
  totalMutations = machine.mutationCount;
}, SUITE_TIMEOUT_MS);

/** Replays the workload, keeping a copy of the machine just before each wanted mutating call. */
async function collectCutPoints(wanted: ReadonlySet<number>): Promise<Map<number, CutPoint>> {
  const points = new Map<number, CutPoint>();
  let driver: AcknowledgingDriver | undefined;
  const machine: PowerCutFs = new PowerCutFs({
    onCall: (call) => {
      if (call.mutationIndex < 0 || !wanted.has(call.mutationIndex)) return;
      points.set(call.mutationIndex, {
        machine: machine.clone(),
        acknowledged: driver?.acknowledgedSequence ?? 0,
        highest: driver === undefined ? 0 : driver.inner.stats().sequence + 1,
      });
    },
  });
  await runStoreWorkload(SQL, machine, {
    runs: WORKLOAD_RUNS,
    onOpen: (opened) => (driver = opened),
  });
  // The workload is deterministic: the replay makes the same calls as the recording.
  expect(machine.mutationCount).toBe(totalMutations);
  if (wanted.has(totalMutations))
    points.set(totalMutations, {
      machine: machine.clone(),
      acknowledged: driver?.acknowledgedSequence ?? 0,
      highest: driver?.inner.stats().sequence ?? 0,
    });
  return points;
}

function cutIndexOf(seed: number): number {
  return Math.floor(seededRandom(seed)() * (totalMutations + 1));
}

/** Power cut at `point` as `seed` decides, perhaps again inside the recovery, then the checks. Throws on a violation. */
async function checkSeed(seed: number, point: CutPoint): Promise<void> {
  const random = seededRandom(seed);
  random(); // the cut index, drawn by cutIndexOf
  let machine = point.machine.materialise(random);
  if (random() < RECOVERY_CUT.share) {
    const cutAt = Math.floor(random() * RECOVERY_CUT.span);
    let afterCut: PowerCutFs | undefined;
    const recovering = machine;
    recovering.options = {
      onCall: (call) => {
        if (call.mutationIndex !== cutAt) return;
        afterCut = recovering.powerCut(random);
        throw fsError("EIO", "the machine lost power during recovery");
      },
    };
    try {
      const driver = await openSqlJsFileDriver(SQL, { path: WORKLOAD_DB_PATH, fs: recovering });
      await driver.close().catch(() => undefined);
    } catch (error) {
      if (afterCut === undefined)
        throw new Error(`the recovery failed before any second cut: ${errorMessage(error)}`, {
          cause: error,
        });
    }
    recovering.options = {};
    machine = afterCut ?? recovering.materialise(random);
  }
  let driver;
  try {
    driver = await openSqlJsFileDriver(SQL, { path: WORKLOAD_DB_PATH, fs: machine });
  } catch (error) {
    throw new Error(`the store did not open after the power cut: ${errorMessage(error)}`, {
      cause: error,
    });
  }
  try {
    const { sequence, digest } = await databaseDigest(driver);
    if (sequence < point.acknowledged)
      throw new Error(
        `acknowledged commit ${point.acknowledged} lost: the store opened at sequence ${sequence}`,
      );
    if (sequence > point.highest)
      throw new Error(
        `the store opened at sequence ${sequence}, past the highest written ${point.highest}`,
      );
    if (digests.get(sequence) !== digest)
      throw new Error(
        `the state at sequence ${sequence} differs from what that commit left (a transaction half applied or replayed wrongly)`,
      );
    if (random() < REOPEN_SHARE) {
      await driver.checkpoint();
      await driver.close();
      driver = await openSqlJsFileDriver(SQL, {
        path: WORKLOAD_DB_PATH,
        fs: machine.materialise(random),
      });
      const again = await databaseDigest(driver);
      if (again.sequence !== sequence || again.digest !== digest)
        throw new Error(
          `a checkpoint and a power cut after the recovery changed the state (sequence ${sequence} → ${again.sequence})`,
        );
    }
  } finally {
    await driver.close();
  }
}

describe("sqljs-file under simulated power loss", () => {
  it(
    "loses no acknowledged commit and applies none by half, for every seeded cut point and recovery cut",
    async () => {
      expect(totalMutations).toBeGreaterThan(200);
      const seeds = powerCutSeeds(SEEDS);
      const seedsByCut = new Map<number, number[]>();
      for (const seed of seeds) {
        const index = cutIndexOf(seed);
        seedsByCut.set(index, [...(seedsByCut.get(index) ?? []), seed]);
      }
      const points = await collectCutPoints(new Set(seedsByCut.keys()));
      const failures: string[] = [];
      for (const [index, cutSeeds] of [...seedsByCut].sort((a, b) => a[0] - b[0])) {
        const point = points.get(index);
        if (point === undefined)
          throw new Error(`no machine copy was taken at mutating call ${index}`);
        for (const seed of cutSeeds) {
          try {
            await checkSeed(seed, point);
          } catch (error) {
            failures.push(
              `seed ${seed} (QLR_POWERCUT_SEED=${seed}), cut before mutating call ${index} of ${totalMutations}: ${errorMessage(error)}`,
            );
            if (failures.length <= 5) console.error(failures[failures.length - 1]);
          }
        }
        points.delete(index);
      }
      console.log(
        `power cut: ${seeds.length} seeds over ${seedsByCut.size} of ${totalMutations + 1} cut points, ${digests.size} commits recorded, ${failures.length} failed`,
      );
      expect(failures.slice(0, 10), `${failures.length} of ${seeds.length} seeds failed`).toEqual(
        [],
      );
    },
    SUITE_TIMEOUT_MS,
  );
});
