/**
 * Mutation testing of the core's rules against the fast tests: `npm run mutate` (every rule
 * file, one after another, see scripts/mutate.mjs) or one file:
 * `node scripts/mutate.mjs src/recovery.ts`. Not part of `npm test`: a full pass takes a long
 * while on a small machine. Reports go to the ignored `.stryker/` folder.
 * @type {import("@stryker-mutator/api/core").PartialStrykerOptions}
 */
export default {
  testRunner: "vitest",
  vitest: { configFile: "vitest.mutate.config.ts", related: true },
  plugins: ["@stryker-mutator/vitest-runner"],
  mutate: [
    "src/admission.ts",
    "src/execution.ts",
    "src/recovery.ts",
    "src/leases.ts",
    "src/lease-service.ts",
    "src/cancellation.ts",
    "src/frontier.ts",
    "src/aggregate.ts",
    "src/state-machines.ts",
    "src/schedules.ts",
    "src/canonical-json.ts",
    "storage/sql-store/run-rows-by-version.ts",
    "storage/sql-store/column-arrays.ts",
  ],
  coverageAnalysis: "perTest",
  concurrency: 1,
  timeoutMS: 5_000,
  reporters: ["clear-text", "json", "progress"],
  jsonReporter: { fileName: `.stryker/report/${process.env.QLR_MUTATE_REPORT ?? "mutation"}.json` },
  htmlReporter: { fileName: `.stryker/report/${process.env.QLR_MUTATE_REPORT ?? "mutation"}.html` },
  tempDirName: ".stryker/tmp",
  incremental: false,
  cleanTempDir: true,
  thresholds: { high: 90, low: 80, break: null },
  ignorePatterns: [
    "dist",
    ".qlr",
    "coverage",
    "test-results",
    ".wrangler",
    ".stryker",
    "bench",
    "examples",
    "test/browser",
    "test/worker",
    "test/worker-e2e",
    "test/device",
    "test/launcher",
    "test/http",
    "test/storage",
    "test/sim",
    "test/leases",
    "runtimes/browser/dist",
  ],
};
