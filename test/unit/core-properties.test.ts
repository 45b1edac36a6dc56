import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { convergeCancellation } from "../../src/cancellation.ts";
import {
  complete,
  markRunning,
  markStarting,
  requestShutdownStop,
  requestTimeoutStop,
  startFailed,
  type AttemptScope,
  type CompletionFacts,
} from "../../src/execution.ts";
import { advanceFrontier } from "../../src/frontier.ts";
import type { Manifest, TaskSpec } from "../../src/manifest/types.ts";
import type { ChangeSet, RunAttempt, StopReason } from "../../src/model.ts";
import {
  LIVE_ATTEMPT_STATUSES,
  SETTLED_STEP_STATUSES,
  TERMINAL_RUN_STATUSES,
} from "../../src/model.ts";
import { admitOrdinaryAttempt } from "../../src/ordinary.ts";
import {
  applyRecovery,
  decideRecovery,
  type LiveInspection,
  type RecoveryEvidence,
} from "../../src/recovery.ts";
import { requestCancel } from "../../src/runs.ts";
import { task } from "../support/fixtures.ts";
import { CoreWorld, definitionOf, handleAt, T0 } from "./core-fixtures.ts";

/**
 * Property tests of the pure core. fast-check generates random DAGs (acyclic by construction:
 * a step needs only earlier steps) and random interleavings of every operation the cadence,
 * the API, the executor and recovery can perform. The driver only performs an operation whose
 * preconditions hold, so any error thrown by the core is a failure; every change set is applied
 * to an in-memory model that refuses a stale CAS exactly as the SQL store does.
 */

const RUN_ID = "run-1";
const INSPECTIONS: readonly LiveInspection[] = [
  "running",
  "not_running",
  "changed_identity",
  "unverifiable",
];

interface Op {
  readonly kind: number;
  readonly pick: number;
  readonly variant: number;
  readonly delta: number;
}

const opArbitrary = fc.record({
  kind: fc.nat(13),
  pick: fc.nat(),
  variant: fc.nat(),
  delta: fc.integer({ min: 0, max: 1_500 }),
});

const taskArbitrary = fc.record({
  timeoutMs: fc.integer({ min: 50, max: 2_000 }),
  max: fc.integer({ min: 0, max: 2 }),
  backoffMs: fc.integer({ min: 0, max: 300 }),
  idempotent: fc.boolean(),
});

const dagArbitrary = fc.record({
  needs: fc.array(fc.array(fc.boolean(), { maxLength: 6 }), { minLength: 1, maxLength: 6 }),
  taskOfStep: fc.array(fc.nat(1), { minLength: 6, maxLength: 6 }),
  tasks: fc.array(taskArbitrary, { minLength: 1, maxLength: 2 }),
});

type Dag = typeof dagArbitrary extends fc.Arbitrary<infer T> ? T : never;

function manifestOf(dag: Dag): Manifest {
  const tasks: TaskSpec[] = dag.tasks.map((spec, index) =>
    task(`t${index}`, ["true"], {
      timeoutMs: spec.timeoutMs,
      retry: { max: spec.max, backoffMs: spec.backoffMs, idempotent: spec.idempotent },
    }),
  );
  const steps = dag.needs.map((flags, index) => ({
    name: `s${index}`,
    task: `t${(dag.taskOfStep[index] ?? 0) % tasks.length}`,
    // Only earlier steps can be needed, so the graph is acyclic by construction.
    needs: flags.slice(0, index).flatMap((flag, earlier) => (flag ? [`s${earlier}`] : [])),
  }));
  return {
    package: "prop",
    description: null,
    tasks,
    workflows: [{ name: "dag", description: null, steps }],
    schedules: [],
  };
}

function pick<T>(items: readonly T[], index: number): T | undefined {
  return items.length === 0 ? undefined : items[index % items.length];
}

/** Drives one run through the pure functions and checks the invariants after every change. */
class Driver {
  readonly world: CoreWorld;
  nowMs = T0;
  private changeSets = 0;
  /** Which operation wrote each change, to prove who may finalize a workflow run. */
  private readonly log: string[] = [];

