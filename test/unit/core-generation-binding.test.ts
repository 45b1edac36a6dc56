import { describe, expect, it } from "vitest";
import type { Coordinator } from "../../src/coordinator.ts";
import type { AdmissionReceipt, RunAttempt } from "../../src/model.ts";
import { applyPackage, startRun } from "../../src/operations.ts";
import type { LaunchRequest } from "../../src/ports.ts";
import { PROFILES } from "../../src/profiles.ts";
import type { SqlStore } from "../../storage/sql-store.ts";
import {
  diamondManifest,
  SequentialIds,
  task,
  workflowStart,
  type TestClock,
} from "../support/fixtures.ts";
import { recordingExecutor } from "../support/simulated-executors.ts";
import { storeRig } from "./store-rig.ts";

/**
 * Generation binding at execution (ADR-0227 §4, ADR-0229 §2): what a workflow attempt runs is
 * what its admission receipt recorded, read from the ledger and verified, never the package
 * head's definition and never a definition looked up again by name. Over a real sql.js store,
 * with the simulated executor recording every launch request.
 */

interface Rig {
  readonly store: SqlStore;
  readonly clock: TestClock;
  readonly launches: LaunchRequest[];
  readonly coordinator: Coordinator;
  start(argv: string[]): Promise<string>;
  apply(argv: string[]): Promise<number>;
  /** Two cycles of a coordinator that admits but never dispatches: run `runId`'s claimed attempts. */
  claimedOnly(runId: string): Promise<RunAttempt[]>;
}

async function rig(): Promise<Rig> {
  const base = await storeRig(3);
  const { clock, store, ids } = base;
  const launches: LaunchRequest[] = [];
  const coordinator = base.coordinator("edge", {
    executors: { local_process: recordingExecutor(base.executor, launches) },
  });
  const apply = (argv: string[]): Promise<number> =>
    store.transaction(
      async (tx) =>
        (
          await applyPackage(
            tx,
            diamondManifest("bind", { tasks: [task("work", argv)] }),
            await tx.observe(clock.nowMs()),
          )
        ).generation,
    );
  return {
    store,
    clock,
    launches,
    coordinator,
    apply,
    claimedOnly: async (runId) => {
      const admitOnly = base.coordinator(
        { ...PROFILES.edge, dispatch: 0 },
        { ids: new SequentialIds("x"), executors: {} },
      );
      await admitOnly.tick();
      await admitOnly.tick();
      return store.transaction(async (tx) =>
        (await tx.getAttempts(runId)).filter((attempt) => attempt.status === "claimed"),
      );
    },
    start: async (argv) => {
      await apply(argv);
      return store.transaction(
        async (tx) =>
          (
            await startRun(
              tx,
              workflowStart("bind", "diamond", ids.runId()),
              await tx.observe(clock.nowMs()),
            )
          ).run.id,
      );
    },
  };
}

async function runStatus(store: SqlStore, runId: string): Promise<string> {
  return store.transaction(async (tx) => (await tx.getRun(runId))?.status ?? "missing");
}

async function tickUntilEnded(r: Rig, runId: string): Promise<void> {
  for (
    let cycle = 0;
    cycle < 200 && !["succeeded", "failed"].includes(await runStatus(r.store, runId));
    cycle += 1
  ) {
    r.clock.nowMsValue += 50;
    await r.coordinator.tick();
  }
}

function argvOf(request: LaunchRequest): readonly string[] {
  return request.definition.execution.executor === "local_process"
    ? request.definition.execution.argv
    : [];
}

