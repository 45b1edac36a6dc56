import { describe, expect, it } from "vitest";
import { Coordinator } from "../../src/coordinator.ts";
import { isQlrError } from "../../src/errors.ts";
import { parseManifest } from "../../src/manifest/index.ts";
import type { Manifest } from "../../src/manifest/types.ts";
import { applyPackage, rerunRun, startRun } from "../../src/operations.ts";
import type { LaunchRequest } from "../../src/ports.ts";
import { PROFILES } from "../../src/profiles.ts";
import {
  MAX_INPUT_BYTES,
  MAX_INPUT_KEYS,
  resolveRunInput,
  type InputDeclaration,
} from "../../src/run-inputs.ts";
import type { SimulatedOutcome } from "../../src/sim/simulated-executor.ts";
import { checkOutput, MAX_OUTPUT_BYTES, outputFromText } from "../../src/task-output.ts";
import type { SqlStore } from "../../storage/sql-store.ts";
import { SequentialIds, TestClock, workflowStart } from "../support/fixtures.ts";
import { recordingExecutor, steadyExecutor } from "../support/simulated-executors.ts";
import { T0 } from "./core-fixtures.ts";
import { driverNamed, openTestStore } from "../support/drivers.ts";

/**
 * Run inputs, step context, step outputs and reruns through the core: the pure rules, then
 * whole runs over a real sql.js store driven by the coordinator with a simulated executor that
 * records every launch request (its context is what a task's environment is built from).
 */

const DECLARED: InputDeclaration[] = [
  { name: "count", type: "number", required: false, default: 3 },
  { name: "dry_run", type: "boolean", required: false, default: null },
  { name: "target", type: "string", required: true, default: null },
];

function refusal(fn: () => unknown): { code: string; paths: string[] } {
  try {
    fn();
  } catch (error) {
    if (isQlrError(error))
      return { code: error.code, paths: error.details.map((detail) => detail.path) };
    throw error;
  }
  throw new Error("expected a refusal");
}

describe("run input rules", () => {
  it("applies declared types (text spelling a number or boolean is accepted, as the CLI sends it), fills defaults and sorts keys", () => {
    expect(resolveRunInput({ target: "eu", dry_run: "true", count: "7" }, DECLARED)).toEqual({
      count: 7,
      dry_run: true,
      target: "eu",
    });
    expect(Object.keys(resolveRunInput({ target: "eu" }, DECLARED))).toEqual(["count", "target"]);
    expect(resolveRunInput({ target: "eu" }, DECLARED)).toEqual({ count: 3, target: "eu" });
  });

  it("reports every problem at once: a missing required input, a wrong type, an undeclared key", () => {
    const refused = refusal(() =>
      resolveRunInput({ count: "seven", dry_run: "yes", extra: 1 }, DECLARED),
    );
    expect(refused.code).toBe("invalid_request");
    expect(refused.paths.sort()).toEqual([
      "input.count",
      "input.dry_run",
      "input.extra",
      "input.target",
    ]);
  });

  it("without declarations any well-formed key passes as given; bad keys, values and sizes are refused", () => {
    expect(resolveRunInput({ b: 1, a: "x", c: false }, null)).toEqual({ a: "x", b: 1, c: false });
    expect(resolveRunInput(undefined, null)).toEqual({});
    expect(refusal(() => resolveRunInput({ "bad-key": "x" }, null)).paths).toEqual([
      "input.bad-key",
    ]);
    expect(refusal(() => resolveRunInput({ nested: { a: 1 } }, null)).paths).toEqual([
      "input.nested",
    ]);
    expect(refusal(() => resolveRunInput({ nul: "a\u0000b" }, null)).paths).toEqual(["input.nul"]);
    expect(refusal(() => resolveRunInput(["a"], null)).paths).toEqual(["input"]);
    const many = Object.fromEntries(
      Array.from({ length: MAX_INPUT_KEYS + 1 }, (_, index) => [`k${index}`, 1]),
    );
    expect(refusal(() => resolveRunInput(many, null)).paths).toContain("input");
    expect(
      refusal(() => resolveRunInput({ big: "x".repeat(MAX_INPUT_BYTES) }, null)).paths,
    ).toEqual(["input"]);
  });
});

