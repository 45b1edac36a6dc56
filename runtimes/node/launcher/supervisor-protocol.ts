import { createHash, createHmac } from "node:crypto";
import { isPortableId } from "../../../src/identity.ts";
import { timingSafeEqualText } from "../../../src/digest.ts";

/**
 * The resident supervisor of a state directory listens on an abstract Unix socket whose name
 * is derived from the state directory (`supervisorSocketName`). Abstract names vanish with the
 * process that bound them, so a dead supervisor leaves nothing stale behind, and binding the
 * name is the lock that keeps one supervisor per state directory. Everyone in the network
 * namespace can connect to an abstract name, so both sides prove they hold the receipt key
 * before anything else is said: the supervisor sends a challenge, the client answers it with
 * an HMAC and its own challenge, the supervisor answers that one.
 *
 * Messages are JSON, one per line, each at most `SUPERVISOR_MESSAGE_MAX_BYTES`.
 */
export interface SupervisorSpec {
  readonly attemptId: string;
  readonly argv: readonly string[];
  /** The task's complete environment (base env already merged). */
  readonly env: Readonly<Record<string, string>>;
  /** Absolute; the launcher resolves a null cwd before handing the spec over. */
  readonly cwd: string;
  readonly logMaxBytes: number;
  /** The task's uid and gid (set in the child before exec); null: the supervisor's own. */
  readonly uid: number | null;
  readonly gid: number | null;
  /**
   * Milliseconds after the journal's startedAtMs at which the supervisor stops the task by
   * itself when nobody else has (the runtime is down or cannot reach the attempt); null: never.
   */
  readonly timeoutMs: number | null;
  /** Time between SIGTERM and SIGKILL when the supervisor stops the task. */
  readonly graceMs: number;
  /**
   * A task run as another user: the folder of its needs and output (user-task-files.ts). The
   * supervisor takes it back from the task's user when the task has ended, then reads the
   * output from it. Absent: the output is `taskOutputPath(stateDir, attemptId)`.
   */
  readonly taskFilesDir?: string;
  /**
   * `cwd` is the attempt's own work dir (`work/<attemptId>/`, the task declared none): the
   * supervisor creates it (0700, the task user's when there is one) right before the spawn, so
   * the runtime's event loop does not. Sent only to a supervisor that announced
   * `SUPERVISOR_FEATURE_CREATE_CWD`; absent, the directory exists already.
   */
  readonly createCwd?: true;
}

/**
 * What a supervisor announces in its `welcome`, so a runtime of a newer build that adopts a
 * resident supervisor of an older one asks it only for what it does.
 */
export const SUPERVISOR_FEATURE_CREATE_CWD = "create-cwd";
export const SUPERVISOR_FEATURES: readonly string[] = [SUPERVISOR_FEATURE_CREATE_CWD];

export type ClientMessage =
  | { readonly op: "hello"; readonly proof: string; readonly nonce: string }
  | { readonly op: "launch"; readonly spec: SupervisorSpec }
  /** Stop by durable intent: the intent file is already written; the supervisor signals now. */
  | { readonly op: "stop"; readonly attemptId: string }
  /**
   * Has this attempt been (or is it being) spawned? An unknown attempt is answered `never` and
   * refused from then on, so the answer stays true whatever arrives later.
   */
  | { readonly op: "settle"; readonly attemptId: string };

export type SupervisorMessage =
  | { readonly kind: "challenge"; readonly nonce: string }
  | {
      readonly kind: "welcome";
      readonly proof: string;
      readonly pid: number;
      /** Absent from a supervisor built before features were announced: none. */
      readonly features: readonly string[];
    }
  | {
      readonly kind: "started";
      readonly attemptId: string;
      readonly pid: number;
      readonly startTicks: string | null;
    }
  | { readonly kind: "spawn_failed"; readonly attemptId: string; readonly spawnError: string }
  /** Nothing ran and no receipt was written (no journal, no spawn record possible, a refused id). */
  | { readonly kind: "rejected"; readonly attemptId: string; readonly reason: string }
  | { readonly kind: "stopping"; readonly attemptId: string; readonly known: boolean }
  | {
      readonly kind: "settled";
      readonly attemptId: string;
      readonly state: "spawned" | "never";
      /**
       * The task's identity while this supervisor holds it (null before its spawn, after its
       * receipt, or from an older supervisor): a runtime that lost the handle takes it from here.
       */
      readonly pid?: number | null;
      readonly startTicks?: string | null;
    }
  /** A task's receipt is durable (or could not be written): a hint to look, never evidence. */
  | { readonly kind: "exited"; readonly attemptId: string };

