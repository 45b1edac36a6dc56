import { QlrError } from "../errors.ts";

/**
 * Validation and ordering of a workflow's steps. An edge "a → b" means b needs a: a runs
 * first. Cycles are reported in that direction, starting at the cycle's smallest step name,
 * so one graph always yields the same message.
 */

export interface DagStep {
  readonly name: string;
  readonly needs: readonly string[];
}

/** A step as written, for `findWorkflowProblems`; `task` is absent when it was not a string. */
export interface WorkflowStepInput extends DagStep {
  readonly task?: string | undefined;
}

export type WorkflowProblem =
  | { readonly kind: "duplicate_step"; readonly step: string; readonly message: string }
  | {
      readonly kind: "unknown_task";
      readonly step: string;
      readonly task: string;
      readonly message: string;
    }
  | {
      readonly kind: "unknown_need";
      readonly step: string;
      readonly index: number;
      readonly message: string;
    }
  | {
      readonly kind: "duplicate_need";
      readonly step: string;
      readonly index: number;
      readonly message: string;
    }
  | {
      readonly kind: "self_need";
      readonly step: string;
      readonly index: number;
      readonly message: string;
    }
  /** `cycle` starts and ends at the same step, e.g. ["a", "b", "a"]; `step` is its first name. */
  | {
      readonly kind: "cycle";
      readonly step: string;
      readonly cycle: readonly string[];
      readonly message: string;
    };

/** Names compare by UTF-16 code units (like canonical JSON keys), never by locale. */
export function compareNames(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export function formatCycle(cycle: readonly string[]): string {
  return cycle.join(" → ");
}

/**
 * Every problem of one workflow's steps: unknown tasks (checked when `knownTasks` is given),
 * unknown `needs` targets, duplicate entries, self-dependencies and cycles (one per strongly
 * connected group of steps). Edges that are themselves problems are left out of the cycle
 * search, so each mistake is reported once.
 */
export function findWorkflowProblems(
  steps: readonly WorkflowStepInput[],
  knownTasks?: ReadonlySet<string>,
): WorkflowProblem[] {
  const problems: WorkflowProblem[] = [];
  const stepNames = new Set<string>();
  for (const step of steps) {
    // A record cannot repeat a name, but an array handed in by other code can.
    if (stepNames.has(step.name))
      problems.push({
        kind: "duplicate_step",
        step: step.name,
        message: `step ${JSON.stringify(step.name)} is declared more than once`,
      });
    stepNames.add(step.name);
  }
  const validNeeds = new Map<string, string[]>();
  for (const step of [...steps].sort((a, b) => compareNames(a.name, b.name))) {
    if (knownTasks !== undefined && step.task !== undefined && !knownTasks.has(step.task)) {
      problems.push({
        kind: "unknown_task",
        step: step.name,
        task: step.task,
        message: `unknown task ${JSON.stringify(step.task)}`,
      });
    }
    const seen = new Set<string>();
    const needs: string[] = [];
    step.needs.forEach((need, index) => {
      if (need === step.name) {
        problems.push({
          kind: "self_need",
          step: step.name,
          index,
          message: "a step cannot need itself",
        });
      } else if (!stepNames.has(need)) {
        problems.push({
          kind: "unknown_need",
          step: step.name,
          index,
          message: `unknown step ${JSON.stringify(need)}`,
        });
      } else if (seen.has(need)) {
        problems.push({
          kind: "duplicate_need",
          step: step.name,
          index,
          message: `${JSON.stringify(need)} is listed more than once`,
        });
      } else {
        needs.push(need);
      }
      seen.add(need);
    });
    validNeeds.set(step.name, needs);
  }
  for (const cycle of findCycles(validNeeds)) {
    problems.push({
      kind: "cycle",
      step: cycle[0] ?? "",
      cycle,
      message: `cycle: ${formatCycle(cycle)}`,
    });
  }
  return problems;
}

/**
 * The step names in an order where every step comes after all of its needs; among steps that
 * are ready together the smaller name comes first, so the order is a function of the graph
 * alone (plans and their digests rely on that). Throws `invalid_manifest` for a graph
 * `findWorkflowProblems` would reject.
 */
export function topologicalOrder(steps: readonly DagStep[]): string[] {
  const problems = findWorkflowProblems(steps);
  if (problems.length > 0) {
    throw new QlrError(
      "invalid_manifest",
      `steps do not form a DAG: ${problems[0]?.message ?? ""}`,
      {
        details: problems.map((problem) => ({ path: problem.step, message: problem.message })),
      },
    );
  }
  const waitingOn = new Map(steps.map((step) => [step.name, step.needs.length]));
  const dependents = dependentsOf(steps);
  // Kept sorted descending so the smallest ready name is popped from the end in O(1).
  const ready = steps
    .filter((step) => step.needs.length === 0)
    .map((step) => step.name)
    .sort((a, b) => compareNames(b, a));
  const order: string[] = [];
  for (let name = ready.pop(); name !== undefined; name = ready.pop()) {
    order.push(name);
    for (const dependent of dependents.get(name) ?? []) {
      const remaining = (waitingOn.get(dependent) ?? 0) - 1;
      waitingOn.set(dependent, remaining);
      if (remaining === 0) insertDescending(ready, dependent);
    }
  }
  return order;
}

function dependentsOf(steps: readonly DagStep[]): Map<string, string[]> {
  const dependents = new Map<string, string[]>();
  for (const step of steps) {
    for (const need of step.needs) {
      const list = dependents.get(need);
      if (list === undefined) dependents.set(need, [step.name]);
      else list.push(step.name);
    }
  }
  return dependents;
}

function insertDescending(sorted: string[], name: string): void {
  let low = 0;
  let high = sorted.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (compareNames(sorted[middle] ?? "", name) > 0) low = middle + 1;
    else high = middle;
  }
  sorted.splice(low, 0, name);
}

