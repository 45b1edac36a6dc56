import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isQlrError } from "../../src/errors.ts";
import { claimedAttempt } from "../../src/attempts.ts";
import { EMPTY_CHANGE_SET, type ChangeSet } from "../../src/model.ts";
import { applyPackage, startRun } from "../../src/operations.ts";
import type { RemoteWorkerRevision } from "../../src/packages.ts";
import type { SqlDriver } from "../../storage/driver.ts";
import { openPgDriver } from "../../storage/postgres/pg-driver.ts";
import { openSqlStore, type SqlStore } from "../../storage/sql-store.ts";
import { migrationsFor } from "../support/dialect-migrations.ts";
import { DRIVERS } from "../support/drivers.ts";
import { countOrphanRows } from "../support/store-dump.ts";
import { diamondManifest, SequentialIds, TestClock, workflowStart } from "../support/fixtures.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

/**
 * A run's steps and receipts kept by run version across transactions on PostgreSQL, where
 * other coordinators write the same database (storage/sql-store/run-rows-by-version.ts): a page's preload
 * of a run whose row has not moved reads them from no statement; a run another store moved is
 * read again and what it returns is the database's; and the store refuses the one kind of change
 * that would make a run's version not stand for its steps (the memory's own rules:
 * test/unit/run-rows-by-version.test.ts). Two stores on two pools of one real
 * PostgreSQL database play two coordinators; statements are counted between store and driver.
 */

/** A driver that records the text of every statement sent through it. */
function counting(driver: SqlDriver, statements: string[]): SqlDriver {
  return {
    dialect: driver.dialect,
    name: driver.name,
    close: () => driver.close(),
    transaction: (fn, options) =>
      driver.transaction(
        (tx) =>
          fn({
            query: (sql, params) => {
              statements.push(sql);
              return tx.query(sql, params);
            },
          }),
        options,
      ),
  };
}

const REMOTE: RemoteWorkerRevision = {
  executor: "remote_worker",
  pool: "default",
  argv: ["true"],
  env: {},
  timeoutMs: 60_000,
  shell: false,
};

const readsOf = (table: string, statements: readonly string[]): number =>
  statements.filter((sql) => sql.startsWith("SELECT") && sql.includes(` ${table} `)).length;

