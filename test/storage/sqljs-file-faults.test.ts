/**
 * The sqljs-file store when the disk is full or failing. A workload (open, numbered commits of
 * two rows each, automatic and explicit checkpoints, close) runs on the simulated machine
 * (fixtures/power-cut-fs.ts) once per file call it makes, reads included, with ENOSPC or EIO
 * injected at that call: once, or persistently from that call until several later commits
 * have been refused ("space returns"). Every refusal must be `storage_unavailable`; a refused
 * commit must be absent and an acknowledged one present, in the live store and after a power
 * cut and a reopen; once the fault is gone the store must accept writes again without a
 * restart. A failed fsync is never followed by an append to the same journal until the store
 * has reopened from what is durable (fsyncgate): the simulated machine drops the pages a
 * failed fsync covered, so a store that simply carried on would lose or tear commits.
 *
 * Plus one real full file system: a small tmpfs mounted by the test when it runs as root.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { SqlJsStatic } from "sql.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorMessage, isQlrError } from "../../src/errors.ts";
import type { DurableFs } from "../../storage/node/durable-fs.ts";
import { openSqlJsFileDriver } from "../../storage/sqljs/node/file-driver.ts";
import type { SqlJsFileDriver } from "../../storage/sqljs/node/file-driver.ts";
import { loadSqlJs } from "../../storage/sqljs/node/load.ts";
import { commitPair, committedNumbers, createPairs } from "./fixtures/pairs.ts";
import { PowerCutFs, fsError, seededRandom } from "./fixtures/power-cut-fs.ts";
import type { FsCall } from "./fixtures/power-cut-fs.ts";

const DB_PATH = "/machine/db";
const COMMITS = 24;
/** Small, so that the workload checkpoints several times. */
const CHECKPOINT_JOURNAL_BYTES = 300;
/** A persistent fault lasts until this many commits were refused after it began. */
const REFUSALS_BEFORE_HEALING = 3;
const SUITE_TIMEOUT_MS = 10 * 60_000;

let SQL: SqlJsStatic;

beforeAll(async () => {
  SQL = await loadSqlJs();
});

function open(fs: DurableFs): Promise<SqlJsFileDriver> {
  return openSqlJsFileDriver(SQL, {
    path: DB_PATH,
    fs,
    checkpointJournalBytes: CHECKPOINT_JOURNAL_BYTES,
  });
}

interface FaultPlan {
  readonly code: "ENOSPC" | "EIO";
  readonly atCall: number;
  readonly persistent: boolean;
}

interface Outcome {
  readonly acknowledged: number[];
  readonly refused: number[];
  /** Errors that were not `storage_unavailable` (each a violation). */
  readonly unexpected: string[];
  readonly liveNumbers: number[];
  readonly machine: PowerCutFs;
  readonly calls: number;
  readonly faultHit: boolean;
}

/** The workload with the fault of `plan` (none when undefined). */
async function runWithFault(plan: FaultPlan | undefined): Promise<Outcome> {
  let healed = false;
  let faultHit = false;
  let refusalsSinceFault = 0;
  const machine = new PowerCutFs({
    inject: (call: FsCall) => {
      if (plan === undefined || healed || call.callIndex < plan.atCall) return undefined;
      if (!plan.persistent && call.callIndex !== plan.atCall) return undefined;
      faultHit = true;
      return fsError(plan.code, `injected at call ${call.callIndex} (${call.name} ${call.path})`);
    },
  });
  const acknowledged: number[] = [];
  const refused: number[] = [];
  const unexpected: string[] = [];
  const refuse = (what: string, error: unknown): void => {
    if (!isQlrError(error, "storage_unavailable"))
      unexpected.push(`${what}: ${errorMessage(error)}`);
    if (faultHit) refusalsSinceFault += 1;
    if (refusalsSinceFault >= REFUSALS_BEFORE_HEALING) healed = true;
  };
  let driver: SqlJsFileDriver | undefined;
  // Bounded: each attempt either opens or counts a refusal, and the fault heals after a few.
  for (let attempt = 0; driver === undefined && attempt < 10; attempt += 1) {
    try {
      driver = await open(machine);
    } catch (error) {
      refuse("open", error);
      if (!faultHit) throw error;
      healed = healed || !plan?.persistent;
    }
  }
  if (driver === undefined) throw new Error("the store never opened");
  for (let attempt = 0; attempt < 10; attempt += 1) {
    try {
      await createPairs(driver);
      break;
    } catch (error) {
      refuse("create table", error);
    }
  }
  for (let number = 1; number <= COMMITS; number += 1) {
    try {
      await commitPair(driver, number);
      acknowledged.push(number);
    } catch (error) {
      refused.push(number);
      refuse(`commit ${number}`, error);
    }
    if (number === COMMITS / 2) {
      try {
        await driver.checkpoint();
      } catch (error) {
        refuse("checkpoint", error);
      }
    }
  }
  // Space returned: the store takes writes again without a restart.
  healed = true;
  await commitPair(driver, COMMITS + 1);
  acknowledged.push(COMMITS + 1);
  const liveNumbers = await committedNumbers(driver);
  await driver.close();
  return {
    acknowledged,
    refused,
    unexpected,
    liveNumbers,
    machine,
    calls: machine.callCount,
    faultHit,
  };
}

