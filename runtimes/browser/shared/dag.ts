/// <reference lib="dom" />
import { s } from "./dom.ts";
import { statusInfo, withStatusTone } from "./status.ts";

/**
 * The DAG of a run drawn as SVG: layers from `needs` (a step sits one layer right of its
 * deepest need), order inside a layer by a few barycentre sweeps to keep edges short, edges
 * from each need to its step, nodes coloured by status and labelled with the status word.
 */

export interface DagStep {
  readonly name: string;
  readonly task?: string;
  readonly needs: readonly string[];
  readonly status: string;
  readonly attemptCount?: number;
}

export interface DagLayout {
  /** Step names per layer, left to right, each layer ordered top to bottom. */
  readonly layers: readonly (readonly string[])[];
  readonly position: ReadonlyMap<string, { readonly layer: number; readonly row: number }>;
}

export function layoutDag(steps: readonly DagStep[]): DagLayout {
  const byName = new Map(steps.map((step) => [step.name, step]));
  const layerOf = new Map<string, number>();
  const visiting = new Set<string>();
  const depth = (name: string): number => {
    const known = layerOf.get(name);
    if (known !== undefined) return known;
    if (visiting.has(name)) return 0; // a cycle cannot come from a valid manifest; draw it flat
    visiting.add(name);
    const needs = (byName.get(name)?.needs ?? []).filter((need) => byName.has(need));
    const layer = needs.length === 0 ? 0 : 1 + Math.max(...needs.map(depth));
    visiting.delete(name);
    layerOf.set(name, layer);
    return layer;
  };
  const layers: string[][] = [];
  for (const step of steps) {
    const layer = depth(step.name);
    while (layers.length <= layer) layers.push([]);
    layers[layer]?.push(step.name);
  }
  // Barycentre sweeps: order each layer by the mean row of its neighbours in the layer before
  // (down) or after (up). Declaration order breaks ties, so the drawing is stable.
  const declared = new Map(steps.map((step, index) => [step.name, index]));
  const successors = new Map<string, string[]>();
  for (const step of steps)
    for (const need of step.needs)
      if (byName.has(need)) successors.set(need, [...(successors.get(need) ?? []), step.name]);
  const rowOf = (): Map<string, number> =>
    new Map(layers.flatMap((layer) => layer.map((name, row) => [name, row] as const)));
  const sortBy = (layer: string[], neighbours: (name: string) => readonly string[]): void => {
    const rows = rowOf();
    const key = (name: string): number => {
      const around = neighbours(name)
        .map((other) => rows.get(other))
        .filter((row): row is number => row !== undefined);
      return around.length === 0
        ? (rows.get(name) ?? 0)
        : around.reduce((sum, row) => sum + row, 0) / around.length;
    };
    const keys = new Map(layer.map((name) => [name, key(name)]));
    layer.sort(
      (a, b) =>
        (keys.get(a) ?? 0) - (keys.get(b) ?? 0) || (declared.get(a) ?? 0) - (declared.get(b) ?? 0),
    );
  };
  for (let sweep = 0; sweep < 4; sweep += 1) {
    for (const layer of layers.slice(1)) sortBy(layer, (name) => byName.get(name)?.needs ?? []);
    for (const layer of layers.slice(0, -1).reverse())
      sortBy(layer, (name) => successors.get(name) ?? []);
  }
  const position = new Map<string, { layer: number; row: number }>();
  layers.forEach((layer, layerIndex) =>
    layer.forEach((name, row) => position.set(name, { layer: layerIndex, row })),
  );
  return { layers, position };
}

export const NODE_WIDTH = 150;
export const NODE_HEIGHT = 58;
const GAP_X = 54;
const GAP_Y = 18;
const MARGIN = 10;
let svgCounter = 0;

