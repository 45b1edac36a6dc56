import { Coordinator, type FaultPoint } from "../coordinator.ts";
import { digestOf, type Digest } from "../digest.ts";
import { isQlrError } from "../errors.ts";
import type { Manifest, TaskSpec, WorkflowSpec } from "../manifest/types.ts";
import { TERMINAL_RUN_STATUSES, type Run } from "../model.ts";
import { applyPackage, cancelRun, startRun } from "../operations.ts";
import {
  transactAtStoreTime,
  type IdSource,
  type PurgedRun,
  type Store,
  type StoreTransactionOptions,
  type StoreTx,
} from "../ports.ts";
import type { RetentionPolicy } from "../retention.ts";
import { PROFILES, type ProfileName } from "../profiles.ts";
import { Prng } from "./prng.ts";
import { SimulatedExecutor } from "./simulated-executor.ts";
import { VirtualClock } from "./virtual-clock.ts";

/**
 * The deterministic simulation: one seed drives a random package (DAG workflows, tasks with
 * timeouts and retry policies), run starts, cancels, executor outcomes and durations,
 * coordinator crashes between transactions, lost commit responses and clock steps, on a
 * virtual clock. The same seed yields the same final state on every runtime.
 */

export interface SimulationOptions {
  readonly seed: number;
  readonly actions?: number;
  readonly maxDrainTicks?: number;
  readonly profile?: ProfileName;
  /** Virtual start time; a store shared by several seeds needs each to start after the last. */
  readonly startMs?: number;
  /** Arms the store's driver to lose the next commit response (commit, then throw), and disarms it. */
  readonly lostCommitResponses?: { arm(): void; disarm(): void };
  /** Called after every action, for pages that animate the simulation. */
  readonly onAction?: (entry: SimulationLogEntry) => void | Promise<void>;
  /**
   * The simulated executor's fault probabilities (absent: its defaults). Its PRNG draws are the
   * same whatever they are, so only the outcomes of those draws change.
   */
  readonly executorFaults?: { readonly failureRate?: number; readonly spawnFailureRate?: number };
  /**
   * Retention on: the coordinator purges by this policy, crashes may also land on the purge
   * stage's fault points, and after the drain the clock moves past the horizon so every
   * expired run is purged before the simulation ends. Absent: nothing is purged (and the PRNG
   * sequence is the one of earlier versions).
   */
  readonly retention?: RetentionPolicy;
}

/** One purge as the coordinator reported it, with the virtual time of its commit. */
export interface PurgeRecord {
  readonly run: PurgedRun;
  readonly atMs: number;
}

export interface SimulationLogEntry {
  readonly index: number;
  readonly action: string;
  readonly atMs: number;
  readonly detail: string;
}

export interface SimulationResult {
  readonly seed: number;
  readonly packageName: string;
  readonly log: SimulationLogEntry[];
  readonly executor: SimulatedExecutor;
  readonly finalDigest: Digest;
  readonly drained: boolean;
  readonly crashes: number;
  readonly runs: number;
  readonly idempotentTasks: ReadonlySet<string>;
  /** The virtual time when the simulation ended. */
  readonly endMs: number;
  /** Every purge, in order (empty without retention). */
  readonly purges: readonly PurgeRecord[];
  /** Every run id the simulation started (purged ones included). */
  readonly runIds: ReadonlySet<string>;
}

class SimulatedCrash extends Error {
  constructor(point: string) {
    super(`simulated coordinator crash at ${point}`);
    this.name = "SimulatedCrash";
  }
}

