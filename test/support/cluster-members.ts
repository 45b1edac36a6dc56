/**
 * The processes of the cluster tests: real `qlr serve` and `qlr worker` children of the test,
 * each named, restartable on the same arguments (same port, same state dir) after a SIGKILL,
 * with the tail of its output kept to explain a failure.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createServer } from "node:net";
import type { Bundle } from "./bundle.ts";
import { childEnv } from "./serve-child.ts";
import { workerArgs } from "./qlr-args.ts";

export interface ClusterMember {
  readonly name: string;
  readonly kind: "coordinator" | "worker";
  readonly args: () => string[];
  child: ChildProcess | null;
  exited: Promise<void>;
  output: string;
  restarts: number;
}

/** The output kept per member: enough to explain a failure, bounded for a long soak. */
const MAX_OUTPUT_CHARS = 20_000;

export function clusterMember(
  name: string,
  kind: ClusterMember["kind"],
  args: () => string[],
): ClusterMember {
  return { name, kind, args, child: null, exited: Promise.resolve(), output: "", restarts: 0 };
}

/** A `qlr serve --store postgres --profile cluster` on a fixed loopback port: a restart comes back where clients and workers look. */
export function coordinatorMember(name: string, port: number, stateDir: string): ClusterMember {
  return clusterMember(name, "coordinator", () => [
    "serve",
    "--store",
    "postgres",
    "--profile",
    "cluster",
    "--host",
    "127.0.0.1",
    "--port",
    String(port),
    "--state-dir",
    stateDir,
  ]);
}

/** A `qlr worker` of pool `p1` with capacity 4, leasing from one coordinator. */
export function workerMember(
  name: string,
  coordinatorUrl: string,
  stateDir: string,
): ClusterMember {
  return clusterMember(name, "worker", () => workerArgs(coordinatorUrl, stateDir, { capacity: 4 }));
}

export function isAlive(member: ClusterMember): boolean {
  return (
    member.child !== null && member.child.exitCode === null && member.child.signalCode === null
  );
}

/** Starts (or starts again) `member` from the bundle, with a clean environment plus `env`. */
export function launchMember(
  bundle: Bundle,
  member: ClusterMember,
  env: Record<string, string>,
): void {
  const child = spawn(process.execPath, [bundle.qlr, ...member.args()], {
    env: childEnv(env),
    stdio: ["ignore", "pipe", "pipe"],
  });
  member.child = child;
  member.exited = new Promise((resolveExit) => child.once("exit", () => resolveExit()));
  const keep = (text: string): void => {
    member.output = (member.output + text).slice(-MAX_OUTPUT_CHARS);
  };
  child.stdout?.setEncoding("utf8").on("data", keep);
  child.stderr?.setEncoding("utf8").on("data", keep);
}

/** Every member's restarts and output tail, for a failure message. */
export function describeMembers(members: readonly ClusterMember[]): string {
  return members
    .map(
      (member) =>
        `--- ${member.name} (restarts ${member.restarts})\n${member.output.slice(-4_000)}`,
    )
    .join("\n");
}

export function killMembers(members: readonly ClusterMember[]): void {
  for (const member of members) if (isAlive(member)) member.child?.kill("SIGKILL");
}

export async function freeLoopbackPort(): Promise<number> {
  return new Promise((resolvePort, rejectPort) => {
    const server = createServer();
    server.once("error", rejectPort);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

/** One API call with a bearer token and a ceiling (15 s); the body is parsed when there is one. */
export async function callApi<T>(
  url: string,
  token: string,
  method: string,
  path: string,
  body?: unknown,
  timeoutMs = 15_000,
): Promise<{ status: number; body: T }> {
  const response = await fetch(`${url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await response.text();
  return { status: response.status, body: (text.length > 0 ? JSON.parse(text) : null) as T };
}