  constructor(manifest: Manifest, kind: "workflow" | "ordinary") {
    this.world = new CoreWorld(manifest);
    if (kind === "workflow") this.world.startWorkflow("dag", RUN_ID, T0);
    else this.world.startTask("t0", RUN_ID, T0);
  }

  get run() {
    return this.world.model.run(RUN_ID);
  }

  get steps() {
    return this.world.model.stepsOf(RUN_ID);
  }

  get attempts() {
    return this.world.model.attemptsOf(RUN_ID);
  }

  private live(): RunAttempt[] {
    return this.attempts.filter((attempt) => LIVE_ATTEMPT_STATUSES.has(attempt.status));
  }

  private retryOf(attempt: RunAttempt) {
    const step = attempt.stepRunId === null ? null : this.world.model.steps.get(attempt.stepRunId);
    return definitionOf(this.world.pkg, step?.task ?? this.run.target).retry;
  }

  /** Applies one change set after checking the aggregate's serialization rules on it. */
  apply(change: ChangeSet | null, by: string): void {
    if (change === null) return;
    const held = this.run;
    expect(change.runs, `${by}: one run row per change set`).toHaveLength(1);
    const row = change.runs[0]!;
    expect(row.before?.version, `${by}: CAS on the version held`).toBe(held.version);
    expect(row.after.version, `${by}: exactly one version bump`).toBe(held.version + 1);
    expect(
      change.events.map((event) => event.seq),
      `${by}: contiguous event seqs`,
    ).toEqual(change.events.map((_, index) => held.eventSeq + index + 1));
    expect(row.after.eventSeq).toBe(held.eventSeq + change.events.length);
    if (held.kind === "workflow" && row.after.status !== held.status) {
      // A workflow run is finalized only by the frontier or whole-run cancellation convergence.
      expect(["frontier", "converge"], `${by} changed the workflow run's status`).toContain(by);
    }
    this.world.model.apply(change);
    this.changeSets += 1;
    this.log.push(by);
    this.checkInvariants(by);
  }

  checkInvariants(after: string): void {
    const run = this.run;
    const steps = this.steps;
    const attempts = this.attempts;
    const live = attempts.filter((attempt) => LIVE_ATTEMPT_STATUSES.has(attempt.status));
    expect(run.version, `after ${after}: one version per change set`).toBe(1 + this.changeSets);
    const events = this.world.model.eventsOf(RUN_ID);
    expect(events.map((event) => event.seq)).toEqual(events.map((_, index) => index + 1));
    expect(run.eventSeq).toBe(events.length);
    for (const mutation of this.world.model.mutations.filter(
      (candidate) => candidate.fromStatus !== null,
    )) {
      const event = events.find((candidate) => candidate.seq === mutation.eventSeq);
      expect(event?.type).toBe("step.status_changed");
      expect(event?.stepRunId).toBe(mutation.stepRunId);
    }
    if (run.kind === "workflow") {
      expect(["running", "succeeded", "failed", "cancelled"]).toContain(run.status);
      for (const step of steps) {
        const mine = attempts.filter((attempt) => attempt.stepRunId === step.id);
        const liveMine = mine.filter((attempt) => LIVE_ATTEMPT_STATUSES.has(attempt.status));
        expect(
          liveMine.length,
          `after ${after}: at most one live attempt for step ${step.name}`,
        ).toBeLessThanOrEqual(1);
        for (const attempt of liveMine) {
          if (attempt.status === "running") expect(step.status).toBe("running");
          else expect([step.status, step.version]).toEqual(["ready", attempt.stepRunVersion]);
        }
        if (step.status === "running")
          expect(liveMine.map((attempt) => attempt.status)).toEqual(["running"]);
        // attemptCount grows only on entering running: it counts the attempts that ever ran.
        expect(step.attemptCount, `after ${after}: attemptCount of ${step.name}`).toBe(
          mine.filter((attempt) => attempt.startedAtMs !== null).length,
        );
      }
      for (const attempt of attempts)
        expect(
          this.world.model.admission(RUN_ID, attempt.stepRunId!, attempt.stepRunVersion!)
            ?.attemptId,
        ).toBe(attempt.id);
    } else {
      expect(
        live.length,
        `after ${after}: at most one live attempt per ordinary run`,
      ).toBeLessThanOrEqual(1);
      const latest = attempts.at(-1);
      if (run.status === "dispatching") expect(["claimed", "starting"]).toContain(latest?.status);
      if (run.status === "running") expect(latest?.status).toBe("running");
      if (run.status === "queued") expect(live).toEqual([]);
    }
    const settled = steps.every((step) => SETTLED_STEP_STATUSES.has(step.status));
    if (TERMINAL_RUN_STATUSES.has(run.status)) {
      expect(live, `after ${after}: a terminal run has no live attempt`).toEqual([]);
      expect(settled, `after ${after}: a terminal run has only settled steps`).toBe(true);
    } else if (run.kind === "workflow" && settled && live.length === 0) {
      // Settled and quiet: the very next frontier or cancellation pass finalizes the run.
      const next =
        run.cancelRequestedAtMs === null
          ? advanceFrontier(run, steps, attempts, this.nowMs)
          : convergeCancellation(run, steps, attempts, this.nowMs);
      expect(
        next?.runs[0]?.after.status !== undefined &&
          TERMINAL_RUN_STATUSES.has(next.runs[0].after.status),
      ).toBe(true);
    }
  }

