#!/usr/bin/env node
/**
 * `npm run bench` / `node bench/run.mjs`: bundles the TypeScript bench entries with esbuild
 * (platform node, ESM, packages external, code splitting so each child loads only the store
 * it measures) into node_modules/.cache/qlr-bench/dist-<pid>/, then hands over to the bundled
 * orchestrator, which runs every bench in its own child Node process and writes
 * bench/results/latest.json and latest.md.
 *
 * Environment (see docs/PERFORMANCE.md): QLR_BENCH_QUICK=1 for a ~1-minute run,
 * QLR_BENCH_ONLY=admission,profile,bytes,throughput,memory,serve,peers,scaleout,workerd,soak,launcher (soak and launcher only when named), QLR_BENCH_STORES=sqljs-memory,...,
 * QLR_BENCH_DATABASE_URL for an existing PostgreSQL server, QLR_BENCH_PROFILE=0 to skip the
 * CPU profile, QLR_BENCH_DATA_DIR for where the sql.js file stores live,
 * QLR_BENCH_CHILD_NODE_FLAGS for Node flags of every bench child (`--cpu-prof --cpu-prof-dir=…`).
 */
import { build } from "esbuild";
import { mkdirSync, readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = dirname(dirname(fileURLToPath(import.meta.url)));
// One directory per run: two benches at once (two checkouts sharing one node_modules, or two
// runs in one checkout) must not rebuild each other's children in the middle of a measurement.
// Inside node_modules so that the bundles' bare specifiers resolve from the repository's packages.
const cacheDir = join(root, "node_modules", ".cache", "qlr-bench");
const outdir = join(cacheDir, `dist-${process.pid}`);
mkdirSync(cacheDir, { recursive: true });
// Directories of earlier runs whose process is gone (a killed run leaves its own behind).
for (const name of readdirSync(cacheDir, { withFileTypes: true }).flatMap((entry) =>
  entry.isDirectory() ? [entry.name] : [],
)) {
  const pid = /^dist-(\d+)$/.exec(name)?.[1];
  if (name !== "dist" && (pid === undefined || isAlive(Number(pid)))) continue;
  rmSync(join(cacheDir, name), { recursive: true, force: true });
}

function isAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return error.code === "EPERM";
  }
}
// Every bench/*.ts file is an entry: the orchestrator, the children it spawns, and the benches
// run on their own (built alongside at no cost), so a new bench needs no second list here.
const entries = readdirSync(join(root, "bench"))
  .filter((file) => file.endsWith(".ts"))
  .map((file) => file.slice(0, -".ts".length));

rmSync(outdir, { recursive: true, force: true });
await build({
  entryPoints: entries.map((name) => join(root, "bench", `${name}.ts`)),
  outdir,
  bundle: true,
  splitting: true,
  platform: "node",
  format: "esm",
  target: "node20",
  packages: "external",
  outExtension: { ".js": ".mjs" },
  sourcemap: true,
  logLevel: "warning",
});

try {
  const { main } = await import(pathToFileURL(join(outdir, "orchestrator.mjs")).href);
  process.exitCode = await main({ root, bundleDir: outdir });
} finally {
  rmSync(outdir, { recursive: true, force: true });
}
