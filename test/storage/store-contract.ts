import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Coordinator } from "../../src/coordinator.ts";
import { isQlrError } from "../../src/errors.ts";
import { admitTaskAttempt, MAX_ADMISSION_PAGE } from "../../src/admission.ts";
import { EMPTY_CHANGE_SET, type ChangeSet, type Run, type RunStatus } from "../../src/model.ts";
import type { AdmissionCandidate, ListedAdmissionCandidate, StoreTx } from "../../src/ports.ts";
import { applyPackage, cancelRun, rerunRun, startRun } from "../../src/operations.ts";
import { findAttemptScope, type DefinedAttemptScope } from "../../src/attempt-scope.ts";
import { complete, markRunning, markStarting } from "../../src/execution.ts";
import { PROFILES } from "../../src/profiles.ts";
import type { SqlDriver } from "../../storage/driver.ts";
import { migrate, type Migration } from "../../storage/migrate.ts";
import { lossyDriver, type LossyDriver } from "../../storage/lossy-driver.ts";
import { openSqlStore, SqlStore } from "../../storage/sql-store.ts";
import { convergeCancellation } from "../../src/cancellation.ts";
import type { DriverFactory } from "../support/drivers.ts";
import { migrationsFor } from "../support/dialect-migrations.ts";
import {
  diamondManifest,
  manualStart,
  SequentialIds,
  task,
  TestClock,
  wideManifest,
  workflowStart,
} from "../support/fixtures.ts";
import type { Manifest } from "../../src/manifest/types.ts";
import type { RetentionPolicy } from "../../src/retention.ts";
import { claimForDelivery, recordDelivery } from "../../src/notifications.ts";
import { countOrphanRows, RUN_CHILD_TABLES, runRows } from "../support/store-dump.ts";
import { describeGroupCommit } from "./group-commit-contract.ts";

/**
 * The one storage contract every driver passes. `describeStoreContract` takes a factory of a
 * fresh, empty driver (test/support/drivers.ts); each driver gets one fresh database for the
 * whole file, and every test uses its own package and run ids so tests never see each other's
 * rows.
 */

