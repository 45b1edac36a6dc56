import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Coordinator } from "../../src/coordinator.ts";
import { isQlrError } from "../../src/errors.ts";
import { admitTaskAttempt, MAX_ADMISSION_PAGE } from "../../src/admission.ts";
import type { ChangeSet } from "../../src/model.ts";
import type { AdmissionCandidate } from "../../src/ports.ts";
import { applyPackage, cancelRun, startRun } from "../../src/operations.ts";
import { PROFILES } from "../../src/profiles.ts";
import type { SqlDriver, SqlTx } from "../../storage/driver.ts";
import { migrate } from "../../storage/migrate.ts";
import { openSqlStore, type SqlStore } from "../../storage/sql-store.ts";
import { MIGRATIONS as SQLITE_MIGRATIONS } from "../../storage/sqlite/migrations.generated.ts";
import { MIGRATIONS as POSTGRES_MIGRATIONS } from "../../storage/postgres/migrations.generated.ts";
import { diamondManifest, SequentialIds, TestClock, wideManifest } from "../support/fixtures.ts";

/**
 * The one storage contract every driver passes. `describeStoreContract` takes a factory of a
 * fresh, empty driver; each driver gets one fresh database for the whole file, and every test
 * uses its own package and run ids so tests never see each other's rows.
 */
export interface DriverFactory {
  readonly name: string;
  open(): Promise<SqlDriver>;
  /** A second, independent handle to the same database, for real concurrency (null: single-connection driver). */
  openSecond?: () => Promise<SqlDriver>;
}

