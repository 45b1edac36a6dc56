import { configDefaults, defineConfig } from "vitest/config";

/**
 * Two projects, one `npx vitest run`:
 * - `node`: every test under test/ except test/worker, in forked Node processes, with one
 *   PostgreSQL server for the run (test/support/global-setup.ts).
 * - `worker`: test/worker inside workerd through @cloudflare/vitest-pool-workers
 *   (test/worker/vitest.config.ts).
 * One project alone: `npx vitest run --project node` or `--project worker`.
 */
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: "node",
          include: ["test/**/*.test.ts"],
          exclude: [...configDefaults.exclude, "test/worker/**"],
          testTimeout: 30_000,
          hookTimeout: 120_000,
          globalSetup: ["test/support/global-setup.ts"],
          pool: "forks",
        },
      },
      "test/worker/vitest.config.ts",
    ],
  },
});
