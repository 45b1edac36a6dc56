import { spawn } from "node:child_process";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFileExclusiveDurable } from "../../runtimes/node/launcher/durable-file.ts";
import { journalText } from "../../runtimes/node/launcher/journal.ts";
import { readBootId } from "../../runtimes/node/launcher/proc.ts";
import { journalPath, stateLayout } from "../../runtimes/node/launcher/state-layout.ts";
import { makeScratch, newAttemptId, newLauncher, waitForReceipt } from "./support.ts";

let scratch: Awaited<ReturnType<typeof makeScratch>>;

beforeAll(async () => {
  scratch = await makeScratch("supervisor");
});

afterAll(async () => {
  await scratch.cleanup();
});

/** Runs the supervisor by hand with the given stdin, as the launcher would but without its checks, and returns its report line and exit code. */
async function runSupervisor(stateDir: string, attemptId: string, stdinText: string): Promise<{ report: string; exitCode: number | null }> {
  const child = spawn(process.execPath, [scratch.supervisorPath, stateDir, attemptId], { stdio: ["pipe", "ignore", "ignore", "pipe"] });
  let report = "";
  child.stdio[3]?.on("data", (chunk: Buffer) => (report += chunk.toString("utf8")));
  child.stdin?.end(stdinText);
  const exitCode = await new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return { report, exitCode };
}

async function journalAttempt(stateDir: string, attemptId: string, startedAtMs: number): Promise<void> {
  const layout = stateLayout(stateDir);
  const bootId = (await readBootId()) ?? "unknown";
  await createFileExclusiveDurable(journalPath(layout, attemptId), layout.tmpDir, journalText({ version: 1, attemptId, startedAtMs, bootId, argvDigest: `sha256:${"0".repeat(64)}`, cwd: null, logMaxBytes: 1024 }));
}

describe("supervisor", () => {
  it("ends a torn spec handover (the runtime died mid-write) with a spawn-error receipt, never a run", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    // A first launch creates the state directories the way the runtime would.
    const warmUp = newAttemptId();
    await launcher.launch({ attemptId: warmUp, argv: ["true"], env: {}, cwd: null, logMaxBytes: 1024 });
    await waitForReceipt(launcher, warmUp);

    const attemptId = newAttemptId();
    await journalAttempt(stateDir, attemptId, 1234);
    const { report, exitCode } = await runSupervisor(stateDir, attemptId, `{"attemptId":"${attemptId}","argv":["touch","${join(stateDir, "ran")}"`);
    expect(exitCode).toBe(0);
    expect(report).toContain("spawn_failed");
    const reading = await launcher.readReceipt(attemptId);
    expect(reading.status === "valid" && reading.receipt).toMatchObject({ startedAtMs: 1234, exitCode: null, spawnError: expect.stringContaining("did not arrive whole") as unknown });
    expect(await readdir(stateDir)).not.toContain("ran");
  });

  it("refuses to start a task that has no journal record", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    const warmUp = newAttemptId();
    await launcher.launch({ attemptId: warmUp, argv: ["true"], env: {}, cwd: null, logMaxBytes: 1024 });
    await waitForReceipt(launcher, warmUp);

    const attemptId = newAttemptId();
    const marker = join(stateDir, "ran");
    const spec = { attemptId, argv: ["touch", marker], env: {}, cwd: "/", logMaxBytes: 1024, receiptKeyPath: join(stateDir, "receipt.key") };
    const { report, exitCode } = await runSupervisor(stateDir, attemptId, JSON.stringify(spec));
    expect(exitCode).not.toBe(0);
    expect(report).toBe("");
    expect(await launcher.readReceipt(attemptId)).toEqual({ status: "none" });
    expect(await readdir(stateDir)).not.toContain("ran");
    expect(await readFile(join(stateDir, "logs", `${attemptId}.supervisor.log`), "utf8")).toContain("no journal record");
  });
});
