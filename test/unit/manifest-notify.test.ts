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

  it.each([
    ["notify: 5", "tasks.t.notify", "a notifier"],
    ["notify: []", "tasks.t.notify", "at least one"],
    ["notify: {}", "tasks.t.notify[0].webhook", "is required"],
    ['notify: { webhook: "ftp://x/y" }', "tasks.t.notify[0].webhook", "http(s) URL"],
    ['notify: { webhook: "not a url" }', "tasks.t.notify[0].webhook", "absolute"],
    ['notify: { webhook: "https://u:p@x/y" }', "tasks.t.notify[0].webhook", "user or password"],
    [
      'notify: { webhook: "https://x/y", secret: short }',
      "tasks.t.notify[0].secret",
      "at least 16",
    ],
    [
      'notify: { command: [a], secret: "0123456789abcdef" }',
      "tasks.t.notify[0].secret",
      "only to a webhook",
    ],
    ['notify: { command: [a], webhook: "https://x/y" }', "tasks.t.notify[0].command", "not both"],
    ["notify: { command: [] }", "tasks.t.notify[0].command", "program"],
    [
      'notify: { webhook: "https://x/y", headers: 1 }',
      "tasks.t.notify[0].headers",
      "unknown field",
    ],
    [
      "notify: [{ command: [a] }, { command: [a] }, { command: [a] }, { command: [a] }, { command: [a] }]",
      "tasks.t.notify",
      "at most 4",
    ],
  ])("refuses %s with a clear issue", (notify, path, message) => {
    const issues = issuesOf(`package: p\ntasks:\n  t: { run: [echo], ${notify} }\n`);
    expect(
      issues.some((issue) => issue.path === path && issue.message.includes(message)),
      JSON.stringify(issues),
    ).toBe(true);
  });
});
