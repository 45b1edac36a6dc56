import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Coordinator } from "../../src/coordinator.ts";
import { isQlrError } from "../../src/errors.ts";
import { admitTaskAttempt, MAX_ADMISSION_PAGE } from "../../src/admission.ts";
import type { ChangeSet } from "../../src/model.ts";
import type { AdmissionCandidate } from "../../src/ports.ts";
import { applyPackage, cancelRun, rerunRun, startRun } from "../../src/operations.ts";
import { findAttemptScope, type DefinedAttemptScope } from "../../src/attempt-scope.ts";
import { complete, markRunning, markStarting } from "../../src/execution.ts";
import { PROFILES } from "../../src/profiles.ts";
import type { SqlDriver } from "../../storage/driver.ts";
import { migrate } from "../../storage/migrate.ts";
import { lossyDriver, type LossyDriver } from "../../storage/lossy-driver.ts";
import { openSqlStore, type SqlStore } from "../../storage/sql-store.ts";
import { MIGRATIONS as SQLITE_MIGRATIONS } from "../../storage/sqlite/migrations.generated.ts";
import { MIGRATIONS as POSTGRES_MIGRATIONS } from "../../storage/postgres/migrations.generated.ts";
import { diamondManifest, SequentialIds, TestClock, wideManifest } from "../support/fixtures.ts";
import type { RetentionPolicy } from "../../src/retention.ts";

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
      lossy = lossyDriver(driver);
      store = await openSqlStore(lossy.driver, migrations, clock.nowMs());
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
      // The highest number, not the count: numbers are assigned ahead and may leave a gap.
      expect(again.version).toBe(Math.max(...migrations.map((migration) => migration.version)));
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
      lossy.arm();
      await expect(c.admit(candidate!)).rejects.toThrow(/lost commit response/);
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

    it("run inputs, attempt and step outputs and rerun links round-trip exactly", async () => {
      const input = { flag: true, n: 2.5, region: "eu-中文-é", quote: "a\"b'c\n" };
      const output = { rows: [1, 2, { nested: "ü" }], ok: true, note: null };
      const runId = await store.transaction(async (tx) => {
        const nowMs = await tx.observe(clock.nowMs());
        await applyPackage(tx, diamondManifest("io-pkg"), nowMs);
        return (await startRun(tx, { package: "io-pkg", target: { kind: "workflow", name: "diamond" }, idempotencyKey: null, scheduleName: null, runId: ids.runId(), input }, nowMs)).run.id;
      });
      await coordinator().frontier(runId);
      const candidate = (await store.transaction((tx) => tx.listAdmissionCandidates({ runId, stepRunId: "", stepRunVersion: 0 }, 64, clock.nowMs()))).find((item) => item.runId === runId);
      expect(candidate).toBeDefined();
      if (candidate !== undefined) await coordinator().admit(candidate);
      const attemptId = (await store.transaction((tx) => tx.getAttempts(runId)))[0]?.id ?? "";
      const step = async (change: (scope: DefinedAttemptScope, nowMs: number) => ChangeSet) =>
        store.transaction(async (tx) => {
          const nowMs = await tx.observe(clock.nowMs());
          const scope = await findAttemptScope(tx, attemptId);
          if (scope === null) throw new Error("attempt vanished");
          await tx.apply(change(scope, nowMs));
        });
      await step((scope, nowMs) => markStarting(scope, nowMs));
      await step((scope, nowMs) => markRunning(scope, { pid: 77, processStartTicks: "1", bootId: "b", startedAtMs: nowMs }, nowMs));
      await step((scope, nowMs) => complete(scope, { startedAtMs: nowMs, finishedAtMs: nowMs, exitCode: 0, signal: null, stopReason: null, spawnError: null, output }, scope.definition.retry, nowMs));

      const stored = await store.transaction(async (tx) => ({ run: await tx.getRun(runId), steps: await tx.getSteps(runId), attempt: await tx.getAttempt(attemptId), listed: await tx.listRuns({ status: null, cursor: null, limit: 500 }) }));
      expect(stored.run?.input).toEqual({ flag: true, n: 2.5, quote: "a\"b'c\n", region: "eu-中文-é" });
      expect(stored.run?.rerunOf).toBeNull();
      expect(stored.listed.find((run) => run.id === runId)?.input).toEqual(stored.run?.input);
      expect(stored.attempt?.output).toEqual(output);
      expect(stored.steps.find((item) => item.name === "a")?.output).toEqual(output);
      expect(stored.steps.filter((item) => item.name !== "a").every((item) => item.output === null)).toBe(true);

      await store.transaction(async (tx) => cancelRun(tx, runId, await tx.observe(clock.nowMs())));
      await coordinator().convergeRun(runId);
      const rerun = await store.transaction(async (tx) => rerunRun(tx, { runId, fromFailed: true, newRunId: ids.runId(), idempotencyKey: null }, await tx.observe(clock.nowMs())));
      const again = await store.transaction(async (tx) => ({ run: await tx.getRun(rerun.run.id), steps: await tx.getSteps(rerun.run.id) }));
      expect(again.run).toMatchObject({ rerunOf: runId, input: stored.run?.input, planDigest: stored.run?.planDigest });
      expect(again.steps.map((item) => [item.name, item.status, item.output])).toEqual([["a", "succeeded", output], ["b", "pending", null], ["c", "pending", null], ["d", "pending", null]]);
    });

    /**
     * Retention, checked against an oracle written here from raw rows (not the core's
     * decision): after purging, exactly the runs the rule selects are gone with every row they
     * owned, nothing left points at a purged run, and protected runs keep all their rows. It
     * runs last in the file, over every run the tests above left in this database.
     */
    it("retention purges exactly the runs the rule selects, with all they own, and nothing referenced", async () => {
      const p = (index: number): string => (driver.dialect === "postgres" ? `$${index}` : "?");
      const raw = <R extends Record<string, unknown>>(sql: string, params: (string | number | null)[] = []) => driver.transaction((tx) => tx.query<R>(sql, params));
      const c = coordinator();
      /** A workflow run with an admitted attempt, cancelled and converged: terminal with a receipt, events and mutations. */
      const finishedRun = async (idempotencyKey: string | null): Promise<string> => {
        const runId = await store.transaction(async (tx) => {
          const nowMs = await tx.observe(clock.nowMs());
          await applyPackage(tx, diamondManifest("purge-pkg"), nowMs);
          return (await startRun(tx, { package: "purge-pkg", target: { kind: "workflow", name: "diamond" }, idempotencyKey, scheduleName: null, runId: ids.runId() }, nowMs)).run.id;
        });
        await c.frontier(runId);
        const candidates = await store.transaction(async (tx) => (await tx.listAdmissionCandidates(null, 64, clock.nowMs())).filter((item) => item.runId === runId));
        for (const candidate of candidates) await c.admit(candidate);
        await store.transaction(async (tx) => cancelRun(tx, runId, await tx.observe(clock.nowMs())));
        await c.convergeRun(runId);
        const run = await store.transaction(async (tx) => tx.getRun(runId));
        expect(run?.status).toBe("cancelled");
        return runId;
      };
      // Settle what the tests above left moving, so the oracle's snapshot stays true while purging.
      for (let round = 0; round < 20; round += 1) {
        clock.advance(1);
        const report = await c.tick();
        if (report.stages.every((stage) => stage.processed === 0)) break;
      }
      clock.advance(1_000);
      const plain = await finishedRun(null);
      const keyed = await finishedRun("purge-contract-key");
      const scheduled = await finishedRun(null);
      const withLiveAttempt = await finishedRun(null);
      const stillRunning = await newWorkflowRun("purge-pkg");
      // A schedule's overlap rule reads its last run; an attempt marked live may still run.
      await raw(`INSERT INTO schedules (package, name, generation, spec, next_fire_at_ms, last_fire_at_ms, last_run_id, missed_fires, skipped_overlaps, version) VALUES (${p(1)}, ${p(2)}, 1, '{}', NULL, NULL, ${p(3)}, 0, 0, 1)`, ["purge-pkg", "keeper", scheduled]);
      await raw(`UPDATE run_attempts SET status = 'running' WHERE run_id = ${p(1)}`, [withLiveAttempt]);
      clock.advance(10 * 60_000);
      const recentA = await finishedRun(null);
      clock.advance(1);
      const recentB = await finishedRun(null);

      interface Facts { id: string; status: string; finished: number | null; key: string | null; frontier: number; live: number; refs: number }
      const facts = async (): Promise<Facts[]> =>
        (await raw<Record<string, unknown>>(`SELECT r.id, r.status, r.finished_at_ms, r.idempotency_key, r.frontier_due,
            (SELECT COUNT(*) FROM run_attempts a WHERE a.run_id = r.id AND a.status IN ('claimed', 'starting', 'running')) AS live,
            (SELECT COUNT(*) FROM schedules s WHERE s.last_run_id = r.id) AS refs FROM runs r`)).map((row) => ({
          id: String(row.id), status: String(row.status), finished: row.finished_at_ms === null ? null : Number(row.finished_at_ms), key: typeof row.idempotency_key === "string" ? row.idempotency_key : null,
          frontier: Number(row.frontier_due), live: Number(row.live), refs: Number(row.refs),
        }));
      const terminal = new Set(["succeeded", "failed", "timed_out", "cancelled", "lost"]);
      /** The oracle: which runs must go under `policy` at `nowMs`. */
      const expectedPurge = (all: Facts[], policy: RetentionPolicy, nowMs: number): Set<string> => {
        const finished = all.filter((run) => terminal.has(run.status) && run.finished !== null);
        const newestFirst = [...finished].sort((a, b) => (b.finished! - a.finished!) || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
        const kept = new Set(newestFirst.slice(0, policy.maxRuns).map((run) => run.id));
        return new Set(
          finished
            .filter((run) => run.live === 0 && run.refs === 0 && run.frontier === 0)
            .filter((run) => {
              const expired = run.finished! < nowMs - policy.horizonMs;
              return expired || (!kept.has(run.id) && run.key === null);
            })
            .map((run) => run.id),
        );
      };
      const childCounts = async (runId: string): Promise<number[]> => {
        const counts: number[] = [];
        for (const table of ["step_runs", "run_attempts", "admission_receipts", "run_events", "step_mutations"]) {
          counts.push(Number((await raw<{ n: number }>(`SELECT COUNT(*) AS n FROM ${table} WHERE run_id = ${p(1)}`, [runId]))[0]?.n ?? 0));
        }
        return counts;
      };
      const orphanRows = async (): Promise<number> => {
        let total = 0;
        for (const table of ["step_runs", "run_attempts", "admission_receipts", "run_events", "step_mutations"]) {
          total += Number((await raw<{ n: number }>(`SELECT COUNT(*) AS n FROM ${table} t WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = t.run_id)`))[0]?.n ?? 0);
        }
        total += Number((await raw<{ n: number }>("SELECT COUNT(*) AS n FROM run_attempts a WHERE a.step_run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM step_runs s WHERE s.id = a.step_run_id)"))[0]?.n ?? 0);
        return total;
      };
      const purgeWith = async (policy: RetentionPolicy): Promise<{ before: Facts[]; expected: Set<string>; purged: string[] }> => {
        const before = await facts();
        const expected = expectedPurge(before, policy, clock.nowMs());
        const purged: string[] = [];
        const purging = new Coordinator({ store, clock, ids, profile: PROFILES.edge, executors: {}, retention: policy, onPurge: (run) => purged.push(run.runId) });
        // Edge budget: 4 runs per cycle. Bounded: the expected set plus a margin of cycles.
        for (let round = 0; round < expected.size + 5; round += 1) await purging.tick();
        return { before, expected, purged };
      };
      // The still-running run moves on while the cycles run (admission, frontier); the others are settled.
      const protectedCounts = { scheduled: await childCounts(scheduled), withLiveAttempt: await childCounts(withLiveAttempt), keyed: await childCounts(keyed) };

      // Phase 1, by count: only the newest two terminal runs stay, besides what the rules protect.
      const byCount = await purgeWith({ horizonMs: 3_650 * 86_400_000, maxRuns: 2 });
      expect(byCount.expected.has(plain)).toBe(true);
      for (const runId of [keyed, scheduled, withLiveAttempt, stillRunning, recentA, recentB]) expect(byCount.expected.has(runId), runId).toBe(false);
      expect(new Set(byCount.purged)).toEqual(byCount.expected);
      const afterCount = new Set((await facts()).map((run) => run.id));
      expect(afterCount).toEqual(new Set(byCount.before.map((run) => run.id).filter((id) => !byCount.expected.has(id))));
      expect(await childCounts(plain)).toEqual([0, 0, 0, 0, 0]);
      expect(await orphanRows()).toBe(0);
      expect(await childCounts(keyed)).toEqual(protectedCounts.keyed);

      // Phase 2, by time: everything terminal older than a minute goes, the keyed run included.
      clock.advance(2 * 60_000);
      const byTime = await purgeWith({ horizonMs: 60_000, maxRuns: 10_000_000 });
      for (const runId of [keyed, recentA, recentB]) expect(byTime.expected.has(runId), runId).toBe(true);
      expect(new Set(byTime.purged)).toEqual(byTime.expected);
      const afterTime = new Set((await facts()).map((run) => run.id));
      expect(afterTime).toEqual(new Set(byTime.before.map((run) => run.id).filter((id) => !byTime.expected.has(id))));
      expect(await orphanRows()).toBe(0);
      expect(await childCounts(scheduled)).toEqual(protectedCounts.scheduled);
      expect(await childCounts(withLiveAttempt)).toEqual(protectedCounts.withLiveAttempt);
      expect((await childCounts(stillRunning))[0]).toBe(4);
      for (const runId of [scheduled, withLiveAttempt, stillRunning]) expect(afterTime.has(runId), runId).toBe(true);
      // A purged run reads as absent, and its idempotency key starts a new run.
      expect(await store.transaction(async (tx) => tx.getRun(keyed))).toBeNull();
      const restarted = await store.transaction(async (tx) => startRun(tx, { package: "purge-pkg", target: { kind: "workflow", name: "diamond" }, idempotencyKey: "purge-contract-key", scheduleName: null, runId: ids.runId() }, await tx.observe(clock.nowMs())));
      expect(restarted.created).toBe(true);
      expect(restarted.run.id).not.toBe(keyed);
    });
  });
}
