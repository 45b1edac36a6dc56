import { describe, expect, it } from "vitest";
import { isQlrError } from "../../src/errors.ts";
import {
  ATTEMPT_STATUSES,
  LIVE_ATTEMPT_STATUSES,
  RUN_STATUSES,
  SETTLED_STEP_STATUSES,
  STEP_STATUSES,
  TERMINAL_ATTEMPT_STATUSES,
  TERMINAL_RUN_STATUSES,
} from "../../src/model.ts";
import {
  ATTEMPT_TRANSITIONS,
  isLegalTransition,
  ORDINARY_RUN_TRANSITIONS,
  STEP_TRANSITIONS,
  transitionAttempt,
  transitionRun,
  transitionStep,
  WORKFLOW_RUN_TRANSITIONS,
  type TransitionTable,
} from "../../src/state-machines.ts";
import { thrownCode } from "./core-fixtures.ts";

/**
 * The four machines of DESIGN.md §3 and ADR-0227/0229, checked against the tables in
 * src/state-machines.ts. The literal tables below restate the specification, so a change of
 * the code tables has to be a deliberate change of this file too.
 */

function pairs<S extends string>(statuses: readonly S[]): [S, S][] {
  return statuses.flatMap((from) => statuses.map((to): [S, S] => [from, to]));
}

function sorted<S extends string>(table: TransitionTable<S>): Record<string, string[]> {
  return Object.fromEntries(
    Object.entries<readonly S[]>(table).map(([from, to]) => [from, [...to].sort()]),
  );
}

interface Machine {
  readonly table: TransitionTable<string>;
  readonly statuses: readonly string[];
  /** The statuses each status may move to, sorted; a status not listed has no way out. */
  readonly waysOut: Readonly<Record<string, readonly string[]>>;
}

/** The specification, restated: each machine with the ways out of each of its statuses. */
const MACHINES = {
  ordinaryRun: {
    table: ORDINARY_RUN_TRANSITIONS,
    statuses: RUN_STATUSES,
    waysOut: {
      queued: ["cancelled", "dispatching"],
      dispatching: ["cancelled", "failed", "lost", "queued", "running", "timed_out"],
      running: ["cancelled", "failed", "lost", "queued", "succeeded", "timed_out"],
    },
  },
  workflowRun: {
    table: WORKFLOW_RUN_TRANSITIONS,
    statuses: RUN_STATUSES,
    waysOut: { running: ["cancelled", "failed", "succeeded"] },
  },
  step: {
    table: STEP_TRANSITIONS,
    statuses: STEP_STATUSES,
    waysOut: {
      pending: ["cancelled", "ready", "skipped"],
      ready: ["cancelled", "failed", "ready", "running", "timed_out"],
      running: ["cancelled", "failed", "ready", "succeeded", "timed_out"],
    },
  },
  attempt: {
    table: ATTEMPT_TRANSITIONS,
    statuses: ATTEMPT_STATUSES,
    waysOut: {
      claimed: ["cancelled", "lost", "starting"],
      starting: ["failed", "lost", "running", "timed_out"],
      running: ["cancelled", "failed", "lost", "succeeded", "timed_out"],
    },
  },
} satisfies Record<string, Machine>;

function expectMachine({ table, statuses, waysOut }: Machine): void {
  expect(sorted(table)).toEqual(
    Object.fromEntries(statuses.map((from) => [from, waysOut[from] ?? []])),
  );
}

