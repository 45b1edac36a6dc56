import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  Coordinator,
  type PageReport,
  type StageReport,
  type TickReport,
} from "../../src/coordinator.ts";
import type { Executor, LaunchRequest } from "../../src/ports.ts";
import { PROFILES, type Profile } from "../../src/profiles.ts";
import { Prng } from "../../src/sim/prng.ts";
import { SimulatedExecutor } from "../../src/sim/simulated-executor.ts";
import type { SqlDriver, SqlTx } from "../../storage/driver.ts";
import { LOST_COMMIT_RESPONSE_MESSAGE } from "../../storage/lossy-driver.ts";
import { openSqlStore, type SqlStore } from "../../storage/sql-store.ts";
import type { DriverFactory } from "../support/drivers.ts";
import { migrationsFor } from "../support/dialect-migrations.ts";
import { applyAndStart, SequentialIds, TestClock, wideManifest } from "../support/fixtures.ts";

/**
 * A driver that counts the transactions that committed a write and the calls of transaction
 * bodies, and can fail the statements a predicate names (an I/O error on one item's row, or a
 * serialization failure), to watch how a stage page commits.
 */
interface PageWatch {
  readonly driver: SqlDriver;
  /** Transactions that issued at least one INSERT, UPDATE or DELETE and committed. */
  writeCommits: number;
  /** Calls of transaction bodies (PostgreSQL calls one again after a serialization failure). */
  bodyRuns: number;
  /** Throws from the statement it returns an error for; null: no fault. */
  poison: ((sql: string, params: readonly unknown[]) => Error | null) | null;
  /** The next transaction that commits a write throws after its COMMIT (a lost response). */
  loseNextWriteResponse: boolean;
}

function pageWatch(inner: SqlDriver): PageWatch {
  const watch: PageWatch = {
    writeCommits: 0,
    bodyRuns: 0,
    poison: null,
    loseNextWriteResponse: false,
    driver: {
      dialect: inner.dialect,
      name: inner.name,
      close: () => inner.close(),
      async transaction<T>(fn: (tx: SqlTx) => Promise<T>): Promise<T> {
        let wrote = false;
        const result = await inner.transaction((tx) => {
          watch.bodyRuns += 1;
          // Reset on every call: PostgreSQL may run `fn` again after a serialization failure.
          wrote = false;
          return fn({
            query: (sql, params = []) => {
              if (/^\s*(INSERT|UPDATE|DELETE)\b/i.test(sql)) wrote = true;
              const error = watch.poison?.(sql, params) ?? null;
              if (error !== null) return Promise.reject(error);
              return tx.query(sql, params);
            },
          });
        });
        if (wrote) {
          watch.writeCommits += 1;
          if (watch.loseNextWriteResponse) {
            watch.loseNextWriteResponse = false;
            throw new Error(LOST_COMMIT_RESPONSE_MESSAGE);
          }
        }
        return result;
      },
    },
  };
  return watch;
}

const OFF = { pageSize: 1, pages: 0 };

/** Only the admission stage runs (one page of up to 16 candidates per cycle). */
const ADMISSION_ONLY: Profile = {
  ...PROFILES.standalone,
  cancellation: OFF,
  schedules: OFF,
  ordinary: OFF,
  frontier: OFF,
  admission: { pageSize: 16, pages: 1 },
  dispatch: 1,
  executionControl: OFF,
  purge: OFF,
  notifications: OFF,
};

/** Only dispatch runs (pages of 16) and, when asked, execution control. */
function dispatchOnly(control: boolean): Profile {
  return {
    ...ADMISSION_ONLY,
    admission: OFF,
    dispatch: 16,
    executionControl: control ? { pageSize: 16, pages: 1 } : OFF,
  };
}

/** A serialization failure as PostgreSQL reports it (SQLSTATE 40001). */
function serializationFailure(): Error {
  return Object.assign(new Error("could not serialize access due to concurrent update"), {
    code: "40001",
    severity: "ERROR",
  });
}

/**
 * Group commit (docs/ARCHITECTURE.md): a stage page's transitions commit in one transaction;
 * a page that fails as a whole is written again item by item. On a database of its own, so
 * each stage's page holds exactly the items these tests make.
 */
