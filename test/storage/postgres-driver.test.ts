/**
 * The two PostgreSQL drivers against the driver contract (storage/driver.ts): PGlite in
 * memory, and pg against the real server from test/support/global-setup.ts, in one fresh
 * database for this file.
 */
import { createServer } from "node:net";
import { setTimeout as delay } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isQlrError, QlrError } from "../../src/errors.ts";
import type { SqlDriver } from "../../storage/driver.ts";
import { isSerializationFailure, toQlrError } from "../../storage/postgres/errors.ts";
import { openPgDriver } from "../../storage/postgres/pg-driver.ts";
import { openPgliteDriver } from "../../storage/postgres/pglite-driver.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

let database: TestDatabase | undefined;

beforeAll(async () => {
  database = await createTestDatabase();
});

afterAll(async () => {
  await database?.drop();
});

function databaseUrl(): string {
  if (database === undefined) throw new Error("the test database was not created");
  return database.url;
}

interface DriverFactory {
  readonly name: string;
  open(): Promise<SqlDriver>;
}

const factories: readonly DriverFactory[] = [
  { name: "pglite", open: () => openPgliteDriver() },
  { name: "pg", open: () => openPgDriver({ connectionString: databaseUrl(), poolSize: 4 }) },
];

/** Settles every promise and splits the outcomes, so a test can assert on both kinds. */
async function settleAll<T>(
  promises: readonly Promise<T>[],
): Promise<{ values: T[]; errors: unknown[] }> {
  const outcomes = await Promise.allSettled(promises);
  const values: T[] = [];
  const errors: unknown[] = [];
  for (const outcome of outcomes) {
    if (outcome.status === "fulfilled") values.push(outcome.value);
    else errors.push(outcome.reason);
  }
  return { values, errors };
}

/** Resolves for everyone once `parties` callers have arrived; later callers pass straight through. */
function createBarrier(parties: number): () => Promise<void> {
  let arrived = 0;
  let open: () => void = () => undefined;
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  return () => {
    arrived += 1;
    if (arrived >= parties) open();
    return opened;
  };
}

async function readCounter(driver: SqlDriver, table: string): Promise<number> {
  const rows = await driver.transaction((tx) =>
    tx.query<{ value: number }>(`SELECT value FROM ${table} WHERE id = 1`),
  );
  const value = rows[0]?.value;
  if (typeof value !== "number") throw new Error(`counter ${table} is missing`);
  return value;
}

async function createCounter(driver: SqlDriver, table: string): Promise<void> {
  await driver.transaction(async (tx) => {
    await tx.query(`CREATE TABLE ${table} (id int PRIMARY KEY, value bigint NOT NULL)`);
    await tx.query(`INSERT INTO ${table} (id, value) VALUES (1, 0)`);
  });
}

