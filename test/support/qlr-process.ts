/** A `qlr` command (serve, worker) as a child process of the test: its output kept, stopped with a bound. */
import { spawn, type ChildProcess } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { childEnv } from "./serve-child.ts";

export interface QlrProcess {
  readonly child: ChildProcess;
  readonly name: string;
  stdout: string;
  stderr: string;
  readonly exited: Promise<number | null>;
}

/** `node <qlr> ...args` in `cwd`, with a clean environment plus `env`, its output collected. */
export function spawnQlr(
  qlr: string,
  name: string,
  args: readonly string[],
  options: { readonly cwd?: string; readonly env?: Record<string, string> },
): QlrProcess {
  const child = spawn(process.execPath, [qlr, ...args], {
    cwd: options.cwd,
    stdio: ["ignore", "pipe", "pipe"],
    env: childEnv(options.env),
  });
  const proc: QlrProcess = {
    child,
    name,
    stdout: "",
    stderr: "",
    exited: new Promise((resolveExit) => child.once("exit", (code) => resolveExit(code))),
  };
  child.stdout?.setEncoding("utf8").on("data", (text: string) => (proc.stdout += text));
  child.stderr?.setEncoding("utf8").on("data", (text: string) => (proc.stderr += text));
  return proc;
}

export function isAlive(proc: QlrProcess): boolean {
  return proc.child.exitCode === null && proc.child.signalCode === null;
}

/** Sends `signal`; a process still alive after `boundMs` is killed (SIGKILL) and waited for. */
export async function stopQlr(
  proc: QlrProcess,
  signal: NodeJS.Signals = "SIGTERM",
  boundMs = 10_000,
): Promise<void> {
  if (!isAlive(proc)) return;
  proc.child.kill(signal);
  const ended = await Promise.race([
    proc.exited.then(() => true),
    sleep(boundMs).then(() => false),
  ]);
  if (!ended && isAlive(proc)) {
    proc.child.kill("SIGKILL");
    await proc.exited;
  }
}
