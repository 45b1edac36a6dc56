import { derivedId, digestOf, type Digest } from "./digest.ts";
import { QlrError } from "./errors.ts";
import type {
  ChangeSet,
  EventType,
  Run,
  RunAttempt,
  RunEvent,
  RunStatus,
  StepMutation,
  StepRun,
  StepStatus,
  AdmissionReceipt,
  RowChange,
} from "./model.ts";
import { EMPTY_CHANGE_SET, SETTLED_STEP_STATUSES, TERMINAL_RUN_STATUSES } from "./model.ts";
import { transitionAttempt, transitionRun, transitionStep } from "./state-machines.ts";

/** The digest of a step's canonical state; a new version always yields a new digest. */
export function stepDigest(step: Omit<StepRun, "digest">): Digest {
  return digestOf({
    id: step.id,
    runId: step.runId,
    name: step.name,
    task: step.task,
    needs: [...step.needs],
    status: step.status,
    version: step.version,
    attemptCount: step.attemptCount,
    readyAtMs: step.readyAtMs,
    notBeforeMs: step.notBeforeMs,
    startedAtMs: step.startedAtMs,
    finishedAtMs: step.finishedAtMs,
    // Present only when the step has an output, so every digest written before outputs existed stays valid.
    ...(step.output === null ? {} : { output: step.output }),
  });
}

export function eventId(runId: string, seq: number): string {
  return derivedId("evt", [runId, seq]);
}

/** Event time never precedes the creation of what it speaks of; a clock that went back fails closed. */
export function assertNotBefore(nowMs: number, createdAtMs: number, subject: string): void {
  if (!Number.isSafeInteger(nowMs))
    throw new QlrError("invalid_request", `${subject}: time must be an integer of milliseconds`);
  if (nowMs < createdAtMs) {
    throw new QlrError(
      "clock_regression",
      `${subject}: observation time ${nowMs} is before its creation at ${createdAtMs}; refusing to write`,
    );
  }
}

/**
 * A working copy of one run aggregate for one transaction. Every change goes through a
 * checked transition and appends its event (and, for steps, its canonical mutation); `build()`
 * bumps the run's version exactly once, so the run version is the aggregate's serialization
 * fence and its event sequence stays contiguous.
 */
export class RunChange {
  private readonly originalRun: Run;
  private currentRun: Run;
  private readonly stepBefore = new Map<string, StepRun>();
  private readonly stepAfter = new Map<string, StepRun>();
  private readonly attemptBefore = new Map<string, RunAttempt | null>();
  private readonly attemptAfter = new Map<string, RunAttempt>();
  private readonly events: RunEvent[] = [];
  private readonly mutations: StepMutation[] = [];
  private readonly admissions: AdmissionReceipt[] = [];
  readonly nowMs: number;

  constructor(run: Run, nowMs: number) {
    assertNotBefore(nowMs, run.createdAtMs, `run ${run.id}`);
    this.originalRun = run;
    this.currentRun = run;
    this.nowMs = nowMs;
  }

  get run(): Run {
    return this.currentRun;
  }

  get changed(): boolean {
    return this.events.length > 0;
  }

  /** The step as this transaction currently sees it. */
  step(step: StepRun): StepRun {
    return this.stepAfter.get(step.id) ?? step;
  }

  attempt(attempt: RunAttempt): RunAttempt {
    return this.attemptAfter.get(attempt.id) ?? attempt;
  }

  emit(
    type: EventType,
    refs: { stepRunId?: string | null; attemptId?: string | null; id?: string },
    data: Record<string, unknown> = {},
  ): RunEvent {
    const seq = this.currentRun.eventSeq + this.events.length + 1;
    const event: RunEvent = {
      id: refs.id ?? eventId(this.currentRun.id, seq),
      runId: this.currentRun.id,
      seq,
      type,
      atMs: this.nowMs,
      stepRunId: refs.stepRunId ?? null,
      attemptId: refs.attemptId ?? null,
      data,
    };
    this.events.push(event);
    return event;
  }

  patchRun(
    patch: Partial<
      Pick<Run, "cancelRequestedAtMs" | "cancelReason" | "notBeforeMs" | "attemptSeq">
    >,
  ): void {
    this.currentRun = { ...this.currentRun, ...patch };
  }

  setRunStatus(
    to: RunStatus,
    data: Record<string, unknown> = {},
    patch: Partial<Pick<Run, "notBeforeMs">> = {},
  ): void {
    const from = this.currentRun.status;
    transitionRun(this.currentRun.kind, from, to, this.currentRun.id);
    this.currentRun = {
      ...this.currentRun,
      ...patch,
      status: to,
      finishedAtMs: TERMINAL_RUN_STATUSES.has(to) ? this.nowMs : null,
    };
    this.emit("run.status_changed", {}, { from, to, ...data });
  }

