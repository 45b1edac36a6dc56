/**
 * The two transaction modes besides the plain serializable one, on real databases:
 *
 * - a read-only transaction (`Store.read`, `TransactionOptions.readOnly`) is a snapshot that
 *   takes no predicate locks on PostgreSQL, and the store refuses a write in one on every
 *   driver before it reaches the database;
 * - transactions in turn (`TransactionOptions.inTurn`, the coordinators' stage pages) never
 *   overlap on one PostgreSQL, from separate drivers as from separate hosts, begin their
 *   snapshot after the previous holder committed, give the turn back whatever happens, and run
 *   without a turn rather than wait past the driver's limit for a holder that stopped; after
 *   such a wait the driver stops asking for a pause (its breaker, on the test's clock).
 *
 * The waits are observed in `pg_locks` with bounded polls, never assumed from elapsed time.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { isQlrError } from "../../src/errors.ts";
import type { SqlDriver, SqlTx } from "../../storage/driver.ts";
import { openPgDriver, TURN_LOCK_KEY } from "../../storage/postgres/pg-driver.ts";
import { TurnBreaker } from "../../storage/postgres/turn-breaker.ts";
import { openSqlStore } from "../../storage/sql-store.ts";
import { migrationsFor } from "../support/dialect-migrations.ts";
import { DRIVERS } from "../support/drivers.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

const NOW_MS = 1_800_000_000_000;

/** A promise and the function that settles it. */
function gate(): { readonly opened: Promise<void>; readonly open: () => void } {
  let open = (): void => undefined;
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { opened, open };
}

describe("Store.read refuses writes", () => {
  for (const factory of DRIVERS) {
    it(`on ${factory.name}: a write inside a read fails before it is sent, and nothing changes`, async () => {
      const driver = await factory.open();
      try {
        const store = await openSqlStore(driver, migrationsFor(driver.dialect), NOW_MS);
        const error = await store
          .read((tx) => tx.clearFrontierMark("run-1"))
          .then(
            () => null,
            (caught: unknown) => caught,
          );
        expect(isQlrError(error, "internal")).toBe(true);
        expect(String((error as Error).message)).toMatch(
          /read-only store transaction tried to write/,
        );
        // The same store goes on reading and writing.
        expect(await store.read((tx) => tx.getRun("run-1"))).toBeNull();
        await store.transaction((tx) => tx.clearFrontierMark("run-1"));
      } finally {
        await driver.close();
      }
    });
  }
});

