import { describe, expect, it } from "vitest";
import { DeviceRuntime } from "../../runtimes/node/device.ts";
import { Api } from "../support/api-client.ts";
import { useDeviceHarness } from "../support/device-harness.ts";
import { notedSupervisorFlags, writeNotingSupervisor } from "../support/noting-supervisor.ts";
import { chain } from "../support/workflow-shapes.ts";

const runtimes: DeviceRuntime[] = [];

const device = useDeviceHarness({
  beforeCleanup: async () => {
    for (const runtime of runtimes.splice(0)) await runtime.stop().catch(() => undefined);
  },
});

/**
 * The device starts its state directory's supervisor with the flags of its profile: on the edge
 * profile without V8's optimizing compiler (memory counts most), elsewhere with it
 * (runtimes/node/launcher/supervisor-client.ts, `supervisorNodeFlags`).
 */
describe("the supervisor's flags follow the device's profile", () => {
  it("edge without the optimizing compiler, standalone with it", { timeout: 90_000 }, async () => {
    for (const [profile, withoutOptimizing] of [
      ["edge", true],
      ["standalone", false],
    ] as const) {
      const dir = await device.scratch(`flags-${profile}`);
      const { file } = await dir.manifest(
        "flags",
        { quick: dir.task({ label: "a" }) },
        { pipeline: chain({ a: "quick" }) },
      );
      const token = "device-test-token-0123456789";
      const runtime = await DeviceRuntime.start({
        stateDir: dir.stateDir,
        host: "127.0.0.1",
        port: 0,
        token,
        profile,
        store: "sqlite",
        databaseUrl: null,
        applyFiles: [file],
        supervisorPath: await writeNotingSupervisor(
          dir.path("noting-supervisor.mjs"),
          device.bundle.supervisor,
        ),
        log: () => undefined,
      });
      runtimes.push(runtime);
      const api = new Api(runtime.url, token);
      const run = await api.waitTerminal((await api.startWorkflow("flags", "pipeline")).id);
      expect(run.run.status).toBe("succeeded");
      const flags = await notedSupervisorFlags(dir.stateDir);
      expect(flags, profile).toEqual(
        expect.arrayContaining(["--max-old-space-size=32", "--max-semi-space-size=1"]),
      );
      expect(flags.includes("--no-opt"), profile).toBe(withoutOptimizing);
      await runtime.stop();
    }
  });
});
