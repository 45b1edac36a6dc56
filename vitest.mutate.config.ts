import { configDefaults, defineConfig } from "vitest/config";

/**
 * The fast tests alone (the `unit` project of vitest.config.ts, as one flat config) for
 * mutation testing: `npm run mutate` (stryker.config.mjs) runs them against each mutant of
 * the core's rule files. Kept apart from vitest.config.ts because Stryker drives one config
 * without projects. QLR_MUTATE_TESTS (comma-separated paths) narrows it to one file's tests.
 */
export default defineConfig({
  test: {
    // scripts/mutate.mjs names the tests written for the file under mutation; alone, every one.
    include: process.env.QLR_MUTATE_TESTS?.split(",") ?? ["test/unit/**/*.test.ts"],
    exclude: [...configDefaults.exclude],
    // Instrumented code on a loaded machine runs several times slower than `npm run test:unit`.
    testTimeout: 120_000,
    retry: 0,
  },
});
