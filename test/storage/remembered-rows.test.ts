import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimedAttempt } from "../../src/attempts.ts";
import { isQlrError } from "../../src/errors.ts";
import { EMPTY_CHANGE_SET } from "../../src/model.ts";
import { applyPackage, cancelRun, startRun } from "../../src/operations.ts";
import type { LocalProcessRevision } from "../../src/packages.ts";
import type { StoreTx } from "../../src/ports.ts";
import type { SqlDriver } from "../../storage/driver.ts";
import { lossyDriver, type LossyDriver } from "../../storage/lossy-driver.ts";
import { openSqlStore, type SqlStore } from "../../storage/sql-store.ts";
import { REMEMBERED_ROWS_MAX } from "../../storage/sql-store/transaction-rows.ts";
import { migrationsFor } from "../support/dialect-migrations.ts";
import { DRIVERS, type DriverFactory } from "../support/drivers.ts";
import { diamondManifest, SequentialIds, TestClock, workflowStart } from "../support/fixtures.ts";

/**
 * Rows a store remembers across its transactions (storage/sql-store/transaction-rows.ts): on a driver that
 * is the sole writer of its database a second transaction reads a remembered row with no
 * statement, and a failed transaction, a lost commit response, a write by any other caller and
 * the cap each make the next read go to the database; on PostgreSQL through `pg` no row
 * outlives a transaction (only a page preload's steps and receipts kept by run version, which
 * test/storage/runs-kept-by-version.test.ts covers). Statements are counted between the store
 * and the driver.
 */
/** What `readRun` costs when nothing is remembered: the clock's observation, the run, the run's steps. */
const FRESH_READ_STATEMENTS = 3;

