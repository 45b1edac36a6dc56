// Builds the distributable: the migrations module, the `qlr` bundle and the supervisor bundle.
// Dependencies stay external (resolved from node_modules at run time); the supervisor is fully
// self-contained because it must start fast and outlive the runtime.
import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { generateAll } from "./gen-migrations.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "dist");
mkdirSync(dist, { recursive: true });
generateAll();

/** What every Node bundle shares: ESM for Node 20, written to memory and then moved in place. */
const NODE_BUNDLE = {
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  legalComments: "none",
  logLevel: "warning",
  write: false,
};

/**
 * Replaces each output with a rename, in the given order, so a process starting a file while
 * another build runs (tests build in parallel) never loads a half-written one.
 */
function writeInPlace(outputFiles, isExecutable) {
  for (const file of outputFiles) {
    const temp = `${file.path}.tmp-${process.pid}`;
    writeFileSync(temp, file.contents);
    if (isExecutable(file.path)) chmodSync(temp, 0o755);
    renameSync(temp, file.path);
  }
}

/** Bundles one entry into one file. */
async function bundle(entry, outfile, options) {
  const result = await build({ ...NODE_BUNDLE, entryPoints: [entry], outfile, ...options });
  writeInPlace(result.outputFiles, (path) => path.endsWith(".mjs"));
}

/**
 * The CLI is split (esbuild `splitting`): every `import()` in the sources (the PGlite and pg
 * stores, the remote worker) becomes its own chunk beside `qlr.mjs`, loaded only when that
 * path runs. Unsplit, esbuild inlines a dynamically imported module and hoists its package
 * imports to the top of the bundle, so `qlr serve` on a device loaded `pg` and PGlite at start
 * (≈ 3–5 MiB RSS) without ever using them. Chunks stay in `dist/` itself, because code that
 * finds `supervisor.mjs` and the dashboard relative to `import.meta.url` may land in a chunk.
 * Chunk names carry a content hash and are written before the entry, so a process starting
 * `qlr.mjs` during a build finds every chunk the entry it loads names.
 */
async function bundleSplit(entry, name, options) {
  const result = await build({
    ...NODE_BUNDLE,
    entryPoints: { [name]: entry },
    outdir: dist,
    outExtension: { ".js": ".mjs" },
    chunkNames: "chunk-[hash]",
    splitting: true,
    ...options,
  });
  const entryPath = join(dist, `${name}.mjs`);
  writeInPlace(
    [
      ...result.outputFiles.filter((file) => file.path !== entryPath),
      ...result.outputFiles.filter((file) => file.path === entryPath),
    ],
    (path) => path === entryPath,
  );
}

await bundleSplit(join(root, "runtimes/node/main.ts"), "qlr", {
  packages: "external",
  banner: { js: "#!/usr/bin/env node" },
});
await bundle(join(root, "runtimes/node/launcher/supervisor.ts"), join(dist, "supervisor.mjs"), {});

/**
 * The native task spawner beside the supervisor (what buildSpawner in build-supervisor.ts does,
 * with the same flags). Without a C compiler: one warning, no binary, and the supervisor starts
 * tasks with Node's spawn, so `dist/` still works wherever it is copied.
 */
function buildSpawner(outFile) {
  const temp = `${outFile}.tmp-${process.pid}`;
  const flags = ["-O2", "-Wall", "-Wextra", "-Werror", "-std=c11", "-D_GNU_SOURCE"];
  try {
    execFileSync("cc", [...flags, "-o", temp, join(root, "runtimes/node/launcher/spawner.c")], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    chmodSync(temp, 0o755);
    renameSync(temp, outFile);
  } catch (error) {
    rmSync(temp, { force: true });
    const reason = error.code === "ENOENT" ? "no C compiler (cc)" : String(error).split("\n")[0];
    console.warn(`qlr: qlr-spawner not built (${reason}); the supervisor will use Node's spawn`);
  }
}
buildSpawner(join(dist, "qlr-spawner"));

// The browser pages (dashboard served by `qlr serve`, static simulation page): dist/browser/.
await import("./build-browser.mjs");
await import("./build-worker.mjs"); // The Cloudflare Worker bundle: dist/worker/ (wrangler deploy --dry-run, offline).