  private facts(attempt: RunAttempt, op: Op): CompletionFacts {
    const startedAtMs =
      attempt.startedAtMs ?? Math.max(attempt.createdAtMs, this.nowMs - (op.delta % 200));
    const finishedAtMs = startedAtMs + (op.delta % (this.nowMs - startedAtMs + 1));
    const exit = op.variant % 3;
    // A receipt reports the stop intent recorded before the signal, or none.
    const stopReason: StopReason | null = (op.variant >> 2) % 2 === 0 ? attempt.stopReason : null;
    return {
      startedAtMs,
      finishedAtMs,
      exitCode: exit === 0 ? 0 : exit === 1 ? 1 : null,
      signal: exit === 2 ? "SIGKILL" : null,
      stopReason,
      spawnError: null,
      handle: handleAt(startedAtMs, 1000 + attempt.number),
    };
  }

  private evidence(attempt: RunAttempt, op: Op): RecoveryEvidence {
    const v = op.variant;
    const receiptRoll = v % 5;
    const receipt: RecoveryEvidence["receipt"] =
      receiptRoll === 0 && attempt.status !== "claimed"
        ? { status: "valid", facts: this.facts(attempt, op) }
        : receiptRoll === 1
          ? { status: "invalid", reason: "mac mismatch" }
          : { status: "none" };
    const journalRoll = Math.floor(v / 5) % 5;
    const journal = journalRoll === 0 ? "absent" : journalRoll === 1 ? "invalid" : "present";
    const inspectionCount = Math.floor(v / 25) % 4 === 0 ? 1 : 2;
    const inspections = Array.from(
      { length: inspectionCount },
      (_, index) => INSPECTIONS[Math.floor(v / (100 * (index + 1))) % INSPECTIONS.length]!,
    );
    // A running attempt's journal was written before its spawn, so it cannot be absent.
    return {
      receipt,
      journal: attempt.status === "running" && journal === "absent" ? "present" : journal,
      inspections,
    };
  }

  /** Applies what `change` makes of one attempt in `statuses` (picked by `op`), if there is one. */
  private onAttempt(
    statuses: readonly RunAttempt["status"][],
    op: Op,
    by: string,
    change: (attempt: RunAttempt, scope: AttemptScope) => ChangeSet | null,
  ): void {
    const candidates = this.attempts.filter((candidate) => statuses.includes(candidate.status));
    const attempt = pick(candidates, op.pick);
    if (attempt !== undefined) this.apply(change(attempt, this.world.model.scope(attempt.id)), by);
  }

