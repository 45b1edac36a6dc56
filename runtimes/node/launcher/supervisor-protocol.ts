import { isPortableId } from "../../../src/identity.ts";

/**
 * The supervisor's command line is `<supervisor.mjs> <stateDir> <attemptId>`: nothing secret,
 * since /proc/<pid>/cmdline is world-readable. Everything else (argv, env, the key's path)
 * arrives as one JSON document on its stdin, and the supervisor answers with one JSON line on
 * file descriptor 3, then closes it.
 */
export interface SupervisorSpec {
  readonly attemptId: string;
  readonly argv: readonly string[];
  /** The task's complete environment (base env already merged). */
  readonly env: Readonly<Record<string, string>>;
  /** Absolute; the launcher resolves a null cwd before handing the spec over. */
  readonly cwd: string;
  readonly logMaxBytes: number;
  readonly receiptKeyPath: string;
  /** The task's uid and gid (the supervisor sets them in the child before exec); null: the supervisor's own. */
  readonly uid: number | null;
  readonly gid: number | null;
}

export type SupervisorReport =
  | { readonly kind: "started"; readonly pid: number; readonly startTicks: string | null }
  | { readonly kind: "spawn_failed"; readonly spawnError: string };

export const SUPERVISOR_REPORT_FD = 3;
/** Bounds the spec (argv plus env) so a runaway manifest cannot balloon the supervisor. */
export const SUPERVISOR_SPEC_MAX_BYTES = 1024 * 1024;
export const SUPERVISOR_REPORT_MAX_BYTES = 4096;

function isStringRecord(value: unknown): value is Record<string, string> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  return Object.values(value).every((member) => typeof member === "string");
}

/** Returns the spec, or the reason the text is not one (a runtime that died mid-handover sends a torn document). */
export function parseSupervisorSpec(text: string, expectedAttemptId: string): SupervisorSpec | string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return "the launch spec did not arrive whole (the runtime likely died while handing it over)";
  }
  if (typeof parsed !== "object" || parsed === null) return "the launch spec is not a JSON object";
  const spec = parsed as Record<string, unknown>;
  if (!isPortableId(spec.attemptId) || spec.attemptId !== expectedAttemptId) return "the launch spec names another attempt";
  if (!Array.isArray(spec.argv) || spec.argv.length === 0 || !spec.argv.every((item) => typeof item === "string")) return "the launch spec has no argv";
  if (!isStringRecord(spec.env)) return "the launch spec env is not a string map";
  if (typeof spec.cwd !== "string") return "the launch spec has no cwd";
  if (!Number.isSafeInteger(spec.logMaxBytes) || (spec.logMaxBytes as number) < 1) return "the launch spec has no log cap";
  if (typeof spec.receiptKeyPath !== "string") return "the launch spec has no receipt key path";
  const isId = (value: unknown): boolean => value === null || (Number.isSafeInteger(value) && (value as number) >= 0);
  if (!isId(spec.uid) || !isId(spec.gid) || (spec.uid === null) !== (spec.gid === null)) return "the launch spec's uid and gid are not both ids or both null";
  return spec as unknown as SupervisorSpec;
}

export function parseSupervisorReport(line: string): SupervisorReport | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch {
    return null;
  }
  if (typeof parsed !== "object" || parsed === null) return null;
  const report = parsed as Record<string, unknown>;
  if (report.kind === "started" && Number.isSafeInteger(report.pid) && (report.pid as number) > 0) {
    const startTicks = typeof report.startTicks === "string" && /^[0-9]+$/.test(report.startTicks) ? report.startTicks : null;
    return { kind: "started", pid: report.pid as number, startTicks };
  }
  if (report.kind === "spawn_failed" && typeof report.spawnError === "string") return { kind: "spawn_failed", spawnError: report.spawnError };
  return null;
}
