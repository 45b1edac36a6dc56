#!/usr/bin/env node
/**
 * `npm run mutate [src/file.ts ...]`: mutation testing of the core's rule files, one file per
 * Stryker run (a small machine finishes each in minutes and a report per file survives an
 * interrupted pass). Without arguments it runs every file `mutate` lists in
 * stryker.config.mjs. Each file runs against its own list of fast unit tests
 * (TESTS_BY_FILE, handed to vitest.mutate.config.ts as QLR_MUTATE_TESTS): Stryker runs the
 * tests covering a mutant, and the slow whole-coordinator and property tests would cover every
 * mutant of every file. Reports: `.stryker/report/<file>.json` and `.html`; the summary line per
 * file is printed at the end.
 */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The unit tests each rule file is mutated against: the tests written for its rules, plus the
 * tests of its direct callers that drive it through whole lifecycles. Files not listed run the
 * whole unit project.
 */
const TESTS_BY_FILE = {
  "src/aggregate.ts": [
    "test/unit/core-aggregate.test.ts",
    "test/unit/core-execution.test.ts",
    "test/unit/core-admission.test.ts",
    "test/unit/core-cancellation.test.ts",
    "test/unit/core-frontier.test.ts",
  ],
  "src/admission.ts": [
    "test/unit/core-admission.test.ts",
    "test/unit/core-generation-binding.test.ts",
  ],
  "src/execution.ts": [
    "test/unit/core-execution.test.ts",
    "test/unit/core-ordinary.test.ts",
    "test/unit/core-cancellation.test.ts",
    "test/unit/core-leases.test.ts",
  ],
  "src/recovery.ts": ["test/unit/core-recovery.test.ts", "test/unit/core-leases.test.ts"],
  "src/leases.ts": ["test/unit/core-leases.test.ts"],
  "src/lease-service.ts": ["test/unit/lease-service.test.ts"],
  "src/cancellation.ts": ["test/unit/core-cancellation.test.ts"],
  "src/frontier.ts": ["test/unit/core-frontier.test.ts"],
  "src/state-machines.ts": ["test/unit/core-state-machines.test.ts"],
  "src/schedules.ts": ["test/unit/core-schedules.test.ts"],
  "src/canonical-json.ts": ["test/unit/core-identity-digest.test.ts"],
  "storage/sql-store/run-rows-by-version.ts": ["test/unit/run-rows-by-version.test.ts"],
  "storage/sql-store/column-arrays.ts": ["test/unit/column-arrays.test.ts"],
};

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const config = (await import(path.join(root, "stryker.config.mjs"))).default;
const files = process.argv.slice(2).length > 0 ? process.argv.slice(2) : config.mutate;
const summary = [];
for (const file of files) {
  const report = path.basename(file, path.extname(file));
  const result = spawnSync(
    process.execPath,
    [
      path.join(root, "node_modules/@stryker-mutator/core/bin/stryker.js"),
      "run",
      "stryker.config.mjs",
      "--mutate",
      file,
    ],
    {
      cwd: root,
      stdio: "inherit",
      env: {
        ...process.env,
        QLR_MUTATE_REPORT: report,
        ...(TESTS_BY_FILE[file] === undefined
          ? {}
          : { QLR_MUTATE_TESTS: TESTS_BY_FILE[file].join(",") }),
      },
    },
  );
  if (result.status !== 0) {
    summary.push(`${file}: stryker exited with ${result.status ?? result.signal}`);
    continue;
  }
  const json = JSON.parse(
    readFileSync(path.join(root, ".stryker/report", `${report}.json`), "utf8"),
  );
  let killed = 0;
  let survived = 0;
  let other = 0;
  for (const { mutants } of Object.values(json.files)) {
    for (const mutant of mutants) {
      if (mutant.status === "Killed" || mutant.status === "Timeout") killed += 1;
      else if (mutant.status === "Survived" || mutant.status === "NoCoverage") survived += 1;
      else other += 1;
    }
  }
  const total = killed + survived;
  summary.push(
    `${file}: ${killed}/${total} killed (${total === 0 ? "n/a" : ((100 * killed) / total).toFixed(1)} %), ${survived} surviving, ${other} not counted (compile errors, ignored)`,
  );
}
console.log(["", "Mutation score per file:", ...summary].join("\n"));