  /** Performs the operation `op` names if one of its kind is possible now. */
  step(op: Op): void {
    this.nowMs += 1;
    const run = this.run;
    const model = this.world.model;
    const admitting = !TERMINAL_RUN_STATUSES.has(run.status) && run.cancelRequestedAtMs === null;
    switch (op.kind) {
      case 0:
        if (run.kind === "workflow")
          this.apply(advanceFrontier(run, this.steps, this.attempts, this.nowMs), "frontier");
        return;
      case 1:
      case 2: {
        if (!admitting) return;
        if (run.kind === "ordinary") {
          const admitted = admitOrdinaryAttempt(
            run,
            definitionOf(this.world.pkg, run.target),
            this.nowMs,
          );
          this.apply(admitted?.change ?? null, "admit");
          return;
        }
        const ready = this.steps.filter(
          (step) =>
            step.status === "ready" &&
            (step.notBeforeMs === null || step.notBeforeMs <= this.nowMs),
        );
        const step = pick(ready, op.pick);
        if (step === undefined) return;
        const result = this.world.tryAdmit(RUN_ID, step.name, this.nowMs);
        if (result.kind === "replayed") {
          // The epoch already has its winner: the replay must name it and write nothing.
          expect(result.receipt.attemptId).toBe(
            model.admission(RUN_ID, step.id, step.version)?.attemptId,
          );
          return;
        }
        this.apply(result.change, "admit");
        return;
      }
      case 3:
        if (!admitting) return;
        this.onAttempt(["claimed"], op, "starting", (_, scope) => markStarting(scope, this.nowMs));
        return;
      case 4:
        this.onAttempt(["starting"], op, "running", (attempt, scope) =>
          markRunning(
            scope,
            handleAt(
              Math.max(attempt.createdAtMs, this.nowMs - (op.delta % 100)),
              1000 + attempt.number,
            ),
            this.nowMs,
          ),
        );
        return;
      case 5:
      case 6:
        this.onAttempt(["running", "starting"], op, "complete", (attempt, scope) =>
          complete(scope, this.facts(attempt, op), this.retryOf(attempt), this.nowMs),
        );
        return;
      case 7:
        this.onAttempt(["starting"], op, "start_failed", (attempt, scope) =>
          startFailed(scope, "ENOENT", this.retryOf(attempt), this.nowMs),
        );
        return;
      case 8:
        this.onAttempt(["running"], op, "timeout", (attempt, scope) => {
          // Half of these let the clock reach the deadline first, so timeouts are not left to chance.
          if (op.variant % 2 === 0 && attempt.deadlineAtMs !== null)
            this.nowMs = Math.max(this.nowMs, attempt.deadlineAtMs);
          return requestTimeoutStop(scope, this.nowMs);
        });
        return;
      case 9:
        // Cancelling is rarer than the rest, so most runs get far before an intent freezes them.
        if (op.variant % 10 === 0) this.apply(requestCancel(run, this.nowMs, "user"), "cancel");
        return;
      case 10:
        this.apply(convergeCancellation(run, this.steps, this.attempts, this.nowMs), "converge");
        return;
      case 11:
        this.onAttempt([...LIVE_ATTEMPT_STATUSES], op, "recovery", (attempt, scope) =>
          applyRecovery(
            scope,
            decideRecovery(scope, this.evidence(attempt, op)),
            this.retryOf(attempt),
            this.nowMs,
          ),
        );
        return;
      case 12:
        this.onAttempt(["running"], op, "shutdown", (_, scope) =>
          requestShutdownStop(scope, this.nowMs),
        );
        return;
      default:
        this.nowMs += op.delta;
    }
  }