describe.each(factories)("$name driver", (factory) => {
  let driver: SqlDriver;

  beforeAll(async () => {
    driver = await factory.open();
  });

  afterAll(async () => {
    await driver.close();
  });

  it("reports the postgres dialect and its name", () => {
    expect(driver.dialect).toBe("postgres");
    expect(driver.name).toBe(factory.name);
  });

  it("rolls back everything when fn throws and rethrows the same error", async () => {
    await driver.transaction((tx) => tx.query("CREATE TABLE rollback_probe (id int PRIMARY KEY)"));
    const plainError = new Error("fn failed on purpose");
    await expect(
      driver.transaction(async (tx) => {
        await tx.query("INSERT INTO rollback_probe (id) VALUES ($1), ($2)", [1, 2]);
        throw plainError;
      }),
    ).rejects.toBe(plainError);

    const typedError = new QlrError("illegal_transition", "the caller's own typed error");
    await expect(
      driver.transaction(async (tx) => {
        await tx.query("INSERT INTO rollback_probe (id) VALUES ($1)", [3]);
        throw typedError;
      }),
    ).rejects.toBe(typedError);

    const rows = await driver.transaction((tx) =>
      tx.query<{ n: number }>("SELECT count(*) AS n FROM rollback_probe"),
    );
    expect(rows).toEqual([{ n: 0 }]);
  });

  it("maps a duplicate key (23505) to conflict and keeps the first row", async () => {
    await driver.transaction(async (tx) => {
      await tx.query("CREATE TABLE duplicate_probe (id text PRIMARY KEY)");
      await tx.query("INSERT INTO duplicate_probe (id) VALUES ($1)", ["run-1"]);
    });
    const failure: unknown = await driver
      .transaction((tx) => tx.query("INSERT INTO duplicate_probe (id) VALUES ($1)", ["run-1"]))
      .catch((error: unknown) => error);
    expect(isQlrError(failure, "conflict")).toBe(true);
    expect((failure as QlrError).cause).toMatchObject({
      code: "23505",
      constraint: "duplicate_probe_pkey",
    });

    const rows = await driver.transaction((tx) => tx.query("SELECT id FROM duplicate_probe"));
    expect(rows).toEqual([{ id: "run-1" }]);
  });

  it("returns int8 and numeric as JavaScript numbers and refuses unsafe integers", async () => {
    const rows = await driver.transaction(async (tx) => {
      await tx.query("CREATE TABLE int8_probe (at_ms bigint NOT NULL)");
      await tx.query(
        "INSERT INTO int8_probe (at_ms) VALUES ($1), ($2)",
        [1_767_225_600_000, 9_007_199_254_740_991],
      );
      return tx.query(
        "SELECT max(at_ms) AS max_ms, min(at_ms) AS min_ms, count(*) AS n, sum(at_ms - 1767225600000) AS delta_sum, 2.5::numeric AS ratio FROM int8_probe",
      );
    });
    expect(rows).toEqual([
      {
        max_ms: 9_007_199_254_740_991,
        min_ms: 1_767_225_600_000,
        n: 2,
        delta_sum: 9_007_199_254_740_991 - 1_767_225_600_000,
        ratio: 2.5,
      },
    ]);

    const failure: unknown = await driver
      .transaction((tx) => tx.query("SELECT 9007199254740993::int8 AS too_big"))
      .catch((error: unknown) => error);
    expect(isQlrError(failure, "internal")).toBe(true);
    await expect(driver.transaction((tx) => tx.query("SELECT 1::int8 AS one"))).resolves.toEqual([
      { one: 1 },
    ]);
  });

  it("commits nothing when fn swallows a statement error, and says so", async () => {
    await driver.transaction((tx) => tx.query("CREATE TABLE swallow_probe (id int PRIMARY KEY)"));
    const failure: unknown = await driver
      .transaction(async (tx) => {
        await tx.query("INSERT INTO swallow_probe (id) VALUES (1)");
        await tx.query("SELECT 1 / 0").catch(() => undefined);
        return "fn thinks it succeeded";
      })
      .catch((error: unknown) => error);
    expect(isQlrError(failure, "internal")).toBe(true);
    expect((failure as QlrError).cause).toMatchObject({ code: "22012" });
    const rows = await driver.transaction((tx) =>
      tx.query<{ n: number }>("SELECT count(*) AS n FROM swallow_probe"),
    );
    expect(rows).toEqual([{ n: 0 }]);
  });

  it("applies N concurrent read-then-write increments exactly once each", async () => {
    const increments = 8;
    await createCounter(driver, "counter_many");
    let invocations = 0;
    const { values, errors } = await settleAll(
      Array.from({ length: increments }, () =>
        driver.transaction(async (tx) => {
          invocations += 1;
          const rows = await tx.query<{ value: number }>(
            "SELECT value FROM counter_many WHERE id = 1",
          );
          const current = rows[0]?.value ?? Number.NaN;
          // The pause lets the other transactions read the same value first.
          await delay(2);
          await tx.query("UPDATE counter_many SET value = $1 WHERE id = 1", [current + 1]);
          return current + 1;
        }),
      ),
    );

    for (const error of errors) expect(isQlrError(error, "conflict")).toBe(true);
    expect(await readCounter(driver, "counter_many")).toBe(values.length);
    expect(new Set(values).size).toBe(values.length);
    expect(invocations).toBeGreaterThanOrEqual(increments);
    // Eight attempts outlast seven competitors: each lost attempt is another one's commit.
    expect(values).toHaveLength(increments);
  });

  // PGlite costs about 700 MiB per instance, so its queueing tests share this one instead
  // of opening a second; they are registered for PGlite only, not skipped for pg.
  if (factory.name === "pglite") {
    it("runs concurrent transactions one after another even when they await inside", async () => {
      await createCounter(driver, "queue_probe");
      const events: string[] = [];
      const incrementSlowly = (label: string): Promise<number> =>
        driver.transaction(async (tx) => {
          events.push(`${label}:start`);
          const rows = await tx.query<{ value: number }>(
            "SELECT value FROM queue_probe WHERE id = 1",
          );
          await delay(20);
          const next = (rows[0]?.value ?? Number.NaN) + 1;
          await tx.query("UPDATE queue_probe SET value = $1 WHERE id = 1", [next]);
          events.push(`${label}:end`);
          return next;
        });

      const results = await Promise.all([incrementSlowly("a"), incrementSlowly("b")]);
      expect(events).toEqual(["a:start", "a:end", "b:start", "b:end"]);
      expect(results).toEqual([1, 2]);
      expect(await readCounter(driver, "queue_probe")).toBe(2);
    });

    it("keeps the queue moving after a failed transaction", async () => {
      const failing = driver.transaction(async () => {
        await delay(5);
        throw new Error("first one fails");
      });
      const following = driver.transaction((tx) => tx.query<{ ok: number }>("SELECT 1 AS ok"));
      await expect(failing).rejects.toThrow("first one fails");
      await expect(following).resolves.toEqual([{ ok: 1 }]);
    });
  }

  it("closes idempotently and refuses transactions afterwards", async () => {
    await driver.close();
    await driver.close();
    const failure: unknown = await driver
      .transaction((tx) => tx.query("SELECT 1"))
      .catch((error: unknown) => error);
    expect(isQlrError(failure, "storage_unavailable")).toBe(true);
  });
});