/** The supervisor's start-up line on fd 3 to the process that started it. */
export type StartupReport =
  | { readonly kind: "ready"; readonly pid: number }
  | { readonly kind: "busy" }
  | { readonly kind: "failed"; readonly reason: string };

export const SUPERVISOR_STARTUP_FD = 3;
/** Bounds one message (a launch spec: argv plus env) so a runaway manifest cannot balloon the supervisor. */
export const SUPERVISOR_SPEC_MAX_BYTES = 1024 * 1024;
export const SUPERVISOR_MESSAGE_MAX_BYTES = SUPERVISOR_SPEC_MAX_BYTES + 4096;
const NONCE_PATTERN = /^[0-9a-f]{32}$/;
/** More than any build announces: a welcome listing more is malformed. */
const MAX_FEATURES = 64;

/** The abstract socket name of a state directory's supervisor (leading NUL: Linux abstract namespace). */
export function supervisorSocketName(stateDir: string): string {
  return `\0qlr-supervisor-${createHash("sha256").update(stateDir, "utf8").digest("hex").slice(0, 40)}`;
}

export function challengeProof(
  key: Uint8Array,
  role: "client" | "supervisor",
  nonce: string,
): string {
  return createHmac("sha256", key).update(`qlr-supervisor-${role}:${nonce}`, "utf8").digest("hex");
}

export function proofMatches(
  key: Uint8Array,
  role: "client" | "supervisor",
  nonce: string,
  proof: unknown,
): boolean {
  return typeof proof === "string" && timingSafeEqualText(proof, challengeProof(key, role, nonce));
}

export function isNonce(value: unknown): value is string {
  return typeof value === "string" && NONCE_PATTERN.test(value);
}

function isFeatureList(value: unknown): value is string[] {
  return (
    Array.isArray(value) &&
    value.length <= MAX_FEATURES &&
    value.every((member) => typeof member === "string")
  );
}

function isStringRecord(value: unknown): value is Record<string, string> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  return Object.values(value).every((member) => typeof member === "string");
}

/** Returns the spec, or the reason the value is not one. */
export function parseSupervisorSpec(value: unknown): SupervisorSpec | string {
  if (typeof value !== "object" || value === null) return "the launch spec is not a JSON object";
  const spec = value as Record<string, unknown>;
  if (!isPortableId(spec.attemptId)) return "the launch spec has no portable attempt id";
  if (
    !Array.isArray(spec.argv) ||
    spec.argv.length === 0 ||
    !spec.argv.every((item) => typeof item === "string")
  )
    return "the launch spec has no argv";
  if (!isStringRecord(spec.env)) return "the launch spec env is not a string map";
  if (typeof spec.cwd !== "string") return "the launch spec has no cwd";
  if (!Number.isSafeInteger(spec.logMaxBytes) || (spec.logMaxBytes as number) < 1)
    return "the launch spec has no log cap";
  const isId = (member: unknown): boolean =>
    member === null || (Number.isSafeInteger(member) && (member as number) >= 0);
  if (!isId(spec.uid) || !isId(spec.gid) || (spec.uid === null) !== (spec.gid === null))
    return "the launch spec's uid and gid are not both ids or both null";
  if (
    spec.timeoutMs !== null &&
    (!Number.isSafeInteger(spec.timeoutMs) || (spec.timeoutMs as number) < 1)
  )
    return "the launch spec's timeoutMs is not a positive integer or null";
  if (!Number.isSafeInteger(spec.graceMs) || (spec.graceMs as number) < 0)
    return "the launch spec's graceMs is not a non-negative integer";
  if (
    spec.taskFilesDir !== undefined &&
    (typeof spec.taskFilesDir !== "string" ||
      !spec.taskFilesDir.startsWith("/") ||
      spec.uid === null)
  )
    return "the launch spec's taskFilesDir is not an absolute path of a task run as another user";
  if (spec.createCwd !== undefined && spec.createCwd !== true)
    return "the launch spec's createCwd is not true or absent";
  return spec as unknown as SupervisorSpec;
}

