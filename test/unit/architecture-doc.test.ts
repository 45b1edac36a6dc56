import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { STAGE_ORDER } from "../../src/coordinator.ts";
import { MAX_ADMISSION_PAGE } from "../../src/admission.ts";
import { PROFILES, type ProfileName } from "../../src/profiles.ts";
import {
  ATTEMPT_TRANSITIONS,
  ORDINARY_RUN_TRANSITIONS,
  STEP_TRANSITIONS,
  WORKFLOW_RUN_TRANSITIONS,
  type TransitionTable,
} from "../../src/state-machines.ts";

/**
 * docs/ARCHITECTURE.md shows the state machines and the cycle budgets as tables. This test
 * parses them out of the page and compares them with the tables the code runs on, so the page
 * cannot drift from src/ without failing the build.
 */

const doc = readFileSync(join(import.meta.dirname, "..", "..", "docs", "ARCHITECTURE.md"), "utf8");
const lines = doc.split("\n");

/** The rows of the first Markdown table after `heading`, as arrays of trimmed cells, header and separator dropped. */
function tableAfter(heading: string): string[][] {
  const start = lines.findIndex((line) => line.trim() === heading);
  if (start < 0) throw new Error(`docs/ARCHITECTURE.md has no heading ${JSON.stringify(heading)}`);
  const first = lines.findIndex((line, index) => index > start && line.trim().startsWith("|"));
  const rows: string[][] = [];
  for (
    let index = first;
    index < lines.length && (lines[index] ?? "").trim().startsWith("|");
    index += 1
  ) {
    rows.push(
      (lines[index] ?? "")
        .trim()
        .replace(/^\||\|$/g, "")
        .split("|")
        .map((cell) => cell.trim()),
    );
  }
  return rows.slice(2);
}

function unquote(cell: string): string {
  return cell.replace(/`/g, "").trim();
}

/** A transition table parsed from the page: `from` → sorted allowed targets ("—" means none). */
function parsedMachine(heading: string): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [from = "", to = ""] of tableAfter(heading)) {
    const key = unquote(from);
    expect(out[key], `${heading}: row ${key} appears twice`).toBeUndefined();
    out[key] = to.trim() === "—" ? [] : to.split(",").map(unquote).sort();
  }
  return out;
}

function codeMachine<S extends string>(table: TransitionTable<S>): Record<string, string[]> {
  return Object.fromEntries(
    Object.entries<readonly S[]>(table).map(([from, to]) => [from, [...to].sort()]),
  );
}

describe("docs/ARCHITECTURE.md", () => {
  it("the ordinary run table equals ORDINARY_RUN_TRANSITIONS", () => {
    expect(parsedMachine("### Ordinary run")).toEqual(codeMachine(ORDINARY_RUN_TRANSITIONS));
  });

  it("the workflow run table equals WORKFLOW_RUN_TRANSITIONS", () => {
    expect(parsedMachine("### Workflow run")).toEqual(codeMachine(WORKFLOW_RUN_TRANSITIONS));
  });

  it("the step run table equals STEP_TRANSITIONS", () => {
    expect(parsedMachine("### Step run")).toEqual(codeMachine(STEP_TRANSITIONS));
  });

  it("the run attempt table equals ATTEMPT_TRANSITIONS", () => {
    expect(parsedMachine("### Run attempt")).toEqual(codeMachine(ATTEMPT_TRANSITIONS));
  });

  it("the budget table equals the profiles, stage by stage, in the cycle's order", () => {
    const rows = tableAfter("## 3. The tick: one cadence, one bounded cycle");
    const names: ProfileName[] = ["edge", "standalone", "cluster"];
    const budget = (name: ProfileName, stage: string): string => {
      const profile = PROFILES[name];
      switch (stage) {
        case "dispatch":
          return String(profile.dispatch);
        case "tick interval (ms)":
          return String(profile.tickIntervalMs);
        case "execution_control":
          return `${profile.executionControl.pageSize}×${profile.executionControl.pages}`;
        default: {
          const entry =
            profile[
              stage as
                "cancellation" | "schedules" | "ordinary" | "frontier" | "admission" | "purge"
            ];
          return `${entry.pageSize}×${entry.pages}`;
        }
      }
    };
    expect(rows.map((row) => row[0])).toEqual([...STAGE_ORDER, "tick interval (ms)"]);
    for (const [stage = "", ...cells] of rows)
      expect(cells, stage).toEqual(names.map((name) => budget(name, stage)));
    expect(doc).toContain(`\`MAX_ADMISSION_PAGE\` (${MAX_ADMISSION_PAGE})`);
  });

  it("the numbered stage list follows STAGE_ORDER", () => {
    const listed = lines
      .map((line) => /^\d\. `([a-z_]+)`/.exec(line)?.[1])
      .filter((name): name is string => name !== undefined);
    expect(listed).toEqual([...STAGE_ORDER]);
  });
  it("every test the rule table names exists: the file, and an it/test with exactly that title in it", () => {
    const rows = tableAfter("## 16. The design records, rule by rule");
    expect(rows.length).toBeGreaterThan(20);
    const root = join(import.meta.dirname, "..", "..");
    const missing: string[] = [];
    let cited = 0;
    for (const [rule = "", , tests = ""] of rows) {
      const entries = tests
        .split("<br>")
        .map((entry) => entry.trim())
        .filter((entry) => entry.length > 0);
      expect(entries.length, `rule ${rule} names no test`).toBeGreaterThan(0);
      for (const entry of entries) {
        const match = /^`([^`]+)` › (.+)$/.exec(entry);
        if (match === null) {
          missing.push(`${rule}: ${JSON.stringify(entry)} is not \`file\` › title`);
          continue;
        }
        const [, file = "", title = ""] = match;
        const path = join(root, file);
        if (!existsSync(path)) {
          missing.push(`${rule}: ${file} does not exist`);
          continue;
        }
        const source = readFileSync(path, "utf8");
        const quoted = JSON.stringify(title);
        // The formatter may break the line after `it(`: allow any whitespace before the title.
        const escaped = quoted.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
        if (!new RegExp(`\\b(?:it|test)\\(\\s*${escaped}`).test(source))
          missing.push(`${rule}: ${file} has no it/test titled ${quoted}`);
        cited += 1;
      }
    }
    expect(missing).toEqual([]);
    expect(cited).toBeGreaterThan(30);
  });
  it("every folder and file the layout table names exists", () => {
    const rows = tableAfter("### Layout");
    expect(rows.length).toBeGreaterThan(15);
    const root = join(import.meta.dirname, "..", "..");
    const missing: string[] = [];
    for (const [folderCell = "", what = ""] of rows) {
      const folder = folderCell.replace(/`/g, "");
      if (!existsSync(join(root, folder))) missing.push(folder);
      for (const [, name = ""] of what.matchAll(/`([\w./-]+(?:\.(?:ts|mjs)|\/))`/g)) {
        if (!existsSync(join(root, folder, name))) missing.push(`${folder}${name}`);
      }
    }
    expect(missing).toEqual([]);
  });
});
