/**
 * Reads a V8 `.cpuprofile` (node --cpu-prof) and names where the time goes: self time per
 * function, and inclusive time for named cost centres (a sample counts once for a centre when
 * any frame on its stack belongs to it). Optionally only the samples under one function (the
 * timed operation) are considered.
 */
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

interface CallFrame {
  readonly functionName: string;
  readonly url: string;
  /** 0-based. */
  readonly lineNumber: number;
  /** 0-based. */
  readonly columnNumber: number;
}

interface ProfileNode {
  readonly id: number;
  readonly callFrame: CallFrame;
  readonly children?: readonly number[];
}

interface CpuProfile {
  readonly nodes: readonly ProfileNode[];
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

export interface CostCentre {
  readonly name: string;
  /** Matches one frame. */
  readonly match: (frame: CallFrame) => boolean;
  /** Count only the sampled (innermost) frame: self time. Builtins such as JSON.parse have no frame of their own and show as their caller's self time. */
  readonly selfOnly?: boolean;
}

export interface ProfileSummary {
  /** Time under the scope function (or all sampled time), ms. */
  readonly scopeMs: number;
  readonly topSelf: readonly {
    readonly name: string;
    readonly ms: number;
    readonly share: number;
  }[];
  readonly centres: readonly {
    readonly name: string;
    readonly ms: number;
    readonly share: number;
  }[];
}

const BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/** Per generated line, the segments [generated column, source index] of a source map (v3). */
type LineSegments = readonly (readonly [number, number])[];

interface SourceMap {
  readonly sources: readonly string[];
  readonly lines: readonly LineSegments[];
}

function decodeMappings(mappings: string): LineSegments[] {
  const lines: LineSegments[] = [];
  let sourceIndex = 0;
  for (const lineText of mappings.split(";")) {
    const segments: [number, number][] = [];
    let column = 0;
    for (const segment of lineText.split(",")) {
      if (segment === "") continue;
      const values: number[] = [];
      let value = 0;
      let shift = 0;
      for (const char of segment) {
        const digit = BASE64.indexOf(char);
        value += (digit & 31) << shift;
        if ((digit & 32) !== 0) {
          shift += 5;
        } else {
          values.push(value & 1 ? -(value >>> 1) : value >>> 1);
          value = 0;
          shift = 0;
        }
      }
      column += values[0] ?? 0;
      if (values.length >= 4) sourceIndex += values[1] ?? 0;
      segments.push([column, sourceIndex]);
    }
    lines.push(segments);
  }
  return lines;
}

/** Maps bundled frames back to their source file through the bundle's `.map`, when there is one. */
class SourceResolver {
  private readonly maps = new Map<string, SourceMap | null>();

  source(frame: CallFrame): string | null {
    if (!frame.url.startsWith("file://")) return null;
    let map = this.maps.get(frame.url);
    if (map === undefined) {
      map = null;
      const path = `${fileURLToPath(frame.url)}.map`;
      if (existsSync(path)) {
        const raw = JSON.parse(readFileSync(path, "utf8")) as {
          sources: string[];
          mappings: string;
        };
        map = { sources: raw.sources, lines: decodeMappings(raw.mappings) };
      }
      this.maps.set(frame.url, map);
    }
    if (map === null) return null;
    const segments = map.lines[frame.lineNumber];
    if (segments === undefined) return null;
    let found: number | undefined;
    for (const [column, sourceIndex] of segments) {
      if (column > frame.columnNumber) break;
      found = sourceIndex;
    }
    const source = found === undefined ? segments[0]?.[1] : found;
    if (source === undefined) return null;
    return (map.sources[source] ?? "").replace(/^(\.\.\/)+/, "");
  }
}

function frameLabel(frame: CallFrame, resolver: SourceResolver): string {
  const name = frame.functionName === "" ? "(anonymous)" : frame.functionName;
  const url = frame.url;
  if (url === "") return `${name} [native]`;
  if (url.startsWith("wasm://")) return `${name} [wasm]`;
  if (url.startsWith("node:")) return `${name} [${url}]`;
  const source = resolver.source(frame);
  if (source !== null) {
    const module = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(source)?.[1];
    return `${name} [${module ?? source}]`;
  }
  const module = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1];
  if (module !== undefined && !url.includes(".cache/qlr-bench")) return `${name} [${module}]`;
  return name;
}

export function summarizeCpuProfile(
  path: string,
  centres: readonly CostCentre[],
  scopeFunction?: string,
  top = 15,
): ProfileSummary {
  const profile = JSON.parse(readFileSync(path, "utf8")) as CpuProfile;
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const node of profile.nodes) {
    byId.set(node.id, node);
    for (const child of node.children ?? []) parent.set(child, node.id);
  }
  const resolver = new SourceResolver();
  const self = new Map<string, number>();
  const centreTime = new Map<string, number>();
  let scopeUs = 0;
  for (let index = 0; index < profile.samples.length; index += 1) {
    const leafId = profile.samples[index];
    const delta = profile.timeDeltas[index] ?? 0;
    if (leafId === undefined) continue;
    const stack: CallFrame[] = [];
    // Bounded by the depth of the profile tree.
    for (let id: number | undefined = leafId; id !== undefined; id = parent.get(id)) {
      const node = byId.get(id);
      if (node !== undefined) stack.push(node.callFrame);
    }
    if (scopeFunction !== undefined && !stack.some((frame) => frame.functionName === scopeFunction))
      continue;
    // The profiler's own stop request is not part of the measured work.
    if (stack.some((frame) => frame.url === "node:inspector")) continue;
    scopeUs += delta;
    const leaf = stack[0];
    if (leaf !== undefined) {
      const label = frameLabel(leaf, resolver);
      self.set(label, (self.get(label) ?? 0) + delta);
    }
    for (const centre of centres) {
      const hit =
        centre.selfOnly === true
          ? leaf !== undefined && centre.match(leaf)
          : stack.some(centre.match);
      if (hit) centreTime.set(centre.name, (centreTime.get(centre.name) ?? 0) + delta);
    }
  }
  const share = (us: number): number =>
    scopeUs === 0 ? 0 : Math.round((us / scopeUs) * 1000) / 10;
  const ms = (us: number): number => Math.round(us / 10) / 100;
  return {
    scopeMs: ms(scopeUs),
    topSelf: [...self.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, us]) => ({ name, ms: ms(us), share: share(us) })),
    centres: centres.map((centre) => {
      const us = centreTime.get(centre.name) ?? 0;
      return { name: centre.name, ms: ms(us), share: share(us) };
    }),
  };
}
