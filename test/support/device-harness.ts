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
import type { Api } from "./api-client.ts";
import { buildBundle, type Bundle } from "./bundle.ts";
import { Scratch, type WorkflowSpec } from "./scratch.ts";
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
  /**
   * The opening most device tests share: a scratch folder, a manifest of the deployment's
   * tasks and workflows, `qlr serve` on it, and the package applied.
   */
  deploy(name: string, deployment: Deployment): Promise<Deployed>;
}

/** What a test deploys on a fresh runtime; everything but the tasks and workflows has a default. */
export interface Deployment {
  /** The package name; default the scratch folder's name. */
  readonly packageName?: string;
  /** The manifest's tasks, written with the scratch folder's helpers (`dir.task`, `dir.gate`…). */
  readonly tasks: (dir: Scratch) => Record<string, Record<string, unknown>>;
  readonly workflows: Record<string, WorkflowSpec>;
  /**
   * How the package reaches the runtime: `POST /packages` once it serves (the default), or
   * `--apply` at start-up (the manifest a restarted runtime is started with again).
   */
  readonly applyAt?: "http" | "start-up";
  readonly serve?: ServeOptions;
}

export interface Deployed {
  readonly dir: Scratch;
  readonly served: Served;
  readonly api: Api;
  /** The manifest file, to apply again on a restart. */
  readonly manifestFile: string;
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
    async deploy(name: string, deployment: Deployment): Promise<Deployed> {
      const dir = await harness.scratch(name);
      const { file, text } = await dir.manifest(
        deployment.packageName ?? name,
        deployment.tasks(dir),
        deployment.workflows,
      );
      const atStartUp = deployment.applyAt === "start-up";
      const served = await harness.serve(dir, {
        ...deployment.serve,
        ...(atStartUp ? { apply: [file] } : {}),
      });
      if (!atStartUp) await served.api.apply(text);
      return { dir, served, api: served.api, manifestFile: file };
    },
  };
  return harness;
}
