/** `qlr serve` as a child process of the test: started on port 0, watched, killed. */
import { spawn, type ChildProcess } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Api } from "./api-client.ts";
import type { Bundle } from "./bundle.ts";
import { within } from "./wait.ts";

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** A clean environment for a child: no QLR_* settings or NODE_OPTIONS leak in from the test runner. */
export function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (key.startsWith("QLR_") || key === "NODE_OPTIONS") continue;
    env[key] = value;
  }
  return { ...env, ...extra };
}

export class Served {
  constructor(
    readonly child: ChildProcess,
    readonly url: string,
    readonly token: string,
    readonly stateDir: string,
    private readonly watched: Watched,
  ) {}

  get exited(): Promise<Exit> {
    return this.watched.exited;
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  get stdout(): string {
    return this.watched.output.stdout;
  }

  get stderr(): string {
    return this.watched.output.stderr;
  }

  get api(): Api {
    return new Api(this.url, this.token);
  }

  /** The flags that point a `qlr` command at this runtime: its state dir (for the token) and URL. */
  get cliTarget(): string[] {
    return ["--state-dir", this.stateDir, "--url", this.url];
  }

  /**
   * SIGTERM (a service manager's stop) and wait for the exit, bounded: a graceful stop waits
   * for its tasks' grace and escalation, never forever.
   */
  async terminate(timeoutMs = 30_000): Promise<Exit> {
    this.child.kill("SIGTERM");
    return within("the runtime to exit after SIGTERM", this.exited, timeoutMs);
  }

  /** SIGKILL (a power cut, an OOM kill) and wait for the exit. */
  async kill9(): Promise<Exit> {
    this.child.kill("SIGKILL");
    return this.exited;
  }
}

/** Every runtime child of this test file, so `stopAllServed` can end what a failed test left. */
const servedChildren = new Set<ChildProcess>();

export function stopAllServed(): void {
  for (const child of servedChildren) {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  }
  servedChildren.clear();
}

export interface ServeOptions {
  readonly fault?: string;
  /** The fault fires at this reach of its point (QLR_FAULT_OCCURRENCE; default the first). */
  readonly faultOccurrence?: number;
  readonly faultAction?: "sigkill" | "throw";
  readonly apply?: readonly string[];
  readonly profile?: string;
  readonly tickInterval?: string;
  readonly maxRunning?: string;
  readonly retention?: string;
  readonly retentionRuns?: string;
  /** `--store`: the state dir's SQLite file (the default) or a PostgreSQL database. */
  readonly store?: "sqlite" | "postgres";
  /** The PostgreSQL URL for `store: "postgres"`, passed as QLR_DATABASE_URL (not on the command line). */
  readonly databaseUrl?: string;
}

/** A child's exit and everything it printed so far, collected from its spawn on. */
export interface Watched {
  readonly exited: Promise<Exit>;
  readonly output: { stdout: string; stderr: string };
}

/** Collects a just-spawned child's output (as utf8) and its exit. */
export function watchChild(child: ChildProcess): Watched {
  const output = { stdout: "", stderr: "" };
  const exited = new Promise<Exit>((resolveExit) =>
    child.once("exit", (code, signal) => resolveExit({ code, signal })),
  );
  child.stdout?.setEncoding("utf8");
  child.stderr?.setEncoding("utf8");
  child.stdout?.on("data", (chunk: string) => (output.stdout += chunk));
  child.stderr?.on("data", (chunk: string) => (output.stderr += chunk));
  return { exited, output };
}

/**
 * Waits for a starting runtime's `qlr serving URL` line and answers the URL. Fails with what
 * it printed when it exits first, or when it prints no URL within the timeout (then it is killed).
 */
export function servingUrl(
  child: ChildProcess,
  watched: Watched,
  what: string,
  timeoutMs: number,
): Promise<string> {
  const printed = (): string =>
    `stdout: ${watched.output.stdout}\nstderr: ${watched.output.stderr}`;
  return new Promise<string>((resolveUrl, rejectUrl) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      rejectUrl(new Error(`${what} did not print its URL within ${timeoutMs} ms\n${printed()}`));
    }, timeoutMs);
    const look = (): void => {
      const match = /qlr serving (http:\/\/\S+)/.exec(watched.output.stdout);
      if (match?.[1] === undefined) return;
      clearTimeout(timer);
      child.stdout?.off("data", look);
      resolveUrl(match[1]);
    };
    // Registered after `watchChild`'s collector, so each chunk is in `output.stdout` when looked at.
    child.stdout?.on("data", look);
    look();
    void watched.exited.then((exit) => {
      clearTimeout(timer);
      rejectUrl(
        new Error(
          `${what} exited (${exit.signal ?? `code ${exit.code}`}) before serving\n${printed()}`,
        ),
      );
    });
  });
}

/**
 * Starts `node qlr.mjs serve --state-dir DIR --port 0` and waits for its `qlr serving URL`
 * line. `fault` sets QLR_FAULT_POINT: the runtime SIGKILLs itself when that point is reached
 * (at its `faultOccurrence`th reach).
 */
export async function startServe(
  bundle: Bundle,
  stateDir: string,
  options: ServeOptions = {},
): Promise<Served> {
  const args = [
    bundle.qlr,
    "serve",
    "--state-dir",
    stateDir,
    "--port",
    "0",
    ...(options.profile === undefined ? [] : ["--profile", options.profile]),
    ...(options.tickInterval === undefined ? [] : ["--tick-interval", options.tickInterval]),
    ...(options.maxRunning === undefined ? [] : ["--max-running", options.maxRunning]),
    ...(options.retention === undefined ? [] : ["--retention", options.retention]),
    ...(options.retentionRuns === undefined ? [] : ["--retention-runs", options.retentionRuns]),
    ...(options.store === undefined ? [] : ["--store", options.store]),
    ...(options.apply ?? []).flatMap((file) => ["--apply", file]),
  ];
  const child = spawn(process.execPath, args, {
    env: childEnv({
      ...(options.fault === undefined ? {} : { QLR_FAULT_POINT: options.fault }),
      ...(options.faultOccurrence === undefined
        ? {}
        : { QLR_FAULT_OCCURRENCE: String(options.faultOccurrence) }),
      ...(options.faultAction === undefined ? {} : { QLR_FAULT_ACTION: options.faultAction }),
      ...(options.databaseUrl === undefined ? {} : { QLR_DATABASE_URL: options.databaseUrl }),
    }),
    stdio: ["ignore", "pipe", "pipe"],
  });
  servedChildren.add(child);
  const watched = watchChild(child);
  // Generous: a loaded machine starts Node slowly; a runtime that never serves still fails.
  const url = await servingUrl(child, watched, "qlr serve", 60_000);
  const token = (await readFile(join(stateDir, "token"), "utf8")).trim();
  return new Served(child, url, token, stateDir, watched);
}
