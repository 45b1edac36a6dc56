import { describe, expect, it } from "vitest";
import { EMPTY_CHANGE_SET, type Run, type StepRun } from "../../src/model.ts";
import {
  alertingSteps,
  deliveryRequest,
  entriesForRun,
  entriesForStep,
  notifiersForRun,
  notifiersForStep,
} from "../../src/notifications.ts";
import { diamondManifest, task } from "../support/fixtures.ts";

const taskHook = { kind: "webhook" as const, url: "https://alerts.example/task", secret: null };
const workflowHook = { kind: "webhook" as const, url: "https://alerts.example/wf", secret: null };
const pager = { kind: "command" as const, argv: ["/usr/local/bin/page-me"] };

const manifest = {
  ...diamondManifest("alerts", {
    tasks: [task("work", ["true"], { notify: [taskHook, pager, taskHook] }), task("quiet")],
  }),
};
const withWorkflowNotify = {
  ...manifest,
  workflows: manifest.workflows.map((workflow) => ({ ...workflow, notify: [workflowHook] })),
};

const run: Run = {
  id: "run:00000000000000000000000000000001",
  package: "alerts",
  generation: 1,
  kind: "workflow",
  target: "diamond",
  status: "running",
  scheduleName: null,
  createdAtMs: 1_000,
  updatedAtMs: 2_000,
  finishedAtMs: null,
} as unknown as Run;

function step(status: StepRun["status"], name = "b"): StepRun {
  return {
    id: `step:${name}`,
    runId: run.id,
    name,
    task: "work",
    needs: ["a"],
    status,
    version: 3,
    attemptCount: 2,
    finishedAtMs: status === "running" ? null : 5_000,
  } as unknown as StepRun;
}

describe("task notify: for workflow steps", () => {
  it("a step that enters failed or timed_out alerts; one already settled, running or succeeded does not", () => {
    const changes = [
      { before: step("running", "b"), after: step("failed", "b") },
      { before: step("running", "c"), after: step("timed_out", "c") },
      { before: step("failed", "x"), after: step("failed", "x") },
      { before: step("running", "s"), after: step("succeeded", "s") },
      { before: step("ready", "r"), after: step("running", "r") },
      { before: step("running", "k"), after: step("cancelled", "k") },
    ];
    expect(
      alertingSteps({ ...EMPTY_CHANGE_SET, steps: changes }).map((changed) => changed.name),
    ).toEqual(["b", "c"]);
  });

  it("the step's task's notifiers, each once; a task without notify has none", () => {
    expect(notifiersForStep(manifest, { task: "work" })).toEqual([taskHook, pager]);
    expect(notifiersForStep(manifest, { task: "quiet" })).toEqual([]);
    expect(notifiersForStep(manifest, { task: "gone" })).toEqual([]);
  });

  it("step entries name the step, carry it in the payload, and have ids stable per run, step, status and notifier", () => {
    const failed = entriesForStep(run, step("failed"), [taskHook, pager], 5_000);
    expect(failed.map((entry) => [entry.event, entry.stepName, entry.notifier])).toEqual([
      ["step.failed", "b", taskHook],
      ["step.failed", "b", pager],
    ]);
    expect(JSON.parse(failed[0]?.payload ?? "{}")).toMatchObject({
      event: "step.failed",
      run: { id: run.id, target: "diamond" },
      step: { name: "b", task: "work", status: "failed", attempts: 2 },
    });
    expect(entriesForStep(run, step("failed"), [taskHook], 9_000)[0]?.id).toBe(failed[0]?.id);
    expect(entriesForStep(run, step("timed_out"), [taskHook], 5_000)[0]?.id).not.toBe(
      failed[0]?.id,
    );
    expect(entriesForStep(run, step("failed", "c"), [taskHook], 5_000)[0]?.id).not.toBe(
      failed[0]?.id,
    );
    expect(entriesForStep(run, step("succeeded"), [taskHook], 5_000)).toEqual([]);
    // A command notifier learns which step.
    const request = deliveryRequest(failed[1]!);
    expect(request.kind === "command" ? request.env : null).toMatchObject({
      QLR_EVENT: "step.failed",
      QLR_STEP: "b",
      QLR_RUN_ID: run.id,
    });
  });

  it("both fire: the run's event goes to the workflow's notifiers, the step's to its task's, with different ids", () => {
    const ended = { ...run, status: "failed", finishedAtMs: 6_000 } as Run;
    const runEntries = entriesForRun(ended, notifiersForRun(withWorkflowNotify, ended), 6_000);
    expect(runEntries.map((entry) => [entry.event, entry.stepName, entry.notifier])).toEqual([
      ["run.failed", null, workflowHook],
    ]);
    // The task's notifiers are not the run's: a workflow run's run event does not reach them.
    expect(notifiersForRun(manifest, ended)).toEqual([]);
    const stepEntries = entriesForStep(ended, step("failed"), [workflowHook], 6_000);
    expect(stepEntries[0]?.id).not.toBe(runEntries[0]?.id);
  });
});
