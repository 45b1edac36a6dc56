/**
 * What the simulation page and its Node twin share: the settings of one case and their URL
 * form, the simulate() options built from them and the digests the page displays. The lossy
 * driver wrapper is storage/lossy-driver.ts, the same one the simulation tests use.
 * Isomorphic: no DOM, no node:*.
 */
import { digestOf, type Digest } from "../../../src/digest.ts";
import { TERMINAL_RUN_STATUSES, type RunStatus } from "../../../src/model.ts";
import type {
  SimulationLogEntry,
  SimulationOptions,
  SimulationResult,
} from "../../../src/sim/simulation.ts";
import type { Store } from "../../../src/ports.ts";
import type { LossyDriver } from "../../../storage/lossy-driver.ts";
import type { DagStep } from "../shared/dag.ts";

export type SimStoreKind = "sqljs" | "pglite";

export interface SimSettings {
  readonly seed: number;
  readonly store: SimStoreKind;
  readonly actions: number;
  /** Let the store lose commit responses (commit, then throw), as the Node simulation tests do. */
  readonly lostCommits: boolean;
  /** The simulated executor's fault probabilities; null keeps its defaults. */
  readonly failureRate: number | null;
  readonly spawnFailureRate: number | null;
  /** Animation delay per logged action. */
  readonly delayMs: number;
}

export const DEFAULT_SETTINGS: SimSettings = {
  seed: 42,
  store: "sqljs",
  actions: 120,
  lostCommits: true,
  failureRate: null,
  spawnFailureRate: null,
  delayMs: 80,
};

/** The store's opening time and the simulation's virtual start, as in test/sim. */
export const STORE_OPENED_AT_MS = 1_700_000_000_000;
export const SIM_START_MS = 1_800_000_000_000;
export const MAX_SEED = 0xffffffff;
export const MAX_ACTIONS = 2_000;

function intIn(text: string | null, min: number, max: number): number | null {
  if (text === null || !/^\d+$/.test(text.trim())) return null;
  const value = Number(text);
  return Number.isSafeInteger(value) && value >= min && value <= max ? value : null;
}

function rate(text: string | null): number | null {
  if (text === null || text.trim() === "") return null;
  const value = Number(text);
  return Number.isFinite(value) && value >= 0 && value <= 1 ? value : null;
}

