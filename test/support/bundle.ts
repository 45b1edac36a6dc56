/**
 * The `qlr` and supervisor bundles a test runs as real processes. Each test file builds them
 * once (`buildBundle` in a `beforeAll`).
 *
 * Why a private bundle and not `dist/`: test files run in parallel workers and other people
 * run builds and tests on the same checkout; rewriting `dist/qlr.mjs` while another test's
 * child is loading it would tear it. `buildBundle` runs esbuild with exactly the options of
 * `scripts/build.mjs` (and the supervisor through `buildSupervisor`, which that script
 * mirrors) into a temporary directory of its own. Its `node_modules` is a symbolic link to the
 * repository's, so the bundle's external packages resolve exactly as they do from `dist/`, and
 * `supervisor.mjs` sits beside `qlr.mjs`, where the launcher looks for it by default.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { buildSupervisor } from "../../runtimes/node/launcher/build-supervisor.ts";

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

export interface Bundle {
  readonly dir: string;
  readonly qlr: string;
  readonly supervisor: string;
  cleanup(): Promise<void>;
}

/** Builds dist-equivalent `qlr.mjs` and `supervisor.mjs` into a private directory (see the header of this file). */
export async function buildBundle(): Promise<Bundle> {
  const { build } = await import("esbuild");
  const dir = await mkdtemp(join(tmpdir(), "qlr-device-build-"));
  await symlink(join(REPO_ROOT, "node_modules"), join(dir, "node_modules"), "dir");
  const qlr = join(dir, "qlr.mjs");
  // The options of scripts/build.mjs, output path aside.
  await build({
    entryPoints: [join(REPO_ROOT, "runtimes/node/main.ts")],
    outfile: qlr,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    packages: "external",
    banner: { js: "#!/usr/bin/env node" },
    legalComments: "none",
    logLevel: "warning",
  });
  // QLR_TEST_SPAWNER=0: no native spawner beside it, so the supervisor uses Node's spawn.
  const supervisor = await buildSupervisor(join(dir, "supervisor.mjs"), {
    spawner: process.env.QLR_TEST_SPAWNER !== "0",
  });
  return { dir, qlr, supervisor, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

/**
 * Runs `scripts/build.mjs`, for the tests that need `dist/` itself: the CLI as shipped, the
 * dashboard's assets, the Worker bundle. The build replaces each file by a rename, so test
 * files that build at the same time never load a half-written one.
 */
export async function buildDist(timeoutMs: number): Promise<void> {
  await promisify(execFile)(process.execPath, [join(REPO_ROOT, "scripts/build.mjs")], {
    cwd: REPO_ROOT,
    timeout: timeoutMs,
  });
}
