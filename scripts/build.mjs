// Builds the distributable: the migrations module, the `qlr` bundle and the supervisor bundle.
// Dependencies stay external (resolved from node_modules at run time); the supervisor is fully
// self-contained because it must start fast and outlive the runtime.
import { chmodSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { generateAll } from "./gen-migrations.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "dist");
mkdirSync(dist, { recursive: true });
generateAll();

await build({
  entryPoints: [join(root, "runtimes/node/main.ts")],
  outfile: join(dist, "qlr.mjs"),
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  packages: "external",
  banner: { js: "#!/usr/bin/env node" },
  legalComments: "none",
  logLevel: "warning",
});
chmodSync(join(dist, "qlr.mjs"), 0o755);

await build({
  entryPoints: [join(root, "runtimes/node/launcher/supervisor.ts")],
  outfile: join(dist, "supervisor.mjs"),
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  legalComments: "none",
  logLevel: "warning",
});

// The browser pages (dashboard served by `qlr serve`, static simulation page): dist/browser/.
await import("./build-browser.mjs");
await import("./build-worker.mjs"); // The Cloudflare Worker bundle: dist/worker/ (wrangler deploy --dry-run, offline).
