/**
 * The public HTTP contract (DESIGN.md §6) through `app.request()`, on sql.js and on PGlite:
 * packages, workflow and ordinary runs, cancellation, idempotency, the tick report, metrics
 * and keyset paging. Every scenario uses its own package; the virtual clock only moves on
 * purpose, so every time in an answer is exact.
 */
import { describe, expect, it } from "vitest";
import { RUN_STATUSES } from "../../src/model.ts";
import { cancelRun } from "../../src/operations.ts";
import { expectCancelledWhileFirstRan } from "../support/api-client.ts";
import { workflowRunView } from "../support/api-views.ts";
import { backwards, diamond } from "../support/workflow-shapes.ts";
import {
  ATTEMPT_VIEW_KEYS,
  DEFAULT_TASK_MS,
  EVENT_VIEW_KEYS,
  harnessForBlock,
  RUN_VIEW_KEYS,
  STAGE_ORDER,
  STEP_VIEW_KEYS,
  STORE_FACTORIES,
  TICK_STEP_MS,
  diamondYaml,
  errorOf,
  yamlManifest,
  type ApplyView,
  type AttemptView,
  type EventView,
  type PackageHeadView,
  type RunDetail,
  type RunView,
  type StepView,
  type TickReportView,
  type Harness,
} from "./support.ts";

const DIGEST = /^sha256:[0-9a-f]{64}$/;
const sortedKeys = (value: object): string[] => Object.keys(value).sort();
const byName = (steps: readonly StepView[]): Record<string, StepView> =>
  Object.fromEntries(steps.map((step) => [step.name, step]));
const attemptOf = (attempts: readonly AttemptView[], step: StepView): AttemptView[] =>
  attempts.filter((attempt) => attempt.stepRunId === step.id);
const runTransitions = (events: readonly EventView[]): string[] =>
  events
    .filter((event) => event.type === "run.status_changed")
    .map((event) => `${String(event.data.from)}→${String(event.data.to)}`);