export function describeStoreContract(factory: DriverFactory): void {
  describe(`store contract on ${factory.name}`, () => {
    let driver: SqlDriver;
    let lossy: LossyDriver;
    let store: SqlStore;
    const clock = new TestClock();
    const ids = new SequentialIds(`${factory.name.replace(/[^a-z0-9]/g, "")}`);
    let migrations: readonly Migration[];

    beforeAll(async () => {
      driver = await factory.open();
      migrations = migrationsFor(driver.dialect);
      lossy = lossyDriver(driver);
      store = await openSqlStore(lossy.driver, migrations, clock.nowMs());
    });
    afterAll(async () => {
      await store?.close();
    });

    // The contract shares one store across its tests and runs no executor, so claimed attempts
    // pile up and never end: the runtime-wide limit on live attempts would hold later admissions.
    // That limit has its own tests (core-backpressure, and the live-attempt counts here).
    function coordinator(target: SqlStore = store): Coordinator {
      return new Coordinator({
        store: target,
        clock,
        ids,
        profile: PROFILES.standalone,
        executors: {},
        maxRunning: null,
      });
    }

    /** Starts workflow `diamond` of the package in the transaction, as a fresh unscheduled run. */
    function startDiamond(
      tx: StoreTx,
      packageName: string,
      nowMs: number,
      more: { idempotencyKey?: string | null; input?: Record<string, unknown> } = {},
    ): ReturnType<typeof startRun> {
      return startRun(
        tx,
        {
          package: packageName,
          target: { kind: "workflow", name: "diamond" },
          idempotencyKey: more.idempotencyKey ?? null,
          scheduleName: null,
          runId: ids.runId(),
          ...(more.input === undefined ? {} : { input: more.input }),
        },
        nowMs,
      );
    }

    /** Ends the run directly in the store with `status`, at store time; returns that time. */
    async function endRun(tx: StoreTx, runId: string, status: RunStatus): Promise<number> {
      const nowMs = await tx.observe(clock.nowMs());
      const run = await tx.getRun(runId);
      if (run === null) throw new Error("no run");
      const ended = {
        ...run,
        status,
        version: run.version + 1,
        updatedAtMs: nowMs,
        finishedAtMs: nowMs,
      };
      await tx.apply({ ...EMPTY_CHANGE_SET, runs: [{ before: run, after: ended }] });
      return nowMs;
    }

    /** Applies the package (default: the plain diamond) and starts its workflow `diamond`. */
    /** The run's admission candidates (its steps ready for admission), from the first page. */
    function admissionCandidatesOf(runId: string): Promise<ListedAdmissionCandidate[]> {
      return store.transaction(async (tx) =>
        (await tx.listAdmissionCandidates(null, 64, clock.nowMs())).filter(
          (item) => item.runId === runId,
        ),
      );
    }

    async function newWorkflowRun(
      packageName: string,
      manifest: Manifest = diamondManifest(packageName),
    ): Promise<string> {
      return store.transaction(async (tx) => {
        const nowMs = await tx.observe(clock.nowMs());
        await applyPackage(tx, manifest, nowMs);
        const { run } = await startDiamond(tx, packageName, nowMs);
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
        await tx.query(
          driver.dialect === "postgres"
            ? "INSERT INTO qlr_schema (version, name, applied_at_ms) VALUES ($1, $2, $3)"
            : "INSERT INTO qlr_schema (version, name, applied_at_ms) VALUES (?, ?, ?)",
          [999, "future", clock.nowMs()],
        );
      });
      try {
        await expect(migrate(driver, newer, clock.nowMs())).rejects.toMatchObject({
          code: "schema_too_new",
        });
      } finally {
        await driver.transaction(async (tx) => {
          await tx.query(
            driver.dialect === "postgres"
              ? "DELETE FROM qlr_schema WHERE version = $1"
              : "DELETE FROM qlr_schema WHERE version = ?",
            [999],
          );
        });
      }
    });

    it("an unchanged manifest creates no new generation; a changed one does", async () => {
      const first = await store.transaction(async (tx) =>
        applyPackage(tx, diamondManifest("gen-pkg"), await tx.observe(clock.nowMs())),
      );
      const same = await store.transaction(async (tx) =>
        applyPackage(tx, diamondManifest("gen-pkg"), await tx.observe(clock.nowMs())),
      );
      const changed = await store.transaction(async (tx) =>
        applyPackage(
          tx,
          { ...diamondManifest("gen-pkg"), description: "v2" },
          await tx.observe(clock.nowMs()),
        ),
      );
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
      const state = (await runRows(store, runId)) as {
        run: { eventSeq: number; version: number };
        events: { seq: number }[];
        mutations: { version: number; toStatus: string }[];
        steps: { name: string; status: string; version: number }[];
      };
      expect(state.events.map((event) => event.seq)).toEqual(
        Array.from({ length: state.run.eventSeq }, (_, index) => index + 1),
      );
      const stepA = state.steps.find((step) => step.name === "a");
      expect(stepA?.status).toBe("ready");
      expect(
        state.mutations.filter((mutation) => mutation.toStatus === "ready").length,
      ).toBeGreaterThanOrEqual(1);
      expect(state.steps.map((step) => step.name)).toEqual(["a", "b", "c", "d"]);
    });

    it("a stale version is a conflict and nothing is written", async () => {
      const runId = await newWorkflowRun("cas-pkg");
      const before = await runRows(store, runId);
      const stale = await store.transaction(async (tx) => tx.getRun(runId));
      await store.transaction(async (tx) => cancelRun(tx, runId, await tx.observe(clock.nowMs())));
      const afterCancel = await runRows(store, runId);
      // Apply a change computed from the stale snapshot: the CAS must refuse it.
      const { requestCancel } = await import("../../src/runs.ts");
      const change = requestCancel(
        { ...stale!, cancelRequestedAtMs: null },
        clock.nowMs(),
        "shutdown",
      ) as ChangeSet;
      const error = await store
        .transaction(async (tx) => tx.apply(change))
        .catch((caught: unknown) => caught);
      expect(isQlrError(error, "conflict")).toBe(true);
      expect(await runRows(store, runId)).toEqual(afterCancel);
      expect(afterCancel).not.toEqual(before);
      // The cancel stage's listing: exactly the live runs asked to cancel, this one among them
      // while it is live.
      const { run, listed } = await store.transaction(async (tx) => {
        const ids = await tx.listCancellingRuns(null, 100);
        const runs: (Run | null)[] = [];
        for (const id of ids) runs.push(await tx.getRun(id));
        return { run: await tx.getRun(runId), listed: runs };
      });
      const live = (candidate: Run | null | undefined): boolean =>
        ["queued", "dispatching", "running"].includes(candidate?.status ?? "") &&
        candidate?.cancelRequestedAtMs !== null;
      expect(listed.some((candidate) => candidate?.id === runId)).toBe(live(run));
      for (const candidate of listed) expect(live(candidate)).toBe(true);
    });

    it("a transaction reads a row once: a repeat costs no statement and returns what the database holds, its own writes included; its events and mutations go in one INSERT each", async () => {
      const runId = await newWorkflowRun("rows-pkg");
      const statements: string[] = [];
      const counting: SqlDriver = {
        dialect: driver.dialect,
        name: driver.name,
        close: () => Promise.resolve(),
        transaction: (fn) =>
          driver.transaction((tx) =>
            fn({
              query: (sql, params) => {
                statements.push(sql);
                return tx.query(sql, params);
              },
            }),
          ),
      };
      const counted = new SqlStore(counting);
      const seen = await counted.transaction(async (tx) => {
        const nowMs = await tx.observe(clock.nowMs());
        const run = await tx.getRun(runId);
        const steps = await tx.getSteps(runId);
        const firstReads = statements.length;
        const again = {
          run: await tx.getRun(runId),
          steps: await tx.getSteps(runId),
          step: await tx.getStep(steps[0]?.id ?? ""),
          nowMs: await tx.observe(clock.nowMs()),
        };
        const repeatStatements = statements.length - firstReads;
        const cancelled = await cancelRun(tx, runId, nowMs);
        const change = convergeCancellation(
          cancelled,
          await tx.getSteps(runId),
          await tx.getAttempts(runId),
          nowMs,
        );
        if (change === null) throw new Error("a fresh cancelled run has pending steps to cancel");
        await tx.apply(change);
        const written = statements.length;
        const afterWrites = { run: await tx.getRun(runId), steps: await tx.getSteps(runId) };
        const readsAfterWrites = statements.length - written;
        const events = await tx.listEvents(runId, 0, 100);
        return { run, steps, again, repeatStatements, afterWrites, readsAfterWrites, events };
      });
      expect(seen.repeatStatements).toBe(0);
      expect(seen.again).toEqual({
        run: seen.run,
        steps: seen.steps,
        step: seen.steps[0],
        nowMs: clock.nowMs(),
      });
      expect(Object.isFrozen(seen.run)).toBe(true);
      expect(seen.readsAfterWrites).toBe(0);
      // What the transaction read after its own writes is exactly what it committed.
      const committed = await store.transaction(async (tx) => ({
        run: await tx.getRun(runId),
        steps: await tx.getSteps(runId),
        events: await tx.listEvents(runId, 0, 100),
      }));
      expect(seen.afterWrites).toEqual({ run: committed.run, steps: committed.steps });
      expect(committed.steps.every((step) => step.status === "cancelled")).toBe(true);
      // The events listed inside the transaction were inserted before the list read them.
      expect(seen.events).toEqual(committed.events);
      const inserts = (table: string) =>
        statements.filter((sql) => sql.startsWith(`INSERT INTO ${table} `)).length;
      expect(inserts("run_events")).toBe(1);
      expect(inserts("step_mutations")).toBe(1);
      expect(committed.events.length).toBeGreaterThan(2);
    });

    it("one admission winner per ready epoch, and a replay returns the stored receipt", async () => {
      const runId = await newWorkflowRun("adm-pkg");
      const c = coordinator();
      await c.frontier(runId);
      const [candidate] = await admissionCandidatesOf(runId);
      expect(candidate).toBeDefined();
      // Race several admissions of the same epoch; exactly one wins.
      const results = await Promise.allSettled(
        Array.from({ length: 6 }, () => c.admit(candidate!)),
      );
      const wins = results.filter(
        (result) => result.status === "fulfilled" && result.value === true,
      ).length;
      expect(wins).toBe(1);
      const attempts = await store.transaction(async (tx) => tx.getAttempts(runId));
      expect(attempts).toHaveLength(1);
      const receipt = await store.transaction(async (tx) =>
        tx.getAdmission(runId, candidate!.stepRunId, candidate!.stepRunVersion),
      );
      expect(receipt?.attemptId).toBe(attempts[0]?.id);
      // Exact replay: the same epoch answers from the durable receipt and writes nothing.
      const before = await runRows(store, runId);
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
      expect(await runRows(store, runId)).toEqual(before);
      // The candidate list no longer offers the admitted epoch.
      const again = await admissionCandidatesOf(runId);
      expect(again).toEqual([]);
    });

    /** One package with a limited task `fetch`, an unlimited `other`, and a workflow of `width` fetch steps. */
    function limitedManifest(packageName: string, limit: number, width: number): Manifest {
      return {
        package: packageName,
        description: null,
        tasks: [task("fetch", ["true"], { concurrency: limit }), task("other")],
        workflows: [
          {
            name: "fan",
            description: null,
            steps: Array.from({ length: width }, (_, index) => ({
              name: `s${index}`,
              task: "fetch",
              needs: [],
            })),
          },
        ],
        schedules: [],
      };
    }

    async function startLimited(
      packageName: string,
      limit: number,
      targets: readonly { kind: "workflow" | "task"; name: string }[],
      width = 3,
    ): Promise<string[]> {
      return store.transaction(async (tx) => {
        const nowMs = await tx.observe(clock.nowMs());
        await applyPackage(tx, limitedManifest(packageName, limit, width), nowMs);
        const runIds: string[] = [];
        for (const target of targets) {
          const { run } = await startRun(tx, manualStart(packageName, target, ids.runId()), nowMs);
          runIds.push(run.id);
        }
        return runIds;
      });
    }

    it("live attempts are counted per task across runs and kinds, and per executor", async () => {
      const countTask = (packageName: string, name: string) =>
        store.transaction(async (tx) => tx.countLiveTaskAttempts(packageName, name));
      const countLocal = () =>
        store.transaction(async (tx) => tx.countLiveAttempts("local_process"));
      const localBefore = await countLocal();
      const [taskRunId, workflowRunId] = await startLimited("cnt-pkg", 2, [
        { kind: "task", name: "fetch" },
        { kind: "workflow", name: "fan" },
        { kind: "task", name: "other" },
      ]);
      // The same task name in another package is another task.
      await startLimited("cnt-other", 2, [{ kind: "task", name: "fetch" }]);
      const c = coordinator();
      await c.tick();
      await c.tick();
      // The task run and one step take fetch's two slots; other is unlimited.
      expect(await countTask("cnt-pkg", "fetch")).toBe(2);
      expect(await countTask("cnt-pkg", "other")).toBe(1);
      expect(await countTask("cnt-other", "fetch")).toBe(1);
      expect(await countTask("cnt-pkg", "missing")).toBe(0);
      expect(await countLocal()).toBe(localBefore + 4);
      const admitted = await store.transaction(async (tx) => tx.getAttempts(workflowRunId!));
      expect(admitted).toHaveLength(1);
      // A cancelled claim frees its slot: the next step takes it.
      await store.transaction(async (tx) =>
        cancelRun(tx, taskRunId!, await tx.observe(clock.nowMs())),
      );
      await c.tick();
      await c.tick();
      expect(await countTask("cnt-pkg", "fetch")).toBe(2);
      const after = await store.transaction(async (tx) => tx.getAttempts(workflowRunId!));
      expect(after.filter((attempt) => attempt.status === "claimed")).toHaveLength(2);
      expect(await countLocal()).toBe(localBefore + 4);
    });

    it("two admissions racing for a task's last slot: exactly one wins, the other waits", async () => {
      const [runId] = await startLimited("race-pkg", 1, [{ kind: "workflow", name: "fan" }], 6);
      const c = coordinator();
      await c.frontier(runId!);
      const candidates = await admissionCandidatesOf(runId!);
      expect(candidates).toHaveLength(6);
      expect(candidates.every((item) => item.package === "race-pkg" && item.task === "fetch")).toBe(
        true,
      );
      // Two coordinators at once, each on its own candidate (on PostgreSQL, concurrent transactions).
      const other = coordinator();
      const results = await Promise.all(
        candidates.map((candidate, index) => (index % 2 === 0 ? c : other).admit(candidate)),
      );
      expect(results.filter(Boolean)).toHaveLength(1);
      expect(
        await store.transaction(async (tx) => tx.countLiveTaskAttempts("race-pkg", "fetch")),
      ).toBe(1);
      expect(await store.transaction(async (tx) => tx.getAttempts(runId!))).toHaveLength(1);
    });

    it("a commit whose response is lost is answered from the durable receipt on retry", async () => {
      const runId = await newWorkflowRun("lost-pkg");
      const c = coordinator();
      await c.frontier(runId);
      const [candidate] = await admissionCandidatesOf(runId);
      lossy.arm();
      await expect(c.admit(candidate!)).rejects.toThrow(/lost commit response/);
      const afterLoss = await runRows(store, runId);
      expect(await c.admit(candidate!)).toBe(false);
      expect(await runRows(store, runId)).toEqual(afterLoss);
      const attempts = await store.transaction(async (tx) => tx.getAttempts(runId));
      expect(attempts).toHaveLength(1);
    });

    it("ADR-0227 §3: a candidate page holds at most 64, whatever the caller asks, and the keyset reaches every candidate", async () => {
      const runId = ids.runId();
      await store.transaction(async (tx) => {
        const nowMs = await tx.observe(clock.nowMs());
        await applyPackage(tx, wideManifest("wide-pkg", 70), nowMs);
        await startRun(tx, workflowStart("wide-pkg", "wide", runId), nowMs);
      });
      // The frontier alone: 70 ready steps, none admitted (the admission and dispatch budgets are zero).
      const frontierOnly = {
        ...PROFILES.standalone,
        frontier: { pageSize: 64, pages: 4 },
        admission: { pageSize: 64, pages: 0 },
        dispatch: 0,
      };
      await new Coordinator({ store, clock, ids, profile: frontierOnly, executors: {} }).tick();
      const ours = new Set<string>();
      let after: AdmissionCandidate | null = null;
      let pages = 0;
      for (;;) {
        const cursor: AdmissionCandidate | null = after;
        const page: AdmissionCandidate[] = await store.transaction(async (tx) =>
          tx.listAdmissionCandidates(cursor, 1000, clock.nowMs()),
        );
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
      const first = await store.transaction(async (tx) =>
        tx.listRuns({ status: null, cursor: null, limit: 3 }),
      );
      clock.advance(1);
      await newWorkflowRun("list-pkg");
      const second = await store.transaction(async (tx) =>
        tx.listRuns({ status: null, cursor: first[first.length - 1]!.id, limit: 3 }),
      );
      const seen = new Set(first.map((run) => run.id));
      for (const run of second) expect(seen.has(run.id)).toBe(false);
      expect(second[0]!.createdAtMs).toBeLessThanOrEqual(first[first.length - 1]!.createdAtMs);
    });

    it("a clock that went back fails closed and writes nothing", async () => {
      const runId = await newWorkflowRun("clock-pkg");
      clock.advance(10);
      await store.transaction(async (tx) => cancelRun(tx, runId, await tx.observe(clock.nowMs())));
      const before = await runRows(store, runId);
      const back = clock.nowMs() - 5_000;
      const error = await store
        .transaction(async (tx) => tx.observe(back))
        .catch((caught: unknown) => caught);
      expect(isQlrError(error, "clock_regression")).toBe(true);
      expect(await runRows(store, runId)).toEqual(before);
    });

    it("an idempotency key returns the same run", async () => {
      const start = (key: string) =>
        store.transaction(async (tx) => {
          const nowMs = await tx.observe(clock.nowMs());
          await applyPackage(tx, diamondManifest("idem-pkg"), nowMs);
          return startDiamond(tx, "idem-pkg", nowMs, { idempotencyKey: key });
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
        return (await startDiamond(tx, "io-pkg", nowMs, { input })).run.id;
      });
      await coordinator().frontier(runId);
      const candidate = (
        await store.transaction((tx) =>
          tx.listAdmissionCandidates(
            { runId, stepRunId: "", stepRunVersion: 0 },
            64,
            clock.nowMs(),
          ),
        )
      ).find((item) => item.runId === runId);
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
      await step((scope, nowMs) =>
        markRunning(
          scope,
          { pid: 77, processStartTicks: "1", bootId: "b", startedAtMs: nowMs },
          nowMs,
        ),
      );
      await step((scope, nowMs) =>
        complete(
          scope,
          {
            startedAtMs: nowMs,
            finishedAtMs: nowMs,
            exitCode: 0,
            signal: null,
            stopReason: null,
            spawnError: null,
            output,
          },
          scope.definition.retry,
          nowMs,
        ),
      );

      const stored = await store.transaction(async (tx) => ({
        run: await tx.getRun(runId),
        steps: await tx.getSteps(runId),
        attempt: await tx.getAttempt(attemptId),
        listed: await tx.listRuns({ status: null, cursor: null, limit: 500 }),
      }));
      expect(stored.run?.input).toEqual({
        flag: true,
        n: 2.5,
        quote: "a\"b'c\n",
        region: "eu-中文-é",
      });
      expect(stored.run?.rerunOf).toBeNull();
      expect(stored.listed.find((run) => run.id === runId)?.input).toEqual(stored.run?.input);
      expect(stored.attempt?.output).toEqual(output);
      expect(stored.steps.find((item) => item.name === "a")?.output).toEqual(output);
      expect(
        stored.steps.filter((item) => item.name !== "a").every((item) => item.output === null),
      ).toBe(true);

      await store.transaction(async (tx) => cancelRun(tx, runId, await tx.observe(clock.nowMs())));
      await coordinator().convergeRun(runId);
      const rerun = await store.transaction(async (tx) =>
        rerunRun(
          tx,
          { runId, fromFailed: true, newRunId: ids.runId(), idempotencyKey: null },
          await tx.observe(clock.nowMs()),
        ),
      );
      const again = await store.transaction(async (tx) => ({
        run: await tx.getRun(rerun.run.id),
        steps: await tx.getSteps(rerun.run.id),
      }));
      expect(again.run).toMatchObject({
        rerunOf: runId,
        input: stored.run?.input,
        planDigest: stored.run?.planDigest,
      });
      expect(again.steps.map((item) => [item.name, item.status, item.output])).toEqual([
        ["a", "succeeded", output],
        ["b", "pending", null],
        ["c", "pending", null],
        ["d", "pending", null],
      ]);
    });

    /**
     * Retention, checked against an oracle written here from raw rows (not the core's
     * decision): after purging, exactly the runs the rule selects are gone with every row they
     * owned, nothing left points at a purged run, and protected runs keep all their rows. It
     * runs last in the file, over every run the tests above left in this database.
     */
    it("retention purges exactly the runs the rule selects, with all they own, and nothing referenced", async () => {
      const p = (index: number): string => (driver.dialect === "postgres" ? `$${index}` : "?");
      const raw = <R extends Record<string, unknown>>(
        sql: string,
        params: (string | number | null)[] = [],
      ) => driver.transaction((tx) => tx.query<R>(sql, params));
      const c = coordinator();
      /** A workflow run with an admitted attempt, cancelled and converged: terminal with a receipt, events and mutations. */
      const finishedRun = async (idempotencyKey: string | null): Promise<string> => {
        const runId = await store.transaction(async (tx) => {
          const nowMs = await tx.observe(clock.nowMs());
          await applyPackage(tx, diamondManifest("purge-pkg"), nowMs);
          return (await startDiamond(tx, "purge-pkg", nowMs, { idempotencyKey })).run.id;
        });
        await c.frontier(runId);
        const candidates = await admissionCandidatesOf(runId);
        for (const candidate of candidates) await c.admit(candidate);
        await store.transaction(async (tx) =>
          cancelRun(tx, runId, await tx.observe(clock.nowMs())),
        );
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
      await raw(
        `INSERT INTO schedules (package, name, generation, spec, next_fire_at_ms, last_fire_at_ms, last_run_id, missed_fires, skipped_overlaps, version) VALUES (${p(1)}, ${p(2)}, 1, '{}', NULL, NULL, ${p(3)}, 0, 0, 1)`,
        ["purge-pkg", "keeper", scheduled],
      );
      await raw(`UPDATE run_attempts SET status = 'running' WHERE run_id = ${p(1)}`, [
        withLiveAttempt,
      ]);
      clock.advance(10 * 60_000);
      const recentA = await finishedRun(null);
      clock.advance(1);
      const recentB = await finishedRun(null);

      interface Facts {
        id: string;
        status: string;
        finished: number | null;
        key: string | null;
        frontier: number;
        live: number;
        refs: number;
      }
      const facts = async (): Promise<Facts[]> =>
        (
          await raw<
            Record<string, unknown>
          >(`SELECT r.id, r.status, r.finished_at_ms, r.idempotency_key, r.frontier_due,
            (SELECT COUNT(*) FROM run_attempts a WHERE a.run_id = r.id AND a.status IN ('claimed', 'starting', 'running')) AS live,
            (SELECT COUNT(*) FROM schedules s WHERE s.last_run_id = r.id) AS refs FROM runs r`)
        ).map((row) => ({
          id: String(row.id),
          status: String(row.status),
          finished: row.finished_at_ms === null ? null : Number(row.finished_at_ms),
          key: typeof row.idempotency_key === "string" ? row.idempotency_key : null,
          frontier: Number(row.frontier_due),
          live: Number(row.live),
          refs: Number(row.refs),
        }));
      const terminal = new Set(["succeeded", "failed", "timed_out", "cancelled", "lost"]);
      /** The oracle: which runs must go under `policy` at `nowMs`. */
      const expectedPurge = (all: Facts[], policy: RetentionPolicy, nowMs: number): Set<string> => {
        const finished = all.filter((run) => terminal.has(run.status) && run.finished !== null);
        const newestFirst = [...finished].sort(
          (a, b) => b.finished! - a.finished! || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0),
        );
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
        for (const table of RUN_CHILD_TABLES) {
          counts.push(
            Number(
              (
                await raw<{ n: number }>(
                  `SELECT COUNT(*) AS n FROM ${table} WHERE run_id = ${p(1)}`,
                  [runId],
                )
              )[0]?.n ?? 0,
            ),
          );
        }
        return counts;
      };
      const orphanRows = (): Promise<number> => driver.transaction(countOrphanRows);
      const purgeWith = async (
        policy: RetentionPolicy,
      ): Promise<{ before: Facts[]; expected: Set<string>; purged: string[] }> => {
        const before = await facts();
        const expected = expectedPurge(before, policy, clock.nowMs());
        const purged: string[] = [];
        const purging = new Coordinator({
          store,
          clock,
          ids,
          profile: PROFILES.edge,
          executors: {},
          retention: policy,
          onPurge: (run) => purged.push(run.runId),
        });
        // Edge budget: 4 runs per cycle. Bounded: the expected set plus a margin of cycles.
        for (let round = 0; round < expected.size + 5; round += 1) await purging.tick();
        return { before, expected, purged };
      };
      // The still-running run moves on while the cycles run (admission, frontier); the others are settled.
      const protectedCounts = {
        scheduled: await childCounts(scheduled),
        withLiveAttempt: await childCounts(withLiveAttempt),
        keyed: await childCounts(keyed),
      };

      // Phase 1, by count: only the newest two terminal runs stay, besides what the rules protect.
      const byCount = await purgeWith({ horizonMs: 3_650 * 86_400_000, maxRuns: 2 });
      expect(byCount.expected.has(plain)).toBe(true);
      for (const runId of [keyed, scheduled, withLiveAttempt, stillRunning, recentA, recentB])
        expect(byCount.expected.has(runId), runId).toBe(false);
      expect(new Set(byCount.purged)).toEqual(byCount.expected);
      const afterCount = new Set((await facts()).map((run) => run.id));
      expect(afterCount).toEqual(
        new Set(byCount.before.map((run) => run.id).filter((id) => !byCount.expected.has(id))),
      );
      expect(await childCounts(plain)).toEqual([0, 0, 0, 0, 0]);
      expect(await orphanRows()).toBe(0);
      expect(await childCounts(keyed)).toEqual(protectedCounts.keyed);

      // Phase 2, by time: everything terminal older than a minute goes, the keyed run included.
      clock.advance(2 * 60_000);
      const byTime = await purgeWith({ horizonMs: 60_000, maxRuns: 10_000_000 });
      for (const runId of [keyed, recentA, recentB])
        expect(byTime.expected.has(runId), runId).toBe(true);
      expect(new Set(byTime.purged)).toEqual(byTime.expected);
      const afterTime = new Set((await facts()).map((run) => run.id));
      expect(afterTime).toEqual(
        new Set(byTime.before.map((run) => run.id).filter((id) => !byTime.expected.has(id))),
      );
      expect(await orphanRows()).toBe(0);
      expect(await childCounts(scheduled)).toEqual(protectedCounts.scheduled);
      expect(await childCounts(withLiveAttempt)).toEqual(protectedCounts.withLiveAttempt);
      expect((await childCounts(stillRunning))[0]).toBe(4);
      for (const runId of [scheduled, withLiveAttempt, stillRunning])
        expect(afterTime.has(runId), runId).toBe(true);
      // A purged run reads as absent, and its idempotency key starts a new run.
      expect(await store.transaction(async (tx) => tx.getRun(keyed))).toBeNull();
      const restarted = await store.transaction(async (tx) =>
        startDiamond(tx, "purge-pkg", await tx.observe(clock.nowMs()), {
          idempotencyKey: "purge-contract-key",
        }),
      );
      expect(restarted.created).toBe(true);
      expect(restarted.run.id).not.toBe(keyed);
    });

    it("a run entering failed, timed_out or lost writes its alerts in the same transaction, once; the outbox is CAS-guarded and purged with the run", async () => {
      const base = diamondManifest("notify-pkg");
      const hook = { kind: "webhook" as const, url: "http://127.0.0.1:9/hook", secret: null };
      const manifest = {
        ...base,
        workflows: base.workflows.map((workflow) => ({
          ...workflow,
          notify: [hook, { kind: "command" as const, argv: ["logger", "x"] }],
        })),
      };
      const start = (): Promise<string> => newWorkflowRun("notify-pkg", manifest);
      const settle = async (
        runId: string,
        status: "failed" | "succeeded" | "lost",
        failWith: Error | null = null,
      ): Promise<void> =>
        store.transaction(async (tx) => {
          await endRun(tx, runId, status);
          if (failWith !== null) throw failWith;
        });
      const outbox = async (runId: string) =>
        store.transaction(async (tx) =>
          tx.listNotifications({ runId, state: null, cursor: null, limit: 10 }),
        );

      // A transaction that fails after the transition leaves neither the transition nor an alert.
      const rolledBack = await start();
      await expect(settle(rolledBack, "failed", new Error("after the transition"))).rejects.toThrow(
        "after the transition",
      );
      expect(await outbox(rolledBack)).toEqual([]);

      const failed = await start();
      clock.advance(1000);
      await settle(failed, "failed");
      const entries = await outbox(failed);
      expect(
        entries.map((entry) => [entry.event, entry.notifier.kind, entry.state, entry.attempts]),
      ).toEqual(
        expect.arrayContaining([
          ["run.failed", "webhook", "pending", 0],
          ["run.failed", "command", "pending", 0],
        ]),
      );
      expect(entries).toHaveLength(2);
      expect(JSON.parse(entries[0]?.payload ?? "{}")).toMatchObject({
        event: "run.failed",
        run: { id: failed, status: "failed", package: "notify-pkg", target: "diamond" },
      });

      // A run that succeeded alerts nobody.
      const succeeded = await start();
      await settle(succeeded, "succeeded");
      expect(await outbox(succeeded)).toEqual([]);

      // Due entries, then one claim and one record under the version fence; a stale writer conflicts.
      const nowMs = clock.nowMs();
      const due = (
        await store.transaction(async (tx) => tx.listDueNotifications(nowMs, 500))
      ).filter((entry) => entry.runId === failed);
      expect(due).toHaveLength(2);
      const first = due[0];
      if (first === undefined) throw new Error("no entry");
      const claim = claimForDelivery(first, nowMs);
      if (claim === null) throw new Error("not claimable");
      await store.transaction(async (tx) => tx.updateNotification(claim, first.version));
      await expect(
        store.transaction(async (tx) => tx.updateNotification(claim, first.version)),
      ).rejects.toSatisfy((error: unknown) => isQlrError(error, "conflict"));
      expect(
        (await store.transaction(async (tx) => tx.listDueNotifications(nowMs, 500))).map(
          (entry) => entry.id,
        ),
      ).not.toContain(first.id);
      await store.transaction(async (tx) =>
        tx.updateNotification(recordDelivery(claim, { ok: true }, nowMs), claim.version),
      );
      expect(await store.transaction(async (tx) => tx.getNotification(first.id))).toMatchObject({
        state: "delivered",
        attempts: 1,
        deliveredAtMs: nowMs,
      });
      expect(
        (
          await store.transaction(async (tx) =>
            tx.listNotifications({ runId: null, state: "delivered", cursor: null, limit: 500 }),
          )
        ).map((entry) => entry.id),
      ).toContain(first.id);

      // Retention takes a run's alerts with it.
      await store.transaction(async (tx) => tx.purgeRun(failed));
      expect(await outbox(failed)).toEqual([]);
    });

    it("a workflow step entering failed or timed_out writes its task's alerts (step events) in the same transaction, once; the workflow's own notifiers wait for the run", async () => {
      const base = diamondManifest("step-notify-pkg");
      const taskHook = { kind: "webhook" as const, url: "http://127.0.0.1:9/task", secret: null };
      const workflowHook = {
        kind: "webhook" as const,
        url: "http://127.0.0.1:9/workflow",
        secret: null,
      };
      const manifest = {
        ...base,
        tasks: base.tasks.map((spec) => ({ ...spec, notify: [taskHook] })),
        workflows: base.workflows.map((workflow) => ({ ...workflow, notify: [workflowHook] })),
      };
      const runId = await newWorkflowRun("step-notify-pkg", manifest);
      const settleStep = async (
        name: string,
        status: "failed" | "timed_out" | "succeeded",
      ): Promise<void> =>
        store.transaction(async (tx) => {
          const nowMs = await tx.observe(clock.nowMs());
          const step = (await tx.getSteps(runId)).find((candidate) => candidate.name === name);
          const run = await tx.getRun(runId);
          if (step === undefined || run === null) throw new Error(`no step ${name}`);
          await tx.apply({
            ...EMPTY_CHANGE_SET,
            // Every change of a step moves its run (the store refuses one that does not).
            runs: [{ before: run, after: { ...run, version: run.version + 1 } }],
            steps: [
              {
                before: step,
                after: {
                  ...step,
                  status,
                  version: step.version + 1,
                  finishedAtMs: nowMs,
                },
              },
            ],
          });
        });
      const outbox = async () =>
        store.transaction(async (tx) =>
          tx.listNotifications({ runId, state: null, cursor: null, limit: 10 }),
        );
      clock.advance(1000);
      await settleStep("a", "succeeded");
      expect(await outbox()).toEqual([]);
      await settleStep("b", "failed");
      await settleStep("c", "timed_out");
      const entries = await outbox();
      expect(
        entries
          .map((entry) => [entry.event, entry.stepName, entry.notifier] as const)
          .sort((x, y) => x[0].localeCompare(y[0])),
      ).toEqual([
        ["step.failed", "b", taskHook],
        ["step.timed_out", "c", taskHook],
      ]);
      const failedEntry = entries.find((entry) => entry.stepName === "b");
      expect(JSON.parse(failedEntry?.payload ?? "{}")).toMatchObject({
        event: "step.failed",
        run: { id: runId, package: "step-notify-pkg", target: "diamond" },
        step: { name: "b", task: "work", status: "failed" },
      });
      // A step already settled that is written again (a replayed change) alerts nobody anew.
      await store.transaction(async (tx) => {
        const step = (await tx.getSteps(runId)).find((candidate) => candidate.name === "b");
        const run = await tx.getRun(runId);
        if (step === undefined || run === null) throw new Error("no step b");
        await tx.apply({
          ...EMPTY_CHANGE_SET,
          runs: [{ before: run, after: { ...run, version: run.version + 1 } }],
          steps: [{ before: step, after: { ...step, version: step.version + 1 } }],
        });
      });
      expect(await outbox()).toHaveLength(2);
      await store.transaction(async (tx) => tx.purgeRun(runId));
      expect(await outbox()).toEqual([]);
    });

    it("the overview aggregates ended runs per hour and workflow in SQL, lists failures, active runs and next fires, bounded", async () => {
      const manifest = diamondManifest("overview-pkg");
      const startedAt = clock.nowMs();
      const runIds = await store.transaction(async (tx) => {
        const nowMs = await tx.observe(clock.nowMs());
        await applyPackage(tx, manifest, nowMs);
        const started: string[] = [];
        for (let index = 0; index < 4; index += 1)
          started.push((await startDiamond(tx, "overview-pkg", nowMs)).run.id);
        return started;
      });
      const finalNow = startedAt + 90 * 60_000;
      const before = await store.transaction(async (tx) => tx.overview(finalNow, 24));
      const settle = async (
        runId: string,
        status: "failed" | "succeeded" | "timed_out",
      ): Promise<number> => store.transaction((tx) => endRun(tx, runId, status));
      clock.advance(30 * 60_000);
      const firstEnd = await settle(runIds[0] ?? "", "failed");
      clock.advance(60 * 60_000);
      const secondEnd = await settle(runIds[1] ?? "", "succeeded");
      await settle(runIds[2] ?? "", "timed_out");
      expect(clock.nowMs()).toBe(finalNow);
      const after = await store.transaction(async (tx) => tx.overview(finalNow, 24));

      const hourOf = (ms: number): number => Math.floor(ms / 3_600_000) * 3_600_000;
      const counts = (overview: typeof after): Map<string, number> =>
        new Map(overview.runsPerHour.map((row) => [`${row.hourStartMs}|${row.status}`, row.count]));
      const added = new Map<string, number>();
      for (const [key, count] of counts(after)) {
        const delta = count - (counts(before).get(key) ?? 0);
        if (delta !== 0) added.set(key, delta);
      }
      const expected = new Map<string, number>();
      for (const [ms, status] of [
        [firstEnd, "failed"],
        [secondEnd, "succeeded"],
        [secondEnd, "timed_out"],
      ] as const)
        expected.set(`${hourOf(ms)}|${status}`, (expected.get(`${hourOf(ms)}|${status}`) ?? 0) + 1);
      expect(added).toEqual(expected);

      const mine = after.durations.filter((row) => row.package === "overview-pkg");
      expect(
        mine.map((row) => [
          row.hourStartMs,
          row.workflow,
          row.runs,
          row.avgDurationMs,
          row.maxDurationMs,
        ]),
      ).toEqual(
        [
          [hourOf(firstEnd), "diamond", 1, 30 * 60_000, 30 * 60_000],
          [hourOf(secondEnd), "diamond", 2, 90 * 60_000, 90 * 60_000],
        ]
          .sort((a, b) => Number(a[0]) - Number(b[0]))
          .reduce<(string | number)[][]>((rowsByHour, row) => {
            const last = rowsByHour[rowsByHour.length - 1];
            if (last !== undefined && last[0] === row[0]) {
              const runs = Number(last[2]) + Number(row[2]);
              return [
                ...rowsByHour.slice(0, -1),
                [
                  row[0] ?? 0,
                  "diamond",
                  runs,
                  Math.round(
                    (Number(last[3]) * Number(last[2]) + Number(row[3]) * Number(row[2])) / runs,
                  ),
                  Math.max(Number(last[4]), Number(row[4])),
                ],
              ];
            }
            return [...rowsByHour, row];
          }, []),
      );
      expect(
        after.recentFailures
          .filter((run) => run.package === "overview-pkg")
          .map((run) => [run.id, run.status]),
      ).toEqual(
        [
          [runIds[2], "timed_out"],
          [runIds[0], "failed"],
        ].sort((a, b) => (a[1] === "timed_out" ? -1 : b[1] === "timed_out" ? 1 : 0)),
      );
      expect(after.active.map((run) => run.id)).toContain(runIds[3]);
      expect(after.activeCount).toBeGreaterThanOrEqual(1);
      expect(after.active.length).toBeLessThanOrEqual(20);
      expect(after.sinceMs).toBe(hourOf(finalNow) - 23 * 3_600_000);
    });

    // Last of the contract's own tests: its three live runs would count in the tests that count
    // live runs and attempts across the shared store.
    it("a change of several runs marks the frontier of the runs it names and keeps every other run's mark", async () => {
      const p = (index: number): string => (driver.dialect === "postgres" ? `$${index}` : "?");
      const runIds = [
        await newWorkflowRun("mark-pkg"),
        await newWorkflowRun("mark-pkg"),
        await newWorkflowRun("mark-pkg"),
      ];
      const [marked, unmarked, named] = runIds as [string, string, string];
      const marks = async (): Promise<number[]> => {
        const found = await driver.transaction((tx) =>
          tx.query<{ id: string; frontier_due: number }>(
            `SELECT id, frontier_due FROM runs WHERE id IN (${p(1)}, ${p(2)}, ${p(3)})`,
            runIds,
          ),
        );
        return runIds.map((runId) => Number(found.find((row) => row.id === runId)?.frontier_due));
      };
      await driver.transaction((tx) =>
        tx.query(`UPDATE runs SET frontier_due = 0 WHERE id IN (${p(1)}, ${p(2)})`, [
          unmarked,
          named,
        ]),
      );
      expect(await marks()).toEqual([1, 0, 0]);
      // One transaction moves all three (on PostgreSQL one multi-row UPDATE), naming one of them.
      await store.transaction(async (tx) => {
        const runs: ChangeSet["runs"][number][] = [];
        for (const runId of [marked, unmarked, named]) {
          const run = await tx.getRun(runId);
          if (run === null) throw new Error("no run");
          runs.push({ before: run, after: { ...run, version: run.version + 1 } });
        }
        await tx.apply({ ...EMPTY_CHANGE_SET, runs, frontierDue: [named] });
      });
      expect(await marks()).toEqual([1, 0, 1]);
    });

    describeGroupCommit(factory);
  });
}
