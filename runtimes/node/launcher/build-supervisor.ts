import { execFile } from "node:child_process";
import { chmod, rename, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

/** The supervisor's TypeScript entry; scripts/build.mjs bundles it to dist/supervisor.mjs. */
export const SUPERVISOR_ENTRY_PATH = fileURLToPath(new URL("./supervisor.ts", import.meta.url));
/** The native task spawner's source; compiled to `qlr-spawner` beside the supervisor bundle. */
export const SPAWNER_SOURCE_PATH = fileURLToPath(new URL("./spawner.c", import.meta.url));
/** The compiler flags (scripts/build.mjs uses the same). */
export const SPAWNER_CC_FLAGS = ["-O2", "-Wall", "-Wextra", "-Werror", "-std=c11", "-D_GNU_SOURCE"];

/**
 * Compiles spawner.c to `outFile` with `cc` (written beside it, then renamed in place, mode
 * 0755). Without a C compiler (or when it fails) it prints one warning and returns null: the
 * supervisor then starts tasks with Node's spawn.
 */
export async function buildSpawner(outFile: string): Promise<string | null> {
  const temp = `${outFile}.tmp-${process.pid}`;
  try {
    await promisify(execFile)("cc", [...SPAWNER_CC_FLAGS, "-o", temp, SPAWNER_SOURCE_PATH], {
      timeout: 60_000,
    });
    await chmod(temp, 0o755);
    await rename(temp, outFile);
    return outFile;
  } catch (error) {
    await rm(temp, { force: true });
    const reason =
      (error as { code?: unknown }).code === "ENOENT"
        ? "no C compiler (cc)"
        : String(error).split("\n")[0];
    console.warn(`qlr: qlr-spawner not built (${reason}); the supervisor will use Node's spawn`);
    return null;
  }
}

/**
 * Bundles the supervisor into one self-contained ESM file and, unless `spawner: false`,
 * compiles `qlr-spawner` beside it. esbuild is a build-time tool, so it is imported lazily:
 * the runtime bundle never loads it.
 */
export async function buildSupervisor(
  outFile: string,
  options: { spawner?: boolean } = {},
): Promise<string> {
  const { build } = await import("esbuild");
  await build({
    entryPoints: [SUPERVISOR_ENTRY_PATH],
    outfile: outFile,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    legalComments: "none",
    logLevel: "silent",
  });
  const spawnerPath = join(dirname(outFile), "qlr-spawner");
  if (options.spawner ?? true) await buildSpawner(spawnerPath);
  else await rm(spawnerPath, { force: true });
  return outFile;
}
