/**
 * A workflow step's completion carries its run's frontier in the same transaction
 * (src/coordinator.ts `completeWrite`): the steps it unblocks are ready, and the run whose last
 * step it was is finalized, in the commit that records the completion — not one cycle and one
 * commit later. Driven through the real app on sql.js and PGlite with the simulated executor,
 * one tick at a time on the virtual clock.
 */
import { describe, expect, it } from "vitest";
import {
  STORE_FACTORIES,
  harnessForBlock,
  yamlManifest,
  type Harness,
  type RunDetail,
} from "./support.ts";

const manifest = (name: string, firstRun: string): string =>
  yamlManifest(
    name,
    `tasks:
  first:
    run: ${firstRun}
    timeout: 30s
  second:
    run: ["sim", "ok"]
    timeout: 30s
workflows:
  one:
    steps:
      a: { task: second }
  chain:
    steps:
      a: { task: first }
      b: { task: second, needs: [a] }
`,
  );

describe.each(STORE_FACTORIES)("completion and frontier in one commit on $name", (factory) => {
  let h: Harness;
  harnessForBlock(factory, (opened) => {
    h = opened;
  });

  /** Ticks until step `step`'s attempt is terminal; returns the detail right after that tick. */
  async function tickUntilAttemptEnded(runId: string, step: string): Promise<RunDetail> {
    let detail: RunDetail | null = null;
    await h.tickUntil(async () => {
      detail = await h.runDetail(runId);
      const stepId = detail.steps.find((candidate) => candidate.name === step)?.id;
      return detail.attempts.some(
        (attempt) =>
          attempt.stepRunId === stepId &&
          !["claimed", "starting", "running"].includes(attempt.status),
      );
    });
    if (detail === null) throw new Error("no detail");
    return detail;
  }

  it("the cycle that records the last step's completion ends the run; the next frontier has nothing to do", async () => {
    expect((await h.applyYaml(manifest("one-commit", '["sim", "ok"]'))).status).toBe(201);
    const run = await h.startRun({ package: "one-commit", workflow: "one" });
    const detail = await tickUntilAttemptEnded(run.id, "a");
    expect(detail.attempts.map((attempt) => attempt.status)).toEqual(["succeeded"]);
    expect(detail.run.status).toBe("succeeded");
    expect(detail.run.finishedAtMs).not.toBeNull();
    // Attempt, step and run changed in one transaction: their events share its store time.
    const events = await h.events(run.id);
    const attemptDone = events.find(
      (event) => event.type === "attempt.status_changed" && event.data.to === "succeeded",
    );
    const runDone = events.find(
      (event) => event.type === "run.status_changed" && event.data.to === "succeeded",
    );
    expect(runDone?.atMs).toBe(attemptDone?.atMs);
    expect(runDone?.seq).toBe(events.length);
    const next = await h.tick();
    expect(next.stages.find((stage) => stage.name === "frontier")?.processed).toBe(0);
  });

  it("a completion makes the steps it unblocks ready, and a failure skips them and fails the run, in its own commit", async () => {
    expect((await h.applyYaml(manifest("unblock", '["sim", "ok"]'))).status).toBe(201);
    const run = await h.startRun({ package: "unblock", workflow: "chain" });
    const afterA = await tickUntilAttemptEnded(run.id, "a");
    expect(afterA.steps.map((step) => [step.name, step.status])).toEqual([
      ["a", "succeeded"],
      ["b", "ready"],
    ]);
    expect(afterA.run.status).toBe("running");
    const end = await tickUntilAttemptEnded(run.id, "b");
    expect(end.run.status).toBe("succeeded");

    expect((await h.applyYaml(manifest("skip", '["sim", "fail"]'))).status).toBe(201);
    const failing = await h.startRun({ package: "skip", workflow: "chain" });
    const failed = await tickUntilAttemptEnded(failing.id, "a");
    expect(failed.steps.map((step) => [step.name, step.status])).toEqual([
      ["a", "failed"],
      ["b", "skipped"],
    ]);
    expect(failed.run.status).toBe("failed");
  });

  it("a run with a cancel intent is left to cancellation convergence: the completion does not finalize it", async () => {
    expect((await h.applyYaml(manifest("cancel-owns", '["sim", "ok"]'))).status).toBe(201);
    const run = await h.startRun({ package: "cancel-owns", workflow: "chain" });
    await h.tickUntil(async () =>
      (await h.runDetail(run.id)).attempts.some((attempt) => attempt.status === "running"),
    );
    expect((await h.call("POST", `/runs/${run.id}/cancel`)).status).toBe(202);
    const detail = await h.runUntil(run.id);
    expect(detail.run.status).toBe("cancelled");
    expect(detail.steps.map((step) => step.status)).toEqual(["cancelled", "cancelled"]);
  });
});
