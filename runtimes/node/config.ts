import { randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { mkdir, open } from "node:fs/promises";
import { join, resolve } from "node:path";
import { isProfileName, type ProfileName } from "../../src/profiles.ts";
import { tokenProblem } from "../http/auth.ts";
import { parseRetentionPolicy, type RetentionPolicy } from "../../src/retention.ts";
import { isQlrError, errorCode } from "../../src/errors.ts";
import type { StoreKind } from "./open-store.ts";

/** Common options and their environment twins (DESIGN.md §6). Flags win over the environment. */
export interface CommonConfig {
  readonly stateDir: string;
  readonly host: string;
  readonly port: number;
  /** The admin token from --token-file, QLR_TOKEN or --token; null reads (serve: creates) the state dir's. */
  readonly token: string | null;
  /** The worker token from --worker-token-file, QLR_WORKER_TOKEN or --worker-token; null when none. */
  readonly workerToken: string | null;
  readonly profile: ProfileName;
  readonly store: StoreKind;
  readonly databaseUrl: string | null;
  readonly url: string | null;
  readonly json: boolean;
}

export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

type OptionValues = Record<string, string | boolean | string[] | undefined>;

function checkToken(token: string, origin: string): string {
  const problem = tokenProblem(token);
  if (problem !== null) throw new UsageError(`${origin}: the token ${problem}`);
  return token;
}

/**
 * Reads a secret file: a regular file (a symbolic link is not followed) that only its owner
 * may read or write, like receipt.key. A token others can read is refused, not used: it may
 * already be known to every local user.
 */
export async function readSecretFile(path: string, what: string): Promise<string | null> {
  let handle;
  try {
    handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (error) {
    const code = errorCode(error);
    if (code === "ENOENT") return null;
    if (code === "ELOOP")
      throw new UsageError(`${what} ${path} is a symbolic link; give the file itself`);
    throw new UsageError(
      `${what} ${path} cannot be read: ${code ?? (error instanceof Error ? error.message : "unknown error")}`,
    );
  }
  try {
    const stats = await handle.stat();
    if (!stats.isFile()) throw new UsageError(`${what} ${path} is not a regular file`);
    if ((stats.mode & 0o077) !== 0)
      throw new UsageError(
        `${what} ${path} has mode ${(stats.mode & 0o777).toString(8)}; others could read it. Make it readable by its owner only (chmod 600 ${path})`,
      );
    if (stats.size > 4096)
      throw new UsageError(`${what} ${path} is ${stats.size} bytes; a token file holds one token`);
    return (await handle.readFile("utf8")).trim();
  } finally {
    await handle.close();
  }
}

/**
 * One secret from, in order: its file option, its environment variable, its command-line
 * option. The command line comes last and draws a warning: /proc/<pid>/cmdline is readable by
 * every local user, so a token given there is no longer a secret on a shared machine.
 */
async function secretOption(
  values: OptionValues,
  env: NodeJS.ProcessEnv,
  names: { flag: string; fileFlag: string; variable: string },
  warn: (line: string) => void,
): Promise<string | null> {
  const text = (key: string): string | undefined =>
    typeof values[key] === "string" ? values[key] : undefined;
  const file = text(names.fileFlag);
  const flag = text(names.flag);
  if (file !== undefined && flag !== undefined)
    throw new UsageError(`give --${names.flag} or --${names.fileFlag}, not both`);
  if (flag !== undefined)
    warn(
      `warning: --${names.flag} puts the token on the command line, which every local user can read in /proc; use --${names.fileFlag} PATH or ${names.variable} instead`,
    );
  if (file !== undefined) {
    const token = await readSecretFile(resolve(file), `--${names.fileFlag}`);
    if (token === null) throw new UsageError(`--${names.fileFlag} ${file} does not exist`);
    return checkToken(token, `--${names.fileFlag} ${file}`);
  }
  const fromEnv = env[names.variable];
  if (flag === undefined && fromEnv !== undefined && fromEnv !== "")
    return checkToken(fromEnv, names.variable);
  return flag === undefined ? null : checkToken(flag, `--${names.flag}`);
}

export async function commonConfig(
  values: OptionValues,
  env: NodeJS.ProcessEnv,
  warn: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
): Promise<CommonConfig> {
  const text = (key: string): string | undefined => {
    const value = values[key];
    return typeof value === "string" ? value : undefined;
  };
  const portText = text("port") ?? env.QLR_PORT ?? "8787";
  const port = Number(portText);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new UsageError(`--port must be 0–65535, got ${portText}`);
  const profile = text("profile") ?? env.QLR_PROFILE ?? "standalone";
  if (!isProfileName(profile))
    throw new UsageError(`--profile must be edge, standalone or cluster, got ${profile}`);
  const store = text("store") ?? env.QLR_STORE ?? "sqlite";
  if (store !== "sqlite" && store !== "pglite" && store !== "postgres")
    throw new UsageError(`--store must be sqlite, pglite or postgres, got ${store}`);
  const token = await secretOption(
    values,
    env,
    { flag: "token", fileFlag: "token-file", variable: "QLR_TOKEN" },
    warn,
  );
  const workerToken = await secretOption(
    values,
    env,
    { flag: "worker-token", fileFlag: "worker-token-file", variable: "QLR_WORKER_TOKEN" },
    warn,
  );
  if (token !== null && workerToken !== null && token === workerToken)
    throw new UsageError(
      "the worker token must differ from the admin token, or it would open every route",
    );
  return {
    stateDir: resolve(text("state-dir") ?? env.QLR_STATE_DIR ?? ".qlr"),
    host: text("host") ?? env.QLR_HOST ?? "127.0.0.1",
    port,
    token,
    workerToken,
    profile,
    store,
    databaseUrl: text("database-url") ?? env.QLR_DATABASE_URL ?? null,
    url: text("url") ?? env.QLR_URL ?? null,
    json: values.json === true,
  };
}

/**
 * `--retention DURATION` / `QLR_RETENTION` (default 7d) and `--retention-runs N` /
 * `QLR_RETENTION_RUNS` (default 10000) of `qlr serve`. A bad value is a usage error naming
 * the flag or variable it came from; it is checked before anything is written.
 */
export function retentionConfig(
  values: Record<string, string | boolean | string[] | undefined>,
  env: NodeJS.ProcessEnv,
): RetentionPolicy {
  const flag = (key: string): string | undefined =>
    typeof values[key] === "string" ? values[key] : undefined;
  const horizonFlag = flag("retention");
  const runsFlag = flag("retention-runs");
  try {
    return parseRetentionPolicy(
      { horizon: horizonFlag ?? env.QLR_RETENTION, maxRuns: runsFlag ?? env.QLR_RETENTION_RUNS },
      {
        horizon: horizonFlag !== undefined ? "--retention" : "QLR_RETENTION",
        maxRuns: runsFlag !== undefined ? "--retention-runs" : "QLR_RETENTION_RUNS",
      },
    );
  } catch (error) {
    if (isQlrError(error, "invalid_request"))
      throw new UsageError(
        error.details.map((detail) => `${detail.path} ${detail.message}`).join("\n"),
      );
    throw error;
  }
}

export const TOKEN_FILE = "token";

/**
 * Reads the stored token, or creates one (0600, created exclusively so two starts never write
 * two tokens) when absent; `created` says it is new. A stored token others can read is refused.
 */
export async function loadOrCreateToken(
  stateDir: string,
): Promise<{ token: string; created: boolean; path: string }> {
  const path = join(stateDir, TOKEN_FILE);
  const existing = await readSecretFile(path, "the token file");
  if (existing !== null)
    return { token: checkToken(existing, `the token file ${path}`), created: false, path };
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  const token = `qlr_${randomBytes(24).toString("base64url")}`;
  const handle = await open(
    path,
    constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
    0o600,
  );
  try {
    await handle.writeFile(`${token}\n`, "utf8");
    await handle.sync();
  } finally {
    await handle.close();
  }
  return { token, created: true, path };
}

export async function readStoredToken(stateDir: string): Promise<string | null> {
  const token = await readSecretFile(join(stateDir, TOKEN_FILE), "the token file");
  return token === null || token.length === 0 ? null : token;
}
