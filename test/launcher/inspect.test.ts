import { spawn } from "node:child_process";
import { chmod, copyFile, mkdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  isAlive,
  parseProcStat,
  readBootId,
  readProcStat,
  type ProcessHandle,
} from "../../runtimes/node/launcher/index.ts";
import { bootIdOnce } from "../../runtimes/node/launcher/proc.ts";
import { useScratch, newLauncher, shellSpec, waitFor, waitForReceipt } from "./support.ts";

const scratch = useScratch("inspect");

/** A handle to a process this launcher never started: start ticks 1, started at 0. */
function foreignHandle(pid: number, bootId: string): ProcessHandle {
  return { attemptId: "wta:foreign", pid, processStartTicks: "1", bootId, startedAtMs: 0 };
}

describe("inspect", () => {
  it("says running while the task runs and not_running after it exits", async () => {
    const { launcher } = await newLauncher(scratch, { graceMs: 1000 });
    const spec = shellSpec("", { argv: ["sleep", "30"] });
    const handle = await launcher.launch(spec);
    expect(await launcher.inspect(handle)).toEqual({ state: "running" });
    expect(await isAlive(handle.pid, handle.processStartTicks)).toBe(true);
    await launcher.stop(handle, "cancel");
    await waitForReceipt(launcher, spec.attemptId);
    expect(await launcher.inspect(handle)).toEqual({ state: "not_running" });
    expect(await isAlive(handle.pid, handle.processStartTicks)).toBe(false);
  });

  it("says changed_identity when the pid's start time differs from the handle's", async () => {
    const { launcher } = await newLauncher(scratch, { graceMs: 1000 });
    const spec = shellSpec("", { argv: ["sleep", "30"] });
    const handle = await launcher.launch(spec);
    const recycled: ProcessHandle = {
      ...handle,
      processStartTicks: String(BigInt(handle.processStartTicks) + 1n),
    };
    expect(await launcher.inspect(recycled)).toEqual({ state: "changed_identity" });
    await launcher.stop(handle, "cancel");
    await waitForReceipt(launcher, spec.attemptId);
  });

  it("trusts a different boot id as not_running (a reboot ended every earlier process)", async () => {
    const { launcher } = await newLauncher(scratch);
    const bootId = await readBootId();
    expect(bootId).not.toBeNull();
    // The test runner's own pid is certainly running in this boot; under another boot id it is not "this" process.
    const handle = foreignHandle(process.pid, "00000000-0000-0000-0000-000000000000");
    expect(await launcher.inspect(handle)).toEqual({ state: "not_running" });
  });

  it("is unverifiable without /proc, and never guesses", async () => {
    const emptyProc = join(scratch.dir, "no-proc");
    await mkdir(emptyProc, { recursive: true });
    const { launcher } = await newLauncher(scratch, { procRoot: emptyProc });
    const handle = foreignHandle(process.pid, (await readBootId()) ?? "");
    expect(await launcher.inspect(handle)).toMatchObject({ state: "unverifiable" });
    const result = await launcher.stop(handle, "cancel");
    expect(result).toMatchObject({ signalsSent: [], finalInspection: { state: "unverifiable" } });
    await expect(launcher.launch(shellSpec("true"))).rejects.toThrow(/boot id/);
  });

  it("reads the boot id once: a process cannot outlive its boot; a missing one is read again", async () => {
    const fakeProc = join(scratch.dir, "boot-proc");
    const bootIdPath = join(fakeProc, "sys/kernel/random/boot_id");
    await mkdir(dirname(bootIdPath), { recursive: true });
    const bootId = bootIdOnce(fakeProc);
    expect(await bootId()).toBeNull();
    await writeFile(bootIdPath, "11111111-1111-4111-8111-111111111111\n");
    expect(await bootId()).toBe("11111111-1111-4111-8111-111111111111");
    await writeFile(bootIdPath, "22222222-2222-4222-8222-222222222222\n");
    expect(await bootId()).toBe("11111111-1111-4111-8111-111111111111");
  });

  it("is unverifiable when /proc holds a stat line it cannot parse", async () => {
    const fakeProc = join(scratch.dir, "fake-proc");
    const bootId = (await readBootId()) ?? "";
    await mkdir(join(fakeProc, "sys/kernel/random"), { recursive: true });
    await writeFile(join(fakeProc, "sys/kernel/random/boot_id"), `${bootId}\n`);
    await mkdir(join(fakeProc, "4242"), { recursive: true });
    await writeFile(join(fakeProc, "4242/stat"), "garbage without fields");
    const { launcher } = await newLauncher(scratch, { procRoot: fakeProc });
    const handle = foreignHandle(4242, bootId);
    expect(await launcher.inspect(handle)).toMatchObject({ state: "unverifiable" });
    expect(await launcher.inspect({ ...handle, pid: 4243 })).toEqual({ state: "not_running" });
  });
});

describe("/proc stat parsing", () => {
  const tail =
    "S 1 100 100 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200 18446744073709551615";

  it("reads the start time after the last ')' whatever the command name holds", () => {
    for (const name of ["sleep", "a b", "a) b (c", ") S 1 2 3", "((("]) {
      expect(parseProcStat(`4242 (${name}) ${tail}`)).toEqual({
        state: "S",
        parentPid: 1,
        processGroupId: 100,
        startTicks: "987654",
      });
    }
  });

  it("knows zombies and rejects truncated lines", () => {
    expect(parseProcStat(`7 (x) Z ${tail.slice(2)}`)?.state).toBe("Z");
    expect(parseProcStat("7 (x) S 1 2")).toBeNull();
    expect(parseProcStat("no parenthesis at all")).toBeNull();
  });

  it("reads a real process whose name holds spaces and parentheses", async () => {
    const oddName = join(scratch.dir, "a) b (c");
    await copyFile("/bin/sleep", oddName);
    await chmod(oddName, 0o755);
    const child = spawn(oddName, ["30"], { stdio: "ignore" });
    try {
      const pid = child.pid;
      if (pid === undefined) throw new Error("the odd-named sleep did not start");
      const reading = await waitFor("the odd-named process in /proc", async () => {
        const found = await readProcStat(pid);
        return found.kind === "present" && found.stat.state !== "R" ? found : null;
      });
      expect(reading.stat.parentPid).toBe(process.pid);
      expect(reading.stat.startTicks).toMatch(/^[0-9]+$/);
      const selfReading = await readProcStat(process.pid);
      expect(
        selfReading.kind === "present" &&
          BigInt(reading.stat.startTicks) >= BigInt(selfReading.stat.startTicks),
      ).toBe(true);
    } finally {
      child.kill("SIGKILL");
    }
  });
});
