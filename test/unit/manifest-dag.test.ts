import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { isQlrError } from "../../src/errors.ts";
import {
  findWorkflowProblems,
  topologicalOrder,
  validateManifest,
  type DagStep,
  type ManifestIssue,
} from "../../src/manifest/index.ts";
import { backwards, diamond } from "../support/workflow-shapes.ts";

function step(name: string, needs: string[] = []): DagStep {
  return { name, needs };
}

/** A manifest with one task `work` and one workflow `flow` whose steps all run it. */
function workflowIssues(needsByStep: Record<string, string[]>): ManifestIssue[] {
  const steps = Object.fromEntries(
    Object.entries(needsByStep).map(([name, needs]) => [name, { task: "work", needs }]),
  );
  const result = validateManifest({
    package: "demo",
    tasks: { work: { run: ["true"] } },
    workflows: { flow: { steps } },
  });
  return result.ok ? [] : result.issues;
}

describe("workflow DAG validation", () => {
  it("a cycle is rejected and named a → b → a", () => {
    expect(workflowIssues({ a: ["b"], b: ["a"] })).toEqual([
      { path: "workflows.flow.steps.a.needs", message: "cycle: a → b → a" },
    ]);
  });

  it("a longer cycle is named from its smallest step in run order: a → b → c → a", () => {
    // c needs b, b needs a, a needs c: a runs before b, b before c, c before a.
    expect(workflowIssues({ c: ["b"], b: ["a"], a: ["c"], d: ["a"] })).toEqual([
      { path: "workflows.flow.steps.a.needs", message: "cycle: a → b → c → a" },
    ]);
  });

  it("each separate cycle is reported once", () => {
    const issues = workflowIssues({ a: ["b"], b: ["a"], x: ["y"], y: ["x"], z: [] });
    expect(issues.map((issue) => issue.message)).toEqual(["cycle: a → b → a", "cycle: x → y → x"]);
  });

  it("a self-dependency is rejected at its needs index", () => {
    expect(workflowIssues({ a: [], b: ["a", "b"] })).toEqual([
      { path: "workflows.flow.steps.b.needs[1]", message: "a step cannot need itself" },
    ]);
  });

  it("an unknown needs target is rejected at its index", () => {
    expect(workflowIssues({ a: [], b: ["a", "nope"] })).toEqual([
      { path: "workflows.flow.steps.b.needs[1]", message: 'unknown step "nope"' },
    ]);
  });

  it("a duplicate entry within one step's needs is rejected at the repeat", () => {
    expect(workflowIssues({ a: [], b: ["a", "a"] })).toEqual([
      { path: "workflows.flow.steps.b.needs[1]", message: '"a" is listed more than once' },
    ]);
  });

  it.each([
    ["a step referencing an unknown task is rejected", { work: { run: ["true"] } }, "wrok"],
    ["a step in a package without tasks references an unknown task", undefined, "work"],
  ])("%s", (_title, tasks, task) => {
    const result = validateManifest({
      package: "demo",
      ...(tasks === undefined ? {} : { tasks }),
      workflows: { flow: { steps: { a: { task } } } },
    });
    expect(result.ok ? [] : result.issues).toEqual([
      { path: "workflows.flow.steps.a.task", message: `unknown task "${task}"` },
    ]);
  });

  it("steps and their needs are normalized in name order", () => {
    const result = validateManifest({
      package: "demo",
      tasks: { work: { run: ["true"] } },
      workflows: { flow: backwards(diamond("work")) },
    });
    if (!result.ok) throw new Error(JSON.stringify(result.issues));
    expect(result.manifest.workflows[0]?.steps).toEqual([
      { name: "a", task: "work", needs: [] },
      { name: "b", task: "work", needs: ["a"] },
      { name: "c", task: "work", needs: ["a"] },
      { name: "d", task: "work", needs: ["b", "c"] },
    ]);
  });

  it("topologicalOrder puts the diamond in dependency order, ties broken by name", () => {
    expect(
      topologicalOrder([step("d", ["c", "b"]), step("c", ["a"]), step("b", ["a"]), step("a")]),
    ).toEqual(["a", "b", "c", "d"]);
    expect(topologicalOrder([step("z"), step("y"), step("x", ["z"])])).toEqual(["y", "z", "x"]);
  });

  it("topologicalOrder throws invalid_manifest for a cycle", () => {
    let thrown: unknown;
    try {
      topologicalOrder([step("a", ["b"]), step("b", ["a"])]);
    } catch (error) {
      thrown = error;
    }
    expect(isQlrError(thrown, "invalid_manifest")).toBe(true);
    expect((thrown as Error).message).toContain("a → b → a");
  });

  it("a repeated step name in an array is reported", () => {
    expect(findWorkflowProblems([step("a"), step("a")]).map((problem) => problem.kind)).toEqual([
      "duplicate_step",
    ]);
  });
});

