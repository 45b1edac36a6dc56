/**
 * `node dist/qlr.mjs serve` as the serve benches start it: a fresh environment, optionally in
 * a memory cgroup from its first byte, resolved once it prints the URL it serves.
 */
import { spawn, type ChildProcess, type SpawnOptionsWithStdioTuple } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { TERMINAL_RUN_STATUSES, type RunStatus } from "../../src/model.ts";
import type { ProfileName } from "../../src/profiles.ts";
import { serveArgs } from "../../test/support/qlr-args.ts";
import { now } from "./common.ts";
import { leanRequest } from "./http-client.ts";

export interface ServeProcessOptions {
  readonly root: string;
  readonly stateDir: string;
  readonly manifestPath: string;
  readonly profile: ProfileName;
  /** Node flags before the script (e.g. `--max-old-space-size`). */
  readonly nodeFlags?: readonly string[];
  /** Flags after the standard serve ones (e.g. retention, `--max-running`). */
  readonly extraArgs?: readonly string[];
  /** A cgroup's `cgroup.procs` to join before Node starts, or null. */
  readonly cgroupProcsPath?: string | null;
  readonly urlTimeoutMs?: number;
}

export interface ServeProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly url: string;
  readonly token: string;
  /** From the spawn to the URL printed, ms. */
  readonly readyMs: number;
  /** The headers of an authorized JSON request. */
  readonly headers: Record<string, string>;
  exited(): boolean;
  /** Resolves when the process has exited. */
  readonly exit: Promise<void>;
  /** The last 4000 characters it wrote to stderr. */
  stderrTail(): string;
}

export async function spawnServe(options: ServeProcessOptions): Promise<ServeProcess> {
  const argv = [
    ...(options.nodeFlags ?? []),
    join(options.root, "dist", "qlr.mjs"),
    ...serveArgs(options.stateDir, options.manifestPath, {
      profile: options.profile,
      extra: options.extraArgs ?? [],
    }),
  ];
  // The token is the state dir's (read back below) and the flags are the bench's own: nothing
  // of the runtime's configuration is inherited from the environment.
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const key of Object.keys(env)) if (key.startsWith("QLR_")) delete env[key];
  delete env.NODE_OPTIONS;
  const spawnOptions: SpawnOptionsWithStdioTuple<"ignore", "pipe", "pipe"> = {
    cwd: options.root,
    stdio: ["ignore", "pipe", "pipe"],
    env,
  };
  const procs = options.cgroupProcsPath ?? null;
  const startedAt = now();
  // The cgroup is joined by a tiny shell that then execs node, so no byte of the serve process
  // is charged elsewhere.
  const child =
    procs === null
      ? spawn(process.execPath, argv, spawnOptions)
      : spawn(
          "/bin/sh",
          ["-c", `echo $$ > ${procs} && exec "$0" "$@"`, process.execPath, ...argv],
          spawnOptions,
        );
  let hasExited = false;
  const exit = new Promise<void>((resolve) =>
    child.on("exit", () => ((hasExited = true), resolve())),
  );
  let errors = "";
  child.stderr.on(
    "data",
    (chunk: Buffer) => (errors = (errors + chunk.toString("utf8")).slice(-4000)),
  );
  const timeoutMs = options.urlTimeoutMs ?? 60_000;
  const url = await new Promise<string>((resolve, reject) => {
    let text = "";
    const timer = setTimeout(
      () =>
        reject(new Error(`qlr serve did not report its URL in ${timeoutMs} ms: ${text} ${errors}`)),
      timeoutMs,
    );
    child.stdout.on("data", (chunk: Buffer) => {
      text += chunk.toString("utf8");
      const match = /qlr serving (http:\/\/\S+)/.exec(text);
      if (match?.[1] !== undefined) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    void exit.then(() => {
      clearTimeout(timer);
      reject(new Error(`qlr serve exited before serving: ${errors}`));
    });
  });
  const readyMs = now() - startedAt;
  const token = readFileSync(join(options.stateDir, "token"), "utf8").trim();
  return {
    child,
    pid: child.pid ?? -1,
    url,
    token,
    readyMs,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    exited: () => hasExited,
    exit,
    stderrTail: () => errors,
  };
}

/** Runs by status as `GET /metrics` counts them (`qlr_runs{status="…"}`). */
export async function runsByStatus(
  served: Pick<ServeProcess, "url" | "token">,
): Promise<Record<string, number>> {
  const response = await leanRequest(`${served.url}/metrics`, {
    headers: { authorization: `Bearer ${served.token}` },
  });
  const runs: Record<string, number> = {};
  for (const match of response.text.matchAll(/^qlr_runs\{status="([a-z_]+)"\} (\d+)$/gm))
    runs[match[1] ?? "?"] = Number(match[2]);
  return runs;
}

/** How many of these runs have ended (in any terminal status, as the core counts them). */
export function terminalRuns(runs: Readonly<Record<string, number>>): number {
  let terminal = 0;
  for (const [status, count] of Object.entries(runs))
    if (TERMINAL_RUN_STATUSES.has(status as RunStatus)) terminal += count;
  return terminal;
}
