#!/usr/bin/env node
/**
 * Sums a V8 `.cpuprofile` (from `node --cpu-prof`) by function, self and inclusive, and by
 * file, so two builds' profiles can be compared as tables (docs/PERFORMANCE.md, "Hot spots
 * now"). Usage: `node scripts/cpu-profile-summary.mjs <file.cpuprofile> [rows] [startAfter]`.
 * `startAfter` names a function: samples before the first one whose stack holds it are left
 * out, so a bench child's setup (imports, migrations, run starts) can be cut off at the
 * function that starts the measured part (`driveUntilTerminal` for bench/throughput.ts).
 * Inclusive time counts a function once per sample, however often it recurs in that stack.
 */
import { readFileSync } from "node:fs";

const [file, rowsArgument, startAfter] = process.argv.slice(2);
if (file === undefined) {
  console.error("usage: cpu-profile-summary.mjs <file.cpuprofile> [rows] [startAfter]");
  process.exit(2);
}
const rows = Number(rowsArgument ?? 15);
const profile = JSON.parse(readFileSync(file, "utf8"));
const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
const parents = new Map();
for (const node of profile.nodes)
  for (const child of node.children ?? []) parents.set(child, node.id);

const baseName = (url) => url.replace(/^.*\//, "");
const functionKey = ({ callFrame }) =>
  `${callFrame.functionName || "(anonymous)"} ${baseName(callFrame.url)}:${callFrame.lineNumber + 1}`;
const fileKey = ({ callFrame }) =>
  callFrame.url === "" ? callFrame.functionName : baseName(callFrame.url);

const self = new Map();
const inclusive = new Map();
const byFile = new Map();
const add = (map, key, ms) => map.set(key, (map.get(key) ?? 0) + ms);
let totalMs = 0;
let started = startAfter === undefined;
for (let index = 0; index < profile.samples.length; index += 1) {
  // A sample's time is the gap to the next one.
  const ms = (profile.timeDeltas[index + 1] ?? 0) / 1000;
  const leaf = nodes.get(profile.samples[index]);
  const stack = [];
  for (let node = leaf; node !== undefined; node = nodes.get(parents.get(node.id)))
    stack.push(node);
  if (!started) {
    if (!stack.some((node) => node.callFrame.functionName === startAfter)) continue;
    started = true;
  }
  totalMs += ms;
  add(self, functionKey(leaf), ms);
  add(byFile, fileKey(leaf), ms);
  for (const key of new Set(stack.map(functionKey))) add(inclusive, key, ms);
}

function print(title, map) {
  console.log(`\n${title} (of ${totalMs.toFixed(0)} ms sampled)`);
  const top = [...map]
    .filter(([key]) => !key.startsWith("(root)"))
    .sort((left, right) => right[1] - left[1])
    .slice(0, rows);
  for (const [key, ms] of top)
    console.log(
      `${ms.toFixed(1).padStart(9)} ms ${((100 * ms) / totalMs).toFixed(1).padStart(5)} %  ${key}`,
    );
}
print("self, by function", self);
print("inclusive, by function", inclusive);
print("self, by file", byFile);
