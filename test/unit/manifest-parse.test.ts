import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { isQlrError } from "../../src/errors.ts";
import {
  MANIFEST_LIMITS,
  manifestError,
  parseManifest,
  type ManifestIssue,
  type ManifestParseResult,
} from "../../src/manifest/index.ts";
import { namedDiamond, stepLines } from "../support/workflow-shapes.ts";

/** The pipeline's join lists its needs out of name order (c before b): normalizing sorts them. */
const YAML_TEXT = `
package: demo
description: prices
tasks:
  hello:
    run: ["echo", "hello"]
    timeout: 30s
    env: { GREETING: hi, ALPHA: "1" }
  fetch:
    shell: sleep 1; echo prices
    retry: { max: 2, backoff: 5s, idempotent: true }
  remote:
    run: [work]
    executor: remote_worker
    pool: gpu
workflows:
  pipeline:
    steps:
${stepLines(namedDiamond({ a: "hello", c: "hello", b: "fetch", d: "remote" }))}
schedules:
  nightly: { cron: "0 3 * * *", timezone: "UTC", workflow: pipeline, overlap: skip }
`;

/** The same package as YAML_TEXT, with keys in a different order and defaults spelled out. */
const JSON_TEXT = JSON.stringify({
  schedules: {
    nightly: {
      workflow: "pipeline",
      cron: "0 3 * * *",
      overlap: "skip",
      missed: "skip",
      enabled: true,
    },
  },
  workflows: {
    pipeline: {
      steps: {
        d: { needs: ["b", "c"], task: "remote" },
        c: { needs: ["a"], task: "hello" },
        b: { needs: ["a"], task: "fetch" },
        a: { task: "hello", needs: [] },
      },
    },
  },
  tasks: {
    remote: { executor: "remote_worker", pool: "gpu", run: ["work"] },
    fetch: { shell: "sleep 1; echo prices", retry: { idempotent: true, backoff: 5000, max: 2 } },
    hello: {
      run: ["echo", "hello"],
      timeout: 30_000,
      env: { ALPHA: "1", GREETING: "hi" },
      executor: "local_process",
    },
  },
  description: "prices",
  package: "demo",
});

function issuesOf(result: ManifestParseResult): ManifestIssue[] {
  if (result.ok) throw new Error("expected the manifest to be rejected");
  return result.issues;
}

