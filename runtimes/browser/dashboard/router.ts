/// <reference lib="dom" />
import { RUN_STATUSES, type RunStatus } from "../../../src/model.ts";

/**
 * The dashboard's routes live in the hash (`#/overview`, `#/runs?status=running`, `#/runs/<id>`,
 * `#/runs/<id>/steps/<name>`, `#/packages`), so every view is a link.
 */

export type Route =
  | { readonly view: "overview" }
  | { readonly view: "runs"; readonly status: RunStatus | null }
  | { readonly view: "run"; readonly id: string; readonly step: string | null }
  | { readonly view: "packages" };

function isRunStatus(text: string | null): text is RunStatus {
  return text !== null && (RUN_STATUSES as readonly string[]).includes(text);
}

export function parseRoute(hash: string): Route | null {
  const path = hash.replace(/^#/, "");
  // The dashboard opens on the overview.
  if (path === "" || path === "/") return { view: "overview" };
  if (!path.startsWith("/")) return null;
  const [pathname = "", query = ""] = path.split("?", 2);
  let parts: string[];
  try {
    parts = pathname
      .split("/")
      .filter((part) => part.length > 0)
      .map(decodeURIComponent);
  } catch {
    return null;
  }
  if (parts[0] === "packages") return { view: "packages" };
  if (parts[0] === "overview") return { view: "overview" };
  if (parts[0] === "runs" && parts[1] !== undefined)
    return {
      view: "run",
      id: parts[1],
      step: parts[2] === "steps" && parts[3] !== undefined ? parts[3] : null,
    };
  if (parts[0] === "runs") {
    const status = new URLSearchParams(query).get("status");
    return { view: "runs", status: isRunStatus(status) ? status : null };
  }
  return null;
}

export const runHref = (id: string): string => `#/runs/${encodeURIComponent(id)}`;
export const stepHref = (id: string, step: string): string =>
  `#/runs/${encodeURIComponent(id)}/steps/${encodeURIComponent(step)}`;
