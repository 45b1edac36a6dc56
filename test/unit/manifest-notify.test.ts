import { describe, expect, it } from "vitest";
import { parseManifest } from "../../src/manifest/index.ts";
import { manifestDigest } from "../../src/packages.ts";

function issuesOf(text: string): { path: string; message: string }[] {
  const result = parseManifest(text, "yaml");
  if (result.ok) throw new Error("expected the manifest to be refused");
  return result.issues;
}

describe("notify: in the manifest", () => {
  it("reads one notifier or a list on tasks, workflows and schedules", () => {
    const result = parseManifest(
      `package: p
tasks:
  t: { run: [echo], notify: { webhook: "http://127.0.0.1:9/hook", secret: "0123456789abcdef" } }
workflows:
  w: { steps: { a: { task: t } }, notify: [ { command: [logger, failed] }, { webhook: "https://example.com/x" } ] }
schedules:
  s: { cron: "0 3 * * *", workflow: w, notify: { command: ["true"] } }
`,
      "yaml",
    );
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.manifest.tasks[0]?.notify).toEqual([
      { kind: "webhook", url: "http://127.0.0.1:9/hook", secret: "0123456789abcdef" },
    ]);
    expect(result.manifest.workflows[0]?.notify).toEqual([
      { kind: "command", argv: ["logger", "failed"] },
      { kind: "webhook", url: "https://example.com/x", secret: null },
    ]);
    expect(result.manifest.schedules[0]?.notify).toEqual([{ kind: "command", argv: ["true"] }]);
  });

  it("leaves a manifest without notify exactly as before (same digest as without the field)", () => {
    const result = parseManifest("package: p\ntasks:\n  t: { run: [echo] }\n", "yaml");
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect("notify" in (result.manifest.tasks[0] ?? {})).toBe(false);
    expect(manifestDigest(result.manifest)).toBe(manifestDigest({ ...result.manifest }));
  });

  // Each case: the value of a task's notify, where the issue is under tasks.t.notify, and what it says.
  it.each([
    ["5", "", "a notifier"],
    ["[]", "", "at least one"],
    ["{}", "[0].webhook", "is required"],
    ['{ webhook: "ftp://x/y" }', "[0].webhook", "http(s) URL"],
    ['{ webhook: "not a url" }', "[0].webhook", "absolute"],
    ['{ webhook: "https://u:p@x/y" }', "[0].webhook", "user or password"],
    ['{ webhook: "https://x/y", secret: short }', "[0].secret", "at least 16"],
    ['{ command: [a], secret: "0123456789abcdef" }', "[0].secret", "only to a webhook"],
    ['{ command: [a], webhook: "https://x/y" }', "[0].command", "not both"],
    ["{ command: [] }", "[0].command", "program"],
    ['{ webhook: "https://x/y", headers: 1 }', "[0].headers", "unknown field"],
    [`[${Array.from({ length: 5 }, () => "{ command: [a] }").join(", ")}]`, "", "at most 4"],
  ])("refuses notify: %s with a clear issue", (notify, pathUnderNotify, message) => {
    const issues = issuesOf(`package: p\ntasks:\n  t: { run: [echo], notify: ${notify} }\n`);
    const path = `tasks.t.notify${pathUnderNotify}`;
    expect(
      issues.some((issue) => issue.path === path && issue.message.includes(message)),
      JSON.stringify(issues),
    ).toBe(true);
  });
});
