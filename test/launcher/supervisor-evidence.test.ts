import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { supervisorAlive } from "../../runtimes/node/local-executor.ts";
import { makeScratch, newAttemptId, newLauncher, shellSpec, waitFor, waitForReceipt } from "./support.ts";

/**
 * "Not running" is trusted evidence only once the supervisor that writes the receipt is gone
 * too; while it lives, a receipt may still be coming, and recovery must not call the attempt lost.
 */
describe("supervisor liveness as part of the not-running evidence", () => {
  let scratch: Awaited<ReturnType<typeof makeScratch>>;
  beforeAll(async () => {
    scratch = await makeScratch("qlr-supervisor-evidence-");
  });
  afterAll(async () => {
    await scratch.cleanup();
  });

  it("sees the supervisor of a running task, and no supervisor once the receipt is written", async () => {
    const { launcher } = await newLauncher(scratch);
    const attemptId = newAttemptId();
    await launcher.launch(shellSpec("sleep 0.5", { attemptId }));
    expect(await supervisorAlive(attemptId)).toBe(true);
    expect(await supervisorAlive(newAttemptId())).toBe(false);
    const receipt = await waitForReceipt(launcher, attemptId);
    expect(receipt.status).toBe("valid");
    await waitFor("the supervisor to exit", async () => ((await supervisorAlive(attemptId)) ? null : true));
  });
});