describe("state machines", () => {
  it("the ordinary run machine is queued → dispatching → running → terminal, with retries back to queued", () =>
    expectMachine(MACHINES.ordinaryRun));

  it("a workflow run is created running and leaves it only for succeeded, failed or cancelled", () =>
    expectMachine(MACHINES.workflowRun));

  it("a step run moves pending → ready → running → terminal, pending → skipped, and ready → ready for a new epoch", () =>
    expectMachine(MACHINES.step));

  it("an attempt moves claimed → starting → running → terminal; a claim may be cancelled or lost, a start may fail, time out or be lost, a running attempt may be lost", () =>
    expectMachine(MACHINES.attempt));

  it("a workflow run is never queued, dispatching, timed_out or lost: a step timeout fails the run instead", () => {
    for (const to of ["queued", "dispatching", "timed_out", "lost"] as const) {
      expect(thrownCode(() => transitionRun("workflow", "running", to, "run-1"))).toBe(
        "illegal_transition",
      );
    }
  });

  it("every table has exactly one row per status of its machine", () => {
    expect(Object.keys(ORDINARY_RUN_TRANSITIONS).sort()).toEqual([...RUN_STATUSES].sort());
    expect(Object.keys(WORKFLOW_RUN_TRANSITIONS).sort()).toEqual([...RUN_STATUSES].sort());
    expect(Object.keys(STEP_TRANSITIONS).sort()).toEqual([...STEP_STATUSES].sort());
    expect(Object.keys(ATTEMPT_TRANSITIONS).sort()).toEqual([...ATTEMPT_STATUSES].sort());
  });

  it("an illegal transition throws illegal_transition, and every legal one returns its target", () => {
    for (const [from, to] of pairs(RUN_STATUSES)) {
      expect(thrownCode(() => transitionRun("ordinary", from, to, "r"))).toBe(
        isLegalTransition(ORDINARY_RUN_TRANSITIONS, from, to) ? null : "illegal_transition",
      );
      expect(thrownCode(() => transitionRun("workflow", from, to, "r"))).toBe(
        isLegalTransition(WORKFLOW_RUN_TRANSITIONS, from, to) ? null : "illegal_transition",
      );
    }
    for (const [from, to] of pairs(STEP_STATUSES)) {
      expect(thrownCode(() => transitionStep(from, to, "s"))).toBe(
        isLegalTransition(STEP_TRANSITIONS, from, to) ? null : "illegal_transition",
      );
    }
    for (const [from, to] of pairs(ATTEMPT_STATUSES)) {
      expect(thrownCode(() => transitionAttempt(from, to, "a"))).toBe(
        isLegalTransition(ATTEMPT_TRANSITIONS, from, to) ? null : "illegal_transition",
      );
    }
    expect(transitionStep("ready", "running", "s")).toBe("running");
  });

  it("an illegal transition names its machine and both statuses", () => {
    try {
      transitionAttempt("succeeded", "running", "wta:0");
      expect.unreachable("a terminal attempt must not run again");
    } catch (error) {
      expect(isQlrError(error, "illegal_transition")).toBe(true);
      expect((error as Error).message).toContain("run attempt wta:0: succeeded → running");
      expect(isQlrError(error) ? error.details : []).toEqual([
        { path: "run attempt", message: "succeeded → running" },
      ]);
    }
  });

  it("terminal run, step and attempt statuses have no way out", () => {
    for (const status of TERMINAL_RUN_STATUSES) {
      expect(ORDINARY_RUN_TRANSITIONS[status]).toEqual([]);
      expect(WORKFLOW_RUN_TRANSITIONS[status]).toEqual([]);
    }
    for (const status of TERMINAL_ATTEMPT_STATUSES) expect(ATTEMPT_TRANSITIONS[status]).toEqual([]);
    for (const status of SETTLED_STEP_STATUSES) expect(STEP_TRANSITIONS[status]).toEqual([]);
  });

  it("a step is settled exactly when its machine has no way out", () => {
    for (const status of STEP_STATUSES)
      expect(SETTLED_STEP_STATUSES.has(status)).toBe(STEP_TRANSITIONS[status].length === 0);
  });

  it("live and terminal attempt statuses partition the attempt statuses", () => {
    for (const status of ATTEMPT_STATUSES)
      expect(LIVE_ATTEMPT_STATUSES.has(status)).toBe(!TERMINAL_ATTEMPT_STATUSES.has(status));
    for (const status of ATTEMPT_STATUSES)
      expect(TERMINAL_ATTEMPT_STATUSES.has(status)).toBe(ATTEMPT_TRANSITIONS[status].length === 0);
  });

  it("a step never returns to pending, and a skipped step never runs", () => {
    for (const from of STEP_STATUSES)
      expect(isLegalTransition(STEP_TRANSITIONS, from, "pending")).toBe(false);
    expect(isLegalTransition(STEP_TRANSITIONS, "skipped", "ready")).toBe(false);
    expect(isLegalTransition(STEP_TRANSITIONS, "pending", "running")).toBe(false);
  });

  it("a claim never reaches running without crossing starting, and starting is never cancelled outright", () => {
    expect(isLegalTransition(ATTEMPT_TRANSITIONS, "claimed", "running")).toBe(false);
    // The start barrier: a `starting` attempt may already have a process, so cancellation waits for it.
    expect(isLegalTransition(ATTEMPT_TRANSITIONS, "starting", "cancelled")).toBe(false);
  });

  it("an attempt is lost only from claimed, starting or running", () => {
    const into = ATTEMPT_STATUSES.filter((from) =>
      isLegalTransition(ATTEMPT_TRANSITIONS, from, "lost"),
    );
    expect(into.sort()).toEqual(["claimed", "running", "starting"]);
  });
});

describe("refusals name their machine", () => {
  it("an illegal transition says which machine refused it and for what subject", () => {
    expect(() => transitionRun("workflow", "running", "queued", "run-w")).toThrow(
      /^workflow run run-w: running → queued is not a legal transition$/,
    );
    expect(() => transitionRun("ordinary", "succeeded", "queued", "run-o")).toThrow(
      /^ordinary run run-o: succeeded → queued is not a legal transition$/,
    );
    expect(() => transitionStep("succeeded", "ready", "step-1")).toThrow(
      /^step run step-1: succeeded → ready is not a legal transition$/,
    );
    expect(() => transitionAttempt("lost", "running", "att-1")).toThrow(
      /^run attempt att-1: lost → running is not a legal transition$/,
    );
  });
});