/** A store handle that dies with its coordinator: after a crash nothing more reaches the database. */
class KillableStore implements Store {
  dead = false;
  readonly dialect;
  readonly driverName;
  private readonly inner: Store;
  constructor(inner: Store) {
    this.inner = inner;
    this.dialect = inner.dialect;
    this.driverName = inner.driverName;
  }
  transaction<T>(fn: (tx: StoreTx) => Promise<T>, options?: StoreTransactionOptions): Promise<T> {
    if (this.dead) return Promise.reject(new SimulatedCrash("a transaction after the crash"));
    return this.inner.transaction(fn, options);
  }
  read<T>(fn: (tx: StoreTx) => Promise<T>): Promise<T> {
    if (this.dead) return Promise.reject(new SimulatedCrash("a transaction after the crash"));
    return this.inner.read(fn);
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

const FAULT_POINTS: readonly FaultPoint[] = [
  "admission.after_commit",
  "dispatch.after_starting",
  "dispatch.after_spawn",
  "dispatch.after_running",
  "completion.before_commit",
  "completion.after_commit",
  "cancellation.after_stop",
];
const PURGE_FAULT_POINTS: readonly FaultPoint[] = ["purge.after_commit", "purge.after_discard"];

export function randomManifest(prng: Prng, packageName: string): Manifest {
  const taskCount = prng.int(1, 3);
  const tasks: TaskSpec[] = Array.from({ length: taskCount }, (_, index) => {
    const idempotent = prng.chance(0.4);
    return {
      name: `t${index}`,
      argv: ["sim", `t${index}`],
      shell: false,
      timeoutMs: prng.int(1_000, 8_000),
      env: {},
      cwd: null,
      executor: "local_process",
      pool: null,
      retry: { max: prng.int(0, 2), backoffMs: prng.int(0, 1_000), idempotent },
    };
  });
  const workflowCount = prng.int(1, 2);
  const workflows: WorkflowSpec[] = Array.from({ length: workflowCount }, (_, workflowIndex) => {
    const stepCount = prng.int(1, 7);
    const steps = Array.from({ length: stepCount }, (_, index) => {
      const needs = Array.from({ length: index }, (__, earlier) => earlier)
        .filter(() => prng.chance(0.35))
        .map((earlier) => `s${earlier}`);
      return { name: `s${index}`, task: prng.pick(tasks).name, needs };
    });
    return { name: `w${workflowIndex}`, description: null, steps };
  });
  return { package: packageName, description: null, tasks, workflows, schedules: [] };
}

export async function simulate(
  store: Store,
  options: SimulationOptions,
): Promise<SimulationResult> {
  const prng = new Prng(options.seed);
  const startMs = options.startMs ?? 1_800_000_000_000;
  const clock = new VirtualClock(startMs);
  const faults = options.executorFaults ?? {};
  const executor = new SimulatedExecutor({
    clock,
    prng: new Prng(options.seed ^ 0x5eed),
    ...(faults.failureRate === undefined ? {} : { failureRate: faults.failureRate }),
    ...(faults.spawnFailureRate === undefined ? {} : { spawnFailureRate: faults.spawnFailureRate }),
  });
  const packageName = `sim-${(options.seed >>> 0).toString(36)}`.slice(0, 32);
  let runCounter = 0;
  const ids: IdSource = { runId: () => `${packageName}-r${(runCounter += 1)}` };
  const manifest = randomManifest(prng, packageName);
  const idempotentTasks = new Set(
    manifest.tasks
      .filter((task) => task.retry.idempotent)
      .map((task) => `${packageName}/${task.name}`),
  );
  const log: SimulationLogEntry[] = [];
  const record = async (action: string, detail: string): Promise<void> => {
    const entry = { index: log.length, action, atMs: clock.nowMs(), detail };
    log.push(entry);
    await options.onAction?.(entry);
  };
  let crashes = 0;
  let crashAt: FaultPoint | null = null;
  let handle = new KillableStore(store);
  const profile = PROFILES[options.profile ?? "standalone"];
  const retention = options.retention ?? null;
  const faultPoints = retention === null ? FAULT_POINTS : [...FAULT_POINTS, ...PURGE_FAULT_POINTS];
  const purges: PurgeRecord[] = [];

  const makeCoordinator = (storeHandle: KillableStore): Coordinator =>
    new Coordinator({
      store: storeHandle,
      clock,
      ids,
      profile,
      executors: { local_process: executor },
      retention,
      onPurge: (run, atMs) => purges.push({ run, atMs }),
      fault: (point) => {
        if (crashAt === point) {
          crashAt = null;
          storeHandle.dead = true;
          throw new SimulatedCrash(point);
        }
      },
    });
  let coordinator = makeCoordinator(handle);

  await transactAtStoreTime(store, clock, (tx, nowMs) => applyPackage(tx, manifest, nowMs));
  await record(
    "apply",
    `${manifest.tasks.length} tasks, ${manifest.workflows.map((workflow) => `${workflow.name}:${workflow.steps.length}`).join(" ")}`,
  );

  // The simulation remembers its own run ids, so a store shared by many seeds is never scanned.
  const runIds = new Set<string>();
  const liveRuns = async (): Promise<Run[]> =>
    store.transaction(async (tx) => {
      const live: Run[] = [];
      for (const id of [...runIds].sort()) {
        const run = await tx.getRun(id);
        if (run !== null && !TERMINAL_RUN_STATUSES.has(run.status)) live.push(run);
      }
      return live;
    });

  // After a crash a fresh coordinator must finish start-up recovery before it ticks; recovery
  // itself fails closed while the clock reads earlier than the store's last observation.
  let recoveryPending = false;
  const recoverIfNeeded = async (): Promise<boolean> => {
    if (!recoveryPending) return true;
    try {
      const decisions = await coordinator.recover();
      recoveryPending = false;
      await record(
        "recover",
        decisions.map((decision) => `${decision.attemptId}:${decision.decision}`).join(" ") ||
          "nothing to recover",
      );
      return true;
    } catch (error) {
      if (!isQlrError(error, "clock_regression")) throw error;
      await record("recover-refused", error.message);
      return false;
    }
  };

  const tick = async (): Promise<void> => {
    if (!(await recoverIfNeeded())) return;
    const report = await coordinator.tick();
    const errors = report.stages.flatMap((stage) =>
      stage.errors.map((error) => `${stage.name}:${error.code}`),
    );
    await record(
      "tick",
      `${report.stages.map((stage) => `${stage.name}=${stage.processed}`).join(" ")}${errors.length > 0 ? ` errors ${errors.join(",")}` : ""}`,
    );
    if (handle.dead) {
      crashes += 1;
      handle = new KillableStore(store);
      coordinator = makeCoordinator(handle);
      recoveryPending = true;
      await recoverIfNeeded();
    }
  };

  const actions = options.actions ?? 120;
  for (let index = 0; index < actions; index += 1) {
    const roll = prng.next();
    if (roll < 0.1) {
      const workflow = prng.chance(0.8);
      const target = workflow
        ? ({ kind: "workflow", name: prng.pick(manifest.workflows).name } as const)
        : ({ kind: "task", name: prng.pick(manifest.tasks).name } as const);
      const key = prng.chance(0.2) ? `k${prng.int(0, 3)}` : null;
      try {
        const { run, created } = await transactAtStoreTime(store, clock, (tx, nowMs) =>
          startRun(
            tx,
            {
              package: packageName,
              target,
              idempotencyKey: key === null ? null : `${packageName}-${key}`,
              scheduleName: null,
              runId: ids.runId(),
            },
            nowMs,
          ),
        );
        runIds.add(run.id);
        await record(
          "start",
          `${run.id} ${target.kind}:${target.name}${created ? "" : " (same idempotency key: same run)"}`,
        );
      } catch (error) {
        if (!isQlrError(error, "conflict")) throw error;
        await record("start-refused", error.message);
      }
    } else if (roll < 0.14) {
      const live = await liveRuns();
      if (live.length > 0) {
        const run = prng.pick(live);
        await transactAtStoreTime(store, clock, (tx, nowMs) =>
          cancelRun(tx, run.id, nowMs, "user"),
        );
        await record("cancel", run.id);
      }
    } else if (roll < 0.17) {
      crashAt = prng.pick(faultPoints);
      await record("arm-crash", `the coordinator dies at ${crashAt}`);
    } else if (roll < 0.19 && options.lostCommitResponses !== undefined) {
      // Only the coordinator's transactions lose responses: a tick retries through the store.
      options.lostCommitResponses.arm();
      await record("lose-commit-response", "the next transaction's response is lost");
      await tick();
      options.lostCommitResponses.disarm();
    } else if (roll < 0.21) {
      const backMs = prng.int(1, 5_000);
      clock.set(clock.nowMs() - backMs);
      await tick();
      clock.advance(backMs);
      await record("clock-step", `the host clock stepped back ${backMs} ms for one tick`);
    } else if (roll < 0.23) {
      const running = [...executor.processes.values()].filter(
        (simulated) => simulated.finishAtMs > clock.nowMs(),
      );
      if (running.length > 0) {
        const victim = prng.pick(running);
        executor.killExternally(victim.attemptId);
        await record("kill", victim.attemptId);
      }
    } else if (roll < 0.5) {
      clock.advance(prng.int(1, 2_000));
    } else {
      await tick();
    }
  }

  // Drain: no new work, let everything settle.
  crashAt = null;
  let drained = false;
  const maxDrain = options.maxDrainTicks ?? 600;
  for (let index = 0; index < maxDrain; index += 1) {
    if ((await liveRuns()).length === 0) {
      drained = true;
      break;
    }
    clock.advance(250);
    await tick();
  }

  if (retention !== null && drained) {
    // Past the horizon every terminal run has expired: a few cycles (bounded by the purge
    // budget) must purge them all.
    clock.advance(retention.horizonMs + 1);
    for (
      let index = 0;
      index <
      1 + Math.ceil(runIds.size / Math.max(1, profile.purge.pageSize * profile.purge.pages));
      index += 1
    )
      await tick();
  }

  const final = await store.transaction(async (tx) => {
    const detail = [];
    for (const id of [...runIds].sort()) {
      const run = await tx.getRun(id);
      if (run === null) continue;
      detail.push({
        id: run.id,
        status: run.status,
        steps: (await tx.getSteps(run.id)).map((step) => [
          step.name,
          step.status,
          step.attemptCount,
        ]),
        attempts: (await tx.getAttempts(run.id)).map((attempt) => [attempt.id, attempt.status]),
        events: digestOf(
          (await tx.listEvents(run.id, 0, 500)).map((event) => [
            event.seq,
            event.type,
            event.atMs - startMs,
          ]),
        ),
      });
    }
    return detail;
  });
  return {
    seed: options.seed,
    packageName,
    log,
    executor,
    finalDigest: digestOf(final),
    drained,
    crashes,
    runs: final.length,
    idempotentTasks,
    endMs: clock.nowMs(),
    purges,
    runIds,
  };
}
