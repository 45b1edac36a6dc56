import { describe, expect, it } from "vitest";
import {
  decideSlot,
  describeWait,
  explainWaiting,
  type SlotInput,
} from "../../src/backpressure.ts";
import { Coordinator } from "../../src/coordinator.ts";
import { parseManifest } from "../../src/manifest/parse.ts";
import type { Manifest, TaskSpec } from "../../src/manifest/types.ts";
import { taskDefinitionFor, verifyTaskDefinition } from "../../src/packages.ts";
import { applyPackage, getRunDetail, startRun } from "../../src/operations.ts";
import type { Store, StoreTx } from "../../src/ports.ts";
import { PROFILES, type Profile } from "../../src/profiles.ts";
import { Prng } from "../../src/sim/prng.ts";
import { SimulatedExecutor } from "../../src/sim/simulated-executor.ts";
import { VirtualClock } from "../../src/sim/virtual-clock.ts";

import { manualStart, task } from "../support/fixtures.ts";
import { driverNamed, openTestStore } from "../support/drivers.ts";

/**
 * Backpressure (src/backpressure.ts): the rule alone, then through the coordinator over a real
 * sql.js store with the simulated executor on a virtual clock.
 */

const base: SlotInput = {
  task: "fetch",
  executor: "local_process",
  taskLimit: null,
  taskLive: 0,
  maxRunning: null,
  localLive: 0,
};

describe("the slot rule", () => {
  it("admits below both limits and holds at either", () => {
    expect(decideSlot(base)).toBeNull();
    expect(decideSlot({ ...base, taskLimit: 2, taskLive: 1 })).toBeNull();
    expect(decideSlot({ ...base, taskLimit: 2, taskLive: 2 })).toEqual({
      kind: "task_limit",
      task: "fetch",
      limit: 2,
      live: 2,
    });
    expect(decideSlot({ ...base, maxRunning: 4, localLive: 3 })).toBeNull();
    expect(decideSlot({ ...base, maxRunning: 4, localLive: 4 })).toEqual({
      kind: "runtime_limit",
      limit: 4,
      live: 4,
    });
  });

  it("names the task's own limit first, and never holds a remote task by the local limit", () => {
    expect(
      decideSlot({ ...base, taskLimit: 1, taskLive: 1, maxRunning: 1, localLive: 1 })?.kind,
    ).toBe("task_limit");
    expect(decideSlot({ ...base, executor: "remote_worker", maxRunning: 1, localLive: 9 })).toBe(
      null,
    );
    expect(
      decideSlot({ ...base, executor: "remote_worker", taskLimit: 1, taskLive: 1 })?.kind,
    ).toBe("task_limit");
  });

  it("refuses a limit outside its range instead of guessing", () => {
    expect(() => decideSlot({ ...base, taskLimit: 0 })).toThrow(/concurrency must be/);
    expect(() => decideSlot({ ...base, taskLimit: 1.5 })).toThrow(/concurrency must be/);
    expect(() => decideSlot({ ...base, maxRunning: 0 })).toThrow(/--max-running must be/);
  });

  it("says why a step waits", () => {
    expect(describeWait({ kind: "task_limit", task: "fetch", limit: 2, live: 2 })).toBe(
      'waiting: task "fetch" at its concurrency limit (2 of 2 running)',
    );
    expect(describeWait({ kind: "runtime_limit", limit: 4, live: 4 })).toBe(
      "waiting: runtime at --max-running 4",
    );
  });
});

describe("concurrency: in the manifest", () => {
  const manifestWith = (concurrency: string): string =>
    `package: bp\ntasks:\n  fetch:\n    run: ["true"]\n    concurrency: ${concurrency}\n`;

  it("takes a whole number from 1 to 1000 into the task and its definition digest", () => {
    const parsed = parseManifest(manifestWith("2"), "yaml");
    if (!parsed.ok) throw new Error(JSON.stringify(parsed.issues));
    const spec = parsed.manifest.tasks[0]!;
    expect(spec.concurrency).toBe(2);
    const limited = taskDefinitionFor("bp", 1, spec);
    expect(limited.concurrency).toBe(2);
    expect(verifyTaskDefinition(limited)).toBe(true);
    // Without one, nothing changes: the field is absent and the digest is the one stored before.
    const { concurrency: _omitted, ...plain } = spec;
    const unlimited = taskDefinitionFor("bp", 1, plain);
    expect("concurrency" in unlimited).toBe(false);
    expect(unlimited.definitionDigest).not.toBe(limited.definitionDigest);
    // A stored definition whose limit was changed no longer verifies.
    expect(verifyTaskDefinition({ ...limited, concurrency: 3 })).toBe(false);
  });

  it.each([
    ["0", "must be at least 1"],
    ["1001", "must be at most 1000"],
    ["1.5", "must be a whole number"],
    ["two", "must be a whole number from 1 to 1000"],
  ])("refuses concurrency: %s with a clear error", (value, message) => {
    const parsed = parseManifest(manifestWith(value), "yaml");
    expect(parsed.ok).toBe(false);
    if (parsed.ok) return;
    expect(parsed.issues).toEqual([{ path: "tasks.fetch.concurrency", message }]);
  });
});

