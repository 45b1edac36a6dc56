import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseManifest, topologicalOrder, type Manifest } from "../../src/manifest/index.ts";

const DEMO_PATH = join(import.meta.dirname, "..", "..", "examples", "demo", "package.yaml");

function demo(): Manifest {
  const result = parseManifest(readFileSync(DEMO_PATH, "utf8"), "yaml");
  if (!result.ok)
    throw new Error(
      `examples/demo/package.yaml is invalid: ${JSON.stringify(result.issues, null, 2)}`,
    );
  return result.manifest;
}

describe("examples/demo/package.yaml", () => {
  it("the demo package is a valid manifest named demo", () => {
    expect(demo().package).toBe("demo");
  });

  it("the demo pipeline is a diamond: a → b, a → c, {b, c} → d", () => {
    const pipeline = demo().workflows.find((workflow) => workflow.name === "pipeline");
    expect(pipeline?.steps.map((step) => [step.name, step.needs])).toEqual([
      ["a", []],
      ["b", ["a"]],
      ["c", ["a"]],
      ["d", ["b", "c"]],
    ]);
    expect(topologicalOrder(pipeline?.steps ?? [])).toEqual(["a", "b", "c", "d"]);
  });

  it("the demo schedules the pipeline nightly at 03:00 UTC and skips overlaps", () => {
    expect(demo().schedules).toEqual([
      {
        name: "nightly",
        cron: "0 3 * * *",
        timezone: "UTC",
        target: { kind: "workflow", name: "pipeline" },
        overlap: "skip",
        missed: "skip",
        enabled: true,
      },
    ]);
  });

  it("the demo tasks run only portable POSIX commands on the local launcher with short timeouts", () => {
    const portable = new Set(["echo", "sh", "/bin/sh"]);
    for (const task of demo().tasks) {
      expect(portable.has(task.argv[0] ?? ""), task.name).toBe(true);
      expect(task.executor).toBe("local_process");
      expect(task.timeoutMs).toBeLessThanOrEqual(30_000);
    }
  });
});