describe("PostgreSQL transaction modes", () => {
  let database: TestDatabase;
  const opened: SqlDriver[] = [];

  async function driver(turnWaitMs = 60_000): Promise<SqlDriver> {
    const made = await openPgDriver({ connectionString: database.url, poolSize: 2, turnWaitMs });
    opened.push(made);
    return made;
  }

  /** Advisory locks of the turn on the test database: granted, and waited for. */
  async function turnLocks(observer: SqlDriver): Promise<{ held: number; waiting: number }> {
    const rows = await observer.transaction((tx) =>
      tx.query<{ held: number; waiting: number }>(
        `SELECT count(*) FILTER (WHERE granted)::int AS held, count(*) FILTER (WHERE NOT granted)::int AS waiting
         FROM pg_locks WHERE locktype = 'advisory' AND objid = $1
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
        [TURN_LOCK_KEY],
      ),
    );
    return rows[0] ?? { held: 0, waiting: 0 };
  }

  /** Polls until `condition` holds: at most 400 reads, 25 ms apart. */
  async function until(
    observer: SqlDriver,
    condition: (locks: { held: number; waiting: number }) => boolean,
  ): Promise<void> {
    for (let read = 0; read < 400; read += 1) {
      if (condition(await turnLocks(observer))) return;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    throw new Error(
      `turn locks never reached the state: ${JSON.stringify(await turnLocks(observer))}`,
    );
  }

  /**
   * A transaction in turn on `on` that has written row `id` (its `v` the same) and holds the
   * turn until `release` opens; `holder` settles once it committed.
   */
  async function holdTurn(
    on: SqlDriver,
    id = 1,
  ): Promise<{ readonly holder: Promise<void>; readonly release: { readonly open: () => void } }> {
    const inserted = gate();
    const release = gate();
    const holder = on.transaction(
      async (tx) => {
        await tx.query("INSERT INTO turn_probe (id, v) VALUES ($1, $1)", [id]);
        inserted.open();
        await release.opened;
      },
      { inTurn: true },
    );
    await inserted.opened;
    return { holder, release };
  }

  const probe = (tx: SqlTx) => tx.query<{ v: number }>("SELECT v FROM turn_probe WHERE id = 1");

  beforeAll(async () => {
    database = await createTestDatabase();
    const setup = await driver();
    await setup.transaction((tx) =>
      tx.query("CREATE TABLE turn_probe (id int PRIMARY KEY, v int)"),
    );
  });

  afterEach(async () => {
    const cleanup = opened[0];
    if (cleanup !== undefined)
      await cleanup.transaction((tx) => tx.query("DELETE FROM turn_probe"));
  });

  afterAll(async () => {
    for (const made of opened) await made.close();
    await database?.drop();
  });

  it("runs a read-only transaction as a read-only snapshot and every other one serializable", async () => {
    const pg = await driver();
    const settings = (tx: SqlTx) =>
      tx.query<{ isolation: string; readOnly: string }>(
        `SELECT current_setting('transaction_isolation') AS isolation, current_setting('transaction_read_only') AS "readOnly"`,
      );
    expect(await pg.transaction(settings, { readOnly: true })).toEqual([
      { isolation: "repeatable read", readOnly: "on" },
    ]);
    expect(await pg.transaction(settings)).toEqual([
      { isolation: "serializable", readOnly: "off" },
    ]);
    expect(await pg.transaction(settings, { inTurn: true })).toEqual([
      { isolation: "serializable", readOnly: "off" },
    ]);
  });

  it("makes a transaction in turn wait for the holder and read what it committed", async () => {
    const [first, second, observer] = [await driver(), await driver(), await driver()];
    const { holder, release } = await holdTurn(first);
    const follower = second.transaction(probe, { inTurn: true });
    // The follower waits for the turn, not for a row: nothing it reads is locked.
    await until(observer, (locks) => locks.held === 1 && locks.waiting === 1);
    release.open();
    await holder;
    // Its snapshot began after the holder's COMMIT.
    expect(await follower).toEqual([{ v: 1 }]);
    await until(observer, (locks) => locks.held === 0 && locks.waiting === 0);
  });

  it("gives the turn back when the transaction fails", async () => {
    const [first, observer] = [await driver(), await driver()];
    await expect(
      first.transaction(
        async (tx) => {
          await tx.query("INSERT INTO turn_probe (id, v) VALUES (1, 1)");
          throw new Error("the body gave up");
        },
        { inTurn: true },
      ),
    ).rejects.toThrow("the body gave up");
    // Its pooled connection is idle now and holds nothing.
    expect(await turnLocks(observer)).toEqual({ held: 0, waiting: 0 });
    expect(await observer.transaction(probe)).toEqual([]);
  });

  it("runs without a turn once the driver's wait is over, and leaves no request behind", async () => {
    const [first, impatient, observer] = [await driver(), await driver(100), await driver()];
    const { holder, release } = await holdTurn(first);
    // Settles while the holder still holds the turn: had it waited for the turn, it never would.
    expect(await impatient.transaction(probe, { inTurn: true })).toEqual([]);
    // The connection that asked was closed, so its request is gone from the server.
    await until(observer, (locks) => locks.held === 1 && locks.waiting === 0);
    release.open();
    await holder;
    expect(await impatient.transaction(probe, { inTurn: true })).toEqual([{ v: 1 }]);
  });

  it("stops asking for turns for a pause once a wait ran out, and asks again after it", async () => {
    // Two drivers of one breaker on a clock of the test's: one gives up on a turn after 100 ms,
    // the other would wait 15 s if it asked at all, and then count a wait that ran out.
    let nowMs = 0;
    const breaker = new TurnBreaker({ firstPauseMs: 4_000, maxPauseMs: 60_000 }, () => nowMs);
    const opening = { connectionString: database.url, poolSize: 2, turnBreaker: breaker };
    const impatient = await openPgDriver({ ...opening, turnWaitMs: 100 });
    const patient = await openPgDriver({ ...opening, turnWaitMs: 15_000 });
    opened.push(impatient, patient);
    const [first, observer] = [await driver(), await driver()];
    const frozen = await holdTurn(first);
    let next: Awaited<ReturnType<typeof holdTurn>> | undefined;
    try {
      // The first page waits, in vain, and runs without its turn.
      expect(await impatient.transaction(probe, { inTurn: true })).toEqual([]);
      expect(breaker.turns).toEqual({ granted: 0, waitsRunOut: 1, skipped: 0 });
      // Within the pause a page does not ask: it settles while the holder still holds the turn,
      // and nothing waits on the server.
      nowMs += 3_999;
      expect(await patient.transaction(probe, { inTurn: true })).toEqual([]);
      expect(await turnLocks(observer)).toEqual({ held: 1, waiting: 0 });
      expect(breaker.turns).toEqual({ granted: 0, waitsRunOut: 1, skipped: 1 });
      // After it one page asks again, waits in vain, and the next pause is twice as long.
      nowMs += 1;
      expect(await impatient.transaction(probe, { inTurn: true })).toEqual([]);
      nowMs += 4_000;
      expect(await patient.transaction(probe, { inTurn: true })).toEqual([]);
      expect(breaker.turns).toEqual({ granted: 0, waitsRunOut: 2, skipped: 2 });
      frozen.release.open();
      await frozen.holder;
      // Once the pause is over, a page takes turns again: it waits for the next holder and
      // reads what that one committed.
      nowMs += 4_000;
      next = await holdTurn(first, 2);
      const follower = patient.transaction(
        (tx) => tx.query<{ v: number }>("SELECT v FROM turn_probe ORDER BY id"),
        { inTurn: true },
      );
      await until(observer, (locks) => locks.held === 1 && locks.waiting === 1);
      next.release.open();
      await next.holder;
      expect(await follower).toEqual([{ v: 1 }, { v: 2 }]);
      expect(breaker.turns).toEqual({ granted: 1, waitsRunOut: 2, skipped: 2 });
      expect(patient.turns).toEqual(breaker.turns);
    } finally {
      // A failed expectation must not leave a holder that keeps the others waiting.
      frozen.release.open();
      next?.release.open();
    }
  });
});
