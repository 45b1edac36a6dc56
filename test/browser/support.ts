/**
 * The page tests' harness: Chromium through playwright-core (the binary found by
 * test/support/chromium-setup.ts, the flags of DESIGN.md §8 and a fresh user-data dir per
 * launch), a tiny static file server bound to 127.0.0.1, screenshots, bounded waits and /proc
 * checks.
 *
 * Screenshots are test artifacts in a temporary folder (`QLR_ARTIFACTS_DIR` to choose it). The
 * README's pictures in docs/screenshots are written only by `npm run screenshots`, which sets
 * `QLR_UPDATE_SCREENSHOTS=1`: a plain test run changes no tracked file.
 */
import { existsSync } from "node:fs";
import { copyFile, mkdir, mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { inject } from "vitest";
// The type-only import ties this file to the `ProvidedContext` declaration it relies on.
import type {} from "../support/chromium-setup.ts";

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const CHROMIUM_FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
export const RESULTS_DIR =
  process.env.QLR_ARTIFACTS_DIR ?? join(tmpdir(), "qlr-test-artifacts", "browser");
export const SCREENSHOTS_DIR = join(REPO_ROOT, "docs", "screenshots");

export interface Browser {
  readonly context: BrowserContext;
  /** Uncaught page errors and console errors of every page opened in the context. */
  readonly errors: string[];
  newPage(viewport?: { width: number; height: number }): Promise<Page>;
  close(): Promise<void>;
}

export async function launchBrowser(): Promise<Browser> {
  const executablePath = inject("chromiumPath");
  const userDataDir = await mkdtemp(join(tmpdir(), "qlr-chromium-"));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    env: { ...process.env, ...inject("chromiumEnv") },
    headless: true,
    args: CHROMIUM_FLAGS,
    viewport: { width: 1280, height: 900 },
    timeout: 60_000,
  });
  context.setDefaultTimeout(20_000);
  const errors: string[] = [];
  const watch = (page: Page): void => {
    page.on("pageerror", (error) => errors.push(`pageerror: ${error.message}`));
    page.on("console", (message) => {
      if (message.type() === "error") errors.push(`console: ${message.text()}`);
    });
  };
  context.on("page", watch);
  return {
    context,
    errors,
    async newPage(viewport) {
      const page = await context.newPage();
      if (viewport !== undefined) await page.setViewportSize(viewport);
      return page;
    },
    async close() {
      await context.close().catch(() => undefined);
      await rm(userDataDir, { recursive: true, force: true });
    },
  };
}

const CONTENT_TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".wasm": "application/wasm",
  ".data": "application/octet-stream",
};

export interface StaticServer {
  readonly url: string;
  close(): Promise<void>;
}

/** Serves the files directly inside `dir` (no subfolders, no dot files) on 127.0.0.1. */
export async function serveStatic(dir: string): Promise<StaticServer> {
  const names = new Set(await readdir(dir));
  const server: Server = createServer((request, response) => {
    const path = new URL(request.url ?? "/", "http://127.0.0.1").pathname;
    const name = path === "/" ? "index.html" : decodeURIComponent(path.slice(1));
    const extension = /\.[a-z]+$/.exec(name)?.[0] ?? "";
    const type = CONTENT_TYPES[extension];
    if (
      !/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name) ||
      !names.has(name) ||
      type === undefined ||
      request.method !== "GET"
    ) {
      response.writeHead(404, { "content-type": "text/plain" }).end("not found");
      return;
    }
    readFile(join(dir, name)).then(
      (body) =>
        response.writeHead(200, { "content-type": type, "cache-control": "no-store" }).end(body),
      () => response.writeHead(500).end(),
    );
  });
  await new Promise<void>((resolveListen) => server.listen(0, "127.0.0.1", resolveListen));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolveClose) => {
        server.closeAllConnections();
        server.close(() => resolveClose());
      }),
  };
}

/** Saves a screenshot as a test artifact and, for `npm run screenshots`, the README's copy. */
export async function screenshot(
  page: Page,
  name: string,
  options: { fullPage?: boolean; docs?: boolean } = {},
): Promise<string> {
  await mkdir(RESULTS_DIR, { recursive: true });
  const file = join(RESULTS_DIR, `${name}.png`);
  await page.screenshot({ path: file, fullPage: options.fullPage ?? true, animations: "disabled" });
  if (options.docs === true && process.env.QLR_UPDATE_SCREENSHOTS === "1") {
    await mkdir(SCREENSHOTS_DIR, { recursive: true });
    await copyFile(file, join(SCREENSHOTS_DIR, `${name}.png`));
  }
  return file;
}

/** True while /proc/<pid> exists. */
export function procExists(pid: number): boolean {
  return existsSync(`/proc/${pid}`);
}

/**
 * The pids whose command line or environment contains `marker` (a unique scratch path or
 * tag): exactly the processes a test started, directly or through the runtime.
 */
export async function pidsMarkedBy(marker: string): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (pid === process.pid) continue;
    for (const file of ["cmdline", "environ"]) {
      try {
        const text = await readFile(`/proc/${pid}/${file}`, "latin1");
        if (text.includes(marker)) {
          found.push(pid);
          break;
        }
      } catch {
        // Gone, or not ours to read.
      }
    }
  }
  return found;
}