function describeRememberedRows(factory: DriverFactory): void {
  const soleWriter = factory.name !== "postgres";

  describe(`rows remembered across transactions on ${factory.name}`, () => {
    let driver: SqlDriver;
    let lossy: LossyDriver;
    let store: SqlStore;
    const statements: string[] = [];
    const clock = new TestClock();
    const ids = new SequentialIds(`mem${factory.name.replace(/[^a-z0-9]/g, "")}`);

    beforeAll(async () => {
      driver = await factory.open();
      lossy = lossyDriver(driver);
      const counting: SqlDriver = {
        dialect: driver.dialect,
        name: driver.name,
        close: () => lossy.driver.close(),
        get soleWriterTransactions() {
          return lossy.driver.soleWriterTransactions;
        },
        transaction: (fn) =>
          lossy.driver.transaction((tx) =>
            fn({
              query: (sql, params) => {
                statements.push(sql);
                return tx.query(sql, params);
              },
            }),
          ),
      };
      store = await openSqlStore(counting, migrationsFor(driver.dialect), clock.nowMs());
    });
    afterAll(async () => {
      await store?.close();
    });

    /** `$n` on PostgreSQL, `?` on SQLite. */
    function placeholder(position: number): string {
      return driver.dialect === "postgres" ? `$${position}` : "?";
    }

    /** How many statements `read` cost, and what it returned. */
    async function counted<T>(read: () => Promise<T>): Promise<{ statements: number; value: T }> {
      const before = statements.length;
      const value = await read();
      return { statements: statements.length - before, value };
    }

    async function newRun(packageName: string): Promise<string> {
      return store.transaction(async (tx) => {
        const nowMs = await tx.observe(clock.nowMs());
        await applyPackage(tx, diamondManifest(packageName), nowMs);
        const { run } = await startRun(
          tx,
          workflowStart(packageName, "diamond", ids.runId()),
          nowMs,
        );
        return run.id;
      });
    }

    /** Observes the clock, reads the run, its steps and one step by id in a transaction of its own. */
    function readRun(runId: string) {
      return counted(() =>
        store.transaction(async (tx) => {
          await tx.observe(clock.nowMs());
          const run = await tx.getRun(runId);
          const steps = await tx.getSteps(runId);
          const step = await tx.getStep(steps[0]?.id ?? "");
          return { run, steps, step };
        }),
      );
    }

    it(
      soleWriter
        ? "a second transaction reads the rows the first read or wrote with no statement"
        : "nothing outlives a transaction: each one reads the rows again",
      async () => {
        const runId = await newRun("mem-read");
        const first = await readRun(runId);
        const second = await readRun(runId);
        expect(second.value).toEqual(first.value);
        expect(second.value.run?.id).toBe(runId);
        expect(second.value.steps).toHaveLength(4);
        // The run and the clock are known from its start; the run's list of steps is read once.
        expect(first.statements).toBe(soleWriter ? 1 : FRESH_READ_STATEMENTS);
        expect(second.statements).toBe(soleWriter ? 0 : FRESH_READ_STATEMENTS);
        expect(Object.isFrozen(second.value.run)).toBe(true);
      },
    );

    /** Ways a transaction fails after it cancelled the run, and how its error is recognised. */
    const failures: readonly {
      readonly how: string;
      readonly fail: (tx: StoreTx, runId: string) => Promise<void>;
      readonly recognised: (error: unknown) => boolean;
    }[] = [
      {
        how: "throws",
        fail: () => Promise.reject(new Error("the caller gives up after writing")),
        recognised: (error) => error instanceof Error,
      },
      {
        how: "meets a conflict",
        fail: async (tx, runId) => {
          const [step] = await tx.getSteps(runId);
          const run = await tx.getRun(runId);
          if (step === undefined || run === null) throw new Error("a diamond run has steps");
          const stale = { ...step, version: step.version + 100 };
          await tx.apply({
            ...EMPTY_CHANGE_SET,
            // The run moves as in every change of a step; the step's stale version loses its CAS.
            runs: [{ before: run, after: { ...run, version: run.version + 1 } }],
            steps: [{ before: stale, after: { ...stale, version: stale.version + 1 } }],
          });
        },
        recognised: (error) => isQlrError(error, "conflict"),
      },
    ];

    for (const { how, fail, recognised } of failures) {
      it(`after a transaction that ${how}, the next read goes to the database and returns the committed rows`, async () => {
        const runId = await newRun(`mem-${how.replace(/\W+/g, "-")}`);
        const committed = (await readRun(runId)).value;
        const thrown = await store
          .transaction(async (tx) => {
            await cancelRun(tx, runId, await tx.observe(clock.nowMs()));
            // Read back inside: the cancelled run is what this transaction remembers now.
            expect((await tx.getRun(runId))?.cancelRequestedAtMs).not.toBeNull();
            await fail(tx, runId);
          })
          .catch((caught: unknown) => caught);
        expect(recognised(thrown)).toBe(true);
        const after = await readRun(runId);
        expect(after.statements).toBe(FRESH_READ_STATEMENTS);
        expect(after.value).toEqual(committed);
        expect(after.value.run?.cancelRequestedAtMs).toBeNull();
      });
    }

    it("after a commit whose response was lost, the next read goes to the database and finds what committed", async () => {
      const runId = await newRun("mem-lost");
      await readRun(runId);
      lossy.arm();
      const thrown = await store
        .transaction(async (tx) => cancelRun(tx, runId, await tx.observe(clock.nowMs())))
        .catch((caught: unknown) => caught);
      expect(thrown).toBeInstanceOf(Error);
      const after = await readRun(runId);
      expect(after.statements).toBe(FRESH_READ_STATEMENTS);
      expect(after.value.run?.cancelRequestedAtMs).not.toBeNull();
    });

    it("after a raw write through the driver, the store reads fresh rows", async () => {
      const RAW_NOT_BEFORE_MS = 1_234;
      const runId = await newRun("mem-raw");
      await readRun(runId);
      await driver.transaction((tx) =>
        tx.query(`UPDATE runs SET not_before_ms = ${placeholder(1)} WHERE id = ${placeholder(2)}`, [
          RAW_NOT_BEFORE_MS,
          runId,
        ]),
      );
      const after = await readRun(runId);
      expect(after.statements).toBe(FRESH_READ_STATEMENTS);
      expect(after.value.run?.notBeforeMs).toBe(RAW_NOT_BEFORE_MS);
      // A raw transaction that failed wrote nothing: what the store remembered still holds.
      await driver
        .transaction(async (tx) => {
          await tx.query(`UPDATE runs SET not_before_ms = NULL WHERE id = ${placeholder(1)}`, [
            runId,
          ]);
          throw new Error("rolled back");
        })
        .catch(() => undefined);
      const again = await readRun(runId);
      expect(again.value.run?.notBeforeMs).toBe(RAW_NOT_BEFORE_MS);
      expect(again.statements).toBe(soleWriter ? 0 : after.statements);
    });

    it("an attempt numbered past its run's last extends the remembered list; one numbered before it makes the list be read again", async () => {
      const runId = await newRun("mem-insert");
      const steps = (await readRun(runId)).value.steps;
      const step = steps[0];
      if (step === undefined) throw new Error("a diamond run has steps");
      const execution: LocalProcessRevision = {
        executor: "local_process",
        argv: ["true"],
        env: {},
        cwd: null,
        timeoutMs: 1_000,
        stdin: "none",
        shell: false,
      };
      const attempt = (number: number) =>
        claimedAttempt(
          { id: `${runId}-a${number}`, runId, stepRunId: step.id, stepRunVersion: 1, number },
          execution,
          clock.nowMs(),
        );
      const insert = (numbers: readonly number[]) =>
        store.transaction(async (tx) => {
          await tx.observe(clock.nowMs());
          // Read whole first, as a stage does before it admits.
          await tx.getAttempts(runId);
          const run = await tx.getRun(runId);
          if (run === null) throw new Error(`no run ${runId}`);
          await tx.apply({
            ...EMPTY_CHANGE_SET,
            // A new attempt moves its run, as every admission does.
            runs: [{ before: run, after: { ...run, version: run.version + 1 } }],
            attempts: numbers.map((number) => ({ before: null, after: attempt(number) })),
          });
        });
      const listed = () => counted(() => store.transaction((tx) => tx.getAttempts(runId)));
      /** What the database lists, read past the store. */
      const stored = async () =>
        (
          await driver.transaction((tx) =>
            tx.query<{ number: number }>(
              `SELECT number FROM run_attempts WHERE run_id = ${placeholder(1)} ORDER BY number`,
              [runId],
            ),
          )
        ).map((row) => Number(row.number));

      await insert([1]);
      const afterFirst = await listed();
      expect(afterFirst.value.map((row) => row.number)).toEqual(await stored());
      expect(afterFirst.statements).toBe(soleWriter ? 0 : 1);
      // 3 extends the list; 2 then sorts before its last: the list is read again, in order.
      await insert([3, 2]);
      const afterBoth = await listed();
      expect(afterBoth.value.map((row) => row.number)).toEqual([1, 2, 3]);
      expect(afterBoth.value.map((row) => row.number)).toEqual(await stored());
      expect(afterBoth.statements).toBe(1);
    });

    it(`past ${REMEMBERED_ROWS_MAX} remembered rows, the next transaction starts by forgetting them all`, async () => {
      const runId = await newRun("mem-cap");
      await readRun(runId);
      // Answers of "no such run" are remembered rows too: a few stay under the cap.
      const fewMissing = Array.from({ length: 16 }, (_, index) => `mem-missing-few-${index}`);
      await store.transaction(async (tx) => {
        for (const missing of fewMissing) await tx.getRun(missing);
      });
      expect((await readRun(runId)).statements).toBe(soleWriter ? 0 : FRESH_READ_STATEMENTS);
      const manyMissing = Array.from(
        { length: REMEMBERED_ROWS_MAX + 1 },
        (_, index) => `mem-missing-many-${index}`,
      );
      await store.transaction(async (tx) => {
        for (const missing of manyMissing) await tx.getRun(missing);
      });
      const after = await readRun(runId);
      expect(after.statements).toBe(FRESH_READ_STATEMENTS);
      expect(after.value.run?.id).toBe(runId);
    });
  });
}

for (const factory of DRIVERS) describeRememberedRows(factory);
