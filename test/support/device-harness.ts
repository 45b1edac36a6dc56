/**
 * The device suites' shared setup: the `qlr` bundle built once per file, temp folders made per
 * test, and after each test every served child stopped and every folder removed.
 *
 * Concurrent suites (`describe.concurrent`) pass their test's context to `scratch`: that
 * folder, and every process started on it (runtimes and supervisors name it on their command
 * line, tasks carry its tag), is removed when that test finishes, and no test's cleanup touches
 * another's processes. The served children left over are stopped once, after the file.
 */
import { afterAll, afterEach, beforeAll, type TestContext } from "vitest";
import { buildBundle, type Bundle } from "./bundle.ts";
import { Scratch } from "./scratch.ts";
import { type Served, startServe, stopAllServed, type ServeOptions } from "./serve-child.ts";

export interface DeviceHarness {
  /** The built bundle; read it inside a test or a hook (it is built in `beforeAll`). */
  readonly bundle: Bundle;
  /**
   * A temp folder removed after the test: after this test alone when its context is given
   * (concurrent suites), else after each test of the file.
   */
  scratch(name: string, test?: TestContext): Promise<Scratch>;
  /** `qlr serve` on the folder's state dir, from this file's bundle. */
  serve(dir: Scratch, options?: ServeOptions): Promise<Served>;
}

export interface DeviceHarnessOptions {
  /** Runs after each test before the served children are stopped (e.g. stopping in-process runtimes). */
  readonly beforeCleanup?: () => Promise<void>;
  /**
   * The file's tests run concurrently: no hook after one test may stop the served children of
   * the others, so they are stopped after the file (each test's own end with its scratch).
   */
  readonly concurrent?: boolean;
}

export function useDeviceHarness(options: DeviceHarnessOptions = {}): DeviceHarness {
  let bundle: Bundle | null = null;
  const scratches: Scratch[] = [];
  beforeAll(async () => {
    bundle = await buildBundle();
  });
  afterEach(async () => {
    await options.beforeCleanup?.();
    if (options.concurrent !== true) stopAllServed();
    for (const item of scratches.splice(0)) await item.cleanup();
  });
  afterAll(async () => {
    stopAllServed();
    await bundle?.cleanup();
  });
  const harness: DeviceHarness = {
    get bundle(): Bundle {
      if (bundle === null)
        throw new Error("the bundle is built in beforeAll: read it inside a test or a hook");
      return bundle;
    },
    async scratch(name: string, test?: TestContext): Promise<Scratch> {
      const created = await Scratch.create(name);
      if (test === undefined) scratches.push(created);
      else test.onTestFinished(() => created.cleanup());
      return created;
    },
    serve(dir: Scratch, serveOptions: ServeOptions = {}): Promise<Served> {
      return startServe(harness.bundle, dir.stateDir, serveOptions);
    },
  };
  return harness;
}
