/**
 * The history checker of the cluster tests (test/device/cluster*.test.ts): the whole record of
 * real `qlr serve` and `qlr worker` processes, read back through the API, against the marker
 * lines every task writes first (`<label> <pid>`, test/support/scratch.ts).
 * - every run ended in a status its workflow allows;
 * - every attempt is terminal, and one that ran (a recorded pid) was settled by its receipt,
 *   never `lost`: no completion lost;
 * - every spawn is the recorded process of exactly one attempt: no (run, step, epoch) spawned
 *   twice; a spawn no attempt records is allowed only for an attempt settled from its receipt
 *   before its process identity was written (pid null), one each;
 * - every non-idempotent step spawned at most once, exactly once when it succeeded;
 * - every run's events are numbered 1..n without a gap;
 * - no claim was stranded: a step holds at most one live attempt, of its current ready epoch, so
 *   a claim whose epoch moved on while it was live (settled "may no longer start") means some
 *   path moved the epoch past it. The problem carries the run's event trail to find that path.
 */
import type { EventView, RunDetail } from "./api-views.ts";

export interface CheckedRun {
  readonly id: string;
  readonly workflow: string;
  readonly cancelled: boolean;
}

export interface ClusterHistory {
  readonly runs: readonly CheckedRun[];
  /** The terminal detail of every run. */
  readonly details: ReadonlyMap<string, RunDetail>;
  /** Every run's events, in the order the API lists them. */
  readonly events: ReadonlyMap<string, readonly EventView[]>;
  /** The marker file's lines. */
  readonly spawnLines: readonly string[];
  /** The task (marker label) a workflow's step runs. */
  readonly taskOf: (workflow: string, step: string) => string | undefined;
  /** Tasks that must never run twice. */
  readonly nonIdempotent: ReadonlySet<string>;
  /** The run statuses a run of this workflow may end in. */
  readonly allowedStatuses: (run: CheckedRun) => readonly string[];
}

const TERMINAL_ATTEMPT = new Set(["succeeded", "failed", "timed_out", "cancelled", "lost"]);

/** Every way the record breaks the rules above, one line each; empty when it holds. */
export function checkClusterHistory(history: ClusterHistory): string[] {
  const spawns = history.spawnLines.map((line) => ({
    label: line.split(" ")[0] ?? "",
    pid: Number(line.split(" ")[1]),
  }));
  const spawnsByPid = new Map<number, number>();
  for (const spawned of spawns)
    spawnsByPid.set(spawned.pid, (spawnsByPid.get(spawned.pid) ?? 0) + 1);
  const problems: string[] = [];
  const attemptsByPid = new Map<number, { runId: string; attemptId: string; status: string }[]>();
  // An attempt settled from its receipt before its running transition was recorded keeps an
  // unknown process identity (pid null); each such attempt may account for one spawn of its task.
  const unknownIdentity = new Map<string, number>();
  for (const run of history.runs) {
    const detail = history.details.get(run.id);
    if (detail === undefined) {
      problems.push(`run ${run.id} has no terminal detail`);
      continue;
    }
    if (!history.allowedStatuses(run).includes(detail.run.status))
      problems.push(
        `run ${run.id} (${run.workflow}${run.cancelled ? ", cancelled" : ""}) ended ${detail.run.status}`,
      );
    for (const attempt of detail.attempts) {
      if (attempt.pid !== null)
        attemptsByPid.set(attempt.pid, [
          ...(attemptsByPid.get(attempt.pid) ?? []),
          { runId: run.id, attemptId: attempt.id, status: attempt.status },
        ]);
      if (!TERMINAL_ATTEMPT.has(attempt.status))
        problems.push(`attempt ${attempt.id} of run ${run.id} is ${attempt.status}`);
      if (attempt.status === "lost" && attempt.pid !== null)
        problems.push(
          `attempt ${attempt.id} of run ${run.id} ran (pid ${attempt.pid}) and was settled lost: its completion was lost`,
        );
      const step = detail.steps.find((candidate) => candidate.id === attempt.stepRunId);
      const task = step === undefined ? undefined : history.taskOf(run.workflow, step.name);
      if (attempt.pid === null && attempt.status !== "lost" && task !== undefined)
        unknownIdentity.set(task, (unknownIdentity.get(task) ?? 0) + 1);
    }
    for (const step of detail.steps) {
      const task = history.taskOf(run.workflow, step.name);
      const attempts = detail.attempts.filter((attempt) => attempt.stepRunId === step.id);
      const spawned = attempts.filter(
        (attempt) => attempt.pid !== null && (spawnsByPid.get(attempt.pid) ?? 0) > 0,
      ).length;
      const unknown = attempts.filter(
        (attempt) => attempt.pid === null && attempt.status !== "lost",
      ).length;
      if (task !== undefined && history.nonIdempotent.has(task)) {
        if (spawned + unknown > 1)
          problems.push(
            `non-idempotent step ${step.name} of run ${run.id} has ${spawned} spawns and ${unknown} settled attempts of unknown identity`,
          );
        if (step.status === "succeeded" && spawned + unknown !== 1)
          problems.push(
            `non-idempotent step ${step.name} of run ${run.id} succeeded with ${spawned} spawns and ${unknown} of unknown identity`,
          );
      }
    }
    const events = history.events.get(run.id) ?? [];
    for (const attempt of detail.attempts) {
      if (attempt.status === "lost" && attempt.error?.includes("may no longer start") === true)
        problems.push(
          `attempt ${attempt.id} of run ${run.id} was a stranded claim (${attempt.error}); events:\n${describeEvents(events)}`,
        );
    }
    events.forEach((event, index) => {
      if (event.seq !== index + 1)
        problems.push(`run ${run.id}: event ${index + 1} has seq ${event.seq}`);
    });
    if (events.length === 0) problems.push(`run ${run.id} has no events`);
  }
  const unmatched = new Map<string, number>();
  for (const [pid, count] of spawnsByPid) {
    const owners = attemptsByPid.get(pid) ?? [];
    if (count > 1) problems.push(`pid ${pid} spawned ${count} marker lines`);
    if (owners.length > 1)
      problems.push(
        `spawn pid ${pid} is the process of ${owners.length} attempts: ${JSON.stringify(owners)}`,
      );
    else if (owners[0]?.status === "lost")
      problems.push(`spawn pid ${pid} belongs to a lost attempt ${owners[0].attemptId}`);
    else if (owners.length === 0) {
      const label = spawns.find((spawned) => spawned.pid === pid)?.label ?? "";
      unmatched.set(label, (unmatched.get(label) ?? 0) + 1);
    }
  }
  for (const [label, count] of unmatched) {
    if (count > (unknownIdentity.get(label) ?? 0))
      problems.push(
        `${count} spawns of ${label} match no recorded process, but only ${unknownIdentity.get(label) ?? 0} settled attempts of ${label} have an unknown identity`,
      );
  }
  return problems;
}

/** A run's event trail, one line each, for a problem that needs the history behind it. */
function describeEvents(events: readonly EventView[]): string {
  return events
    .map(
      (event) =>
        `  ${event.seq} ${event.type} step=${event.stepRunId?.slice(-8) ?? "-"} attempt=${event.attemptId?.slice(-8) ?? "-"} ${JSON.stringify(event.data)}`,
    )
    .join("\n");
}