describe("steps and receipts kept by run version on postgres", () => {
  let database: TestDatabase;
  let mine: SqlStore;
  let theirs: SqlStore;
  const sent: string[] = [];
  const clock = new TestClock();
  const ids = new SequentialIds("kept");

  beforeAll(async () => {
    database = await createTestDatabase();
    const open = async (statements: string[] | null): Promise<SqlStore> => {
      const driver = await openPgDriver({ connectionString: database.url, poolSize: 2 });
      const wrapped = statements === null ? driver : counting(driver, statements);
      return openSqlStore(wrapped, migrationsFor("postgres"), clock.nowMs());
    };
    mine = await open(sent);
    theirs = await open(null);
  });
  afterAll(async () => {
    await mine?.close();
    await theirs?.close();
    await database?.drop();
  });

  async function newRun(): Promise<string> {
    const packageName = `kept-${ids.runId()}`;
    return mine.transaction(async (tx) => {
      const nowMs = await tx.observe(clock.nowMs());
      await applyPackage(tx, diamondManifest(packageName), nowMs);
      const { run } = await startRun(tx, workflowStart(packageName, "diamond", ids.runId()), nowMs);
      return run.id;
    });
  }

  /** A page's preload of `runId` in a transaction of `mine`: the statements it sent and the steps it knows. */
  async function preload(runId: string) {
    const first = sent.length;
    const read = await mine.transaction(async (tx) => {
      await tx.preloadRuns([runId]);
      const before = sent.length;
      const steps = await tx.getSteps(runId);
      const receipt = await tx.getAdmission(runId, steps[0]?.id ?? "", 1);
      // Both answered from what the preload knew.
      expect(sent.length).toBe(before);
      return { steps, receipt };
    });
    return { ...read, statements: sent.slice(first) };
  }

  it("a preload of a run whose row has not moved since a commit reads no step and no receipt, and returns the same rows", async () => {
    const runId = await newRun();
    const first = await preload(runId);
    expect(readsOf("step_runs", first.statements)).toBe(1);
    expect(readsOf("admission_receipts", first.statements)).toBe(1);
    const second = await preload(runId);
    expect(readsOf("step_runs", second.statements)).toBe(0);
    expect(readsOf("admission_receipts", second.statements)).toBe(0);
    // No attempt runs on a remote worker: the attempts are kept too.
    expect(readsOf("run_attempts", second.statements)).toBe(0);
    // The run row is still read: it is what vouches for the rest.
    expect(readsOf("runs", second.statements)).toBe(1);
    expect(second.steps).toEqual(first.steps);
    expect(second.steps).toHaveLength(4);
    expect(second.receipt).toBeNull();
  });

  it("a run another coordinator moved is read again, and the steps returned are the database's", async () => {
    const runId = await newRun();
    await preload(runId);
    await theirs.transaction(async (tx) => {
      const nowMs = await tx.observe(clock.advance(10));
      const run = await tx.getRun(runId);
      const [step] = await tx.getSteps(runId);
      if (run === null || step === undefined) throw new Error("a diamond run has steps");
      await tx.apply({
        ...EMPTY_CHANGE_SET,
        runs: [{ before: run, after: { ...run, version: run.version + 1, updatedAtMs: nowMs } }],
        steps: [{ before: step, after: { ...step, version: step.version + 1, readyAtMs: nowMs } }],
      });
    });
    const after = await preload(runId);
    expect(readsOf("step_runs", after.statements)).toBe(1);
    expect(readsOf("admission_receipts", after.statements)).toBe(1);
    const stored = await theirs.transaction((tx) => tx.getSteps(runId));
    expect(after.steps).toEqual(stored);
    expect(after.steps[0]?.readyAtMs).toBe(clock.nowMs());
  });

  it("a run with a remote worker's attempt has its attempts read at each preload, and sees a lease another coordinator extended", async () => {
    const runId = await newRun();
    const attemptId = `${runId}-remote`;
    await mine.transaction(async (tx) => {
      const nowMs = await tx.observe(clock.advance(10));
      const run = await tx.getRun(runId);
      const [step] = await tx.getSteps(runId);
      if (run === null || step === undefined) throw new Error("a diamond run has steps");
      const claimed = claimedAttempt(
        { id: attemptId, runId, stepRunId: step.id, stepRunVersion: step.version, number: 1 },
        REMOTE,
        nowMs,
      );
      await tx.apply({
        ...EMPTY_CHANGE_SET,
        runs: [{ before: run, after: { ...run, version: run.version + 1, updatedAtMs: nowMs } }],
        attempts: [{ before: null, after: claimed }],
      });
    });
    await preload(runId);
    const second = await preload(runId);
    expect(readsOf("step_runs", second.statements)).toBe(0);
    expect(readsOf("run_attempts", second.statements)).toBe(1);
    // A lease extension moves the attempt alone (src/leases.ts), on the other coordinator.
    const extendedToMs = clock.advance(10) + 30_000;
    await theirs.transaction(async (tx) => {
      await tx.observe(clock.nowMs());
      const attempt = await tx.getAttempt(attemptId);
      if (attempt === null) throw new Error("the attempt was inserted");
      await tx.apply({
        ...EMPTY_CHANGE_SET,
        attempts: [
          {
            before: attempt,
            after: { ...attempt, version: attempt.version + 1, leaseExpiresAtMs: extendedToMs },
          },
        ],
      });
    });
    const seen = await mine.transaction(async (tx) => {
      await tx.preloadRuns([runId]);
      return tx.getAttempt(attemptId);
    });
    expect(seen?.leaseExpiresAtMs).toBe(extendedToMs);
  });

  it("a transaction that fails keeps nothing: the next preload reads the run's rows again", async () => {
    const runId = await newRun();
    const thrown = await mine
      .transaction(async (tx) => {
        await tx.preloadRuns([runId]);
        throw new Error("rolled back");
      })
      .catch((caught: unknown) => caught);
    expect(thrown).toBeInstanceOf(Error);
    const after = await preload(runId);
    expect(readsOf("step_runs", after.statements)).toBe(1);
  });
});