  setStep(
    original: StepRun,
    to: StepStatus,
    patch: Partial<
      Pick<
        StepRun,
        "attemptCount" | "readyAtMs" | "notBeforeMs" | "startedAtMs" | "finishedAtMs" | "output"
      >
    > = {},
    data: Record<string, unknown> = {},
  ): StepRun {
    const current = this.step(original);
    assertNotBefore(this.nowMs, current.createdAtMs, `step ${current.id}`);
    transitionStep(current.status, to, current.id);
    if (original.runId !== this.currentRun.id)
      throw new QlrError(
        "internal",
        `step ${original.id} is not part of run ${this.currentRun.id}`,
      );
    const withoutDigest = { ...current, ...patch, status: to, version: current.version + 1 };
    const next: StepRun = { ...withoutDigest, digest: stepDigest(withoutDigest) };
    if (!this.stepBefore.has(original.id)) this.stepBefore.set(original.id, original);
    this.stepAfter.set(original.id, next);
    const event = this.emit(
      "step.status_changed",
      { stepRunId: next.id },
      { step: next.name, from: current.status, to, version: next.version, ...data },
    );
    this.mutations.push({
      runId: next.runId,
      stepRunId: next.id,
      version: next.version,
      fromStatus: current.status,
      toStatus: to,
      fromDigest: current.digest,
      toDigest: next.digest,
      eventSeq: event.seq,
      atMs: this.nowMs,
    });
    return next;
  }

  insertAttempt(
    attempt: RunAttempt,
    eventRefs: { id?: string } = {},
    type: EventType = "attempt.status_changed",
    data: Record<string, unknown> = {},
  ): void {
    if (this.attemptAfter.has(attempt.id))
      throw new QlrError("internal", `attempt ${attempt.id} inserted twice`);
    this.attemptBefore.set(attempt.id, null);
    this.attemptAfter.set(attempt.id, attempt);
    this.emit(
      type,
      { stepRunId: attempt.stepRunId, attemptId: attempt.id, ...eventRefs },
      { to: attempt.status, number: attempt.number, ...data },
    );
  }

  setAttempt(
    original: RunAttempt,
    to: RunAttempt["status"] | null,
    patch: Partial<RunAttempt>,
    data: Record<string, unknown> = {},
    type: EventType = "attempt.status_changed",
  ): RunAttempt {
    const current = this.attempt(original);
    assertNotBefore(this.nowMs, current.createdAtMs, `attempt ${current.id}`);
    if (to !== null) transitionAttempt(current.status, to, current.id);
    const next: RunAttempt = {
      ...current,
      ...patch,
      status: to ?? current.status,
      version: current.version + 1,
    };
    if (!this.attemptBefore.has(original.id)) this.attemptBefore.set(original.id, original);
    this.attemptAfter.set(original.id, next);
    this.emit(
      type,
      { stepRunId: next.stepRunId, attemptId: next.id },
      to === null ? data : { from: current.status, to, ...data },
    );
    return next;
  }

  addAdmission(receipt: AdmissionReceipt): void {
    this.admissions.push(receipt);
  }

  build(): ChangeSet {
    if (this.events.length === 0) return EMPTY_CHANGE_SET;
    const after: Run = {
      ...this.currentRun,
      version: this.originalRun.version + 1,
      eventSeq: this.originalRun.eventSeq + this.events.length,
      updatedAtMs: this.nowMs,
    };
    const steps: RowChange<StepRun>[] = [...this.stepAfter.entries()].map(([id, step]) => ({
      before: this.stepBefore.get(id) ?? null,
      after: step,
    }));
    const attempts: RowChange<RunAttempt>[] = [...this.attemptAfter.entries()].map(
      ([id, attempt]) => ({ before: this.attemptBefore.get(id) ?? null, after: attempt }),
    );
    const runs: RowChange<Run>[] = [{ before: this.originalRun, after }];
    return {
      runs,
      steps,
      attempts,
      events: [...this.events],
      mutations: [...this.mutations],
      admissions: [...this.admissions],
      frontierDue: frontierMarks(runs, steps),
    };
  }
}

/**
 * The workflow runs whose frontier may move after a change: a running workflow run that is new
 * (its first steps become ready) or one of whose steps settled in this change (its dependants
 * may become ready, or the run may finish). Anything else cannot move a frontier, so the
 * frontier stage only visits runs this marks.
 */
export function frontierMarks(
  runs: readonly RowChange<Run>[],
  steps: readonly RowChange<StepRun>[],
): string[] {
  return runs
    .filter(({ before, after }) => {
      if (after.kind !== "workflow" || after.status !== "running") return false;
      if (before === null) return true;
      return steps.some(
        (step) =>
          step.after.runId === after.id &&
          SETTLED_STEP_STATUSES.has(step.after.status) &&
          step.before?.status !== step.after.status,
      );
    })
    .map(({ after }) => after.id);
}

/** Merges change sets of different aggregates into one transaction's writes. */
export function mergeChangeSets(sets: readonly ChangeSet[]): ChangeSet {
  return {
    runs: sets.flatMap((set) => set.runs),
    steps: sets.flatMap((set) => set.steps),
    attempts: sets.flatMap((set) => set.attempts),
    events: sets.flatMap((set) => set.events),
    mutations: sets.flatMap((set) => set.mutations),
    admissions: sets.flatMap((set) => set.admissions),
    frontierDue: sets.flatMap((set) => set.frontierDue),
  };
}