/**
 * Random DAGs: node i may only need nodes with a smaller index, so the graph is acyclic by
 * construction. Names are a random permutation of the indices, so name order and dependency
 * order are unrelated and the tie-breaking is exercised.
 */
const acyclicGraph = fc
  .integer({ min: 1, max: 24 })
  .chain((size) =>
    fc.record({
      names: fc.shuffledSubarray(
        Array.from({ length: size }, (_, index) => `s${String(index).padStart(2, "0")}`),
        { minLength: size, maxLength: size },
      ),
      needs: fc.tuple(
        ...Array.from({ length: size }, (_, index) =>
          fc.uniqueArray(fc.nat({ max: Math.max(index - 1, 0) }), { maxLength: index }),
        ),
      ),
    }),
  )
  .map(({ names, needs }) =>
    names.map((name, index) => ({
      name,
      needs: (needs[index] ?? []).filter((need) => need < index).map((need) => names[need] ?? ""),
    })),
  );

function reachable(steps: readonly DagStep[], from: string): Set<string> {
  const dependents = new Map<string, string[]>();
  for (const each of steps)
    for (const need of each.needs)
      dependents.set(need, [...(dependents.get(need) ?? []), each.name]);
  const seen = new Set<string>();
  const pending = [from];
  for (let name = pending.pop(); name !== undefined; name = pending.pop()) {
    for (const next of dependents.get(name) ?? []) {
      if (!seen.has(next)) {
        seen.add(next);
        pending.push(next);
      }
    }
  }
  return seen;
}

describe("workflow DAG properties", () => {
  it("random acyclic DAGs are accepted and topologicalOrder puts every step after all its needs", () => {
    fc.assert(
      fc.property(acyclicGraph, (steps) => {
        expect(findWorkflowProblems(steps)).toEqual([]);
        const order = topologicalOrder(steps);
        expect([...order].sort()).toEqual(steps.map((each) => each.name).sort());
        const position = new Map(order.map((name, index) => [name, index]));
        for (const each of steps) {
          for (const need of each.needs)
            expect(position.get(need)).toBeLessThan(position.get(each.name) ?? -1);
        }
      }),
      { numRuns: 300 },
    );
  });

  it("topologicalOrder does not depend on the order the steps are given in", () => {
    fc.assert(
      fc.property(
        acyclicGraph.chain((steps) =>
          fc.tuple(
            fc.constant(steps),
            fc.shuffledSubarray(steps, { minLength: steps.length, maxLength: steps.length }),
          ),
        ),
        ([steps, shuffled]) => {
          expect(topologicalOrder(shuffled)).toEqual(topologicalOrder(steps));
        },
      ),
    );
  });

  it("a random DAG with an added back edge is rejected as a cycle along real edges", () => {
    const withBackEdge = acyclicGraph
      .filter((steps) => steps.some((each) => each.needs.length > 0))
      .chain((steps) => {
        // Pick a step that something depends on, then one of the steps reachable from it.
        const sources = steps.filter((each) => reachable(steps, each.name).size > 0);
        return fc
          .constantFrom(...sources)
          .chain((source) =>
            fc.tuple(
              fc.constant(steps),
              fc.constant(source.name),
              fc.constantFrom(...reachable(steps, source.name)),
            ),
          );
      });
    fc.assert(
      fc.property(withBackEdge, ([steps, source, descendant]) => {
        // The source now also needs one of its own descendants: that closes a cycle.
        const cyclic = steps.map((each) =>
          each.name === source ? { name: each.name, needs: [...each.needs, descendant] } : each,
        );
        const cycles = findWorkflowProblems(cyclic).filter((problem) => problem.kind === "cycle");
        expect(cycles.length).toBeGreaterThanOrEqual(1);
        const needsOf = new Map(cyclic.map((each) => [each.name, each.needs]));
        for (const problem of cycles) {
          if (problem.kind !== "cycle") continue;
          expect(problem.cycle[0]).toBe(problem.cycle[problem.cycle.length - 1]);
          expect(new Set(problem.cycle.slice(1)).size).toBe(problem.cycle.length - 1);
          // "x → y" in a cycle means y needs x.
          for (let index = 0; index + 1 < problem.cycle.length; index += 1) {
            expect(needsOf.get(problem.cycle[index + 1] ?? "")).toContain(problem.cycle[index]);
          }
        }
        expect(() => topologicalOrder(cyclic)).toThrow(/cycle/);
      }),
      { numRuns: 300 },
    );
  });
});
