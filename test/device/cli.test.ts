/**
 * `qlr` CLI smoke test against a real `qlr serve`: apply, start --wait (exit 0 on success, 1 on
 * failure), runs --json, status, logs RUN STEP, cancel. Every command is the built bundle run
 * as its own process, pointed at the runtime with --url and at the token with --state-dir.
 */
import { describe, expect, it } from "vitest";
import { waitUntilGone } from "../support/proc.ts";
import { Scratch } from "../support/scratch.ts";
import { startServe } from "../support/serve-child.ts";
import { runCli } from "../support/cli-runner.ts";
import { useDeviceHarness } from "../support/device-harness.ts";

const device = useDeviceHarness();

describe("qlr CLI", () => {
  it("apply, start --wait, runs --json, status, logs, cancel", { timeout: 300_000 }, async () => {
    const dir = await device.scratch("cli");
    const gate = dir.gate("hold");
    const { file } = await dir.manifest(
      "cli",
      {
        hello: dir.task({ label: "a", then: 'echo "hello from $STEP"' }),
        world: dir.task({ label: "b", then: 'echo "world from $STEP"; echo "to stderr" >&2' }),
        broken: dir.task({ label: "x", then: "echo broken; exit 3" }),
        hold: dir.task({ label: "h", then: Scratch.waitForGate(gate) }),
      },
      {
        pipeline: { steps: { a: { task: "hello" }, b: { task: "world", needs: ["a"] } } },
        failing: { steps: { x: { task: "broken" }, after: { task: "hello", needs: ["x"] } } },
        holding: { steps: { h: { task: "hold" } } },
      },
    );
    const served = await startServe(device.bundle, dir.stateDir);
    const common = ["--state-dir", dir.stateDir, "--url", served.url];

    const applied = await runCli(device.bundle, ["apply", file, ...common]);
    expect(applied).toMatchObject({ code: 0 });
    expect(applied.stdout).toContain("package cli generation 1 (new)");
    expect((await runCli(device.bundle, ["apply", file, ...common])).stdout).toContain(
      "(unchanged)",
    );

    // start --wait: 0 when the run succeeds.
    const ok = await runCli(device.bundle, ["start", "cli/pipeline", "--wait", ...common]);
    expect(ok.stderr).toBe("");
    expect(ok.code).toBe(0);
    const okRunId = /^run (\S+) started$/m.exec(ok.stdout)?.[1] ?? "";
    expect(okRunId).not.toBe("");
    expect(ok.stdout).toMatch(/workflow cli\/pipeline\s+succeeded/);

    // start --wait: 1 when the run does not succeed.
    const failing = await runCli(device.bundle, ["start", "cli/failing", "--wait", ...common]);
    expect(failing.code).toBe(1);
    expect(failing.stdout).toMatch(/workflow cli\/failing\s+failed/);
    const failingRunId = /^run (\S+) started$/m.exec(failing.stdout)?.[1] ?? "";

    // runs --json lists both, newest first.
    const runs = await runCli(device.bundle, ["runs", "--json", ...common]);
    expect(runs.code).toBe(0);
    const listed = JSON.parse(runs.stdout) as {
      runs: { id: string; status: string; target: string }[];
      nextCursor: string | null;
    };
    expect(listed.runs.map((run) => [run.id, run.target, run.status])).toEqual([
      [failingRunId, "failing", "failed"],
      [okRunId, "pipeline", "succeeded"],
    ]);

    // status: the run with its steps and attempts.
    const status = await runCli(device.bundle, ["status", okRunId, ...common]);
    expect(status.code).toBe(0);
    expect(status.stdout).toContain(`run ${okRunId}  workflow cli/pipeline  succeeded`);
    expect(status.stdout).toMatch(
      /^\s+a\s+succeeded\s+attempts 1\s+last succeeded pid \d+ exit 0$/m,
    );
    expect(status.stdout).toMatch(
      /^\s+b\s+succeeded\s+attempts 1\s+last succeeded pid \d+ exit 0$/m,
    );
    const failedStatus = await runCli(device.bundle, ["status", failingRunId, "--json", ...common]);
    const failedDetail = JSON.parse(failedStatus.stdout) as {
      steps: { name: string; status: string }[];
    };
    expect(failedDetail.steps.map((step) => [step.name, step.status])).toEqual([
      ["x", "failed"],
      ["after", "skipped"],
    ]);

    // logs RUN STEP prints the step's stdout (and its stderr after a marker).
    const logsA = await runCli(device.bundle, ["logs", okRunId, "a", ...common]);
    expect(logsA).toEqual({ code: 0, stdout: "hello from a\n", stderr: "" });
    const logsB = await runCli(device.bundle, ["logs", okRunId, "b", ...common]);
    expect(logsB.stdout).toBe("world from b\n--- stderr ---\nto stderr\n");
    const logsX = await runCli(device.bundle, ["logs", failingRunId, "x", ...common]);
    expect(logsX.stdout).toBe("broken\n");
    // A step that never ran has no log: an API error, exit 2.
    const noLog = await runCli(device.bundle, ["logs", failingRunId, "after", ...common]);
    expect(noLog.code).toBe(2);
    expect(noLog.stderr).toContain("not_found");

    // cancel: a running run is stopped and ends cancelled.
    const started = await runCli(device.bundle, ["start", "cli/holding", "--json", ...common]);
    expect(started.code).toBe(0);
    const holdRunId = (JSON.parse(started.stdout) as { run: { id: string } }).run.id;
    const running = await served.api.waitStepRunning(holdRunId, "h");
    const cancelled = await runCli(device.bundle, ["cancel", holdRunId, ...common]);
    expect(cancelled.code).toBe(0);
    expect(cancelled.stdout).toContain(`run ${holdRunId} running, cancel requested`);
    await waitUntilGone(running.attempt.pid);
    const final = await served.api.waitTerminal(holdRunId);
    expect(final.run.status).toBe("cancelled");
    const afterCancel = await runCli(device.bundle, ["status", holdRunId, ...common]);
    expect(afterCancel.stdout).toContain(`run ${holdRunId}  workflow cli/holding  cancelled`);
    // Who cancelled it, from the run view's reason.
    expect(final.run.cancelReason).toBe("user");
    expect(afterCancel.stdout).toMatch(
      /\n {2}cancel requested \d{4}-\d\d-\d\d [\d:]+Z by a user\n/,
    );

    // Usage errors exit 64; an unreachable runtime exits 69.
    expect((await runCli(device.bundle, ["start", "not a target", ...common])).code).toBe(64);
    served.child.kill("SIGTERM");
    expect(await served.exited).toEqual({ code: 0, signal: null });
    expect((await runCli(device.bundle, ["runs", ...common])).code).toBe(69);
    expect((await dir.spawns()).map((spawn) => spawn.label)).toEqual(["a", "b", "x", "h"]);
  });
});
