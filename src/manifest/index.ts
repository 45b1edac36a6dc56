/** The manifest module: parse, validate and normalize a package manifest (DESIGN.md §6). */
export * from "./limits.ts";
export {
  formatDurationMs,
  parseDurationMs,
  tryParseDurationMs,
  type DurationParseResult,
} from "./duration.ts";
export {
  compareNames,
  findWorkflowProblems,
  formatCycle,
  topologicalOrder,
  type DagStep,
  type WorkflowProblem,
  type WorkflowStepInput,
} from "./dag.ts";
export {
  cronProblem,
  ENV_NAME_PATTERN,
  formatIssuePath,
  isKnownTimeZone,
  ManifestSchema,
  SHELL_PATH,
  type ManifestDocument,
  type ManifestInput,
} from "./schema.ts";
export { manifestError, parseManifest, validateManifest } from "./parse.ts";
export type * from "./types.ts";