/** `#seed=42&store=pglite&actions=120&lost=1&fail=0.3&spawnfail=0.05&delay=80`; anything invalid keeps its default. */
export function settingsFromHash(hash: string): { settings: SimSettings; hasSeed: boolean } {
  const params = new URLSearchParams(hash.replace(/^#/, ""));
  const seed = intIn(params.get("seed"), 0, MAX_SEED);
  const store = params.get("store");
  const lost = params.get("lost");
  return {
    hasSeed: seed !== null,
    settings: {
      seed: seed ?? DEFAULT_SETTINGS.seed,
      store: store === "pglite" || store === "sqljs" ? store : DEFAULT_SETTINGS.store,
      actions: intIn(params.get("actions"), 1, MAX_ACTIONS) ?? DEFAULT_SETTINGS.actions,
      lostCommits: lost === null ? DEFAULT_SETTINGS.lostCommits : lost !== "0",
      failureRate: rate(params.get("fail")),
      spawnFailureRate: rate(params.get("spawnfail")),
      delayMs: intIn(params.get("delay"), 0, 5_000) ?? DEFAULT_SETTINGS.delayMs,
    },
  };
}

export function settingsToHash(settings: SimSettings): string {
  const params = new URLSearchParams({ seed: String(settings.seed), store: settings.store });
  if (settings.actions !== DEFAULT_SETTINGS.actions)
    params.set("actions", String(settings.actions));
  if (!settings.lostCommits) params.set("lost", "0");
  if (settings.failureRate !== null) params.set("fail", String(settings.failureRate));
  if (settings.spawnFailureRate !== null)
    params.set("spawnfail", String(settings.spawnFailureRate));
  if (settings.delayMs !== DEFAULT_SETTINGS.delayMs) params.set("delay", String(settings.delayMs));
  return `#${params.toString()}`;
}

/** The options simulate() gets for a case; everything not named here is simulate()'s default. */
export function simulationOptions(
  settings: SimSettings,
  lossy: LossyDriver,
  onAction?: SimulationOptions["onAction"],
): SimulationOptions {
  const executorFaults = {
    ...(settings.failureRate === null ? {} : { failureRate: settings.failureRate }),
    ...(settings.spawnFailureRate === null ? {} : { spawnFailureRate: settings.spawnFailureRate }),
  };
  return {
    seed: settings.seed,
    startMs: SIM_START_MS,
    actions: settings.actions,
    ...(settings.lostCommits ? { lostCommitResponses: lossy } : {}),
    ...(Object.keys(executorFaults).length > 0 ? { executorFaults } : {}),
    ...(onAction === undefined ? {} : { onAction }),
  };
}

/** A digest of the whole action log, times relative to the start. */
export function logDigest(log: readonly SimulationLogEntry[], startMs = SIM_START_MS): Digest {
  return digestOf(
    log.map((entry) => [entry.index, entry.action, entry.atMs - startMs, entry.detail]),
  );
}

/** A digest of every attempt the executor spawned and how often (exactly once each). */
export function spawnDigest(result: Pick<SimulationResult, "executor">): Digest {
  return digestOf(
    [...result.executor.spawnCounts.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
  );
}

export type ActionKind = "fault" | "recovery" | "run" | "tick" | "setup";

export function actionKind(action: string): ActionKind {
  switch (action) {
    case "arm-crash":
    case "lose-commit-response":
    case "clock-step":
    case "kill":
    case "recover-refused":
      return "fault";
    case "recover":
      return "recovery";
    case "start":
    case "start-refused":
    case "cancel":
      return "run";
    case "apply":
      return "setup";
    default:
      return "tick";
  }
}

export interface FaultTally {
  readonly label: string;
  readonly count: number;
  readonly note: string;
}

/** Which faults the seed produced: from the log, and from the executor's simulated processes. */
export function faultTally(
  result: Pick<SimulationResult, "log" | "executor" | "crashes">,
): FaultTally[] {
  const count = (action: string): number =>
    result.log.filter((entry) => entry.action === action).length;
  const processes = [...result.executor.processes.values()];
  return [
    {
      label: "Coordinator crashes",
      count: result.crashes,
      note: `${count("arm-crash")} armed at a fault point; each crash is followed by recovery`,
    },
    {
      label: "Recoveries",
      count: count("recover"),
      note: `${count("recover-refused")} refused while the clock read earlier than the store`,
    },
    {
      label: "Lost commit responses",
      count: count("lose-commit-response"),
      note: "the transaction committed, its answer was lost",
    },
    {
      label: "Clock steps back",
      count: count("clock-step"),
      note: "the host clock stepped back for one tick",
    },
    {
      label: "External kills",
      count: count("kill"),
      note: "kill -9 of a task from outside the runtime",
    },
    {
      label: "Tick errors",
      count: result.log.filter(
        (entry) => entry.action === "tick" && entry.detail.includes(" errors "),
      ).length,
      note: "ticks in which a stage reported errors",
    },
    {
      label: "Process failures",
      count: processes.filter((process) => process.exitCode !== null && process.exitCode !== 0)
        .length,
      note: "simulated processes that exited non-zero",
    },
    {
      label: "Spawn failures",
      count: processes.filter((process) => process.spawnError !== null).length,
      note: "spawns that failed outright",
    },
    {
      label: "Stops",
      count: processes.filter((process) => process.stopReason !== null).length,
      note: "processes stopped by the runtime (cancel, timeout)",
    },
  ];
}

export interface SimRunView {
  readonly id: string;
  readonly kind: string;
  readonly target: string;
  readonly status: string;
  readonly steps: DagStep[];
}

/** The runs of a store as DAG input, oldest first (run ids end in a counter: r1, r2, …). */
export async function readRuns(store: Store): Promise<SimRunView[]> {
  return store.transaction(async (tx) => {
    const runs = await tx.listRuns({ status: null, cursor: null, limit: 500 });
    const counter = (id: string): number => Number(/-r(\d+)$/.exec(id)?.[1] ?? 0);
    runs.sort((a, b) => counter(a.id) - counter(b.id));
    const views: SimRunView[] = [];
    for (const run of runs) {
      let steps: DagStep[];
      if (run.kind === "workflow") {
        steps = (await tx.getSteps(run.id)).map((step) => ({
          name: step.name,
          task: step.task,
          needs: step.needs,
          status: step.status,
          attemptCount: step.attemptCount,
        }));
      } else {
        const attempts = await tx.getAttempts(run.id);
        const last = attempts.at(-1);
        steps = [
          {
            name: run.target,
            task: run.target,
            needs: [],
            status: last?.status ?? run.status,
            attemptCount: attempts.length,
          },
        ];
      }
      views.push({ id: run.id, kind: run.kind, target: run.target, status: run.status, steps });
    }
    return views;
  });
}

export function runTally(runs: readonly SimRunView[]): {
  total: number;
  live: number;
  byStatus: [string, number][];
} {
  const byStatus = new Map<string, number>();
  for (const run of runs) byStatus.set(run.status, (byStatus.get(run.status) ?? 0) + 1);
  return {
    total: runs.length,
    live: runs.filter((run) => !TERMINAL_RUN_STATUSES.has(run.status as RunStatus)).length,
    byStatus: [...byStatus.entries()].sort(),
  };
}
