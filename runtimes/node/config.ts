import { randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { isQlrError } from "../../src/errors.ts";
import { isProfileName, type ProfileName } from "../../src/profiles.ts";
import { parseRetentionPolicy, type RetentionPolicy } from "../../src/retention.ts";
import type { StoreKind } from "./open-store.ts";

/** Common options and their environment twins (DESIGN.md §6). Flags win over the environment. */
export interface CommonConfig {
  readonly stateDir: string;
  readonly host: string;
  readonly port: number;
  readonly token: string | null;
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

export function commonConfig(values: Record<string, string | boolean | string[] | undefined>, env: NodeJS.ProcessEnv): CommonConfig {
  const text = (key: string): string | undefined => {
    const value = values[key];
    return typeof value === "string" ? value : undefined;
  };
  const portText = text("port") ?? env.QLR_PORT ?? "8787";
  const port = Number(portText);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError(`--port must be 0–65535, got ${portText}`);
  const profile = text("profile") ?? env.QLR_PROFILE ?? "standalone";
  if (!isProfileName(profile)) throw new UsageError(`--profile must be edge, standalone or cluster, got ${profile}`);
  const store = text("store") ?? env.QLR_STORE ?? "sqlite";
  if (store !== "sqlite" && store !== "pglite" && store !== "postgres") throw new UsageError(`--store must be sqlite, pglite or postgres, got ${store}`);
  const token = text("token") ?? env.QLR_TOKEN ?? null;
  if (token !== null && (token.length < 16 || token.length > 256 || /\s/.test(token))) throw new UsageError("--token must be 16–256 characters without whitespace");
  return {
    stateDir: resolve(text("state-dir") ?? env.QLR_STATE_DIR ?? ".qlr"),
    host: text("host") ?? env.QLR_HOST ?? "127.0.0.1",
    port,
    token,
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
export function retentionConfig(values: Record<string, string | boolean | string[] | undefined>, env: NodeJS.ProcessEnv): RetentionPolicy {
  const flag = (key: string): string | undefined => (typeof values[key] === "string" ? values[key] : undefined);
  const horizonFlag = flag("retention");
  const runsFlag = flag("retention-runs");
  try {
    return parseRetentionPolicy(
      { horizon: horizonFlag ?? env.QLR_RETENTION, maxRuns: runsFlag ?? env.QLR_RETENTION_RUNS },
      { horizon: horizonFlag !== undefined ? "--retention" : "QLR_RETENTION", maxRuns: runsFlag !== undefined ? "--retention-runs" : "QLR_RETENTION_RUNS" },
    );
  } catch (error) {
    if (isQlrError(error, "invalid_request")) throw new UsageError(error.details.map((detail) => `${detail.path} ${detail.message}`).join("\n"));
    throw error;
  }
}

export const TOKEN_FILE = "token";

/** Reads the stored token, or creates one (0600) when absent; `created` says it is new. */
export async function loadOrCreateToken(stateDir: string): Promise<{ token: string; created: boolean; path: string }> {
  const path = join(stateDir, TOKEN_FILE);
  try {
    const token = (await readFile(path, "utf8")).trim();
    if (token.length >= 16) return { token, created: false, path };
  } catch {
    // No token yet: create one below.
  }
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  const token = `qlr_${randomBytes(24).toString("base64url")}`;
  await writeFile(path, `${token}\n`, { mode: 0o600, flag: "w" });
  return { token, created: true, path };
}

export async function readStoredToken(stateDir: string): Promise<string | null> {
  try {
    const token = (await readFile(join(stateDir, TOKEN_FILE), "utf8")).trim();
    return token.length > 0 ? token : null;
  } catch {
    return null;
  }
}