interface World {
  readonly store: Store;
  readonly clock: VirtualClock;
  readonly coordinator: Coordinator;
  /** Starts one run per entry, in this order (run ids sort in start order). */
  readonly start: (
    targets: readonly { kind: "workflow" | "task"; name: string }[],
  ) => Promise<string[]>;
  /** Live attempts per task name, read from the store. */
  readonly live: () => Promise<Record<string, number>>;
}

const SECOND_MS = 1000;

async function world(
  tasks: readonly TaskSpec[],
  options: {
    profile?: Profile;
    maxRunning?: number | null;
    /** What the coordinator sees of the store (the world's own calls go to the store itself). */
    seen?: (store: Store) => Store;
  } = {},
): Promise<World> {
  const clock = new VirtualClock(1_900_000_000_000);
  let next = 0;
  const ids = { runId: () => `bp-${String((next += 1)).padStart(3, "0")}` };
  const store = await openTestStore(driverNamed("sqljs-memory"), clock.nowMs());
  const executor = new SimulatedExecutor({
    clock,
    prng: new Prng(3),
    // Every task runs for ten seconds of virtual time.
    outcome: () => ({ exitCode: 0, durationMs: 10 * SECOND_MS }),
  });
  const manifest: Manifest = {
    package: "bp",
    description: null,
    tasks: [...tasks],
    workflows: tasks.map((spec) => ({
      name: `w-${spec.name}`,
      description: null,
      steps: [{ name: "only", task: spec.name, needs: [] }],
    })),
    schedules: [],
  };
  await store.transaction(async (tx) =>
    applyPackage(tx, manifest, await tx.observe(clock.nowMs())),
  );
  const coordinator = new Coordinator({
    store: options.seen?.(store) ?? store,
    clock,
    ids,
    profile: options.profile ?? PROFILES.standalone,
    ...(options.maxRunning === undefined ? {} : { maxRunning: options.maxRunning }),
    executors: { local_process: executor },
  });
  return {
    store,
    clock,
    coordinator,
    start: async (targets) =>
      store.transaction(async (tx) => {
        const nowMs = await tx.observe(clock.nowMs());
        const runIds: string[] = [];
        for (const target of targets) {
          const { run } = await startRun(tx, manualStart("bp", target, ids.runId()), nowMs);
          runIds.push(run.id);
        }
        return runIds;
      }),
    live: async () =>
      store.transaction(async (tx) => {
        const counts: Record<string, number> = {};
        for (const spec of tasks)
          counts[spec.name] = await tx.countLiveTaskAttempts("bp", spec.name);
        return counts;
      }),
  };
}

/** The time each run's first attempt was admitted, in run order; null while it has none. */
async function admittedAt(store: Store, runIds: readonly string[]): Promise<(number | null)[]> {
  return store.transaction(async (tx) => {
    const out: (number | null)[] = [];
    for (const runId of runIds) out.push((await tx.getAttempts(runId))[0]?.createdAtMs ?? null);
    return out;
  });
}

async function statuses(store: Store, runIds: readonly string[]): Promise<string[]> {
  return store.transaction(async (tx) => {
    const out: string[] = [];
    for (const runId of runIds) out.push((await tx.getRun(runId))?.status ?? "missing");
    return out;
  });
}

interface StoreCall {
  readonly method: string;
  readonly args: readonly unknown[];
}

/**
 * `store` as the coordinator sees it in a test that watches it: each of its `kind`
 * transactions runs on a transaction that records every method called on it, and `ended`
 * gets the record when the transaction ends.
 */
function watchedStore(
  store: Store,
  kind: "read" | "transaction",
  ended: (calls: readonly StoreCall[]) => void,
): Store {
  const watched =
    <T>(fn: (tx: StoreTx) => Promise<T>) =>
    async (tx: StoreTx): Promise<T> => {
      const calls: StoreCall[] = [];
      const recording = new Proxy(tx, {
        get: (target, key) => {
          const value = Reflect.get(target, key) as unknown;
          if (typeof value !== "function") return value;
          return (...args: unknown[]) => {
            if (typeof key === "string") calls.push({ method: key, args });
            return (value as (...values: unknown[]) => unknown).apply(target, args);
          };
        },
      });
      try {
        return await fn(recording);
      } finally {
        ended(calls);
      }
    };
  return {
    dialect: store.dialect,
    driverName: store.driverName,
    close: () => store.close(),
    read: (fn) => (kind === "read" ? store.read(watched(fn)) : store.read(fn)),
    transaction: (fn, options) =>
      kind === "transaction"
        ? store.transaction(watched(fn), options)
        : store.transaction(fn, options),
  };
}