/** A driver whose next committed transaction "loses" its response: it commits, then throws. */
class LossyDriver implements SqlDriver {
  readonly dialect;
  readonly name;
  private armed = false;
  private readonly inner: SqlDriver;
  constructor(inner: SqlDriver) {
    this.inner = inner;
    this.dialect = inner.dialect;
    this.name = `${inner.name}+lossy`;
  }
  loseNextCommitResponse(): void {
    this.armed = true;
  }
  async transaction<T>(fn: (tx: SqlTx) => Promise<T>): Promise<T> {
    const result = await this.inner.transaction(fn);
    if (this.armed) {
      this.armed = false;
      throw new Error("connection reset after COMMIT was sent (simulated lost response)");
    }
    return result;
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

async function snapshot(store: SqlStore, runId: string): Promise<unknown> {
  return store.transaction(async (tx) => ({ run: await tx.getRun(runId), steps: await tx.getSteps(runId), attempts: await tx.getAttempts(runId), events: await tx.listEvents(runId, 0, 500), mutations: await tx.listMutations(runId) }));
}

export function describeStoreContract(factory: DriverFactory): void {
  describe(`store contract on ${factory.name}`, () => {
    let driver: SqlDriver;
    let lossy: LossyDriver;
    let store: SqlStore;
    const clock = new TestClock();
    const ids = new SequentialIds(`${factory.name.replace(/[^a-z0-9]/g, "")}`);
    let migrations: typeof SQLITE_MIGRATIONS;

    beforeAll(async () => {
      driver = await factory.open();
      migrations = driver.dialect === "sqlite" ? SQLITE_MIGRATIONS : POSTGRES_MIGRATIONS;
      lossy = new LossyDriver(driver);
      store = await openSqlStore(lossy, migrations, clock.nowMs());
    });
    afterAll(async () => {
      await store?.close();
    });

    function coordinator(target: SqlStore = store): Coordinator {
      return new Coordinator({ store: target, clock, ids, profile: PROFILES.standalone, executors: {} });
    }

    async function newWorkflowRun(packageName: string): Promise<string> {
      return store.transaction(async (tx) => {
        const nowMs = await tx.observe(clock.nowMs());
        await applyPackage(tx, diamondManifest(packageName), nowMs);
        const { run } = await startRun(tx, { package: packageName, target: { kind: "workflow", name: "diamond" }, idempotencyKey: null, scheduleName: null, runId: ids.runId() }, nowMs);
        return run.id;
      });
    }

    it("re-running the migrations is a no-op", async () => {
      const again = await migrate(driver, migrations, clock.nowMs());
      expect(again.applied).toEqual([]);
      expect(again.version).toBe(migrations.length);
    });

    it("a database with a newer schema refuses to open", async () => {
      const newer = [...migrations.slice(0, 1)];
      await driver.transaction(async (tx) => {
        await tx.query(driver.dialect === "postgres" ? "INSERT INTO qlr_schema (version, name, applied_at_ms) VALUES ($1, $2, $3)" : "INSERT INTO qlr_schema (version, name, applied_at_ms) VALUES (?, ?, ?)", [999, "future", clock.nowMs()]);
      });
      try {
        await expect(migrate(driver, newer, clock.nowMs())).rejects.toMatchObject({ code: "schema_too_new" });
      } finally {
        await driver.transaction(async (tx) => {
          await tx.query(driver.dialect === "postgres" ? "DELETE FROM qlr_schema WHERE version = $1" : "DELETE FROM qlr_schema WHERE version = ?", [999]);
        });
      }
    });

    it("an unchanged manifest creates no new generation; a changed one does", async () => {
      const first = await store.transaction(async (tx) => applyPackage(tx, diamondManifest("gen-pkg"), await tx.observe(clock.nowMs())));
      const same = await store.transaction(async (tx) => applyPackage(tx, diamondManifest("gen-pkg"), await tx.observe(clock.nowMs())));
      const changed = await store.transaction(async (tx) => applyPackage(tx, { ...diamondManifest("gen-pkg"), description: "v2" }, await tx.observe(clock.nowMs())));
      expect(first).toMatchObject({ generation: 1, changed: true });
      expect(same).toMatchObject({ generation: 1, changed: false, digest: first.digest });
      expect(changed).toMatchObject({ generation: 2, changed: true });
      expect(changed.digest).not.toBe(first.digest);
    });

    it("every transition is persisted with contiguous events and canonical step mutations", async () => {
      const runId = await newWorkflowRun("seq-pkg");
      const c = coordinator();
      await c.frontier(runId);
      await c.tick();
      const state = (await snapshot(store, runId)) as { run: { eventSeq: number; version: number }; events: { seq: number }[]; mutations: { version: number; toStatus: string }[]; steps: { name: string; status: string; version: number }[] };
      expect(state.events.map((event) => event.seq)).toEqual(Array.from({ length: state.run.eventSeq }, (_, index) => index + 1));
      const stepA = state.steps.find((step) => step.name === "a");
      expect(stepA?.status).toBe("ready");
      expect(state.mutations.filter((mutation) => mutation.toStatus === "ready").length).toBeGreaterThanOrEqual(1);
      expect(state.steps.map((step) => step.name)).toEqual(["a", "b", "c", "d"]);
    });

    it("a stale version is a conflict and nothing is written", async () => {
      const runId = await newWorkflowRun("cas-pkg");
      const before = await snapshot(store, runId);
      const stale = await store.transaction(async (tx) => tx.getRun(runId));
      await store.transaction(async (tx) => cancelRun(tx, runId, await tx.observe(clock.nowMs())));
      const afterCancel = await snapshot(store, runId);
      // Apply a change computed from the stale snapshot: the CAS must refuse it.
      const { requestCancel } = await import("../../src/runs.ts");
      const change = requestCancel({ ...stale!, cancelRequestedAtMs: null }, clock.nowMs(), "stale") as ChangeSet;
      const error = await store.transaction(async (tx) => tx.apply(change)).catch((caught: unknown) => caught);
      expect(isQlrError(error, "conflict")).toBe(true);
      expect(await snapshot(store, runId)).toEqual(afterCancel);
      expect(afterCancel).not.toEqual(before);
    });

    it("one admission winner per ready epoch, and a replay returns the stored receipt", async () => {
      const runId = await newWorkflowRun("adm-pkg");
      const c = coordinator();
      await c.frontier(runId);
      const [candidate] = await store.transaction(async (tx) => (await tx.listAdmissionCandidates(null, 64, clock.nowMs())).filter((item) => item.runId === runId));
      expect(candidate).toBeDefined();
      // Race several admissions of the same epoch; exactly one wins.
      const results = await Promise.allSettled(Array.from({ length: 6 }, () => c.admit(candidate!)));
      const wins = results.filter((result) => result.status === "fulfilled" && result.value === true).length;
      expect(wins).toBe(1);
      const attempts = await store.transaction(async (tx) => tx.getAttempts(runId));
      expect(attempts).toHaveLength(1);
      const receipt = await store.transaction(async (tx) => tx.getAdmission(runId, candidate!.stepRunId, candidate!.stepRunVersion));
      expect(receipt?.attemptId).toBe(attempts[0]?.id);
      // Exact replay: the same epoch answers from the durable receipt and writes nothing.
      const before = await snapshot(store, runId);
      const replay = await store.transaction(async (tx) => {
        const run = (await tx.getRun(runId))!;
        const step = (await tx.getSteps(runId)).find((item) => item.id === candidate!.stepRunId)!;
        return admitTaskAttempt({
          plan: (await tx.getPlan(run.planDigest!))!,
          run,
          step,
          reconciliation: (await tx.getReconciliation(run.reconciliationDigest))!,
          definition: (await tx.getTaskDefinitionFor(run.reconciliationDigest, step.task))!,
          existing: await tx.getAdmission(runId, step.id, step.version),
          nowMs: clock.nowMs(),
        });
      });
      expect(replay).toEqual({ kind: "replayed", receipt });
      expect(await snapshot(store, runId)).toEqual(before);
      // The candidate list no longer offers the admitted epoch.
      const again = await store.transaction(async (tx) => (await tx.listAdmissionCandidates(null, 64, clock.nowMs())).filter((item) => item.runId === runId));
      expect(again).toEqual([]);
    });

    it("a commit whose response is lost is answered from the durable receipt on retry", async () => {
      const runId = await newWorkflowRun("lost-pkg");
      const c = coordinator();
      await c.frontier(runId);
      const [candidate] = await store.transaction(async (tx) => (await tx.listAdmissionCandidates(null, 64, clock.nowMs())).filter((item) => item.runId === runId));
      lossy.loseNextCommitResponse();
      await expect(c.admit(candidate!)).rejects.toThrow(/lost response/);
      const afterLoss = await snapshot(store, runId);
      expect(await c.admit(candidate!)).toBe(false);
      expect(await snapshot(store, runId)).toEqual(afterLoss);
      const attempts = await store.transaction(async (tx) => tx.getAttempts(runId));
      expect(attempts).toHaveLength(1);
    });

    it("ADR-0227 §3: a candidate page holds at most 64, whatever the caller asks, and the keyset reaches every candidate", async () => {
      const runId = ids.runId();
      await store.transaction(async (tx) => {
        const nowMs = await tx.observe(clock.nowMs());
        await applyPackage(tx, wideManifest("wide-pkg", 70), nowMs);
        await startRun(tx, { package: "wide-pkg", target: { kind: "workflow", name: "wide" }, idempotencyKey: null, scheduleName: null, runId }, nowMs);
      });
      // The frontier alone: 70 ready steps, none admitted (the admission and dispatch budgets are zero).
      const frontierOnly = { ...PROFILES.standalone, frontier: { pageSize: 64, pages: 4 }, admission: { pageSize: 64, pages: 0 }, dispatch: 0 };
      await new Coordinator({ store, clock, ids, profile: frontierOnly, executors: {} }).tick();
      const ours = new Set<string>();
      let after: AdmissionCandidate | null = null;
      let pages = 0;
      for (;;) {
        const cursor: AdmissionCandidate | null = after;
        const page: AdmissionCandidate[] = await store.transaction(async (tx) => tx.listAdmissionCandidates(cursor, 1000, clock.nowMs()));
        pages += 1;
        if (pages === 1) expect(page.length).toBe(MAX_ADMISSION_PAGE);
        expect(page.length).toBeLessThanOrEqual(MAX_ADMISSION_PAGE);
        for (const candidate of page) if (candidate.runId === runId) ours.add(candidate.stepRunId);
        if (page.length < MAX_ADMISSION_PAGE) break;
        after = page[page.length - 1] ?? null;
        expect(pages).toBeLessThan(100);
      }
      expect(ours.size).toBe(70);
      expect(pages).toBeGreaterThanOrEqual(2);
    });

    it("keyset listing is stable while runs are inserted", async () => {
      for (let index = 0; index < 5; index += 1) {
        clock.advance(1);
        await newWorkflowRun(`list-pkg`);
      }
      const first = await store.transaction(async (tx) => tx.listRuns({ status: null, cursor: null, limit: 3 }));
      clock.advance(1);
      await newWorkflowRun("list-pkg");
      const second = await store.transaction(async (tx) => tx.listRuns({ status: null, cursor: first[first.length - 1]!.id, limit: 3 }));
      const seen = new Set(first.map((run) => run.id));
      for (const run of second) expect(seen.has(run.id)).toBe(false);
      expect(second[0]!.createdAtMs).toBeLessThanOrEqual(first[first.length - 1]!.createdAtMs);
    });

    it("a clock that went back fails closed and writes nothing", async () => {
      const runId = await newWorkflowRun("clock-pkg");
      clock.advance(10);
      await store.transaction(async (tx) => cancelRun(tx, runId, await tx.observe(clock.nowMs())));
      const before = await snapshot(store, runId);
      const back = clock.nowMs() - 5_000;
      const error = await store.transaction(async (tx) => tx.observe(back)).catch((caught: unknown) => caught);
      expect(isQlrError(error, "clock_regression")).toBe(true);
      expect(await snapshot(store, runId)).toEqual(before);
    });

    it("an idempotency key returns the same run", async () => {
      const start = (key: string) =>
        store.transaction(async (tx) => {
          const nowMs = await tx.observe(clock.nowMs());
          await applyPackage(tx, diamondManifest("idem-pkg"), nowMs);
          return startRun(tx, { package: "idem-pkg", target: { kind: "workflow", name: "diamond" }, idempotencyKey: key, scheduleName: null, runId: ids.runId() }, nowMs);
        });
      const first = await start("nightly-2026-11-30");
      const second = await start("nightly-2026-11-30");
      expect(first.created).toBe(true);
      expect(second.created).toBe(false);
      expect(second.run.id).toBe(first.run.id);
    });
  });
}
