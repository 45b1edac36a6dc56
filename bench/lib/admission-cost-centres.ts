import type { CostCentre } from "./cpu-profile.ts";

const byName =
  (...names: string[]) =>
  (frame: { functionName: string }): boolean =>
    names.includes(frame.functionName);

/** Where an admission's CPU time can go. Only synchronous functions: an async caller is not on the sampled stack after its first await. */
export const ADMISSION_COST_CENTRES: readonly CostCentre[] = [
  { name: "fdatasync of the journal (syscall)", match: byName("fdatasync", "fdatasyncSync") },
  {
    name: "journal record: encode + crc32 + write(2)",
    match: byName("encodeRecord", "encodeRecordBytes", "crc32Update", "crc32", "writeAll"),
  },
  {
    name: "checkpoint (export + snapshot write + fsync)",
    match: byName("checkpointNow", "checkpointAfterCommit"),
  },
  { name: "SQLite engine (wasm)", match: (frame) => frame.url.startsWith("wasm://") },
  {
    name: "sql.js JS glue (bind, step, get, MEMFS page copies)",
    match: (frame) => frame.url.includes("node_modules/sql.js"),
  },
  { name: "sha256 (@noble/hashes)", match: (frame) => frame.url.includes("@noble/hashes") },
  { name: "canonical JSON", match: byName("canonicalJson") },
  {
    name: "all digests (canonical JSON + sha256 + hex)",
    match: byName("digestOf", "derivedId", "sha256Hex"),
  },
  { name: "verifyPlan (re-digest of the whole plan)", match: byName("verifyPlan") },
  {
    name: "verifyReconciliationReceipt + verifyTaskDefinition",
    match: byName("verifyReconciliationReceipt", "verifyTaskDefinition"),
  },
  { name: "admitTaskAttempt (pure core, all of it)", match: byName("admitTaskAttempt") },
  {
    name: "JSON.parse of stored bodies (self time of the body getters)",
    match: byName(
      "getPlan",
      "getReconciliation",
      "getTaskDefinitionFor",
      "getTaskDefinition",
      "getAdmission",
    ),
    selfOnly: true,
  },
  {
    name: "row mapping (rows.ts toRun/toStep/toAttempt)",
    match: byName("toRun", "toStep", "toAttempt"),
  },
  { name: "garbage collector", match: byName("(garbage collector)") },
];
