/**
 * Serves the built dashboard (Node side; `qlr serve` mounts it through createApp's `mount`
 * hook, before auth): `/` and `/index.html` answer the page, `/assets/dashboard.{js,css}` its
 * bundle. A fixed allow-list maps each URL to one file of the build, so no request path ever
 * reaches the file system and there is nothing to traverse. The page itself holds no secret;
 * every API call it makes still needs the bearer token.
 */
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import type { Hono } from "hono";

interface Asset {
  readonly file: string;
  readonly type: string;
}

const PAGE: Asset = { file: "index.html", type: "text/html; charset=utf-8" };

export const DASHBOARD_ASSETS: Readonly<Record<string, Asset>> = {
  "/": PAGE,
  "/index.html": PAGE,
  "/assets/dashboard.js": { file: "assets/dashboard.js", type: "text/javascript; charset=utf-8" },
  "/assets/dashboard.css": { file: "assets/dashboard.css", type: "text/css; charset=utf-8" },
};

/** Only the page's own script, style and API; no inline code, no framing. */
export const DASHBOARD_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/**
 * Where the build puts the dashboard: `dist/browser/dashboard/` beside the running bundle
 * (`dist/qlr.mjs`); from the sources (tests that start the runtime without bundling) the same
 * folder seen from `runtimes/node/`.
 */
export function defaultDashboardDirs(): string[] {
  const fromSources = new URL(import.meta.url).pathname.endsWith(".ts");
  return [
    fileURLToPath(
      new URL(
        fromSources ? "../../dist/browser/dashboard/" : "./browser/dashboard/",
        import.meta.url,
      ),
    ),
  ];
}

async function readFirst(dirs: readonly string[], file: string): Promise<Buffer | null> {
  for (const dir of dirs) {
    try {
      return await readFile(`${dir.endsWith("/") ? dir : `${dir}/`}${file}`);
    } catch {
      // Not in this folder: try the next one.
    }
  }
  return null;
}

export function mountDashboard(app: Hono, dirs: readonly string[] = defaultDashboardDirs()): void {
  for (const [path, asset] of Object.entries(DASHBOARD_ASSETS)) {
    app.get(path, async (c) => {
      const body = await readFirst(dirs, asset.file);
      if (body === null)
        return c.json(
          {
            error: {
              code: "not_found",
              message: "the dashboard is not built: run `node scripts/build.mjs`",
              details: [],
            },
          },
          404,
        );
      return c.body(new Uint8Array(body), 200, {
        "content-type": asset.type,
        "cache-control": "no-cache",
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        ...(asset === PAGE
          ? { "content-security-policy": DASHBOARD_CSP, "x-frame-options": "DENY" }
          : {}),
      });
    });
  }
  // Any other asset name is unknown: answered here, so it is a 404 and not a token prompt.
  app.get("/assets/*", (c) =>
    c.json({ error: { code: "not_found", message: "no such dashboard asset", details: [] } }, 404),
  );
}
