/**
 * The workflow shapes the device suites declare again and again, so a test names its shape
 * and the tasks of its steps, and nothing else.
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
  return {
    steps: {
      a: { task: taskOf.a },
      b: { task: taskOf.b, needs: ["a"] },
      c: { task: taskOf.c, needs: ["a"] },
      d: { task: taskOf.d, needs: ["b", "c"] },
    },
  };
}
