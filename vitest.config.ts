import { configDefaults, defineConfig, type TestProjectInlineConfiguration } from "vitest/config";

/**
 * One `npx vitest run` (the README's `npm test`) runs every project; one alone:
 * `npx vitest run --project unit` (seconds), `storage`, `http`, `device`, `sim`, `browser`,
 * `worker`. Only `storage` and `device` start PostgreSQL (test/support/global-setup.ts), and
 * only `browser` finds Chromium (test/support/chromium-setup.ts).
 * - `unit`: the pure core, the manifest, docs and golden fixtures.
 * - `storage`: drivers, the store and lease contracts on sql.js, PGlite and a real PostgreSQL.
 * - `http`: the HTTP API on sql.js and PGlite, in process.
 * - `device`: real processes: the launcher, the device runtime and CLI, remote workers, the
 *   workerd-hosted coordinator driven by a real worker.
 * - `sim`: the seeded simulation (QLR_SIM_SEEDS scales it).
 * - `browser`: the dashboard and the simulation page in Chromium.
 * - `worker`: test/worker inside workerd through @cloudflare/vitest-pool-workers
 *   (test/worker/vitest.config.ts).
 * Node projects run in forked processes. No test retries: a flaky test fails loudly.
 */
const POSTGRES_SETUP = "test/support/global-setup.ts";
const CHROMIUM_SETUP = "test/support/chromium-setup.ts";

function nodeProject(
  name: string,
  include: string[],
  options: { globalSetup?: string[]; exclude?: string[] } = {},
): TestProjectInlineConfiguration {
  return {
    test: {
      name,
      include,
      exclude: [...configDefaults.exclude, ...(options.exclude ?? [])],
      testTimeout: 30_000,
      hookTimeout: 120_000,
      globalSetup: options.globalSetup ?? [],
      pool: "forks",
      retry: 0,
    },
  };
}

export default defineConfig({
  test: {
    projects: [
      nodeProject("unit", ["test/unit/**/*.test.ts"]),
      nodeProject("storage", ["test/storage/**/*.test.ts", "test/leases/lease-contract.test.ts"], {
        globalSetup: [POSTGRES_SETUP],
      }),
      nodeProject("http", ["test/http/**/*.test.ts", "test/leases/worker-routes.test.ts"]),
      nodeProject(
        "device",
        [
          "test/device/**/*.test.ts",
          "test/launcher/**/*.test.ts",
          "test/leases/remote-worker-e2e.test.ts",
          "test/worker-e2e/**/*.test.ts",
        ],
        { globalSetup: [POSTGRES_SETUP] },
      ),
      nodeProject("sim", ["test/sim/**/*.test.ts"]),
      nodeProject("browser", ["test/browser/**/*.test.ts"], { globalSetup: [CHROMIUM_SETUP] }),
      "test/worker/vitest.config.ts",
    ],
  },
});
