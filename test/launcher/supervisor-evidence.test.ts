import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readProcStat } from "../../runtimes/node/launcher/index.ts";
import {
  makeScratch,
  newAttemptId,
  newLauncher,
  shellSpec,
  waitFor,
  waitForReceipt,
} from "./support.ts";

/**
 * "Not running" is trusted evidence only once the supervisor that writes the receipt is gone
 * too; while it lives, a receipt may still be coming, and recovery must not call the attempt lost.
 */
describe("supervisor liveness as part of the not-running evidence", () => {
  let scratch: Awaited<ReturnType<typeof makeScratch>>;
  beforeAll(async () => {
    scratch = await makeScratch("supervisor-evidence");
  });
  afterAll(async () => {
    await scratch.cleanup();
  });

  it("sees the supervisor of a spawned task as live, and as gone once it is killed", async () => {
    const { launcher } = await newLauncher(scratch);
    const attemptId = newAttemptId();
    const handle = await launcher.launch(shellSpec("sleep 30", { attemptId }));
    expect(await launcher.supervision(attemptId)).toBe("live");
    expect(await launcher.launchEvidence(attemptId)).toBe("live");
    // A runtime that never persisted the handle gets exactly the same one back.
    expect(await launcher.recoverHandle(attemptId)).toEqual(handle);
    const task = await readProcStat(handle.pid);
    const supervisorPid = task.kind === "present" ? task.stat.parentPid : null;
    expect(supervisorPid).not.toBeNull();
    if (supervisorPid === null) return;
    process.kill(supervisorPid, "SIGKILL");
    await waitFor("the supervisor to count as gone", async () =>
      (await launcher.supervision(attemptId)) === "gone" ? true : null,
    );
    expect(await launcher.launchEvidence(attemptId)).toBe("gone");
    expect(await launcher.recoverHandle(attemptId)).toBeNull();
    process.kill(-handle.pid, "SIGKILL");
    launcher.close();
  });

  it("proves never-spawned for a journaled attempt the live supervisor does not know, and refuses it from then on", async () => {
    const { launcher } = await newLauncher(scratch);
    const warmUp = newAttemptId();
    await launcher.launch(shellSpec("sleep 0.2", { attemptId: warmUp }));
    const unknown = newAttemptId();
    // No journal: never spawned by the first barrier alone.
    expect(await launcher.supervision(unknown)).toBe("never_spawned");
    expect(await launcher.launchEvidence(unknown)).toBe("not_journaled");
    expect(await launcher.recoverHandle(unknown)).toBeNull();
    const receipt = await waitForReceipt(launcher, warmUp);
    expect(receipt.status).toBe("valid");
    expect(await launcher.supervision(warmUp)).toBe("live");
    // Receipted: the supervisor no longer names a process for it.
    expect(await launcher.recoverHandle(warmUp)).toBeNull();
    launcher.close();
  });
});