describe("the coordinator admits within the limits", () => {
  it("concurrency: 2 keeps at most two attempts of the task live and admits the waiting steps oldest first", async () => {
    const w = await world([task("fetch", ["sim"], { concurrency: 2 })]);
    const runIds = await w.start(
      Array.from({ length: 6 }, () => ({ kind: "workflow", name: "w-fetch" })),
    );
    const seen: number[] = [];
    let explained = false;
    for (let cycle = 0; cycle < 60; cycle += 1) {
      await w.coordinator.tick();
      const live = (await w.live()).fetch ?? 0;
      seen.push(live);
      expect(live).toBeLessThanOrEqual(2);
      const last = runIds[runIds.length - 1] ?? "";
      if (!explained && live === 2) {
        // The newest run waits: its ready step says why.
        const view = await w.store.transaction(async (tx) => {
          const detail = await getRunDetail(tx, last);
          return explainWaiting(tx, detail.run, detail.steps, detail.attempts, 32);
        });
        expect([...view.steps.values()]).toEqual([
          'waiting: task "fetch" at its concurrency limit (2 of 2 running)',
        ]);
        explained = true;
      }
      if ((await statuses(w.store, runIds)).every((status) => status === "succeeded")) break;
      w.clock.advance(SECOND_MS);
    }
    expect(explained).toBe(true);
    expect(await statuses(w.store, runIds)).toEqual(Array(6).fill("succeeded"));
    expect(Math.max(...seen)).toBe(2);
    // In order: each run was admitted no earlier than the one started before it.
    const admitted = (await admittedAt(w.store, runIds)).map((atMs) => atMs ?? Infinity);
    expect(admitted).toEqual([...admitted].sort((a, b) => a - b));
    await w.store.close();
  });

  it("--max-running 1 runs one local attempt at a time over every task, and holds no remote task", async () => {
    const w = await world(
      [
        task("a", ["sim"]),
        task("b", ["sim"]),
        task("far", ["sim"], { executor: "remote_worker", pool: "p1" }),
      ],
      { maxRunning: 1 },
    );
    const runIds = await w.start([
      { kind: "workflow", name: "w-a" },
      { kind: "workflow", name: "w-b" },
      { kind: "task", name: "a" },
      { kind: "workflow", name: "w-far" },
    ]);
    await w.coordinator.tick();
    // The remote step is admitted (a worker would lease it) although the local limit is reached.
    expect((await w.live()).far).toBe(1);
    for (let cycle = 0; cycle < 60; cycle += 1) {
      const live = await w.live();
      expect((live.a ?? 0) + (live.b ?? 0)).toBeLessThanOrEqual(1);
      const done = await statuses(w.store, runIds.slice(0, 3));
      if (done.every((status) => status === "succeeded")) break;
      if (cycle === 0) {
        const view = await w.store.transaction(async (tx) => {
          const detail = await getRunDetail(tx, runIds[1] ?? "");
          return explainWaiting(tx, detail.run, detail.steps, detail.attempts, 1);
        });
        expect([...view.steps.values()]).toEqual(["waiting: runtime at --max-running 1"]);
      }
      w.clock.advance(SECOND_MS);
      await w.coordinator.tick();
    }
    expect(await statuses(w.store, runIds.slice(0, 3))).toEqual(Array(3).fill("succeeded"));
    const admitted = (await admittedAt(w.store, runIds.slice(0, 2))).map(
      (atMs) => atMs ?? Infinity,
    );
    expect(admitted[0]).toBeLessThan(admitted[1] ?? -1);
    await w.store.close();
  });

  it("once a limit holds candidates back, the pass reads the rest of its pages in one read, each page at most 64, and still reaches a step pages on", async () => {
    // Each read transaction of the coordinator that listed candidates: its list calls' limits.
    const reads: number[][] = [];
    const counting = (store: Store): Store =>
      watchedStore(store, "read", (calls) => {
        const limits = calls
          .filter((call) => call.method === "listAdmissionCandidates")
          .map((call) => call.args[1] as number);
        if (limits.length > 0) reads.push(limits);
      });
    const w = await world(
      [task("a", ["sim"]), task("far", ["sim"], { executor: "remote_worker", pool: "p1" })],
      { profile: PROFILES.cluster, maxRunning: 1, seen: counting },
    );
    // 150 local steps, then a remote one: the 151st candidate, on the third page of 64.
    await w.start([
      ...Array.from({ length: 150 }, () => ({ kind: "workflow" as const, name: "w-a" })),
      { kind: "workflow", name: "w-far" },
    ]);
    await w.coordinator.tick();
    expect(await w.live()).toEqual({ a: 1, far: 1 });
    // The first page alone; the runtime is full after its first admission, so the second and
    // third pages (64 and 23) come in one read.
    expect(reads).toEqual([[64], [64, 64]]);
    await w.store.close();
  });

  it("a page that takes the runtime's last slot holds the local tasks' later candidates: no page transaction is spent finding the limit", async () => {
    // Each admission page transaction of the coordinator (one that counts the live attempts
    // against the limit and reads admission receipts): how many candidates it decided.
    const pages: number[] = [];
    const counting = (store: Store): Store =>
      watchedStore(store, "transaction", (calls) => {
        const decided = calls.filter((call) => call.method === "getAdmission").length;
        if (calls.some((call) => call.method === "countLiveAttempts") && decided > 0)
          pages.push(decided);
      });
    const w = await world([task("a", ["sim"])], {
      profile: PROFILES.cluster,
      maxRunning: 64,
      seen: counting,
    });
    // 100 local steps: the first page's 64 fill the runtime exactly, refusing none.
    await w.start(Array.from({ length: 100 }, () => ({ kind: "workflow" as const, name: "w-a" })));
    await w.coordinator.tick();
    expect(await w.live()).toEqual({ a: 64 });
    // One page transaction; the second page's 36 candidates wait without one.
    expect(pages).toEqual([64]);
    await w.store.close();
  });

  it("a task at its limit neither blocks another task on the edge budget nor lets its own later steps pass", async () => {
    // Edge decides one admission per cycle; five steps of a full task stand before one of another.
    const w = await world([task("full", ["sim"], { concurrency: 1 }), task("other", ["sim"])], {
      // The edge's admission budget, with a frontier wide enough to make every step ready at once.
      profile: { ...PROFILES.edge, frontier: { pageSize: 16, pages: 1 } },
      maxRunning: null,
    });
    const runIds = await w.start([
      ...Array.from({ length: 5 }, () => ({ kind: "workflow" as const, name: "w-full" })),
      { kind: "workflow", name: "w-other" },
    ]);
    await w.coordinator.tick();
    await w.coordinator.tick();
    expect(await w.live()).toEqual({ full: 1, other: 1 });
    const admitted = await admittedAt(w.store, runIds);
    expect(admitted.map((atMs) => atMs !== null)).toEqual([true, false, false, false, false, true]);
    // The held steps cost no immediate follow-up cycle: only the frontier or a slot moves them.
    for (let cycle = 0; cycle < 80; cycle += 1) {
      if ((await statuses(w.store, runIds)).every((status) => status === "succeeded")) break;
      w.clock.advance(SECOND_MS);
      await w.coordinator.tick();
      expect((await w.live()).full).toBeLessThanOrEqual(1);
    }
    expect(await statuses(w.store, runIds)).toEqual(Array(6).fill("succeeded"));
    const order = (await admittedAt(w.store, runIds.slice(0, 5))).map((atMs) => atMs ?? Infinity);
    expect(order).toEqual([...order].sort((a, b) => a - b));
    expect(new Set(order).size).toBe(5);
    await w.store.close();
  });

  it("one limit counts a task's ordinary runs and its workflow steps together", async () => {
    const w = await world([task("fetch", ["sim"], { concurrency: 1 })]);
    const runIds = await w.start([
      { kind: "task", name: "fetch" },
      { kind: "workflow", name: "w-fetch" },
    ]);
    await w.coordinator.tick();
    expect((await w.live()).fetch).toBe(1);
    const waiting = await w.store.transaction(async (tx) => {
      const detail = await getRunDetail(tx, runIds[1] ?? "");
      return explainWaiting(tx, detail.run, detail.steps, detail.attempts, null);
    });
    expect([...waiting.steps.values()]).toEqual([
      'waiting: task "fetch" at its concurrency limit (1 of 1 running)',
    ]);
    for (let cycle = 0; cycle < 40; cycle += 1) {
      if ((await statuses(w.store, runIds)).every((status) => status === "succeeded")) break;
      w.clock.advance(SECOND_MS);
      await w.coordinator.tick();
      expect((await w.live()).fetch).toBeLessThanOrEqual(1);
    }
    expect(await statuses(w.store, runIds)).toEqual(["succeeded", "succeeded"]);
    await w.store.close();
  });
});