describe("parseManifest", () => {
  it("YAML and JSON of the same manifest normalize identically", () => {
    const fromYaml = parseManifest(YAML_TEXT, "yaml");
    const fromJson = parseManifest(JSON_TEXT, "json");
    expect(fromYaml.ok).toBe(true);
    expect(fromJson).toEqual(fromYaml);
    // A YAML rendering of the JSON value is a third spelling of the same package.
    expect(parseManifest(stringify(JSON.parse(JSON_TEXT)), "yaml")).toEqual(fromYaml);
  });

  it("the normalized manifest lists every collection in name order", () => {
    const result = parseManifest(YAML_TEXT, "yaml");
    if (!result.ok) throw new Error(JSON.stringify(result.issues));
    expect(result.manifest.tasks.map((task) => task.name)).toEqual(["fetch", "hello", "remote"]);
    expect(result.manifest.workflows[0]?.steps.map((step) => step.name)).toEqual([
      "a",
      "b",
      "c",
      "d",
    ]);
    expect(result.manifest.workflows[0]?.steps[3]?.needs).toEqual(["b", "c"]);
    expect(result.manifest.schedules[0]?.target).toEqual({ kind: "workflow", name: "pipeline" });
  });

  it("oversize manifest is rejected before parsing", () => {
    // Not even valid YAML: only the size problem may be reported, so the parser never ran.
    const text = `package: demo\n${"x: [".repeat(MANIFEST_LIMITS.maxManifestBytes / 4)}`;
    expect(issuesOf(parseManifest(text, "yaml"))).toEqual([
      { path: "$", message: expect.stringMatching(/larger than 262144 bytes/) as unknown },
    ]);
  });

  it("the size limit counts UTF-8 bytes, not characters", () => {
    // Each "é" is one UTF-16 unit but two UTF-8 bytes.
    const text = `# ${"é".repeat(MANIFEST_LIMITS.maxManifestBytes / 2)}\npackage: demo\n`;
    expect(text.length).toBeLessThan(MANIFEST_LIMITS.maxManifestBytes);
    expect(issuesOf(parseManifest(text, "yaml"))[0]?.message).toMatch(/larger than/);
  });

  it("every problem is reported, not only the first", () => {
    const text = `
package: Demo
tasks:
  hello:
    run: ["echo", "hi"]
    timeout: soon
    colour: blue
  remote:
    run: [work]
    executor: remote_worker
workflows:
  pipeline:
    steps:
      a: { task: hello, needs: [b] }
      b: { task: hello, needs: [a] }
      c: { task: missing, needs: [ghost] }
schedules:
  nightly: { cron: "0 3 * * *", workflow: nothere }
`;
    expect(issuesOf(parseManifest(text, "yaml")).map((issue) => issue.path)).toEqual([
      "package",
      "schedules.nightly.workflow",
      "tasks.hello.colour",
      "tasks.hello.timeout",
      "tasks.remote.pool",
      "workflows.pipeline.steps.a.needs",
      "workflows.pipeline.steps.c.needs[0]",
      "workflows.pipeline.steps.c.task",
    ]);
  });

  it("YAML syntax errors are reported at $ with line and column", () => {
    const issues = issuesOf(parseManifest("package: demo\ntasks:\n  hello: [unclosed\n", "yaml"));
    expect(issues[0]?.path).toBe("$");
    expect(issues[0]?.message).toMatch(/^YAML: .* at line \d+, column \d+$/);
  });

  it("duplicate YAML keys are rejected with their line", () => {
    const issues = issuesOf(
      parseManifest("package: demo\ntasks:\n  a: { run: [true] }\n  a: { run: [false] }\n", "yaml"),
    );
    expect(issues).toEqual([
      { path: "$", message: "YAML: Map keys must be unique at line 4, column 3" },
    ]);
  });

  it("duplicate JSON keys are rejected with their path instead of keeping the last", () => {
    const text =
      '{"package":"demo","tasks":{"a":{"run":["true"]},"b":{"run":["x"],"run":["y"]},"a":{"run":["false"]}}}';
    expect(issuesOf(parseManifest(text, "json"))).toEqual([
      { path: "tasks.a", message: "duplicate key: JSON would keep only the last one" },
      { path: "tasks.b.run", message: "duplicate key: JSON would keep only the last one" },
    ]);
  });

  it("equal keys in different JSON objects are not duplicates", () => {
    const text =
      '{"package":"demo","tasks":{"a":{"run":["true"],"env":{"run":"x"}},"b":{"run":["true"]}},"workflows":{"w":{"steps":{"a":{"task":"a"},"b":{"task":"b","needs":["a"]}}}}}';
    expect(parseManifest(text, "json").ok).toBe(true);
  });

  it("YAML tags outside the core schema are rejected", () => {
    const issues = issuesOf(
      parseManifest('package: demo\ndescription: !!js/function "function () {}"\n', "yaml"),
    );
    expect(issues[0]?.message).toMatch(/Unresolved tag/);
  });

  it("a YAML alias bomb is rejected", () => {
    const lines = ["a: &a [x, x, x, x, x, x, x, x, x]"];
    for (let level = 1; level < 10; level += 1) {
      const previous = String.fromCharCode(96 + level);
      const current = String.fromCharCode(97 + level);
      lines.push(
        `${current}: &${current} [${Array.from({ length: 9 }, () => `*${previous}`).join(", ")}]`,
      );
    }
    const issues = issuesOf(parseManifest(`${lines.join("\n")}\n`, "yaml"));
    expect(issues).toEqual([{ path: "$", message: expect.stringMatching(/alias/i) as unknown }]);
  });

  it("a YAML anchor reused a few times is fine", () => {
    const text =
      "package: demo\ntasks:\n  a: { run: [echo], env: &shared { MODE: fast } }\n  b: { run: [echo], env: *shared }\n";
    const result = parseManifest(text, "yaml");
    expect(result.ok && result.manifest.tasks.map((task) => task.env)).toEqual([
      { MODE: "fast" },
      { MODE: "fast" },
    ]);
  });

  it("several YAML documents in one text are rejected", () => {
    expect(
      issuesOf(parseManifest("package: demo\n---\npackage: other\n", "yaml"))[0]?.message,
    ).toMatch(/multiple documents/);
  });

  it("YAML merge keys are not expanded", () => {
    const text =
      "package: demo\ntasks:\n  a: &base { run: [echo] }\n  b:\n    <<: *base\n    timeout: 5s\n";
    expect(issuesOf(parseManifest(text, "yaml"))).toContainEqual({
      path: 'tasks.b["<<"]',
      message: "unknown field",
    });
  });

  it("JSON syntax errors are reported at $", () => {
    const issues = issuesOf(parseManifest('{"package": "demo",\n "tasks": }', "json"));
    expect(issues).toHaveLength(1);
    expect(issues[0]?.path).toBe("$");
    expect(issues[0]?.message).toMatch(/^JSON: /);
  });

  it("a byte order mark before JSON is accepted", () => {
    expect(parseManifest('\uFEFF{"package":"demo"}', "json").ok).toBe(true);
  });

  it("an empty YAML document is rejected as not a mapping", () => {
    expect(issuesOf(parseManifest("", "yaml"))).toEqual([
      { path: "$", message: expect.stringMatching(/must be a mapping/) as unknown },
    ]);
  });

  it("issue paths quote names that cannot follow a dot", () => {
    expect(
      issuesOf(parseManifest('{"package":"demo","tasks":{"a.b":{"run":["true"]}}}', "json"))[0]
        ?.path,
    ).toBe('tasks["a.b"]');
  });

  it("manifestError carries every issue as details under invalid_manifest", () => {
    const issues = issuesOf(parseManifest("package: Demo\nextra: 1\n", "yaml"));
    const error = manifestError(issues);
    expect(isQlrError(error, "invalid_manifest")).toBe(true);
    expect(error.details).toEqual(issues);
    expect(error.message).toBe("invalid manifest: extra: unknown field (and 1 more problem)");
  });
});