describe("pg driver on the real server", () => {
  let driver: SqlDriver;

  beforeAll(async () => {
    driver = await openPgDriver({ connectionString: databaseUrl(), poolSize: 4 });
  });

  afterAll(async () => {
    await driver.close();
  });

  interface Race {
    outcome: Promise<{ values: number[]; errors: unknown[] }>;
    /** Transaction bodies run, retries included. */
    invocations: () => number;
  }

  /**
   * Two transactions each read one number (`readSql`, as `value`), meet at a barrier once
   * both have read, then each writes that number plus one into its own row of `rowIds`.
   */
  function raceReadThenWrite(
    target: SqlDriver,
    table: string,
    readSql: string,
    rowIds: readonly [number, number],
  ): Race {
    const bothHaveRead = createBarrier(2);
    let invocations = 0;
    const readThenWrite = (id: number): Promise<number> =>
      target.transaction(async (tx) => {
        invocations += 1;
        const rows = await tx.query<{ value: number }>(readSql);
        await bothHaveRead();
        const next = (rows[0]?.value ?? Number.NaN) + 1;
        await tx.query(`UPDATE ${table} SET value = $1 WHERE id = $2`, [next, id]);
        return next;
      });
    return {
      outcome: settleAll(rowIds.map((id) => readThenWrite(id))),
      invocations: () => invocations,
    };
  }

  /** Two transactions both read the counter, meet at a barrier, then both write it. */
  function raceTwoIncrements(target: SqlDriver, table: string): Race {
    return raceReadThenWrite(target, table, `SELECT value FROM ${table} WHERE id = 1`, [1, 1]);
  }

  it("retries a real serialization failure so both increments apply", async () => {
    await createCounter(driver, "counter_retry");
    const race = raceTwoIncrements(driver, "counter_retry");
    const { values, errors } = await race.outcome;
    expect(errors).toEqual([]);
    expect(values.sort()).toEqual([1, 2]);
    // The loser ran again after its first attempt was aborted.
    expect(race.invocations()).toBeGreaterThanOrEqual(3);
    expect(await readCounter(driver, "counter_retry")).toBe(2);
  });

  it("ends in a retryable storage_unavailable (never a conflict) when the retries are exhausted, with nothing of the loser applied", async () => {
    await createCounter(driver, "counter_exhausted");
    const singleAttempt = await openPgDriver({
      connectionString: databaseUrl(),
      poolSize: 2,
      serializableRetry: { maxAttempts: 1 },
    });
    try {
      const race = raceTwoIncrements(singleAttempt, "counter_exhausted");
      const { values, errors } = await race.outcome;
      expect(values).toEqual([1]);
      expect(errors).toHaveLength(1);
      expect(isQlrError(errors[0], "storage_unavailable")).toBe(true);
      expect(isSerializationFailure(errors[0])).toBe(true);
      expect(race.invocations()).toBe(2);
    } finally {
      await singleAttempt.close();
    }
    expect(await readCounter(driver, "counter_exhausted")).toBe(1);
  });

  /**
   * Two transactions both read the sum of two rows, meet, then each writes a different row.
   * No row lock blocks either; PostgreSQL's SSI finds the cycle and aborts one, at its
   * UPDATE or at its COMMIT depending on timing, and both paths must be retried.
   */
  function raceWriteSkew(target: SqlDriver, table: string): Race {
    return raceReadThenWrite(target, table, `SELECT sum(value) AS value FROM ${table}`, [1, 2]);
  }

  async function createPair(table: string): Promise<void> {
    await driver.transaction(async (tx) => {
      await tx.query(`CREATE TABLE ${table} (id int PRIMARY KEY, value bigint NOT NULL)`);
      await tx.query(`INSERT INTO ${table} (id, value) VALUES (1, 0), (2, 0)`);
    });
  }

  async function readSum(table: string): Promise<number> {
    const rows = await driver.transaction((tx) =>
      tx.query<{ total: number }>(`SELECT sum(value) AS total FROM ${table}`),
    );
    return rows[0]?.total ?? Number.NaN;
  }

  it("retries a write skew (a read/write dependency cycle) into a serial outcome", async () => {
    await createPair("pair_retry");
    const race = raceWriteSkew(driver, "pair_retry");
    const { values, errors } = await race.outcome;
    expect(errors).toEqual([]);
    expect(values.sort()).toEqual([1, 2]);
    expect(race.invocations()).toBeGreaterThanOrEqual(3);
    // Serial order: the first sets its row to 1, the second sees 1 and sets its row to 2.
    expect(await readSum("pair_retry")).toBe(3);
  });

  it("reports an unretried write skew as a retryable storage_unavailable, with nothing of the loser applied", async () => {
    await createPair("pair_exhausted");
    const singleAttempt = await openPgDriver({
      connectionString: databaseUrl(),
      poolSize: 2,
      serializableRetry: { maxAttempts: 1 },
    });
    try {
      const { values, errors } = await raceWriteSkew(singleAttempt, "pair_exhausted").outcome;
      expect(values).toEqual([1]);
      expect(errors).toHaveLength(1);
      expect(isQlrError(errors[0], "storage_unavailable")).toBe(true);
      expect(isSerializationFailure(errors[0])).toBe(true);
    } finally {
      await singleAttempt.close();
    }
    expect(await readSum("pair_exhausted")).toBe(1);
  });

  it("connects as application qlr", async () => {
    const rows = await driver.transaction((tx) =>
      tx.query(
        "SELECT current_setting('application_name') AS name, current_setting('transaction_isolation') AS isolation",
      ),
    );
    expect(rows).toEqual([{ name: "qlr", isolation: "serializable" }]);
  });

  it("maps a statement timeout to storage_unavailable", async () => {
    const impatient = await openPgDriver({
      connectionString: databaseUrl(),
      poolSize: 1,
      statementTimeoutMs: 50,
    });
    try {
      const failure: unknown = await impatient
        .transaction((tx) => tx.query("SELECT pg_sleep(2)"))
        .catch((error: unknown) => error);
      expect(isQlrError(failure, "storage_unavailable")).toBe(true);
      expect((failure as QlrError).cause).toMatchObject({ code: "57014" });
      await expect(impatient.transaction((tx) => tx.query("SELECT 1 AS ok"))).resolves.toEqual([
        { ok: 1 },
      ]);
    } finally {
      await impatient.close();
    }
  });

  it("fails to open with storage_unavailable when nothing listens", async () => {
    const closedPort = await new Promise<number>((resolve, reject) => {
      const probe = createServer();
      probe.once("error", reject);
      probe.listen(0, "127.0.0.1", () => {
        const address = probe.address();
        probe.close(() =>
          address !== null && typeof address === "object"
            ? resolve(address.port)
            : reject(new Error("no TCP address")),
        );
      });
    });
    const failure: unknown = await openPgDriver({
      connectionString: `postgres://nobody:nothing@127.0.0.1:${closedPort}/none`,
      connectTimeoutMs: 2_000,
    }).catch((error: unknown) => error);
    expect(isQlrError(failure, "storage_unavailable")).toBe(true);
  });
});

