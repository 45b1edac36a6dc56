import { isAbsolute } from "node:path";
import { QlrError } from "../../../src/errors.ts";
import type { CompletionReceipt } from "./receipt.ts";
import { SUPERVISOR_SPEC_MAX_BYTES, type SupervisorSpec } from "./supervisor-protocol.ts";
import type { TaskAccount } from "./task-user.ts";
import type { UserTaskFiles } from "./user-task-files.ts";

/** What a launch is asked to run, its limits and its checks. */

export interface LaunchSpec {
  /** Portable identity, e.g. `wta:<32 hex>`; it names the journal, receipt and log files. */
  readonly attemptId: string;
  /** Executed directly, no shell, unless argv itself is ["/bin/sh", "-c", …]. */
  readonly argv: readonly string[];
  /** Merged over `minimalBaseEnv()`; see there for why the runtime's own env is not passed. */
  readonly env: Readonly<Record<string, string>>;
  /** Absolute; null runs the task in a directory of its own, `<stateDir>/work/<attemptId>/`. */
  readonly cwd: string | null;
  /**
   * The user to run the task as (name, uid or uid:gid; needs a root runtime); null or absent:
   * the runtime's own user.
   */
  readonly user?: string | null;
  /**
   * With `user`: the task's `$QLR_NEEDS`/`$QLR_OUTPUT` folder (`userTaskEnvironment` in
   * runtimes/node/task-env.ts builds it), placed after the journal and given to the task's
   * user; the supervisor reads the output from there. Null or absent: none is placed.
   */
  readonly userTaskFiles?: UserTaskFiles | null;
  /** Cap per stream: stdout and stderr each keep at most this many bytes plus one marker line. */
  readonly logMaxBytes: number;
  /**
   * The attempt's timeout: the supervisor stops the task by itself this long after the
   * journal's startedAtMs when nobody else has (the runtime is down, or never learned the
   * handle). Null or absent: only the runtime's stop ends it.
   */
  readonly timeoutMs?: number | null;
}

export const DEFAULT_LOG_MAX_BYTES = 1024 * 1024;
export const LOG_MAX_BYTES_LIMIT = 1024 * 1024 * 1024;
const ARGV_MAX_ENTRIES = 4096;
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/**
 * The environment every task starts from: only PATH, HOME and LANG, copied from the runtime.
 * The runtime's own environment holds its secrets (API tokens, database URLs, NODE_OPTIONS);
 * a user script must see only what its task definition gives it.
 */
export function minimalBaseEnv(source: NodeJS.ProcessEnv = process.env): Record<string, string> {
  return {
    PATH: source.PATH ?? DEFAULT_PATH,
    HOME: source.HOME ?? "/",
    LANG: source.LANG ?? "C.UTF-8",
  };
}

/** Thrown by launch when the task could not be started; its receipt is already durable. */
export class SpawnFailedError extends Error {
  readonly code = "spawn_failed";
  readonly receipt: CompletionReceipt;

  constructor(receipt: CompletionReceipt) {
    super(
      `attempt ${receipt.attemptId} did not start: ${receipt.spawnError ?? "unknown spawn error"}`,
    );
    this.name = "SpawnFailedError";
    this.receipt = receipt;
  }
}

/** Errors cross realms, so the check is by name and code, not instanceof. */
export function isSpawnFailedError(value: unknown): value is SpawnFailedError {
  if (typeof value !== "object" || value === null) return false;
  const candidate = value as { name?: unknown; code?: unknown };
  return candidate.name === "SpawnFailedError" && candidate.code === "spawn_failed";
}

export function invalidSpec(path: string, message: string): QlrError {
  return new QlrError("invalid_request", `launch spec ${path}: ${message}`, {
    details: [{ path, message }],
  });
}

