import { readFile } from "node:fs/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  listProcessGroupMembers,
  readProcStat,
  type PosixLauncher,
  type ProcessHandle,
} from "../../runtimes/node/launcher/index.ts";
import {
  isGoneOrZombie,
  killIfStillRunning,
  makeScratch,
  newLauncher,
  shellSpec,
  supervisorOfTask,
  waitFor,
  waitForReceipt,
} from "./support.ts";

let scratch: Awaited<ReturnType<typeof makeScratch>>;
const started: { launcher: PosixLauncher; handle: ProcessHandle }[] = [];

beforeAll(async () => {
  scratch = await makeScratch("stop");
});

afterAll(async () => {
  for (const { launcher, handle } of started) await killIfStillRunning(launcher, [handle]);
  await scratch.cleanup();
});

async function launchTracked(
  launcher: PosixLauncher,
  spec: Parameters<PosixLauncher["launch"]>[0],
): Promise<ProcessHandle> {
  const handle = await launcher.launch(spec);
  started.push({ launcher, handle });
  return handle;
}

async function procEntryExists(pid: number): Promise<boolean> {
  return (await readProcStat(pid)).kind === "present";
}

describe("stop", () => {
  it("cancels `sleep 30` with SIGTERM and the receipt records the signal and the reason", async () => {
    const { launcher } = await newLauncher(scratch, { graceMs: 5000 });
    const spec = shellSpec("", { argv: ["sleep", "30"] });
    const handle = await launchTracked(launcher, spec);
    expect((await launcher.inspect(handle)).state).toBe("running");

    const result = await launcher.stop(handle, "cancel");
    expect(result.signalsSent).toEqual(["SIGTERM"]);
    expect(result.finalInspection.state).toBe("not_running");
    expect(result.recordedReason).toBe("cancel");

    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status === "valid" && reading.receipt).toMatchObject({
      exitCode: null,
      signal: "SIGTERM",
      stopReason: "cancel",
    });
    await waitFor("the task's /proc entry to go", async () =>
      (await procEntryExists(handle.pid)) ? null : true,
    );
  });

  it("escalates to SIGKILL for a task that ignores SIGTERM", async () => {
    const { launcher } = await newLauncher(scratch, { graceMs: 300 });
    const spec = shellSpec("trap '' TERM; sleep 30");
    const handle = await launchTracked(launcher, spec);
    // Let the shell install its trap before the signal, or the TERM would simply end it.
    await waitFor("sh to start its sleep", async () =>
      (await listProcessGroupMembers(handle.pid)).length >= 2 ? true : null,
    );

    const result = await launcher.stop(handle, "cancel");
    expect(result.signalsSent).toEqual(["SIGTERM", "SIGKILL"]);

    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status === "valid" && reading.receipt).toMatchObject({
      exitCode: null,
      signal: "SIGKILL",
      stopReason: "cancel",
    });
    expect(await listProcessGroupMembers(handle.pid)).toEqual([]);
  });

  it("kills the task's children too: the whole process group goes", async () => {
    const { launcher } = await newLauncher(scratch, { graceMs: 5000 });
    const spec = shellSpec("sleep 30 & wait");
    const handle = await launchTracked(launcher, spec);
    const members = await waitFor("the background sleep to join the group", async () => {
      const found = await listProcessGroupMembers(handle.pid);
      return found.length >= 2 ? found : null;
    });
    const grandchildren = members.filter((pid) => pid !== handle.pid);
    expect(grandchildren.length).toBeGreaterThan(0);

    await launcher.stop(handle, "timeout");
    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status === "valid" && reading.receipt.stopReason).toBe("timeout");
    // The supervisor reaps the task itself; the orphaned grandchildren belong to pid 1, which
    // in a container may be slow to reap, so a zombie counts as ended.
    await waitFor(`task pid ${handle.pid} to be gone`, async () =>
      (await procEntryExists(handle.pid)) ? null : true,
    );
    for (const pid of grandchildren)
      await waitFor(`grandchild pid ${pid} to end`, () => isGoneOrZombie(pid));
  });

  it("shares one stop between concurrent callers and keeps the first reason", async () => {
    const { launcher } = await newLauncher(scratch, { graceMs: 5000 });
    const spec = shellSpec("", { argv: ["sleep", "30"] });
    const handle = await launchTracked(launcher, spec);
    const first = launcher.stop(handle, "cancel");
    const second = launcher.stop(handle, "shutdown");
    expect(second).toBe(first);
    await first;
    // A later stop (the process is already gone) does not relabel the reason either.
    const later = await launcher.stop(handle, "shutdown");
    expect(later).toMatchObject({ signalsSent: [], recordedReason: "cancel" });
    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status === "valid" && reading.receipt.stopReason).toBe("cancel");
  });

  it("never signals a pid whose start time no longer matches", async () => {
    const { launcher } = await newLauncher(scratch, { graceMs: 200 });
    const spec = shellSpec("", { argv: ["sleep", "30"] });
    const handle = await launchTracked(launcher, spec);
    const result = await launcher.stop(
      { ...handle, processStartTicks: String(BigInt(handle.processStartTicks) + 1n) },
      "cancel",
    );
    expect(result).toMatchObject({
      signalsSent: [],
      finalInspection: { state: "changed_identity" },
    });
    expect((await launcher.inspect(handle)).state).toBe("running");
    await launcher.stop(handle, "cancel");
    await waitForReceipt(launcher, spec.attemptId);
  });

  it("keeps the resident supervisor alive through a SIGTERM aimed at its group: the task is stopped and the receipt written", async () => {
    const { launcher } = await newLauncher(scratch);
    const spec = shellSpec("", { argv: ["sleep", "30"] });
    const handle = await launchTracked(launcher, spec);
    const { supervisorPid } = await supervisorOfTask(handle.pid);
    expect(await readFile(`/proc/${supervisorPid}/cmdline`, "utf8")).toMatch(/^qlr-supervisor/);

    // As a service manager stopping the unit does: the whole group, the spawner included (it
    // must survive it: the supervisor needs it for the exit status). The task has its own group.
    process.kill(-supervisorPid, "SIGTERM");
    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status === "valid" && reading.receipt).toMatchObject({
      signal: "SIGTERM",
      stopReason: null,
    });
    // It forwarded the signal and stayed: the state directory's other tasks are still supervised.
    expect((await readProcStat(supervisorPid)).kind).toBe("present");
    launcher.close();
  });
});