describe("postgres error mapping", () => {
  const serverError = (code: string, extra: Record<string, unknown> = {}): Error =>
    Object.assign(new Error(`server says ${code}`), { code, severity: "ERROR", ...extra });

  it("treats serialization failures and deadlocks as retryable conflicts, also through a cause", () => {
    for (const code of ["40001", "40P01"]) {
      const raw = serverError(code);
      expect(isSerializationFailure(raw)).toBe(true);
      const mapped = toQlrError(raw);
      expect(mapped.code).toBe("conflict");
      expect(mapped.cause).toBe(raw);
      expect(isSerializationFailure(new QlrError("conflict", "wrapped", { cause: mapped }))).toBe(
        true,
      );
    }
    expect(isSerializationFailure(serverError("23505"))).toBe(false);
  });

  it("maps integrity, availability and unknown errors to their codes", () => {
    expect(toQlrError(serverError("23505", { constraint: "runs_pkey" }))).toMatchObject({
      code: "conflict",
      message: expect.stringContaining("runs_pkey") as unknown,
    });
    expect(toQlrError(serverError("23503")).code).toBe("conflict");
    expect(toQlrError(serverError("23502")).code).toBe("invalid_request");
    expect(toQlrError(serverError("23514")).code).toBe("invalid_request");
    expect(toQlrError(serverError("08006")).code).toBe("storage_unavailable");
    expect(toQlrError(serverError("57P01")).code).toBe("storage_unavailable");
    expect(toQlrError(serverError("53300")).code).toBe("storage_unavailable");
    expect(toQlrError(serverError("55P03")).code).toBe("storage_locked");
    expect(toQlrError(serverError("XX001")).code).toBe("storage_corrupt");
    expect(toQlrError(serverError("42P01")).code).toBe("internal");
    // A socket error's code looks like a SQLSTATE but has no severity.
    expect(toQlrError(Object.assign(new Error("write EPIPE"), { code: "EPIPE" })).code).toBe(
      "storage_unavailable",
    );
    expect(toQlrError(new Error("Connection terminated unexpectedly")).code).toBe(
      "storage_unavailable",
    );
    const unknown = new TypeError("not a database error");
    expect(toQlrError(unknown)).toMatchObject({ code: "internal", cause: unknown });
  });

  it("passes a QlrError through untouched", () => {
    const typed = new QlrError("not_found", "no such run");
    expect(toQlrError(typed)).toBe(typed);
  });
});