export function validateLaunchSpec(spec: LaunchSpec): void {
  if (!Array.isArray(spec.argv) || spec.argv.length === 0 || spec.argv.length > ARGV_MAX_ENTRIES)
    throw invalidSpec("argv", `must hold 1 to ${ARGV_MAX_ENTRIES} strings`);
  spec.argv.forEach((item, index) => {
    if (typeof item !== "string" || item.includes("\0"))
      throw invalidSpec(`argv[${index}]`, "must be a string without NUL");
  });
  if (spec.argv[0] === "") throw invalidSpec("argv[0]", "must name a program");
  for (const [name, value] of Object.entries(spec.env)) {
    if (name === "" || name.includes("=") || name.includes("\0"))
      throw invalidSpec(`env.${name}`, "a variable name must be non-empty, without '=' or NUL");
    if (typeof value !== "string" || value.includes("\0"))
      throw invalidSpec(`env.${name}`, "must be a string without NUL");
  }
  if (
    spec.cwd !== null &&
    (typeof spec.cwd !== "string" || !isAbsolute(spec.cwd) || spec.cwd.includes("\0"))
  )
    throw invalidSpec("cwd", "must be an absolute path or null");
  if (
    !Number.isSafeInteger(spec.logMaxBytes) ||
    spec.logMaxBytes < 1 ||
    spec.logMaxBytes > LOG_MAX_BYTES_LIMIT
  )
    throw invalidSpec("logMaxBytes", `must be an integer from 1 to ${LOG_MAX_BYTES_LIMIT}`);
  if (
    spec.timeoutMs !== undefined &&
    spec.timeoutMs !== null &&
    (!Number.isSafeInteger(spec.timeoutMs) || spec.timeoutMs < 1)
  )
    throw invalidSpec("timeoutMs", "must be a positive integer or null");
  if (
    spec.userTaskFiles !== undefined &&
    spec.userTaskFiles !== null &&
    (spec.user === undefined || spec.user === null)
  )
    throw invalidSpec("userTaskFiles", "is only for a task run as another user");
}

/** Where and as whom a launch runs, as the launcher resolved it before the journal. */
export interface LaunchPlacement {
  /** The task's account, the reason it cannot be used, or null for the runtime's own user. */
  readonly account: TaskAccount | string | null;
  /** The directory of its own (`spec.cwd` null), or null when the spec names one. */
  readonly ownWorkDir: string | null;
  readonly graceMs: number;
}

/**
 * What the supervisor is asked to start for `spec`: the environment over `minimalBaseEnv()`
 * (a task run as another user gets that user's home, or its work dir, not the runtime's), the
 * directory, the ids and the deadline. Refused when it would not fit in one protocol message.
 */
export function supervisorSpecOf(spec: LaunchSpec, placement: LaunchPlacement): SupervisorSpec {
  const { ownWorkDir, graceMs } = placement;
  const account = typeof placement.account === "string" ? null : placement.account;
  const taskFiles = spec.userTaskFiles ?? null;
  const supervisorSpec: SupervisorSpec = {
    attemptId: spec.attemptId,
    argv: [...spec.argv],
    env: {
      ...minimalBaseEnv(),
      ...(account !== null ? { HOME: account.home ?? ownWorkDir ?? spec.cwd ?? "/" } : {}),
      ...spec.env,
    },
    cwd: spec.cwd ?? ownWorkDir ?? "/",
    logMaxBytes: spec.logMaxBytes,
    uid: account?.uid ?? null,
    gid: account?.gid ?? null,
    timeoutMs: spec.timeoutMs ?? null,
    graceMs,
    // Only when there is one: a launch without it is the message it always was.
    ...(taskFiles === null ? {} : { taskFilesDir: taskFiles.dir }),
  };
  if (Buffer.byteLength(JSON.stringify(supervisorSpec), "utf8") > SUPERVISOR_SPEC_MAX_BYTES)
    throw invalidSpec("argv", `argv and env together exceed ${SUPERVISOR_SPEC_MAX_BYTES} bytes`);
  return supervisorSpec;
}
