// Bundles the Cloudflare Worker (runtimes/worker/index.ts, per wrangler.toml) into
// dist/worker/ exactly as `wrangler deploy` would upload it, without uploading: offline, no
// account needed. `npm run build` calls this after the Node bundles; alone:
// `node scripts/build-worker.mjs`.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const outdir = join(root, "dist/worker");
const require = createRequire(import.meta.url);
const wranglerPackage = require.resolve("wrangler/package.json");
const wranglerBin = join(
  dirname(wranglerPackage),
  JSON.parse(readFileSync(wranglerPackage, "utf8")).bin.wrangler,
);

// Build into a private staging folder and swap it in with one rename, so a reader (a test that
// copies the bundle while another test rebuilds) never sees a half-written dist/worker.
const staging = `${outdir}.staging-${process.pid}`;
rmSync(staging, { recursive: true, force: true });
const result = spawnSync(
  process.execPath,
  [wranglerBin, "deploy", "--dry-run", "--outdir", staging],
  {
    cwd: root,
    stdio: ["ignore", "pipe", "inherit"],
    encoding: "utf8",
    env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
  },
);
if (result.status !== 0) {
  process.stdout.write(result.stdout ?? "");
  rmSync(staging, { recursive: true, force: true });
  throw new Error(`wrangler deploy --dry-run failed with status ${result.status ?? result.signal}`);
}
const previous = `${outdir}.previous-${process.pid}`;
mkdirSync(dirname(outdir), { recursive: true });
if (existsSync(outdir)) renameSync(outdir, previous);
renameSync(staging, outdir);
rmSync(previous, { recursive: true, force: true });
const bytes = statSync(join(outdir, "index.js")).size;
process.stdout.write(
  `dist/worker/index.js: ${(bytes / 1024).toFixed(1)} KiB (${(result.stdout.match(/Total Upload: [^\n]*/) ?? ["size unknown"])[0]})\n`,
);