function truncate(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

export interface DagOptions {
  /** An accessible name for the drawing. */
  readonly label: string;
  /** Makes every node a link (focusable, opens the step). */
  readonly href?: (name: string) => string;
  readonly selected?: string | null;
  /**
   * The drawing shrinks with its frame down to this share of its natural size, and scrolls
   * beyond it, so step names stay readable on a phone. Absent: it shrinks without limit.
   */
  readonly minScale?: number;
}

export function renderDag(steps: readonly DagStep[], options: DagOptions): SVGSVGElement {
  const { layers, position } = layoutDag(steps);
  const tallest = Math.max(1, ...layers.map((layer) => layer.length));
  const width = MARGIN * 2 + layers.length * NODE_WIDTH + Math.max(0, layers.length - 1) * GAP_X;
  const height = MARGIN * 2 + tallest * NODE_HEIGHT + (tallest - 1) * GAP_Y;
  // Each layer is centred vertically, so a single step between two wide layers sits in the middle.
  const at = (name: string): { x: number; y: number } => {
    const place = position.get(name) ?? { layer: 0, row: 0 };
    const count = layers[place.layer]?.length ?? 1;
    const offset = ((tallest - count) * (NODE_HEIGHT + GAP_Y)) / 2;
    return {
      x: MARGIN + place.layer * (NODE_WIDTH + GAP_X),
      y: MARGIN + offset + place.row * (NODE_HEIGHT + GAP_Y),
    };
  };
  svgCounter += 1;
  const arrowId = `dag-arrow-${svgCounter}`;
  const byName = new Map(steps.map((step) => [step.name, step]));
  const edges = steps.flatMap((step) =>
    step.needs
      .filter((need) => byName.has(need))
      .map((need) => {
        const from = at(need);
        const to = at(step.name);
        const x1 = from.x + NODE_WIDTH;
        const y1 = from.y + NODE_HEIGHT / 2;
        const x2 = to.x - 2;
        const y2 = to.y + NODE_HEIGHT / 2;
        const mid = (x1 + x2) / 2;
        const done = byName.get(need)?.status === "succeeded";
        return s("path", {
          class: `dag-edge${done ? " done" : ""}`,
          d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`,
          "marker-end": `url(#${arrowId})`,
          "data-from": need,
          "data-to": step.name,
        });
      }),
  );
  const nodes = steps.map((step) => {
    const { x, y } = at(step.name);
    const info = statusInfo(step.status);
    const attempts = step.attemptCount ?? 0;
    const title = `${step.name}${step.task === undefined ? "" : ` (task ${step.task})`}: ${step.status}${attempts > 0 ? `, ${attempts} attempt${attempts === 1 ? "" : "s"}` : ""}${step.needs.length > 0 ? `; needs ${step.needs.join(", ")}` : ""}`;
    const group = withStatusTone(
      s(
        "g",
        {
          class: `dag-node${options.selected === step.name ? " selected" : ""}`,
          "data-step": step.name,
          "data-status": step.status,
          transform: `translate(${x} ${y})`,
        },
        s("title", {}, title),
        s("rect", { width: NODE_WIDTH, height: NODE_HEIGHT, rx: 8, ry: 8 }),
        s("rect", { class: "dag-stripe", width: 6, height: NODE_HEIGHT, rx: 3, ry: 3 }),
        s("text", { class: "dag-name", x: 16, y: 23 }, truncate(step.name, 16)),
        s(
          "text",
          { class: "dag-status", x: 16, y: 43 },
          `${info.glyph} ${step.status}${attempts > 1 ? `  ×${attempts}` : ""}`,
        ),
      ),
      step.status,
    );
    if (options.href === undefined) return group;
    return s(
      "a",
      {
        href: options.href(step.name),
        class: "dag-link",
        "data-key": `dag-${step.name}`,
        "aria-label": title,
      },
      group,
    );
  });
  const svg = s(
    "svg",
    {
      class: "dag",
      viewBox: `0 0 ${width} ${height}`,
      width,
      height,
      role: "group",
      "aria-label": options.label,
      "data-steps": steps.length,
    },
    s(
      "defs",
      {},
      s(
        "marker",
        {
          id: arrowId,
          viewBox: "0 0 10 10",
          refX: 9,
          refY: 5,
          markerWidth: 7,
          markerHeight: 7,
          orient: "auto-start-reverse",
        },
        s("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "dag-arrow" }),
      ),
    ),
    s("g", { class: "dag-edges" }, edges),
    s("g", { class: "dag-nodes" }, nodes),
  );
  // Set through the CSSOM, which a style-src 'self' policy allows (a style attribute it would not).
  if (options.minScale !== undefined)
    svg.style.minWidth = `${Math.round(width * options.minScale)}px`;
  return svg;
}