describe("step output rules", () => {
  it("accepts JSON up to the cap, treats empty text and null as no output, refuses the rest with a reason", () => {
    expect(outputFromText('{"b": 2, "a": [1, "x"]}\n')).toEqual({
      output: { a: [1, "x"], b: 2 },
      outputError: null,
    });
    expect(outputFromText("  \n")).toEqual({ output: null, outputError: null });
    expect(outputFromText("null")).toEqual({ output: null, outputError: null });
    expect(outputFromText("{not json").outputError).toMatch(/not valid JSON/);
    expect(checkOutput({ big: "x".repeat(MAX_OUTPUT_BYTES) }).outputError).toMatch(
      /more than the 65536 allowed/,
    );
    let deep: unknown = 1;
    for (let level = 0; level < 40; level += 1) deep = [deep];
    expect(checkOutput(deep).outputError).toMatch(/deeper/);
  });
});

/** The manifest `yaml` spells; its issues thrown when it spells none. */
function parsedManifest(yaml: string): Manifest {
  const parsed = parseManifest(yaml, "yaml");
  if (!parsed.ok) throw new Error(JSON.stringify(parsed.issues));
  return parsed.manifest;
}

/** The manifest of one workflow in YAML; without inputs it has no `inputs:` key at all. */
function oneWorkflowYaml(shape: {
  readonly packageName: string;
  readonly tasks: readonly string[];
  readonly workflow: string;
  readonly inputs: readonly string[];
  readonly steps: readonly string[];
}): string {
  const block = (indent: string, entries: readonly string[]): string =>
    entries.map((entry) => `${indent}${entry}\n`).join("");
  const inputs = shape.inputs.length === 0 ? "" : `    inputs:\n${block("      ", shape.inputs)}`;
  return (
    `package: ${shape.packageName}\ntasks:\n${block("  ", shape.tasks)}` +
    `workflows:\n  ${shape.workflow}:\n${inputs}    steps:\n${block("      ", shape.steps)}`
  );
}

const WORK_TASK = 'work: { run: ["true"] }';

describe("manifest keys", () => {
  const yaml = (extra: string): string =>
    oneWorkflowYaml({
      packageName: "shop",
      tasks: [WORK_TASK],
      workflow: "deploy",
      inputs: ["target: { type: string, required: true }", "count: { type: number, default: 2 }"],
      steps: ["a: { task: work }"],
    }) + extra;

  it("parses workflow inputs and resolves a schedule's input against them, defaults filled in", () => {
    const manifest = parsedManifest(
      yaml(
        `schedules:\n  nightly: { cron: "0 3 * * *", workflow: deploy, input: { target: eu } }\n`,
      ),
    );
    expect(manifest.workflows[0]?.inputs).toEqual([
      { name: "count", type: "number", required: false, default: 2 },
      { name: "target", type: "string", required: true, default: null },
    ]);
    expect(manifest.schedules[0]?.input).toEqual({ count: 2, target: "eu" });
  });

  it("refuses a schedule whose runs would all be refused, a default of the wrong type and a required input with a default", () => {
    const missing = parseManifest(
      yaml(`schedules:\n  nightly: { cron: "0 3 * * *", workflow: deploy }\n`),
      "yaml",
    );
    expect(missing.ok ? [] : missing.issues).toEqual([
      { path: "schedules.nightly.input.target", message: "is required" },
    ]);
    const wrongDefault = parseManifest(yaml("").replace("default: 2", 'default: "two"'), "yaml");
    expect(wrongDefault.ok ? [] : wrongDefault.issues.map((issue) => issue.path)).toEqual([
      "workflows.deploy.inputs.count.default",
    ]);
    const both = parseManifest(
      yaml("").replace("default: 2", "default: 2, required: true"),
      "yaml",
    );
    expect(both.ok ? [] : both.issues.map((issue) => issue.path)).toEqual([
      "workflows.deploy.inputs.count.required",
    ]);
    const badName = parseManifest(yaml("").replace("count:", "bad-name:"), "yaml");
    expect(badName.ok).toBe(false);
  });

  it("a workflow without inputs keeps the manifest and plan digests it always had (no key is added)", () => {
    const manifest = parsedManifest(
      oneWorkflowYaml({
        packageName: "shop",
        tasks: [WORK_TASK],
        workflow: "w",
        inputs: [],
        steps: ["a: { task: work }"],
      }),
    );
    expect(Object.keys(manifest.workflows[0] ?? {})).toEqual(["name", "description", "steps"]);
  });
});

