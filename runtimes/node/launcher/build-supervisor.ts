import { fileURLToPath } from "node:url";

/** The supervisor's TypeScript entry; scripts/build.mjs bundles it to dist/supervisor.mjs. */
export const SUPERVISOR_ENTRY_PATH = fileURLToPath(new URL("./supervisor.ts", import.meta.url));

/**
 * Bundles the supervisor into one self-contained ESM file. esbuild is a build-time tool, so
 * it is imported lazily: the runtime bundle never loads it.
 */
export async function buildSupervisor(outFile: string): Promise<string> {
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
  return outFile;
}
