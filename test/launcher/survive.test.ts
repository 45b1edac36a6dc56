import { spawn } from "node:child_process";
import { mkdtemp, readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  loadOrCreateReceiptKey,
  PosixLauncher,
  readProcStat,
  type ProcessHandle,
} from "../../runtimes/node/launcher/index.ts";
import { isGoneOrZombie, makeScratch, newAttemptId, waitFor, waitForReceipt } from "./support.ts";

let scratch: Awaited<ReturnType<typeof makeScratch>>;
let fixturePath: string;

beforeAll(async () => {
  scratch = await makeScratch("survive");
  fixturePath = join(scratch.dir, "launch-and-linger.mjs");
  await build({
    entryPoints: [fileURLToPath(new URL("./fixtures/launch-and-linger.ts", import.meta.url))],
    outfile: fixturePath,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    logLevel: "silent",
  });
});

afterAll(async () => {
  await scratch.cleanup();
});

describe("a SIGKILLed runtime", () => {
  it("leaves the supervisor running: the task completes and its receipt appears", async () => {
    const stateDir = await mkdtemp(join(scratch.dir, "state-"));
    const attemptId = newAttemptId();
    const runtime = spawn(
      process.execPath,
      [fixturePath, stateDir, scratch.supervisorPath, attemptId, "sleep 0.5; echo done"],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    const runtimeExit = new Promise<NodeJS.Signals | null>((resolve) =>
      runtime.once("exit", (_code, signal) => resolve(signal)),
    );

    let output = "";
    runtime.stdout.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
    const handle = await waitFor("the fixture to print the handle", () =>
      Promise.resolve(
        output.includes("\n")
          ? (JSON.parse(output.slice(0, output.indexOf("\n"))) as ProcessHandle)
          : null,
      ),
    );
    const taskStat = await readProcStat(handle.pid);
    const supervisorPid = taskStat.kind === "present" ? taskStat.stat.parentPid : null;

    runtime.kill("SIGKILL");
    expect(await runtimeExit).toBe("SIGKILL");

    const launcher = new PosixLauncher({
      stateDir,
      hmacKey: await loadOrCreateReceiptKey(stateDir),
      nowMs: () => Date.now(),
      supervisorPath: scratch.supervisorPath,
    });
    const reading = await waitForReceipt(launcher, attemptId);
    expect(reading.status).toBe("valid");
    if (reading.status !== "valid") return;
    expect(reading.receipt).toMatchObject({
      attemptId,
      exitCode: 0,
      signal: null,
      stopReason: null,
      spawnError: null,
      startedAtMs: handle.startedAtMs,
    });
    expect(await readFile(launcher.logPath(attemptId, "stdout"), "utf8")).toBe("done\n");
    // The receipt can only come from the supervisor, which therefore outlived the runtime; it
    // exits once the receipt is durable. Orphaned, it belongs to pid 1, which in a container may
    // never reap it, so a zombie counts as exited.
    expect(supervisorPid).not.toBeNull();
    if (supervisorPid !== null)
      await waitFor("the supervisor to exit", () => isGoneOrZombie(supervisorPid));
  });
});
