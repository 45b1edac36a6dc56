import type { World } from "../world.ts";

/** No admission is written for a run after its cancel intent. */
export function checkNoAdmissionAfterCancel(world: World): string[] {
  const problems: string[] = [];
  for (const receipt of world.admissions) {
    const run = world.runs.find((candidate) => candidate.id === receipt.runId);
    if (
      run?.cancelRequestedAtMs !== null &&
      run?.cancelRequestedAtMs !== undefined &&
      receipt.admittedAtMs > run.cancelRequestedAtMs
    ) {
      const cancelEvent = world.events.find(
        (event) => event.runId === run.id && event.type === "run.cancel_requested",
      );
      const admissionEvent = world.events.find((event) => event.id === receipt.eventId);
      if (
        cancelEvent !== undefined &&
        admissionEvent !== undefined &&
        admissionEvent.seq > cancelEvent.seq
      ) {
        problems.push(
          `run ${run.id}: attempt ${receipt.attemptId} admitted (seq ${admissionEvent.seq}) after the cancel intent (seq ${cancelEvent.seq})`,
        );
      }
    }
  }
  return problems;
}
