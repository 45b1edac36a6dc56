/**
 * The workflow shapes the suites declare again and again, so a test names its shape and the
 * tasks of its steps, and nothing else; `stepLines` writes one into a YAML manifest.
 */
import type { WorkflowSpec } from "./scratch.ts";

/** Steps in a line, each needing the one before it: `chain({ a: "ta", b: "tb" })` is a → b. */
export function chain(taskOfStep: Record<string, string>): WorkflowSpec {
  const names = Object.keys(taskOfStep);
  return {
    steps: Object.fromEntries(
      names.map((name, index) => {
        const task = taskOfStep[name] ?? "";
        const before = names[index - 1];
        return [name, before === undefined ? { task } : { task, needs: [before] }];
      }),
    ),
  };
}

/** Steps that need nothing: all of them run at once. */
export function parallel(taskOfStep: Record<string, string>): WorkflowSpec {
  return {
    steps: Object.fromEntries(Object.entries(taskOfStep).map(([name, task]) => [name, { task }])),
  };
}

/**
 * The diamond a → {b, c} → d: one task for every step, or each step's own. Two branches join,
 * so d is admitted once, after both.
 */
export function diamond(
  tasks:
    string | { readonly a: string; readonly b: string; readonly c: string; readonly d: string },
): WorkflowSpec {
  const taskOf = typeof tasks === "string" ? { a: tasks, b: tasks, c: tasks, d: tasks } : tasks;
  return namedDiamond({ a: taskOf.a, b: taskOf.b, c: taskOf.c, d: taskOf.d });
}

/**
 * A diamond whose steps are named for what they do: the four keys of `taskOfStep` are, in order,
 * the first step, the two after it, and the join after both, which needs them in that order.
 */
export function namedDiamond(taskOfStep: Record<string, string>): WorkflowSpec {
  const [first, left, right, join, ...more] = Object.entries(taskOfStep);
  if (
    first === undefined ||
    left === undefined ||
    right === undefined ||
    join === undefined ||
    more.length > 0
  )
    throw new Error("a diamond has four steps");
  return {
    steps: {
      [first[0]]: { task: first[1] },
      [left[0]]: { task: left[1], needs: [first[0]] },
      [right[0]]: { task: right[1], needs: [first[0]] },
      [join[0]]: { task: join[1], needs: [left[0], right[0]] },
    },
  };
}

/** The same workflow written backwards: the last step first, and each step's needs reversed. */
export function backwards(workflow: WorkflowSpec): WorkflowSpec {
  return {
    ...workflow,
    steps: Object.fromEntries(
      Object.entries(workflow.steps)
        .reverse()
        .map(([name, step]) => [
          name,
          step.needs === undefined ? step : { ...step, needs: [...step.needs].reverse() },
        ]),
    ),
  };
}

/**
 * The steps of `workflow` as a YAML manifest writes them under `steps:`: one flow mapping a
 * line, six spaces in, in the workflow's order, with no newline after the last.
 */
export function stepLines(workflow: WorkflowSpec): string {
  return Object.entries(workflow.steps)
    .map(([name, step]) => {
      const needs = step.needs === undefined ? "" : `, needs: [${step.needs.join(", ")}]`;
      return `      ${name}: { task: ${step.task}${needs} }`;
    })
    .join("\n");
}
