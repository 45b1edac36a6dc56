import type { CompletionFacts } from "../../src/execution.ts";
import type { Manifest, TaskSpec } from "../../src/manifest/types.ts";
import { applyPackage, startRun } from "../../src/operations.ts";
import type { Clock, Store } from "../../src/ports.ts";
import type { RunTarget, StartRunRequest } from "../../src/run-start.ts";

export function task(
  name: string,
  argv: string[] = ["true"],
  overrides: Partial<TaskSpec> = {},
): TaskSpec {
  return {
    name,
    argv,
    shell: false,
    timeoutMs: 60_000,
    env: {},
    cwd: null,
    executor: "local_process",
    pool: null,
    retry: { max: 0, backoffMs: 0, idempotent: false },
    ...overrides,
  };
}

/** A diamond: a → b, a → c, {b, c} → d. */
export function diamondManifest(
  packageName = "demo",
  overrides: { tasks?: TaskSpec[] } = {},
): Manifest {
  return {
    package: packageName,
    description: null,
    tasks: overrides.tasks ?? [task("work")],
    workflows: [
      {
        name: "diamond",
        description: null,
        steps: [
          { name: "a", task: "work", needs: [] },
          { name: "b", task: "work", needs: ["a"] },
          { name: "c", task: "work", needs: ["a"] },
          { name: "d", task: "work", needs: ["b", "c"] },
        ],
      },
    ],
    schedules: [],
  };
}

/** A wide workflow of independent steps, to fill candidate pages. */
export function wideManifest(packageName: string, width: number): Manifest {
  const steps = Array.from({ length: width }, (_, index) => ({
    name: `s${String(index).padStart(3, "0")}`,
    task: "work",
    needs: [] as string[],
  }));
  return {
    package: packageName,
    description: null,
    tasks: [task("work")],
    workflows: [{ name: "wide", description: null, steps }],
    schedules: [],
  };
}

/** A controllable clock for tests. */
export class TestClock {
  nowMsValue: number;
  constructor(startMs = 1_800_000_000_000) {
    this.nowMsValue = startMs;
  }
  nowMs(): number {
    return this.nowMsValue;
  }
  advance(ms: number): number {
    this.nowMsValue += ms;
    return this.nowMsValue;
  }
}

/** Deterministic lease secrets for tests: distinct, and inside the lease secret pattern. */
export class SequentialSecrets {
  private next = 0;
  leaseSecret(): string {
    this.next += 1;
    return `lease-secret-${String(this.next).padStart(8, "0")}`;
  }
}

/** Deterministic portable run ids for tests. */
export class SequentialIds {
  private next = 0;
  private readonly prefix: string;
  constructor(prefix = "run") {
    this.prefix = prefix;
  }
  runId(): string {
    this.next += 1;
    return `${this.prefix}-${String(this.next).padStart(6, "0")}`;
  }
}

/** A start by hand, as `qlr run` asks for it: no idempotency key, no schedule. */
export function manualStart(
  packageName: string,
  target: RunTarget,
  runId: string,
  input?: unknown,
): StartRunRequest {
  return {
    package: packageName,
    target,
    idempotencyKey: null,
    scheduleName: null,
    runId,
    ...(input === undefined ? {} : { input }),
  };
}

export function workflowStart(
  packageName: string,
  workflow: string,
  runId: string,
  input?: unknown,
): StartRunRequest {
  return manualStart(packageName, { kind: "workflow", name: workflow }, runId, input);
}

export function taskStart(packageName: string, task: string, runId: string): StartRunRequest {
  return manualStart(packageName, { kind: "task", name: task }, runId);
}

/** Applies `manifest` and starts `target` of it by hand, in one transaction at store time. */
export async function applyAndStart(
  store: Store,
  clock: Clock,
  manifest: Manifest,
  target: RunTarget,
  runId: string,
): Promise<string> {
  return store.transaction(async (tx) => {
    const nowMs = await tx.observe(clock.nowMs());
    await applyPackage(tx, manifest, nowMs);
    const { run } = await startRun(tx, manualStart(manifest.package, target, runId), nowMs);
    return run.id;
  });
}

/** What a launcher reports for a process that ran from `startedAtMs` to `finishedAtMs`: killed by SIGTERM when `exitCode` is null. */
export function exitFacts(
  startedAtMs: number,
  finishedAtMs: number,
  exitCode: number | null = 0,
  extra: Partial<CompletionFacts> = {},
): CompletionFacts {
  return {
    startedAtMs,
    finishedAtMs,
    exitCode,
    signal: exitCode === null ? "SIGTERM" : null,
    stopReason: null,
    spawnError: null,
    ...extra,
  };
}
