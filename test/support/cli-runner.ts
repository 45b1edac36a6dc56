/** The `qlr` CLI run to completion as a child process. */
import { execFile } from "node:child_process";
import type { Bundle } from "./bundle.ts";
import { childEnv } from "./serve-child.ts";

export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `node qlr.mjs ARGS…` to completion (bounded) and returns its exit code and output. */
export function runCli(
  bundle: Bundle,
  args: readonly string[],
  timeoutMs = 60_000,
): Promise<CliResult> {
  return new Promise((resolveRun) => {
    execFile(
      process.execPath,
      [bundle.qlr, ...args],
      { env: childEnv(), timeout: timeoutMs, maxBuffer: 4 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : -1;
        resolveRun({ code, stdout, stderr });
      },
    );
  });
}
