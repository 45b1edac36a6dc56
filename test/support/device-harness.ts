/**
 * The device suites' shared setup: the `qlr` bundle built once per file, temp folders made per
 * test, and after each test every served child stopped and every folder removed.
 */
import { afterAll, afterEach, beforeAll } from "vitest";
import { buildBundle, type Bundle } from "./bundle.ts";
import { Scratch } from "./scratch.ts";
import { stopAllServed } from "./serve-child.ts";

export interface DeviceHarness {
  /** The built bundle; read it inside a test or a hook (it is built in `beforeAll`). */
  readonly bundle: Bundle;
  /** A temp folder removed after the test. */
  scratch(name: string): Promise<Scratch>;
}

export interface DeviceHarnessOptions {
  /** Runs after each test before the served children are stopped (e.g. stopping in-process runtimes). */
  readonly beforeCleanup?: () => Promise<void>;
}

export function useDeviceHarness(options: DeviceHarnessOptions = {}): DeviceHarness {
  let bundle: Bundle | null = null;
  const scratches: Scratch[] = [];
  beforeAll(async () => {
    bundle = await buildBundle();
  });
  afterEach(async () => {
    await options.beforeCleanup?.();
    stopAllServed();
    for (const item of scratches.splice(0)) await item.cleanup();
  });
  afterAll(async () => {
    await bundle?.cleanup();
  });
  return {
    get bundle(): Bundle {
      if (bundle === null)
        throw new Error("the bundle is built in beforeAll: read it inside a test or a hook");
      return bundle;
    },
    async scratch(name: string): Promise<Scratch> {
      const created = await Scratch.create(name);
      scratches.push(created);
      return created;
    },
  };
}