  /** Lets everything finish: processes exit, the frontier and cancellation run, until the run is terminal. */
  drain(): void {
    const model = this.world.model;
    for (let round = 0; round < 100 && !TERMINAL_RUN_STATUSES.has(this.run.status); round += 1) {
      this.nowMs += 1_000;
      this.apply(convergeCancellation(this.run, this.steps, this.attempts, this.nowMs), "converge");
      if (this.run.kind === "workflow")
        this.apply(advanceFrontier(this.run, this.steps, this.attempts, this.nowMs), "frontier");
      if (TERMINAL_RUN_STATUSES.has(this.run.status)) break;
      if (this.run.cancelRequestedAtMs === null) {
        if (this.run.kind === "ordinary")
          this.apply(
            admitOrdinaryAttempt(
              this.run,
              definitionOf(this.world.pkg, this.run.target),
              this.nowMs,
            )?.change ?? null,
            "admit",
          );
        for (const step of this.steps.filter(
          (candidate) => candidate.status === "ready" && (candidate.notBeforeMs ?? 0) <= this.nowMs,
        )) {
          const result = this.world.tryAdmit(RUN_ID, step.name, this.nowMs);
          if (result.kind === "admitted") this.apply(result.change, "admit");
        }
        for (const attempt of this.attempts.filter((candidate) => candidate.status === "claimed"))
          this.apply(markStarting(model.scope(attempt.id), this.nowMs), "starting");
      }
      for (const attempt of this.attempts.filter((candidate) => candidate.status === "starting"))
        this.apply(
          markRunning(model.scope(attempt.id), handleAt(this.nowMs), this.nowMs),
          "running",
        );
      for (const attempt of this.attempts.filter((candidate) => candidate.status === "running")) {
        const current = model.attempt(attempt.id);
        const facts: CompletionFacts = {
          startedAtMs: current.startedAtMs ?? this.nowMs,
          finishedAtMs: this.nowMs,
          exitCode: 0,
          signal: null,
          stopReason: current.stopReason,
          spawnError: null,
        };
        this.apply(
          complete(model.scope(attempt.id), facts, this.retryOf(attempt), this.nowMs),
          "complete",
        );
      }
    }
    const run = this.run;
    expect(TERMINAL_RUN_STATUSES.has(run.status), `the run drained to ${run.status}`).toBe(true);
    expect(this.live()).toEqual([]);
    expect(this.steps.every((step) => SETTLED_STEP_STATUSES.has(step.status))).toBe(true);
  }
}

describe("properties of the pure core", () => {
  it.each([
    {
      title:
        "random DAGs under random interleavings never throw, keep one live attempt per step, bump the run version once per change set, keep event seqs contiguous, and end terminal exactly when settled",
      kind: "workflow",
      maxOps: 100,
      numRuns: 250,
    },
    {
      title:
        "ordinary runs under random interleavings keep latest-attempt semantics: at most one live attempt, dispatching and running mirror it, terminal only when nothing is live",
      kind: "ordinary",
      maxOps: 80,
      numRuns: 200,
    },
  ] as const)("$title", ({ kind, maxOps, numRuns }) => {
    fc.assert(
      fc.property(
        dagArbitrary,
        fc.array(opArbitrary, { minLength: 20, maxLength: maxOps, size: "max" }),
        (dag, ops) => {
          const driver = new Driver(manifestOf(dag), kind);
          driver.checkInvariants("creation");
          for (const op of ops) driver.step(op);
          driver.drain();
        },
      ),
      { numRuns },
    );
  });

  it("the frontier alone finalizes a DAG whose steps all succeed, and never before the last step settles", () => {
    fc.assert(
      fc.property(dagArbitrary, (dag) => {
        const driver = new Driver(manifestOf(dag), "workflow");
        let guard = 0;
        while (driver.run.status === "running" && guard < 50) {
          guard += 1;
          driver.apply(
            advanceFrontier(driver.run, driver.steps, driver.attempts, (driver.nowMs += 1)),
            "frontier",
          );
          for (const step of driver.steps.filter((candidate) => candidate.status === "ready")) {
            expect(driver.run.status).toBe("running");
            const result = driver.world.tryAdmit(RUN_ID, step.name, (driver.nowMs += 1));
            if (result.kind !== "admitted") throw new Error("a fresh ready epoch must be admitted");
            driver.apply(result.change, "admit");
            const id = result.attempt.id;
            driver.apply(
              markStarting(driver.world.model.scope(id), (driver.nowMs += 1)),
              "starting",
            );
            driver.apply(
              markRunning(
                driver.world.model.scope(id),
                handleAt(driver.nowMs),
                (driver.nowMs += 1),
              ),
              "running",
            );
            const facts: CompletionFacts = {
              startedAtMs: driver.nowMs - 1,
              finishedAtMs: driver.nowMs,
              exitCode: 0,
              signal: null,
              stopReason: null,
              spawnError: null,
            };
            driver.apply(
              complete(
                driver.world.model.scope(id),
                facts,
                definitionOf(driver.world.pkg, step.task).retry,
                (driver.nowMs += 1),
              ),
              "complete",
            );
          }
        }
        expect(driver.run.status).toBe("succeeded");
        expect(driver.attempts).toHaveLength(dag.needs.length);
        expect(driver.steps.every((step) => step.attemptCount === 1)).toBe(true);
      }),
      { numRuns: 100 },
    );
  });
});