/** Each step's status by the step's name. */
function statusByStep(
  steps: readonly { readonly name: string; readonly status: string }[],
): Record<string, string> {
  return Object.fromEntries(steps.map((step) => [step.name, step.status]));
}

/** The pipeline's step statuses when one middle branch fails: the other succeeds, publish is skipped. */
function pipelineWithFailedBranch(failed: "transform" | "report"): Record<string, string> {
  return {
    extract: "succeeded",
    transform: "succeeded",
    report: "succeeded",
    [failed]: "failed",
    publish: "skipped",
  };
}

/** extract → {transform, report} → publish; `transform` fails while `failTransform` says so. */
function pipelineManifest(): Manifest {
  return parsedManifest(
    oneWorkflowYaml({
      packageName: "etl",
      tasks: [WORK_TASK, 'flaky: { run: ["false"] }'],
      workflow: "pipeline",
      inputs: ["region: { type: string, required: true }", "limit: { type: number, default: 10 }"],
      steps: [
        "extract: { task: work }",
        "transform: { task: flaky, needs: [extract] }",
        "report: { task: work, needs: [extract] }",
        "publish: { task: work, needs: [transform, report] }",
      ],
    }),
  );
}

interface Rig {
  readonly store: SqlStore;
  readonly clock: TestClock;
  readonly launches: LaunchRequest[];
  readonly coordinator: Coordinator;
  /** Ticks until the run is terminal (bounded). */
  settle(runId: string): Promise<string>;
}

async function rig(
  outcome: (request: LaunchRequest) => SimulatedOutcome | undefined,
): Promise<Rig> {
  const clock = new TestClock(T0);
  const store = await openTestStore(driverNamed("sqljs-memory"), T0 - 1);
  const simulated = steadyExecutor(clock, 5, outcome);
  const launches: LaunchRequest[] = [];
  const recording = recordingExecutor(simulated, launches);
  const coordinator = new Coordinator({
    store,
    clock,
    ids: new SequentialIds("run"),
    profile: PROFILES.edge,
    executors: { local_process: recording },
  });
  await store.transaction(async (tx) =>
    applyPackage(tx, pipelineManifest(), await tx.observe(clock.nowMs())),
  );
  return {
    store,
    clock,
    launches,
    coordinator,
    async settle(runId) {
      for (let round = 0; round < 200; round += 1) {
        await coordinator.tick();
        const run = await store.transaction((tx) => tx.getRun(runId));
        if (
          run !== null &&
          ["succeeded", "failed", "timed_out", "cancelled", "lost"].includes(run.status)
        )
          return run.status;
        clock.advance(100);
      }
      throw new Error(`run ${runId} did not settle`);
    },
  };
}

/** Each step outputs its own name and what it received; `transform` fails while `failing` holds. */
function outputs(state: { failing: boolean }) {
  return (request: LaunchRequest): SimulatedOutcome => {
    const step = request.context.step;
    if (step === "transform" && state.failing) return { exitCode: 1, durationMs: 100 };
    return {
      exitCode: 0,
      durationMs: 100,
      output: {
        step,
        attempt: request.context.attemptNumber,
        needs: Object.keys(request.context.needs),
      },
    };
  };
}

