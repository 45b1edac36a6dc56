import type { World } from "../world.ts";

/** Each run's events are numbered 1..eventSeq with no gap, and every step mutation points at a step event. */
export function checkContiguousEvents(world: World): string[] {
  const problems: string[] = [];
  for (const run of world.runs) {
    const seqs = world.events.filter((event) => event.runId === run.id).map((event) => event.seq);
    const expected = Array.from({ length: run.eventSeq }, (_, index) => index + 1);
    if (seqs.length !== expected.length || seqs.some((seq, index) => seq !== expected[index]))
      problems.push(`run ${run.id}: events ${seqs.join(",")} are not 1..${run.eventSeq}`);
    for (const event of world.events.filter((candidate) => candidate.runId === run.id)) {
      if (event.atMs < run.createdAtMs)
        problems.push(
          `run ${run.id}: event ${event.seq} at ${event.atMs} precedes the run's creation`,
        );
    }
  }
  for (const mutation of world.mutations) {
    if (mutation.version === 1) continue;
    const event = world.events.find(
      (candidate) => candidate.runId === mutation.runId && candidate.seq === mutation.eventSeq,
    );
    if (event?.type !== "step.status_changed" || event.stepRunId !== mutation.stepRunId)
      problems.push(
        `mutation ${mutation.stepRunId}@${mutation.version} has no matching step event`,
      );
  }
  return problems;
}
