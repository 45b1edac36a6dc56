/**
 * Reads a V8 `.cpuprofile` (node --cpu-prof) and names where the time goes: self time per
 * function, and inclusive time for named cost centres (a sample counts once for a centre when
 * any frame on its stack belongs to it). Optionally only the samples under one function (the
 * timed operation) are considered.
 */
import { readFileSync } from "node:fs";

interface CallFrame {
  readonly functionName: string;
  readonly url: string;
  readonly lineNumber: number;
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
}

export interface ProfileSummary {
  /** Time under the scope function (or all sampled time), ms. */
  readonly scopeMs: number;
  readonly topSelf: readonly { readonly name: string; readonly ms: number; readonly share: number }[];
  readonly centres: readonly { readonly name: string; readonly ms: number; readonly share: number }[];
}

function frameLabel(frame: CallFrame): string {
  const name = frame.functionName === "" ? "(anonymous)" : frame.functionName;
  const url = frame.url;
  if (url === "") return name;
  const module = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1];
  if (module !== undefined && !url.includes(".cache/qlr-bench")) return `${name} [${module}]`;
  if (url.startsWith("node:")) return `${name} [${url}]`;
  if (url.startsWith("wasm://")) return `${name} [wasm]`;
  return name;
}

export function summarizeCpuProfile(path: string, centres: readonly CostCentre[], scopeFunction?: string, top = 15): ProfileSummary {
  const profile = JSON.parse(readFileSync(path, "utf8")) as CpuProfile;
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const node of profile.nodes) {
    byId.set(node.id, node);
    for (const child of node.children ?? []) parent.set(child, node.id);
  }
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
    if (scopeFunction !== undefined && !stack.some((frame) => frame.functionName === scopeFunction)) continue;
    scopeUs += delta;
    const leaf = stack[0];
    if (leaf !== undefined) {
      const label = frameLabel(leaf);
      self.set(label, (self.get(label) ?? 0) + delta);
    }
    for (const centre of centres) {
      if (stack.some(centre.match)) centreTime.set(centre.name, (centreTime.get(centre.name) ?? 0) + delta);
    }
  }
  const share = (us: number): number => (scopeUs === 0 ? 0 : Math.round((us / scopeUs) * 1000) / 10);
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