/**
 * One cycle per strongly connected component with more than one step (self-edges are
 * reported separately and never reach here). Components come from Kosaraju's algorithm;
 * within each, a breadth-first search along "runs before" edges from the smallest name finds
 * the shortest cycle through it, visiting neighbours in name order. Both passes are iterative
 * so a large hostile graph cannot exhaust the call stack.
 */
function findCycles(needsOf: ReadonlyMap<string, readonly string[]>): string[][] {
  const names = [...needsOf.keys()].sort(compareNames);
  const runsBefore = new Map<string, string[]>(names.map((name) => [name, []]));
  for (const name of names)
    for (const need of needsOf.get(name) ?? []) runsBefore.get(need)?.push(name);
  for (const list of runsBefore.values()) list.sort(compareNames);

  const finished = finishOrder(names, runsBefore);
  const component = new Map<string, number>();
  const members: string[][] = [];
  for (let index = finished.length - 1; index >= 0; index -= 1) {
    const root = finished[index];
    if (root === undefined || component.has(root)) continue;
    const id = members.length;
    const group: string[] = [];
    const stack = [root];
    component.set(root, id);
    for (let name = stack.pop(); name !== undefined; name = stack.pop()) {
      group.push(name);
      // The transposed "runs before" graph is the "needs" graph.
      for (const need of needsOf.get(name) ?? []) {
        if (!component.has(need)) {
          component.set(need, id);
          stack.push(need);
        }
      }
    }
    members.push(group);
  }

  const cycles: string[][] = [];
  for (const group of members) {
    if (group.length < 2) continue;
    const id = component.get(group[0] ?? "");
    const start = [...group].sort(compareNames)[0] ?? "";
    cycles.push(
      shortestCycleThrough(start, (name) =>
        (runsBefore.get(name) ?? []).filter((next) => component.get(next) === id),
      ),
    );
  }
  return cycles.sort((a, b) => compareNames(a[0] ?? "", b[0] ?? ""));
}

/** Depth-first finishing order over `edges`, iteratively. */
function finishOrder(
  names: readonly string[],
  edges: ReadonlyMap<string, readonly string[]>,
): string[] {
  const visited = new Set<string>();
  const finished: string[] = [];
  for (const root of names) {
    if (visited.has(root)) continue;
    visited.add(root);
    const stack: { name: string; next: number }[] = [{ name: root, next: 0 }];
    while (stack.length > 0) {
      const frame = stack[stack.length - 1];
      if (frame === undefined) break;
      const out = edges.get(frame.name) ?? [];
      const target = out[frame.next];
      frame.next += 1;
      if (target === undefined) {
        finished.push(frame.name);
        stack.pop();
      } else if (!visited.has(target)) {
        visited.add(target);
        stack.push({ name: target, next: 0 });
      }
    }
  }
  return finished;
}

function shortestCycleThrough(start: string, next: (name: string) => readonly string[]): string[] {
  const parent = new Map<string, string>();
  const queue = [start];
  for (let head = 0; head < queue.length; head += 1) {
    const name = queue[head] ?? "";
    for (const target of next(name)) {
      if (target === start) {
        const path = [start];
        for (
          let at: string | undefined = name;
          at !== undefined && at !== start;
          at = parent.get(at)
        )
          path.push(at);
        path.push(start);
        // The walk above went backwards from the closing edge; reverse it into "runs before" order.
        return [start, ...path.slice(1, -1).reverse(), start];
      }
      if (!parent.has(target)) {
        parent.set(target, name);
        queue.push(target);
      }
    }
  }
  // Unreachable for a strongly connected group of two or more steps; kept total for the type.
  return [start, start];
}