describe("generation binding at execution", () => {
  it("a generation applied while a DAG runs changes nothing for it: every remaining step runs generation 1's argv", async () => {
    const r = await rig();
    const runId = await r.start(["echo", "generation-1"]);
    // The edge budget admits and dispatches one step per cycle: a few cycles in, only `a` started.
    for (let cycle = 0; cycle < 3; cycle += 1) await r.coordinator.tick();
    expect(r.launches.length).toBeGreaterThanOrEqual(1);
    expect(await r.apply(["echo", "generation-2"])).toBe(2);
    await tickUntilEnded(r, runId);
    expect(await runStatus(r.store, runId)).toBe("succeeded");
    expect(r.launches).toHaveLength(4);
    for (const request of r.launches) {
      expect(argvOf(request)).toEqual(["echo", "generation-1"]);
      expect(request.definition.generation).toBe(1);
    }
    // A run started now is bound to generation 2.
    const later = await r.start(["echo", "generation-2"]);
    await tickUntilEnded(r, later);
    expect(r.launches.slice(4).map(argvOf)).toEqual(
      Array.from({ length: 4 }, () => ["echo", "generation-2"]),
    );
  });

  /** Each ledger field that binds execution, altered in the stored receipt of a claimed attempt. */
  const TAMPERS: readonly {
    readonly field: keyof AdmissionReceipt;
    readonly value: (receipt: AdmissionReceipt) => unknown;
    readonly reason: RegExp;
  }[] = [
    {
      field: "runtimeTaskRevision",
      value: (receipt) => receipt.runtimeTaskRevision.replace(/:1:/, ":9:"),
      reason: /has no definition/,
    },
    { field: "runtimeTaskId", value: () => "pkg:bind:other", reason: /is not the step's task/ },
    {
      field: "taskDefinitionDigest",
      value: () => `sha256:${"0".repeat(64)}`,
      reason: /definition digest does not match/,
    },
    {
      field: "executionDigest",
      value: () => `sha256:${"1".repeat(64)}`,
      reason: /execution digest does not match/,
    },
    {
      field: "attemptId",
      value: () => "wta:ffffffffffffffffffffffffffffffff",
      reason: /names attempt wta:f+/,
    },
  ];

  it.each(TAMPERS)(
    "an attempt whose admission receipt disagrees on $field is never launched: the dispatch reports an integrity error",
    async ({ field, value, reason }) => {
      const r = await rig();
      const runId = await r.start(["echo", "bound"]);
      // Admission claims `a`; alter its receipt before the dispatch of the next cycle.
      const claimed = await r.claimedOnly(runId);
      expect(claimed).toHaveLength(1);
      const attempt = claimed[0]!;
      await r.store.driver.transaction(async (tx) => {
        const [row] = await tx.query<{ body: string }>(
          "SELECT body FROM admission_receipts WHERE run_id = ? AND step_run_id = ? AND step_run_version = ?",
          [attempt.runId, attempt.stepRunId, attempt.stepRunVersion],
        );
        const receipt = JSON.parse(row!.body) as AdmissionReceipt;
        await tx.query(
          "UPDATE admission_receipts SET body = ? WHERE run_id = ? AND step_run_id = ? AND step_run_version = ?",
          [
            JSON.stringify({ ...receipt, [field]: value(receipt) }),
            attempt.runId,
            attempt.stepRunId,
            attempt.stepRunVersion,
          ],
        );
      });
      const report = await r.coordinator.tick();
      const dispatch = report.stages.find((stage) => stage.name === "dispatch");
      expect(dispatch?.errors.map((error) => error.code)).toEqual(["integrity"]);
      expect(dispatch?.errors[0]?.message).toMatch(reason);
      expect(r.launches).toEqual([]);
      expect((await r.store.transaction(async (tx) => tx.getAttempt(attempt.id)))?.status).toBe(
        "claimed",
      );
    },
  );

  it("an attempt without its admission receipt is never launched", async () => {
    const r = await rig();
    const runId = await r.start(["echo", "bound"]);
    const [attempt] = await r.claimedOnly(runId);
    await r.store.driver.transaction(async (tx) => {
      await tx.query(
        "DELETE FROM admission_receipts WHERE run_id = ? AND step_run_id = ? AND step_run_version = ?",
        [attempt!.runId, attempt!.stepRunId, attempt!.stepRunVersion!],
      );
    });
    const report = await r.coordinator.tick();
    expect(report.stages.find((stage) => stage.name === "dispatch")?.errors[0]?.message).toMatch(
      /no admission receipt/,
    );
    expect(r.launches).toEqual([]);
  });
});