export function parseClientMessage(line: string): ClientMessage | string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch {
    return "not JSON";
  }
  if (typeof parsed !== "object" || parsed === null) return "not a JSON object";
  const message = parsed as Record<string, unknown>;
  switch (message.op) {
    case "hello":
      return typeof message.proof === "string" && isNonce(message.nonce)
        ? { op: "hello", proof: message.proof, nonce: message.nonce }
        : "malformed hello";
    case "launch": {
      const spec = parseSupervisorSpec(message.spec);
      return typeof spec === "string" ? spec : { op: "launch", spec };
    }
    case "stop":
    case "settle":
      return isPortableId(message.attemptId)
        ? { op: message.op, attemptId: message.attemptId }
        : `malformed ${message.op}`;
    default:
      return "unknown op";
  }
}

export function parseSupervisorMessage(line: string): SupervisorMessage | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch {
    return null;
  }
  if (typeof parsed !== "object" || parsed === null) return null;
  const message = parsed as Record<string, unknown>;
  if (message.kind === "challenge")
    return isNonce(message.nonce) ? { kind: "challenge", nonce: message.nonce } : null;
  if (message.kind === "welcome") {
    const features: unknown = message.features ?? [];
    return typeof message.proof === "string" &&
      Number.isSafeInteger(message.pid) &&
      isFeatureList(features)
      ? { kind: "welcome", proof: message.proof, pid: message.pid as number, features }
      : null;
  }
  if (!isPortableId(message.attemptId)) return null;
  const attemptId = message.attemptId;
  switch (message.kind) {
    case "started": {
      if (!Number.isSafeInteger(message.pid) || (message.pid as number) <= 0) return null;
      const startTicks =
        typeof message.startTicks === "string" && /^[0-9]+$/.test(message.startTicks)
          ? message.startTicks
          : null;
      return { kind: "started", attemptId, pid: message.pid as number, startTicks };
    }
    case "spawn_failed":
      return typeof message.spawnError === "string"
        ? { kind: "spawn_failed", attemptId, spawnError: message.spawnError }
        : null;
    case "rejected":
      return typeof message.reason === "string"
        ? { kind: "rejected", attemptId, reason: message.reason }
        : null;
    case "stopping":
      return { kind: "stopping", attemptId, known: message.known === true };
    case "settled":
      if (message.state !== "spawned" && message.state !== "never") return null;
      return {
        kind: "settled",
        attemptId,
        state: message.state,
        pid:
          Number.isSafeInteger(message.pid) && (message.pid as number) > 0
            ? (message.pid as number)
            : null,
        startTicks:
          typeof message.startTicks === "string" && /^[0-9]+$/.test(message.startTicks)
            ? message.startTicks
            : null,
      };
    case "exited":
      return { kind: "exited", attemptId };
    default:
      return null;
  }
}

export function parseStartupReport(line: string): StartupReport | null {
  try {
    const parsed = JSON.parse(line) as Record<string, unknown>;
    if (parsed.kind === "ready" && Number.isSafeInteger(parsed.pid))
      return { kind: "ready", pid: parsed.pid as number };
    if (parsed.kind === "busy") return { kind: "busy" };
    if (parsed.kind === "failed" && typeof parsed.reason === "string")
      return { kind: "failed", reason: parsed.reason };
  } catch {
    return null;
  }
  return null;
}