describe("sqljs-file with ENOSPC and EIO at every file call", () => {
  it(
    "refuses with storage_unavailable, never corrupts, loses no acknowledged commit and resumes when the fault is gone",
    async () => {
      const clean = await runWithFault(undefined);
      expect(clean.acknowledged).toHaveLength(COMMITS + 1);
      const totalCalls = clean.calls;
      expect(totalCalls).toBeGreaterThan(70);
      const failures: string[] = [];
      let runs = 0;
      for (const code of ["ENOSPC", "EIO"] as const) {
        for (const persistent of [false, true]) {
          for (let atCall = 0; atCall < totalCalls; atCall += 1) {
            const plan = { code, atCall, persistent };
            const label = `${code} ${persistent ? "from" : "at"} call ${atCall}`;
            runs += 1;
            try {
              const outcome = await runWithFault(plan);
              if (outcome.unexpected.length > 0)
                throw new Error(`refused with another code: ${outcome.unexpected[0]}`);
              expect(outcome.liveNumbers, "live store: exactly the acknowledged commits").toEqual(
                outcome.acknowledged,
              );
              // A power cut after the run, twice with different fates for what was not synced.
              for (const seed of [atCall, atCall + 0x10000]) {
                const reopened = await open(outcome.machine.materialise(seededRandom(seed)));
                try {
                  expect(
                    await committedNumbers(reopened),
                    "after a power cut: exactly the acknowledged commits",
                  ).toEqual(outcome.acknowledged);
                } finally {
                  await reopened.close();
                }
              }
            } catch (error) {
              failures.push(`${label}: ${errorMessage(error)}`);
              if (failures.length <= 5) console.error(`${label}: ${errorMessage(error)}`);
            }
          }
        }
      }
      console.log(`faults: ${runs} runs over ${totalCalls} file calls, ${failures.length} failed`);
      expect(failures.slice(0, 10), `${failures.length} of ${runs} fault runs failed`).toEqual([]);
    },
    SUITE_TIMEOUT_MS,
  );

  it("refuses, rather than leaves waiting, a commit no sync covered when a failed cut-back stops the store", async () => {
    let armed = false;
    const machine = new PowerCutFs({
      inject: (call) => {
        if (!armed || !call.path.endsWith("journal.log")) return undefined;
        if (call.name === "append") return fsError("ENOSPC", "no space left on device");
        if (call.name !== "truncate") return undefined;
        armed = false;
        return fsError("EIO", "truncate failed");
      },
    });
    let holding = false;
    let release: (() => void) | undefined;
    let entered: (() => void) | undefined;
    const syncEntered = new Promise<void>((resolve) => (entered = resolve));
    const driver = await openSqlJsFileDriver(SQL, {
      path: DB_PATH,
      fs: machine,
      // No checkpoint here: one would queue behind the held sync, and 3 and 4 behind it.
      checkpointJournalBytes: 1024 * 1024,
      journalSync: async (handle) => {
        if (holding) {
          holding = false;
          entered?.();
          await new Promise<void>((resolve) => (release = resolve));
        }
        machine.fdatasync(handle);
      },
    });
    const outcome = (promise: Promise<unknown>): Promise<unknown> =>
      promise.then(
        () => "acknowledged",
        (error: unknown) => error,
      );
    await createPairs(driver);
    await commitPair(driver, 1);
    holding = true;
    const second = outcome(commitPair(driver, 2));
    await syncEntered;
    // Committed in memory while the sync of 2 is held: 3 waits for the next sync.
    const commitsBefore = driver.stats().commits;
    const third = outcome(commitPair(driver, 3));
    for (let turn = 0; driver.stats().commits === commitsBefore; turn += 1) {
      if (turn > 10_000) throw new Error("commit 3 never committed in memory");
      await new Promise((resolve) => setImmediate(resolve));
    }
    armed = true;
    // Its append fails, and so does the cut-back: the store stops with 3 covered by no sync.
    const fourth = await outcome(commitPair(driver, 4));
    expect(isQlrError(fourth, "storage_unavailable")).toBe(true);
    expect(driver.stats().failed).toBe(true);
    release?.();
    expect(await second).toBe("acknowledged");
    const refused = await third;
    expect(isQlrError(refused, "storage_unavailable")).toBe(true);
    expect(errorMessage(refused)).toContain("could not be synced");
    await commitPair(driver, 5);
    expect(driver.stats()).toMatchObject({ failed: false, reopens: 1 });
    expect(await committedNumbers(driver)).toEqual([1, 2, 5]);
    await driver.close();
  });

  it("stops after a failed journal fsync and reopens from what is durable before the next write", async () => {
    let failSync = false;
    const machine = new PowerCutFs({
      inject: (call) => {
        if (!failSync || call.name !== "fdatasync" || !call.path.endsWith("journal.log"))
          return undefined;
        failSync = false;
        return fsError("EIO", "write-back failed");
      },
    });
    const driver = await open(machine);
    await createPairs(driver);
    await commitPair(driver, 1);
    failSync = true;
    const refused = await commitPair(driver, 2).catch((error: unknown) => error);
    expect(isQlrError(refused, "storage_unavailable")).toBe(true);
    expect(errorMessage(refused)).toContain("could not be synced");
    expect(driver.stats().failed).toBe(true);
    // The pages of record 2 were marked clean without reaching the disk; the journal in the
    // page cache still holds them. A store that appended record 3 after them would leave a
    // journal whose durable copy has a hole where record 2 was.
    await commitPair(driver, 3);
    expect(driver.stats()).toMatchObject({ failed: false, reopens: 1 });
    expect(await committedNumbers(driver)).toEqual([1, 3]);
    for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
      const reopened = await open(machine.clone().materialise(seededRandom(seed)));
      try {
        expect(await committedNumbers(reopened)).toEqual([1, 3]);
      } finally {
        await reopened.close();
      }
    }
    await driver.close();
  });
});

