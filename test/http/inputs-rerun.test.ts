import { describe, expect, it } from "vitest";
import { namedDiamond, stepLines } from "../support/workflow-shapes.ts";
import {
  harnessForBlock,
  STORE_FACTORIES,
  errorOf,
  type RunView,
  type Harness,
} from "./support.ts";

/**
 * Run inputs, step outputs and reruns over the HTTP API, on each store: `input` on `POST /runs`
 * (checked against the workflow's declared inputs, refused with a clear error that writes
 * nothing), the views that show inputs and outputs, and `POST /runs/:id/rerun`.
 */

const yaml = (name: string): string => `package: ${name}
tasks:
  echo: { run: ["sim", "ok", "1000", "echo"] }
  flaky: { run: ["sim", "fail", "1000"] }
workflows:
  pipeline:
    inputs:
      region: { type: string, required: true }
      limit: { type: number, default: 10 }
      dry: { type: boolean, default: false }
    steps:
${stepLines(namedDiamond({ extract: "echo", load: "flaky", report: "echo", publish: "echo" }))}
  plain:
    steps:
      only: { task: echo }
`;

for (const factory of STORE_FACTORIES) {
  describe(`inputs, outputs and reruns over HTTP on '${factory.name}'`, () => {
    let h: Harness;
    harnessForBlock(factory, (opened) => {
      h = opened;
    });

    it("a run keeps its resolved input; every step's output is shown and handed to the steps that need it", async () => {
      expect((await h.applyYaml(yaml("io-http"))).status).toBe(201);
      const detail = await h.packageDetail("io-http");
      expect(
        detail.workflows
          .find((workflow) => workflow.name === "pipeline")
          ?.inputs?.map((input) => input.name),
      ).toEqual(["dry", "limit", "region"]);
      const run = await h.startRun({
        package: "io-http",
        workflow: "pipeline",
        input: { region: "eu", limit: 5 },
      });
      expect(run).toMatchObject({ input: { dry: false, limit: 5, region: "eu" }, rerunOf: null });
      const done = await h.runUntil(run.id);
      expect(done.run.status).toBe("failed");
      const byName = Object.fromEntries(done.steps.map((step) => [step.name, step]));
      expect(byName.extract?.output).toEqual({
        step: "extract",
        input: { dry: false, limit: 5, region: "eu" },
        needs: {},
      });
      expect(byName.report?.output).toEqual({
        step: "report",
        input: { dry: false, limit: 5, region: "eu" },
        needs: { extract: byName.extract?.output },
      });
      expect(byName.load).toMatchObject({ status: "failed", output: null });
      expect(byName.publish).toMatchObject({ status: "skipped", output: null });
      const reportAttempt = done.attempts.find(
        (attempt) => attempt.stepRunId === byName.report?.id,
      );
      expect(reportAttempt?.output).toEqual(byName.report?.output);
    });

    it("bad input is a 400 naming each key, a different input under the same idempotency key is a 409; neither writes anything", async () => {
      const before = await h.dump();
      for (const [input, paths] of [
        [{ limit: 5 }, ["input.region"]],
        [{ region: "eu", limit: "many", extra: 1 }, ["input.extra", "input.limit"]],
        [{ region: { nested: true } }, ["input.region"]],
        [{ region: "x".repeat(9000) }, ["input"]],
        [{ "bad key": "x", region: "eu" }, ["input.bad key"]],
      ] as const) {
        const answer = await h.call("POST", "/runs", {
          json: { package: "io-http", workflow: "pipeline", input },
        });
        expect(answer.status, answer.text).toBe(400);
        expect(errorOf(answer).code).toBe("invalid_request");
        expect(
          errorOf(answer)
            .details.map((detail) => detail.path)
            .sort(),
        ).toEqual([...paths]);
      }
      const notObject = await h.call("POST", "/runs", {
        json: { package: "io-http", workflow: "pipeline", input: ["eu"] },
      });
      expect(notObject.status).toBe(400);
      expect(await h.dump()).toBe(before);

      const first = await h.startRun({
        package: "io-http",
        workflow: "plain",
        idempotencyKey: "io-key",
        input: { who: "a" },
      });
      const again = await h.expectJson<{ run: RunView }>(200, "POST", "/runs", {
        json: {
          package: "io-http",
          workflow: "plain",
          idempotencyKey: "io-key",
          input: { who: "a" },
        },
      });
      expect(again.run.id).toBe(first.id);
      const afterFirst = await h.dump();
      const conflict = await h.call("POST", "/runs", {
        json: {
          package: "io-http",
          workflow: "plain",
          idempotencyKey: "io-key",
          input: { who: "b" },
        },
      });
      expect(conflict.status).toBe(409);
      expect(errorOf(conflict)).toMatchObject({ code: "conflict", details: [{ path: "input" }] });
      expect(await h.dump()).toBe(afterFirst);
      await h.runUntil(first.id);
    });

    it("POST /runs/:id/rerun: from the failed steps reuses the succeeded ones and their outputs; without it everything runs again", async () => {
      const old = (await h.allRuns()).find(
        (run) => run.target === "pipeline" && run.status === "failed",
      );
      if (old === undefined) throw new Error("the first test's failed run is missing");
      const oldDetail = await h.runDetail(old.id);
      const launched = h.executor.processes.size;

      const rerun = (
        await h.expectJson<{ run: RunView }>(201, "POST", `/runs/${old.id}/rerun`, {
          json: { fromFailed: true },
        })
      ).run;
      expect(rerun).toMatchObject({
        rerunOf: old.id,
        generation: old.generation,
        input: old.input,
        status: "running",
      });
      const done = await h.runUntil(rerun.id);
      const states = Object.fromEntries(
        done.steps.map((step) => [step.name, [step.status, step.attemptCount]]),
      );
      // load fails again (its task always fails): publish is skipped again, extract and report were reused.
      expect(states).toEqual({
        extract: ["succeeded", 0],
        load: ["failed", 1],
        report: ["succeeded", 0],
        publish: ["skipped", 0],
      });
      expect(done.steps.find((step) => step.name === "report")?.output).toEqual(
        oldDetail.steps.find((step) => step.name === "report")?.output,
      );
      expect(h.executor.processes.size - launched).toBe(1);

      const full = (
        await h.expectJson<{ run: RunView }>(201, "POST", `/runs/${old.id}/rerun`, { json: {} })
      ).run;
      const fullDone = await h.runUntil(full.id);
      expect(fullDone.steps.map((step) => step.attemptCount)).toEqual([1, 1, 1, 0]);
      expect(h.executor.processes.size - launched).toBe(4);
    });

    it("a rerun of a live run or of a run with nothing failed is a 409, a bad body a 400, an unknown run a 404; none writes anything", async () => {
      const succeeded = await h.runUntil(
        (await h.startRun({ package: "io-http", workflow: "plain" })).id,
      );
      const live = await h.startRun({ package: "io-http", workflow: "plain" });
      const before = await h.dump();
      const liveAnswer = await h.call("POST", `/runs/${live.id}/rerun`, { json: {} });
      expect(liveAnswer.status).toBe(409);
      expect(errorOf(liveAnswer).message).toMatch(/only a finished run can be rerun/);
      const nothing = await h.call("POST", `/runs/${succeeded.run.id}/rerun`, {
        json: { fromFailed: true },
      });
      expect(nothing.status).toBe(409);
      expect(errorOf(nothing).message).toMatch(/no failed step to rerun/);
      const badBody = await h.call("POST", `/runs/${succeeded.run.id}/rerun`, {
        json: { fromFailed: "yes", extra: 1 },
      });
      expect(badBody.status).toBe(400);
      expect(
        errorOf(badBody)
          .details.map((detail) => detail.path)
          .sort(),
      ).toEqual(["extra", "fromFailed"]);
      expect((await h.call("POST", "/runs/no-such-run/rerun", { json: {} })).status).toBe(404);
      expect(await h.dump()).toBe(before);
      await h.runUntil(live.id);
    });
  });
}
