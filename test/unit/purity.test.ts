import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { build } from "esbuild";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const srcDir = join(root, "src");

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? sourceFiles(path) : path.endsWith(".ts") ? [path] : [];
  });
}

/** Each banned construct with the replacement the core uses instead. */
const BANNED: readonly { pattern: RegExp; use: string }[] = [
  {
    pattern: /from\s+["'](node:[^"']+|fs|path|os|child_process|crypto)["']/,
    use: "a port implemented in runtimes/ or storage/",
  },
  { pattern: /from\s+["'](\.\.\/)+(storage|runtimes)\//, use: "a port declared in src/ports.ts" },
  { pattern: /\bDate\.now\s*\(/, use: "nowMs passed in (Clock port)" },
  { pattern: /new\s+Date\s*\(\s*\)/, use: "nowMs passed in (Clock port)" },
  { pattern: /\bMath\.random\s*\(/, use: "an injected seeded source" },
  { pattern: /\brandomUUID\s*\(/, use: "the IdSource port or derived ids" },
  {
    pattern: /\b(setTimeout|setInterval|setImmediate)\s*\(/,
    use: "the cadence tick driven from outside",
  },
  { pattern: /\bfetch\s*\(/, use: "a port" },
  { pattern: /\bprocess\./, use: "configuration passed in" },
];

describe("the core is pure", () => {
  it("src/ imports no platform module, storage or runtime, and reads no ambient clock, randomness, timer or network", () => {
    const violations: string[] = [];
    for (const file of sourceFiles(srcDir)) {
      const lines = readFileSync(file, "utf8").split("\n");
      lines.forEach((line, index) => {
        const code = line.replace(/\/\/.*$/, "").replace(/^\s*\*.*$/, "");
        for (const { pattern, use } of BANNED) {
          if (pattern.test(code))
            violations.push(`${relative(root, file)}:${index + 1}: ${line.trim()}  → use ${use}`);
        }
      });
    }
    expect(violations).toEqual([]);
  });

  it("src/ bundles for platform neutral and the bundle runs: digests and ids are the golden ones", async () => {
    const result = await build({
      stdin: {
        contents: `
          import { digestOf, derivedId } from "./src/digest.ts";
          import { workflowAttemptId } from "./src/admission.ts";
          import { Coordinator } from "./src/coordinator.ts";
          export const out = { digest: digestOf({ b: 1, a: [true, null] }), id: derivedId("evt", ["r", 1]), attempt: workflowAttemptId("run-1", "stp:1", 1), coordinator: typeof Coordinator };
        `,
        resolveDir: root,
        loader: "ts",
      },
      bundle: true,
      platform: "neutral",
      format: "esm",
      write: false,
      mainFields: ["module", "main"],
      logLevel: "silent",
    });
    const code = result.outputFiles[0]!.text;
    expect(code).not.toMatch(/require\(["']node:/);
    const module = (await import(
      `data:text/javascript;base64,${Buffer.from(code).toString("base64")}`
    )) as { out: Record<string, string> };
    expect(module.out.coordinator).toBe("function");
    expect(module.out.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(module.out.attempt).toMatch(/^wta:[0-9a-f]{32}$/);
  });
});
