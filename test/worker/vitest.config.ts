import { fileURLToPath } from "node:url";
import { cloudflareTest } from "@cloudflare/vitest-pool-workers";
import { defineProject } from "vitest/config";

/**
 * The workerd project: these tests run inside the Workers runtime (Miniflare), with the
 * Worker of wrangler.toml as `main` (same isolate as the tests, so `runInDurableObject` sees
 * the real `CoordinatorObject`). The token is a Miniflare binding here (tests read it from
 * `env.QLR_TOKEN`), so no `.dev.vars` file is needed. The root vitest.config.ts uses this file
 * as its `worker` project; alone: `npx vitest run --config test/worker/vitest.config.ts`.
 * `root` is set twice on purpose: the Vite root resolves `main` and the wrangler config, the
 * test root resolves `include` (a project file's test root is otherwise its own directory).
 */
const root = fileURLToPath(new URL("../..", import.meta.url));

export default defineProject({
  root,
  plugins: [
    cloudflareTest({
      main: "./runtimes/worker/index.ts",
      wrangler: { configPath: "./wrangler.toml" },
      miniflare: {
        bindings: { QLR_TOKEN: "worker-test-token", QLR_WORKER_TOKEN: "worker-lease-test-token" },
      },
    }),
  ],
  test: {
    name: "worker",
    root,
    include: ["test/worker/**/*.test.ts"],
    testTimeout: 30_000,
  },
});
