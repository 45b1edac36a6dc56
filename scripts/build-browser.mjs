// Builds the two browser pages into dist/browser/ (run alone, or imported by scripts/build.mjs):
// - dist/browser/dashboard/: index.html and assets/dashboard.{js,css}, served by `qlr serve`
//   at / and /assets/ (runtimes/node/serve-dashboard.ts holds the allow-list).
// - dist/browser/simulation/: a static page (index.html, simulation.{js,css}, chunks) with
//   sql.js's sql-wasm.wasm and PGlite's pglite.wasm, pglite.data and initdb.wasm beside the
//   bundle, where both libraries look for them (relative to import.meta.url).
// Everything is bundled: no CDN, no runtime dependency outside the folder.
// `node scripts/build-browser.mjs --out DIR` builds into DIR instead (tests use a private copy).
// Both pages share one frame (runtimes/browser/shared/page.html: the head, the skip link, the top
// bar, the main landmark); each page's page.html holds only its own parts, as <template>s the
// build puts into the frame's slots.
// Each page is built into a staging folder and swapped into place, so a runtime serving the
// old build never sees half of a new one.
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const isMain =
  process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url);
const args = isMain ? parseArgs({ options: { out: { type: "string" } } }).values : {};
const out = resolve(args.out ?? join(root, "dist", "browser"));
const require = createRequire(import.meta.url);
const pages = join(root, "runtimes", "browser");

// PGlite imports Node modules behind runtime checks that are false in a browser; they stay
// unresolved imports in a chunk the page never loads.
const NODE_ONLY = [
  "fs",
  "fs/promises",
  "path",
  "url",
  "crypto",
  "stream",
  "stream/promises",
  "zlib",
  "module",
  "os",
  "child_process",
  "worker_threads",
  "util",
  "node:*",
];

const common = {
  bundle: true,
  platform: "browser",
  format: "esm",
  target: ["chrome110", "firefox115", "safari16"],
  minify: true,
  sourcemap: false,
  legalComments: "none",
  logLevel: "warning",
  conditions: ["browser"],
};

/** What differs between the two pages' frames, besides their page.html parts. */
const PAGE_FACTS = {
  dashboard: {
    title: "qlr dashboard",
    subtitle: "qlr dashboard",
    assets: "assets/dashboard",
    skipTo: "#main",
  },
  simulation: {
    title: "qlr deterministic simulation",
    subtitle: "deterministic simulation, in this page",
    assets: "simulation",
    skipTo: "#",
  },
};

/** Writes a page's index.html: the shared frame with the page's facts and parts in its slots. */
function writePage(name, file) {
  const frame = readFileSync(join(pages, "shared", "page.html"), "utf8");
  const parts = readFileSync(join(pages, name, "page.html"), "utf8");
  const slots = { topbar: "", main: "", ...PAGE_FACTS[name] };
  for (const [, slot, content] of parts.matchAll(/<template id="([a-z]+)">([\s\S]*?)<\/template>/g))
    slots[slot] = content.trim();
  const html = frame.replace(/\{\{([a-zA-Z]+)\}\}/g, (_, slot) => {
    if (slots[slot] === undefined) throw new Error(`${name}: no value for {{${slot}}}`);
    return slots[slot];
  });
  writeFileSync(file, html);
}

function swapIntoPlace(staging, target) {
  const old = `${target}.old-${process.pid}`;
  if (existsSync(target)) renameSync(target, old);
  renameSync(staging, target);
  rmSync(old, { recursive: true, force: true });
}

async function buildBrowser() {
  mkdirSync(out, { recursive: true });
  const dashboard = join(out, `.dashboard-${process.pid}`);
  rmSync(dashboard, { recursive: true, force: true });
  mkdirSync(join(dashboard, "assets"), { recursive: true });
  await build({
    ...common,
    entryPoints: { dashboard: join(pages, "dashboard", "main.ts") },
    outdir: join(dashboard, "assets"),
    // The dashboard talks HTTP only: any node module pulled in is a mistake, so none is external.
  });
  await build({
    ...common,
    entryPoints: { dashboard: join(pages, "dashboard", "dashboard.css") },
    outdir: join(dashboard, "assets"),
  });
  writePage("dashboard", join(dashboard, "index.html"));

  const simulation = join(out, `.simulation-${process.pid}`);
  rmSync(simulation, { recursive: true, force: true });
  mkdirSync(simulation, { recursive: true });
  await build({
    ...common,
    entryPoints: { simulation: join(pages, "simulation", "main.ts") },
    outdir: simulation,
    splitting: true,
    chunkNames: "chunk-[hash]",
    external: NODE_ONLY,
  });
  await build({
    ...common,
    entryPoints: { simulation: join(pages, "simulation", "simulation.css") },
    outdir: simulation,
  });
  writePage("simulation", join(simulation, "index.html"));
  copyFileSync(require.resolve("sql.js/dist/sql-wasm.wasm"), join(simulation, "sql-wasm.wasm"));
  const pglite = dirname(require.resolve("@electric-sql/pglite"));
  for (const file of ["pglite.wasm", "pglite.data", "initdb.wasm"])
    copyFileSync(join(pglite, file), join(simulation, file));

  swapIntoPlace(dashboard, join(out, "dashboard"));
  swapIntoPlace(simulation, join(out, "simulation"));
}

await buildBrowser();
