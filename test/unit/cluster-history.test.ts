import { describe, expect, it } from "vitest";
import {
  workflowRunView,
  type AttemptView,
  type EventView,
  type RunDetail,
} from "../support/api-views.ts";
import { checkClusterHistory, type ClusterHistory } from "../support/cluster-history.ts";

/**
 * The cluster harness's history checker over hand-written records: a remote attempt that
 * provably never spawned is lost before the start barrier and its step runs in a new epoch,
 * which the checker accepts; a second spawn of one attempt, a lost attempt that did spawn, and a
 * non-idempotent step spawned again after the barrier are each reported.
 */

const RUN_ID = "run-1";
const STEP_ID = "stp-1";

function attempt(
  id: string,
  number: number,
  status: AttemptView["status"],
  pid: number | null,
  error: string | null = null,
): AttemptView {
  return {
    id,
    stepRunId: STEP_ID,
    number,
    status,
    executor: "remote_worker",
    startedAtMs: pid === null ? null : 1_000,
    finishedAtMs: 2_000,
    exitCode: status === "succeeded" ? 0 : null,
    signal: null,
    pid,
    stopReason: null,
    error,
    output: null,
  };
}

const NEVER_SPAWNED = "worker w-1: journaled but never spawned";

function detail(
  runStatus: RunDetail["run"]["status"],
  stepStatus: RunDetail["steps"][number]["status"],
  attempts: readonly AttemptView[],
): RunDetail {
  return {
    run: workflowRunView({
      id: RUN_ID,
      status: runStatus,
      package: "cluster",
      target: "single",
      createdAtMs: 0,
      finishedAtMs: 3_000,
    }),
    steps: [
      {
        id: STEP_ID,
        name: "s",
        task: "remote_once",
        needs: [],
        status: stepStatus,
        version: 4,
        attemptCount: attempts.filter((item) => item.pid !== null).length,
        startedAtMs: 1_000,
        finishedAtMs: 2_000,
        output: null,
      },
    ],
    attempts,
  };
}

const EVENTS: readonly EventView[] = [1, 2, 3].map((seq) => ({
  seq,
  type: "run.status_changed",
  atMs: seq,
  stepRunId: null,
  attemptId: null,
  data: {},
}));

function history(record: RunDetail, spawnLines: readonly string[]): ClusterHistory {
  return {
    runs: [{ id: RUN_ID, workflow: "single", cancelled: false }],
    details: new Map([[RUN_ID, record]]),
    events: new Map([[RUN_ID, EVENTS]]),
    spawnLines,
    taskOf: () => "remote_once",
    nonIdempotent: new Set(["remote_once"]),
    allowedStatuses: () => ["succeeded"],
  };
}

describe("the cluster history checker", () => {
  it("accepts a non-idempotent remote step whose first attempt never spawned and whose new epoch ran once", () => {
    const record = detail("succeeded", "succeeded", [
      attempt("a-1", 1, "lost", null, NEVER_SPAWNED),
      attempt("a-2", 2, "succeeded", 501),
    ]);
    expect(checkClusterHistory(history(record, ["remote_once 501"]))).toEqual([]);
  });

  it("reports an attempt settled as never spawned whose process did run, beside the new epoch's spawn", () => {
    const record = detail("succeeded", "succeeded", [
      attempt("a-1", 1, "lost", null, NEVER_SPAWNED),
      attempt("a-2", 2, "succeeded", 501),
    ]);
    expect(checkClusterHistory(history(record, ["remote_once 500", "remote_once 501"]))).toEqual([
      "1 spawns of remote_once match no recorded process, but only 0 settled attempts of remote_once have an unknown identity",
    ]);
  });

  it("reports a second spawn of one (run, step, epoch): one attempt's process spawned twice", () => {
    const record = detail("succeeded", "succeeded", [attempt("a-1", 1, "succeeded", 501)]);
    expect(checkClusterHistory(history(record, ["remote_once 501", "remote_once 501"]))).toEqual([
      "pid 501 spawned 2 marker lines",
    ]);
  });

  it("reports a non-idempotent step spawned again after the start barrier", () => {
    // The first attempt crossed the barrier and ran; a second attempt of the step ran as well.
    const record = detail("succeeded", "succeeded", [
      attempt("a-1", 1, "failed", 500),
      attempt("a-2", 2, "succeeded", 501),
    ]);
    expect(checkClusterHistory(history(record, ["remote_once 500", "remote_once 501"]))).toEqual([
      "non-idempotent step s of run run-1 has 2 spawns and 0 settled attempts of unknown identity",
      "non-idempotent step s of run run-1 succeeded with 2 spawns and 0 of unknown identity",
    ]);
  });

  it("reports an attempt that ran and was settled lost: its completion was lost", () => {
    const record = detail("succeeded", "succeeded", [
      attempt("a-1", 1, "lost", 500, "gone"),
      attempt("a-2", 2, "succeeded", 501),
    ]);
    const problems = checkClusterHistory(history(record, ["remote_once 500", "remote_once 501"]));
    expect(problems).toContain(
      "attempt a-1 of run run-1 ran (pid 500) and was settled lost: its completion was lost",
    );
    expect(problems).toContain("spawn pid 500 belongs to a lost attempt a-1");
  });
});
