/**
 * Vitest global setup of the browser project: finds a Chromium for playwright-core without any
 * system package, and hands its path to the page tests (`inject("chromiumPath")`).
 *
 * In order:
 * 1. `QLR_CHROMIUM`, when set: that binary (for example Debian's /usr/bin/chromium).
 * 2. On Linux x64: the headless Chromium shipped inside the `@sparticuz/chromium` npm package
 *    (brotli-compressed in the package, ≈ 2.5 s to inflate). It is inflated once per run into a
 *    private temporary folder, deleted in teardown, so parallel test files never race on a
 *    half-written binary and nothing is left behind.
 * 3. /usr/bin/chromium when it exists (other platforms).
 * Otherwise setup fails with what to install.
 */
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { arch, platform, tmpdir } from "node:os";
import path from "node:path";
import type { TestProject } from "vitest/node";

declare module "vitest" {
  export interface ProvidedContext {
    /** The Chromium binary the page tests launch. */
    chromiumPath: string;
    /** Environment additions the binary needs (fonts of the packaged build). */
    chromiumEnv: Record<string, string>;
  }
}

const SYSTEM_CHROMIUM = "/usr/bin/chromium";

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const chosen = process.env.QLR_CHROMIUM;
  if (chosen !== undefined && chosen !== "") {
    if (!existsSync(chosen)) throw new Error(`QLR_CHROMIUM names ${chosen}, which does not exist.`);
    project.provide("chromiumPath", chosen);
    project.provide("chromiumEnv", {});
    return () => Promise.resolve();
  }
  if (platform() === "linux" && arch() === "x64") {
    const folder = await mkdtemp(path.join(tmpdir(), "qlr-chromium-bin-"));
    try {
      const executable = await inflatePackagedChromium(folder);
      project.provide("chromiumPath", executable);
      // The packaged build brings its own fonts; a machine with fontconfig keeps its own.
      project.provide(
        "chromiumEnv",
        existsSync("/etc/fonts/fonts.conf") ? {} : { FONTCONFIG_PATH: path.join(folder, "fonts") },
      );
    } catch (error) {
      await rm(folder, { recursive: true, force: true });
      throw error;
    }
    return () => rm(folder, { recursive: true, force: true });
  }
  if (existsSync(SYSTEM_CHROMIUM)) {
    project.provide("chromiumPath", SYSTEM_CHROMIUM);
    project.provide("chromiumEnv", {});
    return () => Promise.resolve();
  }
  throw new Error(
    `No Chromium for the page tests on ${platform()}-${arch()}: the packaged one is Linux x64 only. Install Chromium and set QLR_CHROMIUM to its path.`,
  );
}

/**
 * `@sparticuz/chromium` inflates into `os.tmpdir()`, which it reads from TMPDIR on each call:
 * pointing TMPDIR at the private folder for the duration of the call puts every file there.
 */
async function inflatePackagedChromium(folder: string): Promise<string> {
  const previous = process.env.TMPDIR;
  process.env.TMPDIR = folder;
  try {
    const { default: Chromium } = await import("@sparticuz/chromium");
    Chromium.setGraphicsMode = false;
    const executable = await Chromium.executablePath();
    if (path.dirname(executable) !== folder)
      throw new Error(`@sparticuz/chromium inflated to ${executable}, outside ${folder}.`);
    return executable;
  } catch (error) {
    throw new Error(
      `The Chromium of @sparticuz/chromium could not be inflated (run npm ci): ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  } finally {
    if (previous === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = previous;
  }
}
