/**
 * Retention through the public HTTP contract, on sql.js and PGlite: a purged run answers 404
 * with the `not_found` error shape on every run route, `GET /runs` no longer lists it,
 * `/metrics` counts it, `GET /info` reports the policy, and an idempotency key whose run was
 * purged starts a new run. The virtual clock moves only on purpose.
 */
import { describe, expect, it } from "vitest";
import {
  diamondYaml,
  errorOf,
  harnessForBlock,
  STORE_FACTORIES,
  type RunView,
  type Harness,
} from "./support.ts";

const HOUR_MS = 3_600_000;

describe.each(STORE_FACTORIES)("retention over HTTP on $name", (factory) => {
  let h: Harness;
  harnessForBlock(
    factory,
    (opened) => {
      h = opened;
    },
    { retention: { horizonMs: HOUR_MS, maxRuns: 2 } },
  );

  async function finishedRun(body: Record<string, unknown>): Promise<RunView> {
    const run = await h.startRun(body);
    await h.runUntil(run.id, ["succeeded"]);
    return run;
  }

  it("GET /info reports the retention and the idempotency window it implies", async () => {
    const info = await h.expectJson<unknown>(200, "GET", "/info");
    expect(info).toEqual({
      profile: "standalone",
      retention: { horizonMs: HOUR_MS, maxRuns: 2, idempotencyWindowMs: HOUR_MS },
    });
    expect((await h.call("GET", "/info", { authorization: null })).status).toBe(401);
  });

  it("a run beyond the newest two answers 404 everywhere, is not listed, and is counted in /metrics", async () => {
    expect((await h.applyYaml(diamondYaml("keep"))).status).toBe(201);
    const oldest = await finishedRun({ package: "keep", workflow: "diamond" });
    const middle = await finishedRun({ package: "keep", workflow: "diamond" });
    await h.tick();
    // Two terminal runs: nothing to purge yet.
    expect((await h.call("GET", "/metrics")).text).toMatch(/^qlr_runs_purged_total 0$/m);
    expect((await h.runDetail(oldest.id)).run.status).toBe("succeeded");
    const newest = await finishedRun({ package: "keep", workflow: "diamond" });
    const report = await h.tick();
    expect(report.stages.map((stage) => stage.name)).toContain("purge");

    for (const [method, path] of [
      ["GET", `/runs/${oldest.id}`],
      ["GET", `/runs/${oldest.id}/events`],
      ["GET", `/runs/${oldest.id}/steps/a/log`],
      ["POST", `/runs/${oldest.id}/cancel`],
    ] as const) {
      const answer = await h.call(method, path);
      expect(answer.status, `${method} ${path}`).toBe(404);
      expect(errorOf(answer)).toEqual({
        code: "not_found",
        message: `run ${oldest.id} does not exist`,
        details: [],
      });
    }
    expect((await h.runDetail(middle.id)).run.status).toBe("succeeded");
    expect((await h.runDetail(newest.id)).attempts).toHaveLength(4);
    expect((await h.runsOf("keep")).map((run) => run.id).sort()).toEqual(
      [middle.id, newest.id].sort(),
    );
    expect((await h.call("GET", "/metrics")).text).toMatch(/^qlr_runs_purged_total 1$/m);
  });

  it("an idempotency key answers the same run within the horizon, and a new run once its run is purged", async () => {
    expect((await h.applyYaml(diamondYaml("keyed"))).status).toBe(201);
    const keyed = await finishedRun({
      package: "keyed",
      workflow: "diamond",
      idempotencyKey: "daily-report",
    });
    // Two newer runs push the keyed run beyond the newest two: it stays for its window.
    await finishedRun({ package: "keyed", workflow: "diamond" });
    await finishedRun({ package: "keyed", workflow: "diamond" });
    await h.tick();
    const repeated = await h.expectJson<{ run: RunView }>(200, "POST", "/runs", {
      json: { package: "keyed", workflow: "diamond", idempotencyKey: "daily-report" },
    });
    expect(repeated.run.id).toBe(keyed.id);
    // Past the horizon it goes, and the same key starts a new run.
    h.clock.advance(HOUR_MS + 1);
    await h.tick();
    expect((await h.call("GET", `/runs/${keyed.id}`)).status).toBe(404);
    const fresh = await h.expectJson<{ run: RunView }>(201, "POST", "/runs", {
      json: { package: "keyed", workflow: "diamond", idempotencyKey: "daily-report" },
    });
    expect(fresh.run.id).not.toBe(keyed.id);
  });
});
