/**
 * One runtime process per state dir, with real processes: a second `qlr serve` or `qlr worker`
 * on a state dir in use exits before it launches anything, naming the holder; the holder goes
 * on serving; a graceful stop releases the lock, and a SIGKILLed holder's lock is stale and
 * taken over by the next runtime.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { runCli } from "../support/cli-runner.ts";
import { useDeviceHarness } from "../support/device-harness.ts";
import { spawnQlr, stopQlr } from "../support/qlr-process.ts";
import { waitFor } from "../support/wait.ts";

const device = useDeviceHarness();

function inUseBy(stateDir: string, pid: number): string {
  return `The state dir ${stateDir} is in use by process ${pid} (lock file ${join(stateDir, "runtime.lock")})`;
}

describe("one runtime per state dir", { timeout: 120_000 }, () => {
  it("a second qlr serve or qlr worker on a served state dir exits 1 naming the runtime; the runtime serves on", async () => {
    const dir = await device.scratch("lock-serve");
    const served = await device.serve(dir);
    const tokenFile = join(dir.stateDir, "token");

    const secondServe = await runCli(device.bundle, [
      "serve",
      "--state-dir",
      dir.stateDir,
      "--port",
      "0",
    ]);
    expect(secondServe.code).toBe(1);
    expect(secondServe.stderr).toContain(inUseBy(dir.stateDir, served.pid));

    const worker = await runCli(device.bundle, [
      ...["worker", "--coordinator", served.url, "--pool", "edge"],
      ...["--state-dir", dir.stateDir, "--token-file", tokenFile],
    ]);
    expect(worker.code).toBe(1);
    expect(worker.stderr).toContain(inUseBy(dir.stateDir, served.pid));

    expect((await served.api.call("GET", "/healthz")).status).toBe(200);
    await served.terminate();
    expect(existsSync(join(dir.stateDir, "runtime.lock"))).toBe(false);
  });

  it("a SIGKILLed runtime's lock is taken over; a second worker on a worker's state dir exits 1 naming it", async () => {
    const dir = await device.scratch("lock-takeover");
    const killed = await device.serve(dir);
    await killed.kill9();
    expect(existsSync(join(dir.stateDir, "runtime.lock"))).toBe(true);
    const restarted = await device.serve(dir);
    const tokenFile = join(dir.stateDir, "token");
    await restarted.terminate();

    const workerArgs = [
      ...["worker", "--coordinator", restarted.url, "--pool", "edge"],
      ...["--state-dir", dir.stateDir, "--token-file", tokenFile],
    ];
    const first = spawnQlr(device.bundle.qlr, "worker-1", workerArgs, {});
    try {
      await waitFor("the first worker to start leasing", () =>
        first.stdout.includes("leasing pool edge"),
      );
      const second = await runCli(device.bundle, workerArgs);
      expect(second.code).toBe(1);
      expect(second.stderr).toContain(inUseBy(dir.stateDir, first.child.pid ?? -1));
    } finally {
      await stopQlr(first);
    }
    expect(existsSync(join(dir.stateDir, "runtime.lock"))).toBe(false);
  });
});