describe("inputs, context and outputs through whole runs (sql.js)", () => {
  it("stores the resolved input, gives every step its context and the outputs of the steps it needs", async () => {
    const state = { failing: false };
    const world = await rig(outputs(state));
    const { run } = await world.store.transaction(async (tx) =>
      startRun(
        tx,
        {
          package: "etl",
          target: { kind: "workflow", name: "pipeline" },
          idempotencyKey: "k1",
          scheduleName: null,
          runId: "run-in",
          input: { region: "eu" },
        },
        await tx.observe(world.clock.nowMs()),
      ),
    );
    expect(run.input).toEqual({ limit: 10, region: "eu" });
    expect(await world.settle(run.id)).toBe("succeeded");

    const publish = world.launches.find((request) => request.context.step === "publish");
    expect(publish?.context).toMatchObject({
      runId: "run-in",
      package: "etl",
      generation: 1,
      step: "publish",
      task: "work",
      input: { limit: 10, region: "eu" },
    });
    expect(publish?.context.needs).toEqual({
      report: { attempt: expect.any(Number) as number, needs: ["extract"], step: "report" },
      transform: { attempt: expect.any(Number) as number, needs: ["extract"], step: "transform" },
    });
    expect(
      world.launches.find((request) => request.context.step === "extract")?.context.needs,
    ).toEqual({});

    const detail = await world.store.transaction(async (tx) => ({
      run: await tx.getRun(run.id),
      steps: await tx.getSteps(run.id),
      attempts: await tx.getAttempts(run.id),
    }));
    expect(detail.run?.input).toEqual({ limit: 10, region: "eu" });
    expect(
      detail.steps.map((step) => [step.name, (step.output as { step?: string } | null)?.step]),
    ).toEqual([
      ["extract", "extract"],
      ["report", "report"],
      ["transform", "transform"],
      ["publish", "publish"],
    ]);
    expect(detail.attempts.every((attempt) => attempt.output !== null)).toBe(true);
  });

  it("the same idempotency key with the same input is the same run; with another input it is a conflict that writes nothing", async () => {
    const world = await rig(outputs({ failing: false }));
    const start = (input: unknown, runId: string) =>
      world.store.transaction(async (tx) =>
        startRun(
          tx,
          {
            package: "etl",
            target: { kind: "workflow", name: "pipeline" },
            idempotencyKey: "same",
            scheduleName: null,
            runId,
            input,
          },
          await tx.observe(world.clock.nowMs()),
        ),
      );
    const first = await start({ region: "eu" }, "run-a");
    // The default filled in makes these the same input.
    expect((await start({ region: "eu", limit: 10 }, "run-b")).run.id).toBe(first.run.id);
    await expect(start({ region: "us" }, "run-c")).rejects.toMatchObject({ code: "conflict" });
    await expect(start({ limit: "ten" }, "run-d")).rejects.toMatchObject({
      code: "invalid_request",
    });
    expect(
      (
        await world.store.transaction((tx) =>
          tx.listRuns({ status: null, cursor: null, limit: 10 }),
        )
      ).map((run) => run.id),
    ).toEqual(["run-a"]);
  });

  it("a refused output fails the step that exited 0 and records why; the steps after it are skipped", async () => {
    const world = await rig((request) =>
      request.context.step === "report"
        ? { exitCode: 0, durationMs: 100, output: { big: "x".repeat(MAX_OUTPUT_BYTES) } }
        : { exitCode: 0, durationMs: 100 },
    );
    const { run } = await world.store.transaction(async (tx) =>
      startRun(
        tx,
        workflowStart("etl", "pipeline", "run-big", { region: "eu" }),
        await tx.observe(world.clock.nowMs()),
      ),
    );
    expect(await world.settle(run.id)).toBe("failed");
    const steps = await world.store.transaction((tx) => tx.getSteps(run.id));
    expect(statusByStep(steps)).toEqual(pipelineWithFailedBranch("report"));
    const attempts = await world.store.transaction((tx) => tx.getAttempts(run.id));
    const report = attempts.find(
      (attempt) => attempt.stepRunId === steps.find((step) => step.name === "report")?.id,
    );
    expect(report).toMatchObject({ status: "failed", exitCode: 0, output: null });
    expect(report?.error).toMatch(/^output refused: is \d+ bytes as canonical JSON/);
  });

  it("rerun from the failed steps reuses the succeeded ones with their outputs and runs the rest; a full rerun runs everything", async () => {
    const state = { failing: true };
    const world = await rig(outputs(state));
    const now = async (tx: Parameters<Parameters<SqlStore["transaction"]>[0]>[0]) =>
      tx.observe(world.clock.nowMs());
    const rerunFrom = (runId: string, fromFailed: boolean, newRunId: string) =>
      world.store.transaction(async (tx) =>
        rerunRun(tx, { runId, fromFailed, newRunId, idempotencyKey: null }, await now(tx)),
      );
    const { run: old } = await world.store.transaction(async (tx) =>
      startRun(tx, workflowStart("etl", "pipeline", "run-old", { region: "eu" }), await now(tx)),
    );
    expect(await world.settle(old.id)).toBe("failed");
    const oldSteps = await world.store.transaction((tx) => tx.getSteps(old.id));
    expect(statusByStep(oldSteps)).toEqual(pipelineWithFailedBranch("transform"));

    state.failing = false;
    const launchedBefore = world.launches.length;
    const { run: rerun } = await rerunFrom(old.id, true, "run-re");
    expect(rerun).toMatchObject({
      rerunOf: old.id,
      generation: 1,
      planDigest: old.planDigest,
      input: { limit: 10, region: "eu" },
    });
    expect(await world.settle(rerun.id)).toBe("succeeded");
    const ranAgain = world.launches.slice(launchedBefore).map((request) => request.context.step);
    expect(ranAgain.sort()).toEqual(["publish", "transform"]);
    const publish = world.launches
      .slice(launchedBefore)
      .find((request) => request.context.step === "publish");
    // The reused report's output is the one the old run recorded.
    expect(publish?.context.needs.report).toEqual(
      oldSteps.find((step) => step.name === "report")?.output,
    );
    const newSteps = await world.store.transaction((tx) => tx.getSteps(rerun.id));
    expect(newSteps.find((step) => step.name === "extract")).toMatchObject({
      status: "succeeded",
      attemptCount: 0,
      output: oldSteps.find((step) => step.name === "extract")?.output,
    });

    // Nothing failed in the rerun: a rerun from its failed steps is refused and writes nothing.
    await expect(rerunFrom(rerun.id, true, "run-none")).rejects.toMatchObject({
      code: "conflict",
    });
    const launchedBeforeFull = world.launches.length;
    const { run: full } = await rerunFrom(rerun.id, false, "run-full");
    expect(await world.settle(full.id)).toBe("succeeded");
    expect(
      world.launches
        .slice(launchedBeforeFull)
        .map((request) => request.context.step)
        .sort(),
    ).toEqual(["extract", "publish", "report", "transform"]);
    expect(await world.store.transaction((tx) => tx.getRun("run-none"))).toBeNull();
  });

  it("a run that has not finished cannot be rerun; an unknown run is not found", async () => {
    const world = await rig(outputs({ failing: false }));
    const { run } = await world.store.transaction(async (tx) =>
      startRun(
        tx,
        workflowStart("etl", "pipeline", "run-live", { region: "eu" }),
        await tx.observe(world.clock.nowMs()),
      ),
    );
    await expect(
      world.store.transaction(async (tx) =>
        rerunRun(
          tx,
          { runId: run.id, fromFailed: false, newRunId: "run-x", idempotencyKey: null },
          await tx.observe(world.clock.nowMs()),
        ),
      ),
    ).rejects.toMatchObject({ code: "conflict" });
    await expect(
      world.store.transaction(async (tx) =>
        rerunRun(
          tx,
          { runId: "nope", fromFailed: false, newRunId: "run-y", idempotencyKey: null },
          await tx.observe(world.clock.nowMs()),
        ),
      ),
    ).rejects.toMatchObject({ code: "not_found" });
  });
});