export function describeGroupCommit(factory: DriverFactory): void {
  describe(`group commit of a stage page on ${factory.name}`, () => {
    let watch: PageWatch;
    let store: SqlStore;
    let dialect: SqlDriver["dialect"];
    const clock = new TestClock();
    const ids = new SequentialIds(`grp${factory.name.replace(/[^a-z0-9]/g, "")}`);

    beforeAll(async () => {
      const driver = await factory.open();
      dialect = driver.dialect;
      watch = pageWatch(driver);
      store = await openSqlStore(watch.driver, migrationsFor(driver.dialect), clock.nowMs());
    });
    afterAll(async () => {
      await store?.close();
    });

    function coordinator(
      profile: Profile = ADMISSION_ONLY,
      executor: Executor | null = null,
      pages: PageReport[] = [],
    ): Coordinator {
      return new Coordinator({
        store,
        clock,
        ids,
        profile,
        executors: executor === null ? {} : { local_process: executor },
        maxRunning: null,
        onPage: (page) => pages.push(page),
      });
    }

    /** One admission-only cycle, the watch's counts reset first: its report and the pages it wrote. */
    async function admitWatchingPages(): Promise<{ report: StageReport; pages: PageReport[] }> {
      watch.writeCommits = 0;
      watch.bodyRuns = 0;
      const pages: PageReport[] = [];
      const report = stageReport(
        await coordinator(ADMISSION_ONLY, null, pages).tick(),
        "admission",
      );
      return { report, pages };
    }

    /** A run of `width` independent steps, all ready (its frontier moved), none admitted. */
    async function readyRun(packageName: string, width: number): Promise<string> {
      const runId = await applyAndStart(
        store,
        clock,
        wideManifest(packageName, width),
        { kind: "workflow", name: "wide" },
        ids.runId(),
      );
      await coordinator().frontier(runId);
      return runId;
    }

    async function state(runId: string) {
      return store.transaction(async (tx) => {
        const run = await tx.getRun(runId);
        const steps = await tx.getSteps(runId);
        const admissions = await Promise.all(
          steps.map((step) => tx.getAdmission(runId, step.id, step.version)),
        );
        return {
          run,
          steps,
          attempts: await tx.getAttempts(runId),
          admissions: admissions.filter((receipt) => receipt !== null),
          events: await tx.listEvents(runId, 0, 500),
          mutations: await tx.listMutations(runId),
        };
      });
    }

    function stageReport(report: TickReport, name: string): StageReport {
      const stage = report.stages.find((item) => item.name === name);
      if (stage === undefined) throw new Error(`the tick reported no ${name} stage`);
      return stage;
    }

    function contiguous(events: readonly { seq: number }[], eventSeq: number): void {
      expect(events.map((event) => event.seq)).toEqual(
        Array.from({ length: eventSeq }, (_, index) => index + 1),
      );
    }

    /**
     * The simulated executor, with each launch checking first, from a transaction of its own,
     * that its attempt's `starting` is committed (what it sees is recorded).
     */
    function checkingExecutor(): { executor: Executor; seenAtLaunch: string[] } {
      const simulated = new SimulatedExecutor({
        clock,
        prng: new Prng(7),
        failureRate: 0,
        spawnFailureRate: 0,
        minDurationMs: 1,
        maxDurationMs: 1,
      });
      const seenAtLaunch: string[] = [];
      const executor: Executor = {
        type: "local_process",
        launch: async (request: LaunchRequest) => {
          const committed = await store.transaction((tx) => tx.getAttempt(request.attempt.id));
          seenAtLaunch.push(committed?.status ?? "missing");
          return simulated.launch(request);
        },
        readReceipt: (attempt) => simulated.readReceipt(attempt),
        hasJournal: (attempt) => simulated.hasJournal(attempt),
        inspect: (attempt) => simulated.inspect(attempt),
        stop: (attempt, reason) => simulated.stop(attempt, reason),
      };
      return { executor, seenAtLaunch };
    }

    // The dispatch tests come first: dispatch takes every claimed attempt, and the admission
    // tests below leave theirs claimed.
    it("dispatch commits a page's `starting` once before any launch, and the page's outcomes once after", async () => {
      clock.advance(1_000);
      const runId = await readyRun("grp-dispatch", 5);
      await coordinator().tick();
      const { executor, seenAtLaunch } = checkingExecutor();
      watch.writeCommits = 0;
      const report = stageReport(
        await coordinator(dispatchOnly(false), executor).tick(),
        "dispatch",
      );
      expect(report.errors).toEqual([]);
      expect(report.processed).toBe(5);
      // Every launch found its attempt's `starting` already committed.
      expect(seenAtLaunch).toEqual(["starting", "starting", "starting", "starting", "starting"]);
      // One commit for the five `starting`, one for the five `running`.
      expect(watch.writeCommits).toBe(2);
      const after = await state(runId);
      expect(after.attempts.map((attempt) => attempt.status)).toEqual([
        "running",
        "running",
        "running",
        "running",
        "running",
      ]);
      contiguous(after.events, after.run!.eventSeq);
    });

    it("a lost commit response of a dispatch page launches nothing, and execution control gives those attempts a new epoch", async () => {
      clock.advance(1_000);
      const runId = await readyRun("grp-dispatch-lost", 3);
      await coordinator().tick();
      const { executor, seenAtLaunch } = checkingExecutor();
      const dispatcher = coordinator(dispatchOnly(true), executor);
      watch.loseNextWriteResponse = true;
      const first = await dispatcher.tick();
      // The page's `starting` committed, its answer was lost: the items, written again one by
      // one, find them `starting` and launch none (nothing may spawn without its own commit).
      expect(stageReport(first, "dispatch").processed).toBe(0);
      expect(seenAtLaunch).toEqual([]);
      const settled = await state(runId);
      // Execution control of the same cycle: no journal for an attempt this runtime never
      // handed to a launcher, so each is lost before its start barrier and its step gets a new epoch.
      expect(settled.attempts.map((attempt) => attempt.status).sort()).toEqual([
        "lost",
        "lost",
        "lost",
      ]);
      expect(settled.steps.every((step) => step.status === "ready")).toBe(true);
      contiguous(settled.events, settled.run!.eventSeq);
      // The new epochs are admitted (and left claimed: no dispatch runs after this test).
      expect(stageReport(await coordinator().tick(), "admission").processed).toBe(3);
    });
    it("the admissions of one page commit in one transaction, each decided and CAS-guarded", async () => {
      clock.advance(1_000);
      const runId = await readyRun("grp-one", 6);
      const { report, pages } = await admitWatchingPages();
      expect(report.errors).toEqual([]);
      expect(report.processed).toBe(6);
      // One page, one commit: one transaction per item would commit six times.
      expect(watch.writeCommits).toBe(1);
      expect(pages).toEqual([{ size: 6, committed: true }]);
      const after = await state(runId);
      expect(after.attempts).toHaveLength(6);
      expect(new Set(after.attempts.map((attempt) => attempt.stepRunId)).size).toBe(6);
      expect(after.admissions).toHaveLength(6);
      contiguous(after.events, after.run!.eventSeq);
      // Nothing is a candidate any more: a second cycle writes nothing.
      watch.writeCommits = 0;
      expect(stageReport(await coordinator().tick(), "admission").processed).toBe(0);
      expect(watch.writeCommits).toBe(0);
      expect(await state(runId)).toEqual(after);
    });

    it("a grouped page whose commit response is lost replays exactly: every item re-decides and nothing is written twice", async () => {
      clock.advance(1_000);
      const runId = await readyRun("grp-lost", 5);
      watch.loseNextWriteResponse = true;
      watch.writeCommits = 0;
      const report = stageReport(await coordinator().tick(), "admission");
      // The page committed (its response was lost); each item, written again on its own,
      // finds its epoch admitted and writes nothing.
      expect(watch.writeCommits).toBe(1);
      expect(report.errors).toEqual([]);
      const after = await state(runId);
      expect(after.attempts).toHaveLength(5);
      expect(after.admissions).toHaveLength(5);
      contiguous(after.events, after.run!.eventSeq);
      await coordinator().tick();
      expect(await state(runId)).toEqual(after);
    });

    it("one item of a page failing loses none of the others' work and applies nothing of its own", async () => {
      clock.advance(1_000);
      const runId = await readyRun("grp-loser", 5);
      const before = await state(runId);
      const loser = before.steps[2]!;
      watch.poison = (sql, params) =>
        /^\s*INSERT INTO admission_receipts/i.test(sql) &&
        // A row's value is a parameter of its own, or an element of its column's array.
        params.some((param) => param === loser.id || String(param).includes(`"${loser.id}"`))
          ? new Error("simulated I/O error on one item's row")
          : null;
      try {
        const { report, pages } = await admitWatchingPages();
        // The page rolled back whole; the four others then committed one by one.
        expect(pages.map((page) => page.committed)).toEqual([false]);
        expect(report.processed).toBe(4);
        expect(report.errors).toHaveLength(1);
        expect(report.errors[0]?.subject).toBe(loser.id);
        expect(watch.writeCommits).toBe(4);
        const after = await state(runId);
        expect(after.attempts.map((attempt) => attempt.stepRunId).sort()).toEqual(
          before.steps
            .filter((step) => step.id !== loser.id)
            .map((step) => step.id)
            .sort(),
        );
        // The loser is untouched: still ready at the same version, no receipt, no event of its own.
        expect(after.steps.find((step) => step.id === loser.id)).toEqual(loser);
        expect(after.admissions.some((receipt) => receipt.stepRunId === loser.id)).toBe(false);
        expect(
          after.events.some(
            (event) => event.stepRunId === loser.id && event.seq > before.run!.eventSeq,
          ),
        ).toBe(false);
      } finally {
        watch.poison = null;
      }
      // The fault cleared, the next cycle admits it.
      expect(stageReport(await coordinator().tick(), "admission").processed).toBe(1);
      expect((await state(runId)).attempts).toHaveLength(5);
    });

    it("a page that meets a serialization failure runs once more only to be abandoned, then goes item by item", async () => {
      clock.advance(1_000);
      const runId = await readyRun("grp-serial", 4);
      let failures = 0;
      watch.poison = (sql) =>
        /^\s*INSERT INTO admission_receipts/i.test(sql) && failures++ === 0
          ? serializationFailure()
          : null;
      try {
        const { report, pages } = await admitWatchingPages();
        expect(report.errors).toEqual([]);
        expect(report.processed).toBe(4);
        expect(pages.map((page) => page.committed)).toEqual([false]);
        // The candidate list; the page body once, then (PostgreSQL only, which retries 40001)
        // once more to be abandoned before any statement; then four item transactions.
        expect(watch.bodyRuns).toBe(1 + (dialect === "postgres" ? 2 : 1) + 4);
        expect(watch.writeCommits).toBe(4);
      } finally {
        watch.poison = null;
      }
      const after = await state(runId);
      expect(after.attempts).toHaveLength(4);
      contiguous(after.events, after.run!.eventSeq);
    });
  });
}