describe.each(STORE_FACTORIES)("HTTP API on $name", (factory) => {
  let h: Harness;
  harnessForBlock(factory, (opened) => {
    h = opened;
  });

  it("POST /packages applies YAML and JSON: 201 changed:true, 200 changed:false when unchanged; GET /packages and /packages/:name show it", async () => {
    const name = "apply";
    const first = await h.applyYaml(diamondYaml(name));
    expect(first.status).toBe(201);
    expect(first.contentType).toMatch(/^application\/json/);
    const applied = first.json<ApplyView>();
    expect(sortedKeys(applied)).toEqual(["changed", "digest", "generation", "package"]);
    expect(applied).toMatchObject({ package: name, generation: 1, changed: true });
    expect(applied.digest).toMatch(DIGEST);

    /** An apply of what the head already holds: 200, the same generation and digest, nothing changed. */
    const expectUnchanged = (answer: { status: number; json(): unknown }): void => {
      expect(answer.status).toBe(200);
      expect(answer.json()).toEqual({
        package: name,
        generation: 1,
        digest: applied.digest,
        changed: false,
      });
    };
    expectUnchanged(await h.applyYaml(diamondYaml(name)));

    // The same package written as JSON (keys in another order, needs reversed) has the same canonical digest.
    const sameAsJson = {
      workflows: { diamond: backwards(diamond("work")) },
      tasks: { work: { timeout: 30_000, run: ["sim", "ok"] } },
      package: name,
    };
    expectUnchanged(await h.call("POST", "/packages", { json: sameAsJson }));

    // A changed manifest makes a new generation.
    const changed = await h.call("POST", "/packages", {
      json: { ...sameAsJson, tasks: { work: { timeout: "31s", run: ["sim", "ok"] } } },
    });
    expect(changed.status).toBe(201);
    const second = changed.json<ApplyView>();
    expect(second).toMatchObject({ package: name, generation: 2, changed: true });
    expect(second.digest).toMatch(DIGEST);
    expect(second.digest).not.toBe(applied.digest);

    const list = await h.expectJson<{ packages: PackageHeadView[] }>(200, "GET", "/packages");
    expect(sortedKeys(list)).toEqual(["packages"]);
    const head = list.packages.find((item) => item.package === name);
    expect(head).toEqual({
      package: name,
      generation: 2,
      manifestDigest: second.digest,
      reconciliationDigest: expect.stringMatching(DIGEST) as unknown,
      updatedAtMs: h.clock.nowMs(),
    });

    const detail = await h.packageDetail(name);
    expect(sortedKeys(detail)).toEqual([
      "generations",
      "package",
      "schedules",
      "tasks",
      "workflows",
    ]);
    expect(detail.package).toEqual(head);
    expect(
      detail.generations.map((generation) => [generation.generation, generation.manifestDigest]),
    ).toEqual([
      [2, second.digest],
      [1, applied.digest],
    ]);
    expect(detail.tasks).toEqual([{ name: "work", executor: "local_process", timeoutMs: 31_000 }]);
    expect(detail.workflows).toHaveLength(1);
    expect(detail.workflows[0]?.name).toBe("diamond");
    expect(detail.workflows[0]?.steps.map((step) => [step.name, step.needs])).toEqual([
      ["a", []],
      ["b", ["a"]],
      ["c", ["a"]],
      ["d", ["b", "c"]],
    ]);
    expect(detail.schedules).toEqual([]);

    const missing = await h.call("GET", "/packages/no-such-package");
    expect(missing.status).toBe(404);
    expect(errorOf(missing).code).toBe("not_found");
  });

  it("a diamond workflow runs every step once, in DAG order, and succeeds; events are contiguous and page with after=", async () => {
    const name = "diamond-ok";
    expect((await h.applyYaml(diamondYaml(name))).status).toBe(201);
    const createdAtMs = h.clock.nowMs();
    const run = await h.startRun({ package: name, workflow: "diamond" });
    expect(sortedKeys(run)).toEqual(RUN_VIEW_KEYS);
    expect(run).toEqual(
      // Created with one event, `run.created`.
      workflowRunView({ id: run.id, package: name, target: "diamond", createdAtMs, eventSeq: 1 }),
    );

    const created = await h.runDetail(run.id);
    expect(created.steps.map((step) => [step.name, step.status, step.attemptCount])).toEqual([
      ["a", "pending", 0],
      ["b", "pending", 0],
      ["c", "pending", 0],
      ["d", "pending", 0],
    ]);
    expect(created.attempts).toEqual([]);

    const detail = await h.runUntil(run.id);
    expect(sortedKeys(detail)).toEqual(["attempts", "run", "steps", "waiting"]);
    expect(detail.run.status).toBe("succeeded");
    expect(detail.run.finishedAtMs).toBe(h.clock.nowMs());
    const steps = byName(detail.steps);
    for (const step of detail.steps) {
      expect(sortedKeys(step)).toEqual(STEP_VIEW_KEYS);
      expect(step).toMatchObject({ status: "succeeded", attemptCount: 1, task: "work" });
      expect(step.version).toBeGreaterThan(1);
    }
    expect(detail.attempts).toHaveLength(4);
    expect(detail.attempts.map((attempt) => attempt.number).sort()).toEqual([1, 2, 3, 4]);
    for (const attempt of detail.attempts) {
      expect(sortedKeys(attempt)).toEqual(ATTEMPT_VIEW_KEYS);
      expect(attempt).toMatchObject({
        status: "succeeded",
        executor: "local_process",
        exitCode: 0,
        signal: null,
        stopReason: null,
        error: null,
      });
      expect(attempt.pid).toBeGreaterThan(0);
      expect(attempt.startedAtMs).toBeGreaterThanOrEqual(createdAtMs);
      expect(attempt.finishedAtMs).toBe((attempt.startedAtMs ?? 0) + DEFAULT_TASK_MS);
    }
    const only = (stepName: string): AttemptView => {
      const step = steps[stepName];
      if (step === undefined) throw new Error(`no step ${stepName}`);
      const attempts = attemptOf(detail.attempts, step);
      expect(attempts).toHaveLength(1);
      return attempts[0] as AttemptView;
    };
    const [a, b, c, d] = ["a", "b", "c", "d"].map(only) as [
      AttemptView,
      AttemptView,
      AttemptView,
      AttemptView,
    ];
    expect(b.startedAtMs).toBeGreaterThanOrEqual(a.finishedAtMs ?? Infinity);
    expect(c.startedAtMs).toBeGreaterThanOrEqual(a.finishedAtMs ?? Infinity);
    expect(d.startedAtMs).toBeGreaterThanOrEqual(
      Math.max(b.finishedAtMs ?? Infinity, c.finishedAtMs ?? Infinity),
    );
    expect(new Set(detail.attempts.map((attempt) => attempt.pid)).size).toBe(4);

    const events = await h.events(run.id);
    expect(events.map((event) => event.seq)).toEqual(events.map((_, index) => index + 1));
    for (const event of events) expect(sortedKeys(event)).toEqual(EVENT_VIEW_KEYS);
    expect(events[0]?.type).toBe("run.created");
    const admitted = events.filter((event) => event.type === "workflow.task_attempt_admitted");
    expect(admitted).toHaveLength(4);
    expect(admitted.map((event) => event.attemptId).sort()).toEqual(
      detail.attempts.map((attempt) => attempt.id).sort(),
    );
    expect(admitted.map((event) => event.stepRunId).sort()).toEqual(
      detail.steps.map((step) => step.id).sort(),
    );
    expect(events.map((event) => event.atMs)).toEqual(
      [...events.map((event) => event.atMs)].sort((x, y) => x - y),
    );
    expect(runTransitions(events)).toEqual(["running→succeeded"]);

    // after= pages: limit 5 from 0, then the rest; past the end is empty.
    const firstPage = await h.events(run.id, "?after=0&limit=5");
    expect(firstPage).toEqual(events.slice(0, 5));
    expect(await h.events(run.id, "?after=5")).toEqual(events.slice(5));
    expect(await h.events(run.id, `?after=${events.length}`)).toEqual([]);
    const paged: EventView[] = [];
    for (let after = 0, page = 0; page < 100; page += 1) {
      const next = await h.events(run.id, `?after=${after}&limit=3`);
      if (next.length === 0) break;
      expect(next.length).toBeLessThanOrEqual(3);
      paged.push(...next);
      after = next[next.length - 1]?.seq ?? after;
    }
    expect(paged).toEqual(events);

    // The step's latest attempt log is text/plain.
    const log = await h.call("GET", `/runs/${run.id}/steps/d/log`);
    expect(log.status).toBe(200);
    expect(log.contentType).toBe("text/plain; charset=utf-8");
    expect(log.text).toBe(`simulated attempt ${d.number} pid ${String(d.pid)}\n`);
  });

  it("a failing step fails the run; its downstream steps are skipped and never attempted", async () => {
    const name = "diamond-fail";
    const yaml = diamondYaml(name, {
      yaml: "  ok: { run: [sim, ok] }\n  bad: { run: [sim, fail] }",
      ofStep: { a: "ok", b: "bad", c: "ok", d: "ok" },
    });
    expect((await h.applyYaml(yaml)).status).toBe(201);
    const run = await h.startRun({ package: name, workflow: "diamond" });
    const detail = await h.runUntil(run.id);
    expect(detail.run.status).toBe("failed");
    expect(detail.run.finishedAtMs).toBe(h.clock.nowMs());
    expect(detail.steps.map((step) => [step.name, step.status, step.attemptCount])).toEqual([
      ["a", "succeeded", 1],
      ["b", "failed", 1],
      ["c", "succeeded", 1],
      ["d", "skipped", 0],
    ]);
    const steps = byName(detail.steps);
    expect(detail.attempts).toHaveLength(3);
    expect(attemptOf(detail.attempts, steps.d as StepView)).toEqual([]);
    expect(attemptOf(detail.attempts, steps.b as StepView)).toMatchObject([
      { status: "failed", exitCode: 1 },
    ]);
    const events = await h.events(run.id);
    const skipped = events.find(
      (event) =>
        event.type === "step.status_changed" &&
        event.stepRunId === steps.d?.id &&
        event.data.to === "skipped",
    );
    expect(skipped?.data.blockedBy).toEqual(["b"]);
    expect(runTransitions(events)).toEqual(["running→failed"]);
  });

  it("cancel before start: POST /runs/:id/cancel is 202 and the first tick converges to cancelled with no attempt", async () => {
    const name = "cancel-early";
    expect((await h.applyYaml(diamondYaml(name))).status).toBe(201);
    const run = await h.startRun({ package: name, workflow: "diamond" });
    const ordinary = await h.startRun({ package: name, task: "work" });
    expect(ordinary).toMatchObject({ kind: "ordinary", status: "queued" });

    for (const target of [run, ordinary]) {
      const cancelled = await h.call("POST", `/runs/${target.id}/cancel`);
      expect(cancelled.status).toBe(202);
      const body = cancelled.json<{ run: RunView }>();
      expect(sortedKeys(body)).toEqual(["run"]);
      // The intent is recorded; convergence belongs to the cadence.
      expect(body.run).toEqual({
        ...target,
        cancelRequestedAtMs: h.clock.nowMs(),
        cancelReason: "user",
        // One event more: `run.cancel_requested`.
        eventSeq: (target.eventSeq ?? 0) + 1,
      });
    }

    await h.tick();
    const detail = await h.runDetail(run.id);
    expect(detail.run.status).toBe("cancelled");
    expect(detail.run.finishedAtMs).toBe(h.clock.nowMs());
    expect(detail.steps.map((step) => step.status)).toEqual([
      "cancelled",
      "cancelled",
      "cancelled",
      "cancelled",
    ]);
    expect(detail.attempts).toEqual([]);
    const ordinaryDetail = await h.runDetail(ordinary.id);
    expect(ordinaryDetail.run.status).toBe("cancelled");
    expect(ordinaryDetail.attempts).toEqual([]);
    const events = await h.events(run.id);
    expect(events.some((event) => event.type === "workflow.task_attempt_admitted")).toBe(false);
    expect(runTransitions(events)).toEqual(["running→cancelled"]);
    expect(runTransitions(await h.events(ordinary.id))).toEqual(["queued→cancelled"]);

    // Cancelling a finished run changes nothing and answers the run as it is.
    const before = await h.dump();
    const again = await h.call("POST", `/runs/${run.id}/cancel`);
    expect(again.status).toBe(202);
    expect(again.json<{ run: RunView }>().run).toEqual(detail.run);
    expect(await h.dump()).toBe(before);
  });

  it("cancel during a step: the running attempt is stopped, then attempt, steps and run are cancelled", async () => {
    const name = "cancel-late";
    const yaml = yamlManifest(
      name,
      `tasks:
  slow: { run: [sim, ok, "600000"], timeout: 1h }
  quick: { run: [sim, ok] }
workflows:
  chain:
    steps:
      a: { task: slow }
      b: { task: quick, needs: [a] }
`,
    );
    expect((await h.applyYaml(yaml)).status).toBe(201);
    const run = await h.startRun({ package: name, workflow: "chain" });
    await h.tickUntil(
      async () =>
        (await h.runDetail(run.id)).attempts.some((attempt) => attempt.status === "running"),
      10,
    );
    const running = await h.runDetail(run.id);
    expect(byName(running.steps).a?.status).toBe("running");
    const attempt = running.attempts[0] as AttemptView;
    expect(attempt).toMatchObject({ status: "running", stopReason: null, finishedAtMs: null });

    const cancelled = await h.call("POST", `/runs/${run.id}/cancel`);
    expect(cancelled.status).toBe(202);
    const requestedAtMs = h.clock.nowMs();
    expect(cancelled.json<{ run: RunView }>().run).toMatchObject({
      status: "running",
      cancelRequestedAtMs: requestedAtMs,
      cancelReason: "user",
    });

    // One tick: the stop intent is persisted and the exact process is told to stop.
    await h.tick();
    const stopping = await h.runDetail(run.id);
    expect(stopping.run.status).toBe("running");
    expect(stopping.attempts[0]).toMatchObject({
      id: attempt.id,
      status: "running",
      stopReason: "cancel",
    });
    expect(h.executor.processes.get(attempt.id)?.stopReason).toBe("cancel");
    expect(h.executor.spawnCounts.get(attempt.id)).toBe(1);

    h.clock.advance(TICK_STEP_MS);
    const detail = await h.runUntil(run.id, ["cancelled", "succeeded", "failed"], 10);
    expectCancelledWhileFirstRan(detail, { id: attempt.id, signal: "SIGTERM", exitCode: null });
    expect(detail.attempts[0]?.finishedAtMs).toBeLessThan((attempt.startedAtMs ?? 0) + 600_000);

    const events = await h.events(run.id);
    const index = (predicate: (event: EventView) => boolean): number => events.findIndex(predicate);
    const requested = index((event) => event.type === "run.cancel_requested");
    const stopRequested = index(
      (event) =>
        event.type === "attempt.stop_requested" &&
        event.attemptId === attempt.id &&
        event.data.reason === "cancel",
    );
    const attemptCancelled = index(
      (event) =>
        event.type === "attempt.status_changed" &&
        event.attemptId === attempt.id &&
        event.data.to === "cancelled",
    );
    const runCancelled = index(
      (event) => event.type === "run.status_changed" && event.data.to === "cancelled",
    );
    expect(requested).toBeGreaterThan(0);
    expect(stopRequested).toBeGreaterThan(requested);
    expect(attemptCancelled).toBeGreaterThan(stopRequested);
    expect(runCancelled).toBe(events.length - 1);
    // The run keeps why it was cancelled after it ended.
    expect(detail.run.cancelReason).toBe("user");
  });

  it("a run cancelled because the runtime shuts down says so in its view; the first reason stands", async () => {
    const name = "cancel-shutdown";
    expect((await h.applyYaml(diamondYaml(name))).status).toBe(201);
    const run = await h.startRun({ package: name, workflow: "diamond" });
    expect(run.cancelReason).toBeNull();
    // Only a stopping runtime cancels for shutdown; the API's cancel is always the user's.
    await h.store.transaction(async (tx) =>
      cancelRun(tx, run.id, await tx.observe(h.clock.nowMs()), "shutdown"),
    );
    expect((await h.runDetail(run.id)).run).toMatchObject({
      cancelRequestedAtMs: h.clock.nowMs(),
      cancelReason: "shutdown",
    });
    const again = await h.call("POST", `/runs/${run.id}/cancel`);
    expect(again.status).toBe(202);
    expect(again.json<{ run: RunView }>().run.cancelReason).toBe("shutdown");
    await h.tick();
    const detail = await h.runDetail(run.id);
    expect(detail.run).toMatchObject({ status: "cancelled", cancelReason: "shutdown" });
    const listed = (await h.allRuns()).find((candidate) => candidate.id === run.id);
    expect(listed?.cancelReason).toBe("shutdown");
  });

  it("an idempotency key answers 200 with the same run; the same key for another target is 409", async () => {
    const name = "idempotent";
    expect((await h.applyYaml(diamondYaml(name))).status).toBe(201);
    const key = `${factory.name}-nightly-2030-01-01`;
    const first = await h.call("POST", "/runs", {
      json: { package: name, workflow: "diamond", idempotencyKey: key },
    });
    expect(first.status).toBe(201);
    const run = first.json<{ run: RunView }>().run;
    expect(run.idempotencyKey).toBe(key);

    const before = await h.dump();
    h.clock.advance(1000);
    const repeated = await h.call("POST", "/runs", {
      json: { idempotencyKey: key, workflow: "diamond", package: name },
    });
    expect(repeated.status).toBe(200);
    expect(repeated.json<{ run: RunView }>()).toEqual({ run });

    const otherTarget = await h.call("POST", "/runs", {
      json: { package: name, task: "work", idempotencyKey: key },
    });
    expect(otherTarget.status).toBe(409);
    expect(errorOf(otherTarget).code).toBe("conflict");
    expect(errorOf(otherTarget).message).toContain(run.id);
    expect(await h.dump()).toBe(before);

    const otherKey = await h.call("POST", "/runs", {
      json: { package: name, workflow: "diamond", idempotencyKey: `${key}-2` },
    });
    expect(otherKey.status).toBe(201);
    expect(otherKey.json<{ run: RunView }>().run.id).not.toBe(run.id);
  });

  it("an ordinary run goes queued → dispatching → running → succeeded", async () => {
    const name = "ordinary";
    expect(
      (await h.applyYaml(yamlManifest(name, "tasks:\n  hello: { run: [sim, ok] }\n"))).status,
    ).toBe(201);
    const run = await h.startRun({ package: name, task: "hello" });
    expect(run).toMatchObject({
      kind: "ordinary",
      status: "queued",
      target: "hello",
      finishedAtMs: null,
    });
    const queued = await h.runDetail(run.id);
    expect(queued.steps).toEqual([]);
    expect(queued.attempts).toEqual([]);
    const noLog = await h.call("GET", `/runs/${run.id}/steps/hello/log`);
    expect(noLog.status).toBe(404);
    expect(errorOf(noLog).code).toBe("not_found");

    /** The run is `status` and has one attempt, of no step, as `attempt` says, in the same status. */
    const expectSoleAttempt = (
      answer: RunDetail,
      status: string,
      attempt: Partial<AttemptView>,
    ): void => {
      expect(answer.run.status).toBe(status);
      expect(answer.attempts).toHaveLength(1);
      expect(answer.attempts[0]).toMatchObject({ number: 1, status, stepRunId: null, ...attempt });
    };
    await h.tick();
    expectSoleAttempt(await h.runDetail(run.id), "running", {
      startedAtMs: h.clock.nowMs(),
      finishedAtMs: null,
      exitCode: null,
    });

    const detail = await h.runUntil(run.id);
    expectSoleAttempt(detail, "succeeded", { exitCode: 0 });
    expect(runTransitions(await h.events(run.id))).toEqual([
      "queued→dispatching",
      "dispatching→running",
      "running→succeeded",
    ]);
    // An ordinary run's log is addressed by its task name.
    const log = await h.call("GET", `/runs/${run.id}/steps/hello/log`);
    expect(log.status).toBe(200);
    expect(log.text).toBe(`simulated attempt 1 pid ${String(detail.attempts[0]?.pid)}\n`);
  });

  it("an ordinary run retries a failing task with backoff (retry.max), one attempt per try", async () => {
    const name = "retrying";
    expect(
      (
        await h.applyYaml(
          yamlManifest(
            name,
            "tasks:\n  flaky: { run: [sim, fail], retry: { max: 2, backoff: 5s } }\n",
          ),
        )
      ).status,
    ).toBe(201);
    const run = await h.startRun({ package: name, task: "flaky" });

    // After the first failure the run waits in `queued` for its backoff.
    await h.tickUntil(async () => (await h.runDetail(run.id)).attempts[0]?.status === "failed", 10);
    const waiting = await h.runDetail(run.id);
    expect(waiting.run.status).toBe("queued");
    expect(waiting.attempts).toHaveLength(1);

    const detail = await h.runUntil(run.id, ["succeeded", "failed"], 80);
    expect(detail.run.status).toBe("failed");
    expect(
      detail.attempts.map((attempt) => [attempt.number, attempt.status, attempt.exitCode]),
    ).toEqual([
      [1, "failed", 1],
      [2, "failed", 1],
      [3, "failed", 1],
    ]);
    for (const [previous, next] of [
      [detail.attempts[0], detail.attempts[1]],
      [detail.attempts[1], detail.attempts[2]],
    ] as [AttemptView, AttemptView][]) {
      expect(next.startedAtMs).toBeGreaterThanOrEqual((previous.finishedAtMs ?? Infinity) + 5000);
    }
    expect(runTransitions(await h.events(run.id))).toEqual([
      "queued→dispatching",
      "dispatching→running",
      "running→queued",
      "queued→dispatching",
      "dispatching→running",
      "running→queued",
      "queued→dispatching",
      "dispatching→running",
      "running→failed",
    ]);
  });

  it("POST /tick answers the tick report; GET /metrics is Prometheus text with qlr_runs by status", async () => {
    const name = "tick-report";
    expect(
      (await h.applyYaml(yamlManifest(name, "tasks:\n  hello: { run: [sim, ok] }\n"))).status,
    ).toBe(201);
    await h.startRun({ package: name, task: "hello" });

    const result = await h.call("POST", "/tick");
    expect(result.status).toBe(200);
    const body = result.json<{ report: TickReportView }>();
    expect(sortedKeys(body)).toEqual(["report"]);
    const { report } = body;
    expect(sortedKeys(report)).toEqual(["durationMs", "followUp", "more", "profile", "stages"]);
    expect(report.profile).toBe("standalone");
    expect(report.more).toBe(false);
    // The launch is recorded; no completion or start failure yet, so nothing to follow up.
    expect(report.followUp).toBe(false);
    expect(report.durationMs).toBeGreaterThanOrEqual(0);
    expect(report.stages.map((stage) => stage.name)).toEqual(STAGE_ORDER);
    for (const stage of report.stages) {
      expect(sortedKeys(stage)).toEqual(["durationMs", "errors", "more", "name", "processed"]);
      expect(stage.errors).toEqual([]);
      expect(stage.more).toBe(false);
      expect(Number.isInteger(stage.processed)).toBe(true);
    }
    const processed = Object.fromEntries(
      report.stages.map((stage) => [stage.name, stage.processed]),
    );
    // The queued run was claimed by the ordinary stage and launched by dispatch in this cycle.
    expect(processed.ordinary).toBeGreaterThanOrEqual(1);
    expect(processed.dispatch).toBeGreaterThanOrEqual(1);

    const metrics = await h.call("GET", "/metrics");
    expect(metrics.status).toBe(200);
    expect(metrics.contentType).toBe("text/plain; version=0.0.4; charset=utf-8");
    expect(metrics.text).toContain("# TYPE qlr_runs gauge\n");
    const runs = await h.allRuns();
    for (const status of RUN_STATUSES) {
      const count = runs.filter((run) => run.status === status).length;
      expect(metrics.text).toContain(`\nqlr_runs{status="${status}"} ${count}\n`);
    }
    expect(metrics.text).toMatch(/\nqlr_ticks_total [1-9]\d*\n/);
    expect(metrics.text).toMatch(
      /\nqlr_tick_stage_duration_seconds_count\{stage="admission"\} [1-9]\d*\n/,
    );
    // A histogram: cumulative buckets that never decrease and end with +Inf equal to the count.
    const buckets = [
      ...metrics.text.matchAll(
        /\nqlr_tick_stage_duration_seconds_bucket\{stage="admission",le="([^"]+)"\} (\d+)/g,
      ),
    ].map((match) => [match[1], Number(match[2])] as const);
    const admissionCount = Number(
      /\nqlr_tick_stage_duration_seconds_count\{stage="admission"\} (\d+)/.exec(metrics.text)?.[1],
    );
    expect(buckets.length).toBeGreaterThan(2);
    expect(buckets.at(-1)).toEqual(["+Inf", admissionCount]);
    for (let index = 1; index < buckets.length; index += 1)
      expect(buckets[index]![1]).toBeGreaterThanOrEqual(buckets[index - 1]![1]);
    for (const line of metrics.text.trimEnd().split("\n"))
      expect(line).toMatch(
        /^(# (HELP|TYPE) \w+ .+|\w+(\{\w+="[^"]*"(,\w+="[^"]*")*\})? -?[\d.e+-]+)$/,
      );

    const unauthenticated = await h.call("GET", "/metrics", { authorization: null });
    expect(unauthenticated.status).toBe(401);
  });

  it("GET /runs pages by keyset: pages never overlap, nextCursor is null at the end", async () => {
    const name = "paging";
    expect(
      (await h.applyYaml(yamlManifest(name, "tasks:\n  hello: { run: [sim, ok] }\n"))).status,
    ).toBe(201);
    const mine: RunView[] = [];
    for (let index = 0; index < 5; index += 1) {
      // Two runs share a creation time, the others are a second apart: the keyset is (createdAtMs, id).
      if (index !== 1) h.clock.advance(1000);
      mine.push(await h.startRun({ package: name, task: "hello" }));
    }
    const metricsCount = async (status: string): Promise<number> =>
      Number(
        new RegExp(`\\nqlr_runs\\{status="${status}"\\} (\\d+)\\n`).exec(
          (await h.call("GET", "/metrics")).text,
        )?.[1],
      );

    const walk = async (query: string, limit: number): Promise<RunView[]> => {
      const seen: RunView[] = [];
      let cursor: string | null = null;
      for (let page = 0; page < 100; page += 1) {
        const path: string = `/runs?${query}limit=${limit}${cursor === null ? "" : `&cursor=${cursor}`}`;
        const body: { runs: RunView[]; nextCursor: string | null } = await h.expectJson(
          200,
          "GET",
          path,
        );
        expect(sortedKeys(body)).toEqual(["nextCursor", "runs"]);
        expect(body.runs.length).toBeLessThanOrEqual(limit);
        if (body.nextCursor !== null) {
          expect(body.runs).toHaveLength(limit);
          expect(body.nextCursor).toBe(body.runs[body.runs.length - 1]?.id);
        }
        seen.push(...body.runs);
        cursor = body.nextCursor;
        if (cursor === null) return seen;
      }
      throw new Error("paging did not end");
    };

    const queued = await walk("status=queued&", 2);
    expect(new Set(queued.map((run) => run.id)).size).toBe(queued.length);
    expect(queued.every((run) => run.status === "queued")).toBe(true);
    expect(queued.length).toBe(await metricsCount("queued"));
    const order = (x: RunView, y: RunView): number =>
      y.createdAtMs - x.createdAtMs || (x.id < y.id ? 1 : x.id > y.id ? -1 : 0);
    expect(queued).toEqual([...queued].sort(order));
    // Newest first: mine appear in reverse creation order.
    expect(queued.filter((run) => run.package === name).map((run) => run.id)).toEqual(
      mine.map((run) => run.id).reverse(),
    );

    const all = await walk("", 3);
    expect(new Set(all.map((run) => run.id)).size).toBe(all.length);
    let total = 0;
    for (const status of RUN_STATUSES) total += await metricsCount(status);
    expect(all.length).toBe(total);
    expect(all).toEqual([...all].sort(order));

    // One page holding everything ends at once.
    const single = await h.expectJson<{ runs: RunView[]; nextCursor: string | null }>(
      200,
      "GET",
      `/runs?limit=200`,
    );
    expect(single.nextCursor).toBeNull();
    expect(single.runs).toEqual(all);

    for (const run of mine)
      expect((await h.call("POST", `/runs/${run.id}/cancel`)).status).toBe(202);
    await h.tick();
  });
});

// The error body helper itself must reject what is not an error body.
describe("errorOf", () => {
  it("rejects a body that is not {error: {code, message, details}}", () => {
    const fake = (text: string) => ({
      status: 400,
      contentType: "application/json",
      text,
      json: <T>() => JSON.parse(text) as T,
    });
    expect(() => errorOf(fake('{"error":{"code":"x","message":"m"}}'))).toThrow();
    expect(() =>
      errorOf(fake('{"error":{"code":"x","message":"m","details":[]},"extra":1}')),
    ).toThrow();
    expect(errorOf(fake('{"error":{"code":"x","message":"m","details":[]}}')).code).toBe("x");
  });
});
