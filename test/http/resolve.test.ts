/**
 * `POST /attempts/:id/resolve`: an operator settles an attempt that failed closed, on sql.js and
 * on PGlite. Only such an attempt can be resolved; every refusal writes nothing.
 */
import { describe, expect, it } from "vitest";
import { findAttemptScope } from "../../src/attempt-scope.ts";
import { applyRecovery } from "../../src/recovery.ts";
import {
  errorOf,
  harnessForBlock,
  STORE_FACTORIES,
  yamlManifest,
  type RunDetail,
  type Harness,
} from "./support.ts";

const LONG_TASK = yamlManifest(
  "resolve",
  `tasks:
  slow:
    run: ["sim", "ok", "600000"]
    timeout: 1h
workflows:
  pipeline:
    steps:
      a: { task: slow }
      b: { task: slow, needs: [a] }
`,
);

describe.each(STORE_FACTORIES)("resolving a failed-closed attempt on $name", (factory) => {
  let h: Harness;
  harnessForBlock(factory, async (opened) => {
    h = opened;
    expect((await h.applyYaml(LONG_TASK)).status).toBe(201);
  });

  async function runningAttempt(): Promise<{ runId: string; attemptId: string }> {
    const run = await h.startRun({ package: "resolve", workflow: "pipeline" });
    const detail: RunDetail = await h.runUntil(run.id, ["running"]);
    await h.tickUntil(async () =>
      (await h.runDetail(run.id)).attempts.some((attempt) => attempt.status === "running"),
    );
    const attempt = (await h.runDetail(run.id)).attempts.find((item) => item.status === "running");
    if (attempt === undefined) throw new Error(`run ${detail.run.id} has no running attempt`);
    return { runId: run.id, attemptId: attempt.id };
  }

  /** What recovery writes when it cannot decide: the attempt stays running, with the reason. */
  async function failClosed(attemptId: string): Promise<void> {
    await h.store.transaction(async (tx) => {
      const nowMs = await tx.observe(h.clock.nowMs());
      const scope = await findAttemptScope(tx, attemptId);
      if (scope === null) throw new Error(`attempt ${attemptId} is gone`);
      const change = applyRecovery(
        scope,
        { kind: "fail_closed", reason: "no persisted process handle" },
        scope.definition.retry,
        nowMs,
      );
      if (change !== null) await tx.apply(change);
    });
  }

  it("settles it as lost with the operator's reason; the step fails, the run converges to failed and nothing is re-run", async () => {
    const { runId, attemptId } = await runningAttempt();
    await failClosed(attemptId);
    const answer = await h.call("POST", `/attempts/${attemptId}/resolve`, {
      json: { as: "lost", reason: "checked the host: no such process" },
    });
    expect(answer.status).toBe(200);
    expect(
      answer.json<{ attempt: { id: string; status: string; error: string } }>().attempt,
    ).toMatchObject({
      id: attemptId,
      status: "lost",
      error: "resolved as lost by an operator: checked the host: no such process",
    });
    const detail = await h.runUntil(runId);
    expect(detail.run.status).toBe("failed");
    expect(detail.steps.map((step) => [step.name, step.status])).toEqual([
      ["a", "failed"],
      ["b", "skipped"],
    ]);
    expect(detail.attempts).toHaveLength(1);
    const events = await h.events(runId);
    expect(
      events.some(
        (event) =>
          event.attemptId === attemptId &&
          event.data.to === "lost" &&
          String(event.data.reason).includes("operator"),
      ),
    ).toBe(true);
  });

  it("refuses a healthy running attempt (409), bad input (400) and an unknown attempt (404), writing nothing", async () => {
    const { runId, attemptId } = await runningAttempt();
    const before = await h.dump();
    const healthy = await h.call("POST", `/attempts/${attemptId}/resolve`, {
      json: { as: "lost", reason: "impatient" },
    });
    expect(healthy.status).toBe(409);
    expect(errorOf(healthy).message).toMatch(/has not failed closed/);
    for (const body of [
      {},
      { as: "succeeded", reason: "x" },
      { as: "lost" },
      { as: "lost", reason: "" },
      { as: "lost", reason: "line\nbreak" },
      { as: "lost", reason: "x".repeat(501) },
      { as: "lost", reason: "x", extra: 1 },
    ]) {
      const bad = await h.call("POST", `/attempts/${attemptId}/resolve`, { json: body });
      expect(bad.status, JSON.stringify(body)).toBe(400);
      expect(errorOf(bad).code).toBe("invalid_request");
    }
    expect(
      (await h.call("POST", "/attempts/..%2Fetc/resolve", { json: { as: "lost", reason: "x" } }))
        .status,
    ).toBe(400);
    const unknown = await h.call("POST", "/attempts/wta:00000000000000000000000000000000/resolve", {
      json: { as: "lost", reason: "x" },
    });
    expect(unknown.status).toBe(404);
    expect(await h.dump()).toBe(before);
    await h.call("POST", `/runs/${runId}/cancel`);
  });
});
