import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * The dashboard's imports run one way (docs/ARCHITECTURE.md, runtimes/browser): each file
 * imports only files of its own layer or of a layer named before it, and nothing imports in a
 * loop. The refresh loop reaches the views and the shell as arguments, never as an import back
 * up; this test keeps a new import from closing the circle again.
 */

const dashboard = join(import.meta.dirname, "..", "..", "runtimes", "browser", "dashboard");

/** The layers, lowest first, as docs/ARCHITECTURE.md names them; a folder is one layer. */
const LAYERS = [
  "router.ts",
  "state.ts",
  "page.ts",
  "live-log.ts",
  "views/",
  "shell.ts",
  "actions.ts",
  "refresh.ts",
  "main.ts",
] as const;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? sourceFiles(path) : path.endsWith(".ts") ? [path] : [];
  });
}

function layerOf(file: string): number {
  return LAYERS.findIndex((layer) =>
    layer.endsWith("/") ? file.startsWith(layer) : file === layer,
  );
}

/** The dashboard files each file imports (type-only imports too), as paths inside the folder. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const path of sourceFiles(dashboard)) {
    const text = readFileSync(path, "utf8");
    const targets = [...text.matchAll(/(?:\bfrom|^import)\s+["'](\.[^"']+)["']/gm)]
      .map((match) => relative(dashboard, resolve(dirname(path), match[1] ?? "")))
      .filter((target) => !target.startsWith(".."));
    graph.set(relative(dashboard, path), targets);
  }
  return graph;
}

describe("the dashboard's imports run one way", () => {
  const graph = importGraph();

  it("every file stands in a layer and imports only its own layer or lower ones", () => {
    expect(graph.size).toBeGreaterThan(LAYERS.length);
    const wrong: string[] = [];
    for (const [file, targets] of graph) {
      const layer = layerOf(file);
      if (layer < 0) wrong.push(`${file}: in no layer; add it to LAYERS and the doc`);
      for (const target of targets)
        if (layerOf(target) > layer) wrong.push(`${file} -> ${target}: imports a higher layer`);
    }
    expect(wrong).toEqual([]);
  });

  it("no files import each other in a loop", () => {
    const done = new Set<string>();
    const loops: string[] = [];
    // Bounded: each file is entered once (`done`), and a path is at most the folder's files long.
    const visit = (file: string, path: readonly string[]): void => {
      const at = path.indexOf(file);
      if (at >= 0) {
        loops.push([...path.slice(at), file].join(" -> "));
        return;
      }
      if (done.has(file)) return;
      for (const target of graph.get(file) ?? []) visit(target, [...path, file]);
      done.add(file);
    };
    for (const file of graph.keys()) visit(file, []);
    expect(loops).toEqual([]);
  });
});