describe("the store refuses a change that writes a run's rows without moving its run", () => {
  for (const factory of DRIVERS) {
    it(`on ${factory.name}: internal error, nothing written`, async () => {
      const driver = await factory.open();
      const clock = new TestClock();
      const store = await openSqlStore(driver, migrationsFor(driver.dialect), clock.nowMs());
      try {
        const runId = await store.transaction(async (tx) => {
          const nowMs = await tx.observe(clock.nowMs());
          await applyPackage(tx, diamondManifest("refused"), nowMs);
          const { run } = await startRun(tx, workflowStart("refused", "diamond", "run-1"), nowMs);
          return run.id;
        });
        const [step] = await store.transaction((tx) => tx.getSteps(runId));
        if (step === undefined) throw new Error("a diamond run has steps");
        /** What applying `change` alone threw. */
        const thrownBy = (change: Partial<ChangeSet>) =>
          store
            .transaction(async (tx) => {
              await tx.observe(clock.nowMs());
              await tx.apply({ ...EMPTY_CHANGE_SET, ...change });
            })
            .catch((caught: unknown) => caught);
        const moved = { ...step, version: step.version + 1, status: "skipped" as const };
        expect(
          isQlrError(await thrownBy({ steps: [{ before: step, after: moved }] }), "internal"),
        ).toBe(true);
        const [stored] = await store.transaction((tx) => tx.getSteps(runId));
        expect(stored).toEqual(step);
        // A new attempt, even a remote worker's, moves its run too.
        const remote = claimedAttempt(
          { id: `${runId}-r`, runId, stepRunId: step.id, stepRunVersion: step.version, number: 1 },
          REMOTE,
          clock.nowMs(),
        );
        expect(
          isQlrError(await thrownBy({ attempts: [{ before: null, after: remote }] }), "internal"),
        ).toBe(true);
        expect(await store.transaction((tx) => tx.getAttempts(runId))).toEqual([]);
        // An event or a step mutation alone is a row of the run too.
        const run = await store.transaction((tx) => tx.getRun(runId));
        if (run === null) throw new Error("the run was just started");
        const event = {
          id: `evt:${runId}:${run.eventSeq + 1}`,
          runId,
          seq: run.eventSeq + 1,
          type: "attempt.status_changed" as const,
          atMs: clock.nowMs(),
          stepRunId: step.id,
          attemptId: null,
          data: {},
        };
        expect(isQlrError(await thrownBy({ events: [event] }), "internal")).toBe(true);
        const mutation = {
          runId,
          stepRunId: step.id,
          version: step.version + 1,
          fromStatus: step.status,
          toStatus: "skipped" as const,
          fromDigest: step.digest,
          toDigest: step.digest,
          eventSeq: run.eventSeq + 1,
          atMs: clock.nowMs(),
        };
        const mutationThrown = await thrownBy({ mutations: [mutation] });
        expect(isQlrError(mutationThrown, "internal"), String(mutationThrown)).toBe(true);
        expect((await store.transaction((tx) => tx.listEvents(runId, 0, 500))).length).toBe(
          run.eventSeq,
        );
        // With its run moved, rows of a run that does not exist are refused as a conflict
        // (the compare-and-set finds no run), and nothing is written: PostgreSQL's schema has
        // no foreign keys to refuse them (migration 0014).
        const ghost = { ...run, id: "run-ghost" };
        const ghostThrown = await thrownBy({
          runs: [{ before: ghost, after: { ...ghost, version: ghost.version + 1, eventSeq: 1 } }],
          events: [{ ...event, id: "evt:run-ghost:1", runId: "run-ghost", seq: 1 }],
          mutations: [{ ...mutation, runId: "run-ghost" }],
        });
        expect(isQlrError(ghostThrown, "conflict"), String(ghostThrown)).toBe(true);
        expect(await driver.transaction(countOrphanRows)).toBe(0);
      } finally {
        await store.close();
      }
    });
  }
});