/**
 * A real full file system: a 2 MiB tmpfs mounted by the test (root only; CI runs as root).
 * tmpfs answers ENOSPC for real at write(2); it keeps everything in memory, so no power cut
 * here: the point is the real error path of node:fs.
 */
describe("sqljs-file on a real full file system", () => {
  const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
  let mountPoint: string | undefined;
  let skipReason: string | undefined;

  beforeAll(() => {
    if (!isRoot) {
      skipReason = "not running as root: mounting a tmpfs needs root (CI runs as root)";
      return;
    }
    const parent = mkdtempSync(join(tmpdir(), "qlr-full-disk-"));
    const target = join(parent, "mnt");
    mkdirSync(target);
    try {
      execFileSync("mount", ["-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", target], {
        stdio: "pipe",
      });
      mountPoint = target;
    } catch (error) {
      rmSync(parent, { recursive: true, force: true });
      skipReason = `mount -t tmpfs failed (a container without CAP_SYS_ADMIN?): ${errorMessage(error)}`;
      if (process.env.CI === "true")
        throw new Error(`CI runs as root and must be able to mount a tmpfs: ${skipReason}`, {
          cause: error,
        });
    }
  });

  afterAll(() => {
    if (mountPoint === undefined) return;
    // Lazy: a failed test may have left the store's files open.
    execFileSync("umount", ["-l", mountPoint], { stdio: "pipe" });
    rmSync(join(mountPoint, ".."), { recursive: true, force: true });
  });

  it("refuses commits with storage_unavailable while the disk is full and resumes when space returns, losing nothing", async (context) => {
    if (mountPoint === undefined) {
      console.log(`skipped: ${skipReason}`);
      context.skip(skipReason);
      return;
    }
    const path = join(mountPoint, "db");
    const driver = await openSqlJsFileDriver(SQL, { path, checkpointJournalBytes: 64 * 1024 });
    await createPairs(driver);
    const acknowledged: number[] = [];
    let refusals = 0;
    const filler = join(mountPoint, "filler");
    // Fill the disk: a file as large as tmpfs lets it be.
    try {
      writeFileSync(filler, Buffer.alloc(4 * 1024 * 1024));
    } catch (error) {
      expect((error as NodeJS.ErrnoException).code).toBe("ENOSPC");
    }
    // Commit until the disk refuses (the journal's last page had room for a few records), then a few more.
    let number = 0;
    while (refusals < 5 && number < 5000) {
      number += 1;
      try {
        await commitPair(driver, number);
        acknowledged.push(number);
      } catch (error) {
        expect(isQlrError(error, "storage_unavailable"), errorMessage(error)).toBe(true);
        refusals += 1;
      }
    }
    expect(refusals).toBe(5);
    rmSync(filler);
    for (let more = 1; more <= 10; more += 1) {
      await commitPair(driver, number + more);
      acknowledged.push(number + more);
    }
    expect(await committedNumbers(driver)).toEqual(acknowledged);
    await driver.close();
    expect(existsSync(join(path, "snapshot.sqlite.tmp"))).toBe(false);
    const reopened = await openSqlJsFileDriver(SQL, { path });
    expect(await committedNumbers(reopened)).toEqual(acknowledged);
    await reopened.close();
  });
});
