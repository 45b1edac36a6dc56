/**
 * The sqljs-file driver on disk: reopen, journal replay, checkpoints, the torn tail rule,
 * mid-journal damage, journal write failures and the lock. Real sql.js, real files.
 *
 * A "crash image" is a copy of the database directory's files (without the lock) taken while
 * the driver is open: every commit is fsynced before it is acknowledged, so the copy is what
 * a process killed at that instant would leave behind. Real SIGKILLs are in the crash test.
 */
import {
  existsSync,
  fsyncSync,
  mkdirSync,
  readFileSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import { isQlrError } from "../../src/errors.ts";
import { SQLJS_CHECKPOINT_STEPS } from "../../storage/sqljs/node/file-driver.ts";
import type {
  SqlJsCheckpointIo,
  SqlJsCheckpointStep,
  SqlJsFileDriver,
} from "../../storage/sqljs/node/file-driver.ts";
import { parseRecordAt } from "../../storage/sqljs/node/journal.ts";
import {
  decodeSnapshot,
  deflateFrameSync,
  encodeSnapshot,
} from "../../storage/sqljs/node/snapshot.ts";
import { crc32, crc32Update } from "../../storage/sqljs/crc32.ts";
import { commitPair, committedNumbers, createPairs } from "./fixtures/pairs.ts";
import { SqlJsChild } from "./fixtures/sqljs-child-process.ts";
import { useSqlJsFileScratch } from "./fixtures/sqljs-file-scratch.ts";

const CHILD_TIMEOUT_MS = 20_000;

const scratch = useSqlJsFileScratch("qlr-sqljs-durability-");
const { newDirectory, crashImage, open, close } = scratch;

async function commitPairs(driver: SqlJsFileDriver, numbers: readonly number[]): Promise<void> {
  for (const number of numbers) await commitPair(driver, number);
}

/** A driver on a new directory whose pairs table holds `numbers`, each committed on its own. */
async function openWithPairs(
  numbers: readonly number[],
  options?: Parameters<typeof open>[1],
): Promise<{ path: string; driver: SqlJsFileDriver }> {
  const path = newDirectory();
  const driver = await open(path, options);
  await createPairs(driver);
  await commitPairs(driver, numbers);
  return { path, driver };
}

function journalPath(directory: string): string {
  return join(directory, "journal.log");
}

function recordBounds(directory: string): { offset: number; endOffset: number }[] {
  const bytes = readFileSync(journalPath(directory));
  const bounds: { offset: number; endOffset: number }[] = [];
  for (let offset = 0; offset < bytes.length;) {
    const outcome = parseRecordAt(bytes, offset);
    if (!outcome.valid) throw new Error(`test setup: no valid record at ${offset}`);
    bounds.push({ offset, endOffset: outcome.record.endOffset });
    offset = outcome.record.endOffset;
  }
  return bounds;
}

function range(first: number, last: number): number[] {
  return Array.from({ length: last - first + 1 }, (_, index) => first + index);
}

/** An error's message followed by its causes' messages: the checkpoint wraps I/O failures. */
function messageChain(error: unknown): string {
  const messages: string[] = [];
  // Bounded: error chains here are at most a few levels deep, and the depth limit guards a cycle.
  for (
    let current = error, depth = 0;
    current instanceof Error && depth < 8;
    current = current.cause, depth += 1
  )
    messages.push(current.message);
  return messages.join(" <- ");
}

async function openError(path: string): Promise<unknown> {
  return open(path).then(
    () => new Error("the database opened"),
    (error: unknown) => error,
  );
}

describe("sqljs-file reopen and replay", () => {
  it("keeps commits across close and reopen, checkpointing on close", async () => {
    const path = newDirectory();
    const first = await open(path);
    await createPairs(first);
    await commitPairs(first, range(1, 5));
    expect(first.stats().journalBytes).toBeGreaterThan(0);
    await close(first);
    expect(statSync(journalPath(path)).size).toBe(0);
    expect(existsSync(join(path, "lock"))).toBe(false);

    const second = await open(path);
    expect(await committedNumbers(second)).toEqual(range(1, 5));
    expect(second.stats().sequence).toBe(6);
  });

  it("replays the journal after an unclean end", async () => {
    const { path } = await openWithPairs(range(1, 4));
    const image = crashImage(path);
    expect(existsSync(join(image, "snapshot.sqlite"))).toBe(false);

    const reopened = await open(image);
    expect(await committedNumbers(reopened)).toEqual(range(1, 4));
    expect(reopened.stats().journalBytes).toBe(statSync(journalPath(path)).size);
  });

  it("keeps numbering SQL texts across a replay, so later records refer to texts defined before the crash", async () => {
    const { path } = await openWithPairs(range(1, 3));
    const firstImage = crashImage(path);
    const afterReplay = await open(firstImage);
    await commitPairs(afterReplay, range(4, 6));
    const reopened = await open(crashImage(firstImage));
    expect(await committedNumbers(reopened)).toEqual(range(1, 6));
  });

  it("checkpoints, keeps committing, and reopens from snapshot plus journal", async () => {
    const { path, driver } = await openWithPairs(range(1, 3));
    await driver.checkpoint();
    expect(driver.stats()).toMatchObject({ journalBytes: 0, checkpoints: 1 });
    await commitPairs(driver, range(4, 6));

    const reopened = await open(crashImage(path));
    expect(await committedNumbers(reopened)).toEqual(range(1, 6));
    expect(reopened.stats().sequence).toBe(7);
  });

  it("checkpoints by itself when the journal passes checkpointJournalBytes", async () => {
    const { path, driver } = await openWithPairs(range(1, 30), { checkpointJournalBytes: 300 });
    // The snapshot is written in the background, off the commit path: wait for it (bounded).
    await vi.waitFor(
      () => {
        expect(driver.stats()).toMatchObject({ checkpointInFlight: false });
        expect(driver.stats().checkpoints).toBeGreaterThan(0);
      },
      { timeout: 30_000, interval: 20 },
    );
    const stats = driver.stats();
    // After a checkpoint the journal may grow to the snapshot's image size before the next one,
    // so a (compressed) snapshot's bytes are amortised over more journal bytes than it holds.
    const imageBytes = decodeSnapshot(readFileSync(join(path, "snapshot.sqlite")), "s").image
      .length;
    expect(stats.journalBytes).toBeLessThan(Math.max(300, imageBytes) + 300);
    const reopened = await open(crashImage(path));
    expect(await committedNumbers(reopened)).toEqual(range(1, 30));
  });

  it("writes nothing for transactions that change nothing", async () => {
    const { driver } = await openWithPairs([1]);
    const before = driver.stats();
    await driver.transaction(async (tx) => {
      await tx.query("SELECT * FROM pairs");
      await tx.query(
        "CREATE TABLE IF NOT EXISTS pairs (number INTEGER NOT NULL, part INTEGER NOT NULL, PRIMARY KEY (number, part))",
      );
      await tx.query("UPDATE pairs SET part = part WHERE number = ?", [999]);
      await tx.query("DELETE FROM pairs WHERE number = ?", [999]);
      await tx.query("INSERT OR IGNORE INTO pairs (number, part) VALUES (?, ?)", [1, 0]);
      await tx.query("PRAGMA user_version");
    });
    expect(driver.stats()).toEqual(before);
  });

  it("journals schema changes, pragma writes and savepoints so that replay reproduces them", async () => {
    const path = newDirectory();
    const driver = await open(path);
    await driver.transaction(async (tx) => {
      await tx.query("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)");
      await tx.query("CREATE INDEX notes_body ON notes (body)");
      await tx.query("PRAGMA user_version = 7");
      await tx.query("INSERT INTO notes (body) VALUES (?)", ["kept"]);
      await tx.query("SAVEPOINT maybe");
      await tx.query("INSERT INTO notes (body) VALUES (?)", ["undone"]);
      await tx.query("ROLLBACK TO maybe");
      await tx.query("RELEASE maybe");
    });
    await driver.transaction((tx) => tx.query("ALTER TABLE notes ADD COLUMN tag TEXT"));
    const reopened = await open(crashImage(path));
    const state = await reopened.transaction(async (tx) => ({
      notes: await tx.query("SELECT id, body, tag FROM notes"),
      version: await tx.query("PRAGMA user_version"),
      indexes: await tx.query(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND name = 'notes_body'",
      ),
    }));
    expect(state).toEqual({
      notes: [{ id: 1, body: "kept", tag: null }],
      version: [{ user_version: 7 }],
      indexes: [{ name: "notes_body" }],
    });
  });

  it("refuses a transaction whose failing statement left partial changes", async () => {
    const { driver } = await openWithPairs([2]);
    const outcome = await driver
      .transaction(async (tx) => {
        // Rows (1, 0) and (1, 1) go in before (2, 0) fails, and OR FAIL keeps them.
        await tx
          .query("INSERT OR FAIL INTO pairs (number, part) VALUES (1, 0), (1, 1), (2, 0)")
          .catch(() => undefined);
      })
      .catch((error: unknown) => error);
    expect(isQlrError(outcome, "internal")).toBe(true);
    expect(await committedNumbers(driver)).toEqual([2]);
  });
});

describe("sqljs-file torn tail and damage", () => {
  /** A crash image whose journal holds: the CREATE TABLE record, then numbers 1..4. */
  async function journalOfFiveRecords(): Promise<string> {
    const { path, driver } = await openWithPairs(range(1, 4));
    const image = crashImage(path);
    await close(driver);
    expect(recordBounds(image)).toHaveLength(5);
    return image;
  }

  it("opens at the previous state when the last record is cut at any byte, and truncates the file", async () => {
    const image = await journalOfFiveRecords();
    const last = recordBounds(image).at(-1);
    if (last === undefined) throw new Error("test setup: no records");
    for (let cut = last.offset; cut < last.endOffset; cut += 1) {
      const torn = crashImage(image);
      truncateSync(journalPath(torn), cut);
      const driver = await open(torn);
      expect(await committedNumbers(driver), `cut at ${cut}`).toEqual(range(1, 3));
      expect(statSync(journalPath(torn)).size, `cut at ${cut}`).toBe(last.offset);
      expect(driver.stats().journalBytes).toBe(last.offset);
      // The store continues after the cut.
      await commitPairs(driver, [10]);
      const reopened = await open(crashImage(torn));
      expect(await committedNumbers(reopened)).toEqual([1, 2, 3, 10]);
      await close(reopened);
      await close(driver);
      rmSync(torn, { recursive: true, force: true });
    }
  });

  it("cuts away zero bytes after the last record (a size extended by a crash before its data)", async () => {
    const image = await journalOfFiveRecords();
    const length = statSync(journalPath(image)).size;
    writeFileSync(journalPath(image), Buffer.alloc(4096), { flag: "a" });
    const driver = await open(image);
    expect(await committedNumbers(driver)).toEqual(range(1, 4));
    expect(statSync(journalPath(image)).size).toBe(length);
  });

  it("refuses to open when any byte of a middle record is flipped, naming the record's offset", async () => {
    const image = await journalOfFiveRecords();
    const middle = recordBounds(image)[2];
    if (middle === undefined) throw new Error("test setup: no middle record");
    const original = readFileSync(journalPath(image));
    for (let position = middle.offset; position < middle.endOffset; position += 1) {
      const damaged = Buffer.from(original);
      damaged[position] = (damaged[position] ?? 0) ^ 0x20;
      writeFileSync(journalPath(image), damaged);
      const outcome = await openError(image);
      expect(
        isQlrError(outcome, "storage_corrupt"),
        `flip at ${position}: ${String(outcome)}`,
      ).toBe(true);
      expect((outcome as Error).message).toContain(`byte offset ${middle.offset}`);
    }
    // Nothing was truncated by the refusals.
    writeFileSync(journalPath(image), original);
    const driver = await open(image);
    expect(await committedNumbers(driver)).toEqual(range(1, 4));
  });

  it("cannot tell damage in the last record from a torn append, and cuts it away", async () => {
    const image = await journalOfFiveRecords();
    const last = recordBounds(image).at(-1);
    if (last === undefined) throw new Error("test setup: no records");
    const bytes = readFileSync(journalPath(image));
    bytes[last.endOffset - 2] = (bytes[last.endOffset - 2] ?? 0) ^ 0x01;
    writeFileSync(journalPath(image), bytes);
    const driver = await open(image);
    expect(await committedNumbers(driver)).toEqual(range(1, 3));
  });

  it("refuses a journal whose first record does not follow the snapshot", async () => {
    const { path, driver } = await openWithPairs([1, 2]);
    await driver.checkpoint();
    await commitPairs(driver, [3, 4]);
    const image = crashImage(path);
    rmSync(join(image, "snapshot.sqlite"));
    const outcome = await openError(image);
    expect(isQlrError(outcome, "storage_corrupt")).toBe(true);
    expect((outcome as Error).message).toContain("byte offset 0");
  });

  it("refuses a damaged snapshot", async () => {
    const { path, driver } = await openWithPairs([1, 2]);
    await close(driver);
    const snapshotPath = join(path, "snapshot.sqlite");
    const bytes = readFileSync(snapshotPath);
    bytes[100] = (bytes[100] ?? 0) ^ 0xff;
    writeFileSync(snapshotPath, bytes);
    const outcome = await openError(path);
    expect(isQlrError(outcome, "storage_corrupt")).toBe(true);
    expect((outcome as Error).message).toContain("snapshot.sqlite");
    expect(existsSync(join(path, "lock"))).toBe(false);
  });
});

describe("sqljs-file failures inside commit and checkpoint", () => {
  /**
   * A driver on a new directory, with the pairs table, whose fault point `point` throws
   * `message` at the next pass after each `failNext()`.
   */
  async function openFailingOnce(
    point: "beforeJournalSync" | "afterJournalSync",
    message: string,
  ): Promise<{ path: string; driver: SqlJsFileDriver; failNext: () => void }> {
    const path = newDirectory();
    let armed = false;
    const fail = (): void => {
      if (!armed) return;
      armed = false;
      throw new Error(message);
    };
    const driver = await open(path, { faultPoints: { [point]: fail } });
    await createPairs(driver);
    return { path, driver, failNext: () => (armed = true) };
  }

  it("rolls back and answers storage_unavailable when the journal write fails, leaving the journal as before", async () => {
    const { path, driver, failNext } = await openFailingOnce("beforeJournalSync", "simulated EIO");
    await commitPairs(driver, [1]);
    const journalBytes = driver.stats().journalBytes;
    failNext();
    const outcome = await commitPairs(driver, [2]).catch((error: unknown) => error);
    expect(isQlrError(outcome, "storage_unavailable")).toBe(true);
    expect(driver.stats().journalBytes).toBe(journalBytes);
    expect(statSync(journalPath(path)).size).toBe(journalBytes);
    expect(await committedNumbers(driver)).toEqual([1]);
    await commitPairs(driver, [3]);
    const reopened = await open(crashImage(path));
    expect(await committedNumbers(reopened)).toEqual([1, 3]);
  });

  it("leaves no trace of a commit whose record was synced but whose answer failed before COMMIT", async () => {
    const { path, driver, failNext } = await openFailingOnce(
      "afterJournalSync",
      "simulated failure after sync",
    );
    failNext();
    const outcome = await commitPairs(driver, [1]).catch((error: unknown) => error);
    expect(isQlrError(outcome, "storage_unavailable")).toBe(true);
    const reopened = await open(crashImage(path));
    expect(await committedNumbers(reopened)).toEqual([]);
  });

  it.each(SQLJS_CHECKPOINT_STEPS.map((step) => ({ step })))(
    "opens with every commit when a checkpoint stops after step $step",
    async ({ step }) => {
      const path = newDirectory();
      let stopAt: SqlJsCheckpointStep | undefined;
      const driver = await open(path, {
        faultPoints: {
          duringCheckpoint: (reached) => {
            if (reached === stopAt) throw new Error(`simulated crash after ${reached}`);
          },
        },
      });
      await createPairs(driver);
      await commitPairs(driver, range(1, 3));
      stopAt = step;
      const stopped = await driver.checkpoint().catch((error: unknown) => error);
      expect(messageChain(stopped)).toContain(`simulated crash after ${step}`);
      stopAt = undefined;
      // The files exactly as a crash at this step leaves them.
      const atStep = crashImage(path);
      const reopened = await open(atStep);
      expect(await committedNumbers(reopened)).toEqual(range(1, 3));
      expect(existsSync(join(atStep, "snapshot.sqlite.tmp"))).toBe(false);
      await close(reopened);

      // The interrupted store keeps working, and a later image holds everything.
      await commitPairs(driver, range(4, 5));
      const later = await open(crashImage(path));
      expect(await committedNumbers(later)).toEqual(range(1, 5));
      await close(later);
      await driver.checkpoint();
      const final = await open(crashImage(path));
      expect(await committedNumbers(final)).toEqual(range(1, 5));
    },
  );
});

describe("sqljs-file checkpoint in the background", () => {
  /** A checkpoint's background I/O that waits at `holdAt` until the test releases it. */
  function heldCheckpointIo(holdAt: "deflate" | "sync"): {
    io: SqlJsCheckpointIo;
    reached: () => boolean;
    release: () => void;
  } {
    let reached = false;
    let release = (): void => undefined;
    const gate = new Promise<void>((resolveGate) => {
      release = resolveGate;
    });
    const hold = async (point: "deflate" | "sync"): Promise<void> => {
      if (point !== holdAt) return;
      reached = true;
      await gate;
    };
    return {
      io: {
        deflateFrame: async (piece) => {
          await hold("deflate");
          return deflateFrameSync(piece);
        },
        syncSnapshotFile: async (handle) => {
          await hold("sync");
          fsyncSync(handle);
        },
      },
      reached: () => reached,
      release: () => release(),
    };
  }

  it.each([{ holdAt: "deflate" as const }, { holdAt: "sync" as const }])(
    "acknowledges commits while a checkpoint is held at its $holdAt, and opens exactly before and after it",
    async ({ holdAt }) => {
      const path = newDirectory();
      const held = heldCheckpointIo(holdAt);
      const driver = await open(path, { checkpointIo: held.io });
      await createPairs(driver);
      await commitPairs(driver, range(1, 3));
      const checkpointing = driver.checkpoint();
      await vi.waitFor(() => expect(held.reached()).toBe(true), { timeout: 30_000 });

      // The checkpoint cannot go on until released, so these commits cannot have waited for it.
      await commitPairs(driver, range(4, 8));
      expect(driver.stats()).toMatchObject({ checkpointInFlight: true, checkpoints: 0 });
      expect(existsSync(join(path, "journal.sealed.log"))).toBe(true);
      const during = await open(crashImage(path));
      expect(await committedNumbers(during)).toEqual(range(1, 8));
      await close(during);

      held.release();
      await checkpointing;
      expect(driver.stats()).toMatchObject({ checkpointInFlight: false, checkpoints: 1 });
      expect(existsSync(join(path, "journal.sealed.log"))).toBe(false);
      // The new journal holds only what followed the export: commits 4 to 8.
      expect(recordBounds(path)).toHaveLength(5);
      expect(
        decodeSnapshot(readFileSync(join(path, "snapshot.sqlite")), "s").includedSequence,
      ).toBe(4);
      const after = await open(crashImage(path));
      expect(await committedNumbers(after)).toEqual(range(1, 8));
      await close(after);
      await commitPairs(driver, [9]);
      await close(driver);
      const closed = await open(path);
      expect(await committedNumbers(closed)).toEqual(range(1, 9));
    },
  );

  it("retires a sealed journal left by a failed checkpoint with the next one", async () => {
    const path = newDirectory();
    let failSync = true;
    const driver = await open(path, {
      checkpointIo: {
        deflateFrame: (piece) => Promise.resolve(deflateFrameSync(piece)),
        syncSnapshotFile: (handle) => {
          if (failSync) return Promise.reject(new Error("simulated failed snapshot sync"));
          fsyncSync(handle);
          return Promise.resolve();
        },
      },
    });
    await createPairs(driver);
    await commitPairs(driver, range(1, 3));
    const failed = await driver.checkpoint().catch((error: unknown) => error);
    expect(isQlrError(failed, "storage_unavailable")).toBe(true);
    expect(existsSync(join(path, "journal.sealed.log"))).toBe(true);
    expect(existsSync(join(path, "snapshot.sqlite.tmp"))).toBe(false);
    await commitPairs(driver, range(4, 5));
    const between = await open(crashImage(path));
    expect(await committedNumbers(between)).toEqual(range(1, 5));
    await close(between);

    failSync = false;
    await driver.checkpoint();
    expect(existsSync(join(path, "journal.sealed.log"))).toBe(false);
    await commitPairs(driver, [6]);
    // journal.log still holds 4 and 5 (in the snapshot now, skipped) before 6.
    const after = await open(crashImage(path));
    expect(await committedNumbers(after)).toEqual(range(1, 6));
    expect(after.stats().sequence).toBe(7);
    await close(after);
  });
});

describe("sqljs-file group commit", () => {
  /**
   * A journal sync the test holds: between `hold()` and `letGo()`, each call waits for
   * `release()` (or for `fail(error)`) before it syncs for real; `calls()` counts the calls.
   */
  function heldJournalSync(): {
    readonly sync: (handle: number) => Promise<void>;
    readonly hold: () => void;
    readonly letGo: () => void;
    readonly calls: () => number;
    readonly release: () => void;
    readonly fail: (error: Error) => void;
  } {
    let holding = false;
    let calls = 0;
    let gate: { resolve: () => void; reject: (error: Error) => void } | null = null;
    return {
      sync: async (handle) => {
        calls += 1;
        if (holding)
          await new Promise<void>((resolve, reject) => {
            gate = { resolve, reject };
          });
        fsyncSync(handle);
      },
      hold: () => (holding = true),
      letGo: () => (holding = false),
      calls: () => calls,
      release: () => {
        const held = gate;
        gate = null;
        held?.resolve();
      },
      fail: (error) => {
        const held = gate;
        gate = null;
        held?.reject(error);
      },
    };
  }

  /** Settles `promise` into a flag the test can read without awaiting it. */
  function watch(promise: Promise<unknown>): { settled: () => boolean; outcome: Promise<unknown> } {
    let settled = false;
    const outcome = promise.then(
      (value) => {
        settled = true;
        return value;
      },
      (error: unknown) => {
        settled = true;
        return error;
      },
    );
    return { settled: () => settled, outcome };
  }

  it("acknowledges no commit and no read before a sync covers it, and the commits made during one sync share the next", async () => {
    const path = newDirectory();
    const held = heldJournalSync();
    const driver = await open(path, { journalSync: held.sync });
    await createPairs(driver);
    const before = driver.stats();
    held.hold();
    const first = watch(commitPair(driver, 1));
    await vi.waitFor(() => expect(held.calls()).toBe(before.journalSyncs + 1), { timeout: 30_000 });
    // The queue does not wait for the sync: these commit (in memory) while it is held.
    const second = watch(commitPair(driver, 2));
    const third = watch(commitPair(driver, 3));
    const read = watch(committedNumbers(driver));
    await vi.waitFor(() => expect(driver.stats().commits).toBe(before.commits + 3), {
      timeout: 30_000,
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect([first, second, third, read].map((item) => item.settled())).toEqual([
      false,
      false,
      false,
      false,
    ]);

    held.release();
    await first.outcome;
    // The read saw 2 and 3, so it waits with them for the second sync.
    await vi.waitFor(() => expect(held.calls()).toBe(before.journalSyncs + 2), { timeout: 30_000 });
    expect([second, third, read].map((item) => item.settled())).toEqual([false, false, false]);
    held.release();
    expect(await read.outcome).toEqual([1, 2, 3]);
    await Promise.all([second.outcome, third.outcome]);
    expect(driver.stats()).toMatchObject({
      commits: before.commits + 3,
      journalSyncs: before.journalSyncs + 2,
    });
    await close(driver);
    expect(await committedNumbers(await open(path))).toEqual([1, 2, 3]);
  });

  it("refuses every commit and read a failed sync covered or followed, cuts them from the journal at once, and reopens without them", async () => {
    const path = newDirectory();
    const held = heldJournalSync();
    const driver = await open(path, { journalSync: held.sync });
    await createPairs(driver);
    await commitPair(driver, 1);
    const commitsBefore = driver.stats().commits;
    held.hold();
    const second = watch(commitPair(driver, 2));
    await vi.waitFor(() => expect(driver.stats().commits).toBe(commitsBefore + 1), {
      timeout: 30_000,
    });
    const third = watch(commitPair(driver, 3));
    const read = watch(committedNumbers(driver));
    await vi.waitFor(() => expect(driver.stats().commits).toBe(commitsBefore + 2), {
      timeout: 30_000,
    });
    held.fail(Object.assign(new Error("write-back failed"), { code: "EIO" }));
    for (const refused of [second, third, read]) {
      const outcome = await refused.outcome;
      expect(isQlrError(outcome, "storage_unavailable")).toBe(true);
      expect(messageChain(outcome)).toContain("could not be synced");
    }
    expect(driver.stats().failed).toBe(true);
    // A crash now finds neither 2 nor 3: their callers heard they failed.
    const image = await open(crashImage(path));
    expect(await committedNumbers(image)).toEqual([1]);
    await close(image);

    held.letGo();
    await commitPair(driver, 4);
    expect(driver.stats()).toMatchObject({ failed: false, reopens: 1 });
    expect(await committedNumbers(driver)).toEqual([1, 4]);
    await close(driver);
  });

  it("makes concurrent commits durable with fewer syncs than commits on the real thread pool", async () => {
    const path = newDirectory();
    const driver = await open(path);
    await createPairs(driver);
    const before = driver.stats();
    await Promise.all(range(1, 20).map((number) => commitPair(driver, number)));
    const after = driver.stats();
    expect(after.commits - before.commits).toBe(20);
    expect(after.journalSyncs - before.journalSyncs).toBeLessThan(20);
    expect(await committedNumbers(await open(crashImage(path)))).toEqual(range(1, 20));
    await close(driver);
  });
});

describe("sqljs-file lock", () => {
  it("refuses a second open in the same process, naming the path and pid, and releases on close", async () => {
    const path = newDirectory();
    const driver = await open(path);
    const outcome = await openError(path);
    expect(isQlrError(outcome, "storage_locked")).toBe(true);
    expect((outcome as Error).message).toContain(path);
    expect((outcome as Error).message).toContain(String(process.pid));
    await close(driver);
    expect(existsSync(join(path, "lock"))).toBe(false);
    await close(await open(path));
  });

  it("refuses an open from another process while this one holds the lock", async () => {
    const path = newDirectory();
    const driver = await open(path);
    await createPairs(driver);
    const probe = new SqlJsChild(scratch.childBundle(), { mode: "probe", path });
    const line = await probe.waitForLine(
      (candidate) => candidate.startsWith("result "),
      CHILD_TIMEOUT_MS,
    );
    const result = JSON.parse(line.slice("result ".length)) as {
      opened: boolean;
      code?: string;
      message?: string;
    };
    expect(result).toMatchObject({ opened: false, code: "storage_locked" });
    expect(result.message).toContain(String(process.pid));
    await probe.exited;
  });

  it("refuses to open while another process holds the lock, and takes the lock over once that process is dead", async () => {
    const path = newDirectory();
    const holder = new SqlJsChild(scratch.childBundle(), { mode: "hold", path });
    try {
      await holder.waitForLine((line) => line.startsWith("ready"), CHILD_TIMEOUT_MS);
      const outcome = await openError(path);
      expect(isQlrError(outcome, "storage_locked")).toBe(true);
      expect((outcome as Error).message).toContain(`process ${holder.pid}`);
    } finally {
      holder.kill();
    }
    await holder.exited;
    expect(existsSync(join(path, "lock"))).toBe(true);
    const driver = await open(path);
    expect(await committedNumbers(driver)).toEqual([]);
  });

  it("takes over a lock whose pid now belongs to a different process", async () => {
    const path = newDirectory();
    mkdirSync(path, { recursive: true });
    // Our own pid with another start marker: a restarted container whose runtime is pid 1 again.
    writeFileSync(
      join(path, "lock"),
      JSON.stringify({ pid: process.pid, startMarker: "another-boot/123", token: "old" }),
    );
    const driver = await open(path);
    await createPairs(driver);
    expect(JSON.parse(readFileSync(join(path, "lock"), "utf8"))).toMatchObject({
      pid: process.pid,
    });
  });

  it("takes over an empty lock file left by a crash between its creation and its write", async () => {
    const path = newDirectory();
    mkdirSync(path, { recursive: true });
    writeFileSync(join(path, "lock"), "");
    const driver = await open(path);
    await createPairs(driver);
  });
});

describe("sqljs-file bytes written", () => {
  it("writes a small journal record per two-insert transaction", async () => {
    const { driver } = await openWithPairs([1]);
    const before = driver.stats();
    const transactions = 200;
    await commitPairs(driver, range(2, 1 + transactions));
    const after = driver.stats();
    const bytesPerCommit = (after.bytesWrittenTotal - before.bytesWrittenTotal) / transactions;
    expect(after.commits - before.commits).toBe(transactions);
    // Header 20 bytes plus about 30 bytes of ids and parameters; the bound catches a format regression.
    expect(bytesPerCommit).toBeLessThan(80);
  });
});

describe("sqljs-file snapshot format", () => {
  function snapshotFile(image: Uint8Array, sequence: number, frameBytes?: number): Buffer {
    return Buffer.concat([...encodeSnapshot(image, sequence, frameBytes)]);
  }

  function sampleImage(length: number): Uint8Array {
    // Compressible like SQLite pages: repeated text with a counter in it.
    const text = Array.from(
      { length: Math.ceil(length / 24) },
      (_, index) => `row ${String(index).padStart(8, "0")} ok;`,
    ).join("");
    return Uint8Array.from(Buffer.from(text.slice(0, length), "latin1"));
  }

  it("round-trips an image over many frames and writes it compressed", () => {
    const image = sampleImage(100_000);
    const file = snapshotFile(image, 42, 7_000);
    expect(file.length).toBeLessThan(image.length / 2);
    const decoded = decodeSnapshot(file, "s");
    expect(decoded.includedSequence).toBe(42);
    expect(Buffer.from(decoded.image).equals(Buffer.from(image))).toBe(true);
  });

  it("still reads a snapshot written before compression (format 1)", () => {
    const image = sampleImage(5_000);
    const trailer = Buffer.alloc(32);
    trailer.write("QLRSNAP1", 0, "latin1");
    trailer.writeBigUInt64LE(7n, 8);
    trailer.writeBigUInt64LE(BigInt(image.length), 16);
    trailer.writeUInt32LE(crc32Update(crc32(image), trailer.subarray(0, 24)), 24);
    const decoded = decodeSnapshot(Buffer.concat([image, trailer]), "s");
    expect(decoded.includedSequence).toBe(7);
    expect(Buffer.from(decoded.image).equals(Buffer.from(image))).toBe(true);
  });

  it("refuses every truncation and a flipped bit anywhere, naming the file", () => {
    const file = snapshotFile(sampleImage(20_000), 3, 4_000);
    const refusals = new Set<string>();
    for (let length = 0; length < file.length; length += 97) {
      const outcome = (() => {
        try {
          return decodeSnapshot(file.subarray(0, length), "/db/snapshot.sqlite");
        } catch (error) {
          return error;
        }
      })();
      expect(isQlrError(outcome, "storage_corrupt"), `truncated to ${length}`).toBe(true);
      expect((outcome as Error).message).toContain("/db/snapshot.sqlite");
      refusals.add((outcome as Error).message);
    }
    for (let offset = 0; offset < file.length; offset += 131) {
      const flipped = Buffer.from(file);
      flipped[offset] = (flipped[offset] ?? 0) ^ 0x10;
      expect(() => decodeSnapshot(flipped, "s"), `bit flipped at ${offset}`).toThrow(/damaged/);
    }
    expect(refusals.size).toBeGreaterThan(1);
  });

  it("writes a snapshot the store reopens from, in frames of the size asked", async () => {
    const { path, driver } = await openWithPairs(range(1, 200), { snapshotFrameImageBytes: 4096 });
    await driver.checkpoint();
    const file = readFileSync(join(path, "snapshot.sqlite"));
    const decoded = decodeSnapshot(file, "s");
    expect(file.length).toBeLessThan(decoded.image.length);
    // Several frames: the first declares 4,096 image bytes, and the image holds three pages or more.
    expect(file.readUInt32LE(4)).toBe(4096);
    expect(decoded.image.length).toBeGreaterThan(2 * 4096);
    await close(driver);
    const reopened = await open(path);
    expect(await committedNumbers(reopened)).toEqual(range(1, 200));
  });
});
