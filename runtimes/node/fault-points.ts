/**
 * The named fault points of `qlr serve` and `qlr worker` (`QLR_FAULT_POINT`): the coordinator's
 * own, the device's windows the core cannot see (its launcher's stop and its HTTP intake), and
 * the remote worker's launch. The crash tests make the process SIGKILL itself exactly at one of
 * them, at its Nth reach (`QLR_FAULT_OCCURRENCE`, default 1), or fail that one cycle (or round)
 * there (`QLR_FAULT_ACTION=throw`). Unset, none of them does anything.
 */
import type { FaultPoint } from "../../src/coordinator.ts";

/** A stop's durable intent file is written (cancel, timeout, shutdown); no signal was sent, no supervisor asked. */
export const STOP_AFTER_INTENT = "stop.after_intent";
/** A stop's SIGTERM reached the task's group; its grace runs, the SIGKILL escalation is still to come. */
export const STOP_AFTER_TERM = "stop.after_term";
/** A change accepted over HTTP (a run started, a cancel, an apply) is committed; no answer has left, no cycle was woken. */
export const API_AFTER_CHANGE = "api.after_change";

export type RuntimeFaultPoint =
  typeof STOP_AFTER_INTENT | typeof STOP_AFTER_TERM | typeof API_AFTER_CHANGE;

export type DeviceFaultPoint = FaultPoint | RuntimeFaultPoint;

/** Every point `QLR_FAULT_POINT` accepts. */
export const DEVICE_FAULT_POINTS: readonly DeviceFaultPoint[] = [
  // In the order a run meets them: intake, frontier, admission, dispatch and launch, control.
  API_AFTER_CHANGE,
  "frontier.after_commit",
  "admission.after_commit",
  "dispatch.after_starting",
  "launch.after_journal",
  "dispatch.after_spawn",
  "dispatch.after_running",
  "cancellation.after_stop_intent",
  STOP_AFTER_INTENT,
  STOP_AFTER_TERM,
  "cancellation.after_stop",
  "completion.before_commit",
  "completion.after_commit",
  "notification.after_send",
  "purge.after_commit",
  "purge.discard_before_journal",
  "purge.after_discard",
];

export function isDeviceFaultPoint(value: string): value is DeviceFaultPoint {
  return (DEVICE_FAULT_POINTS as readonly string[]).includes(value);
}

/** The worker's launcher journaled the attempt; no supervisor was asked to spawn it. */
export const LAUNCH_AFTER_JOURNAL = "launch.after_journal";
/** The worker's task is spawned and its handle known; the handle is not yet in the lease file. */
export const WORKER_AFTER_SPAWN = "worker.after_spawn";

export type WorkerFaultPoint = typeof LAUNCH_AFTER_JOURNAL | typeof WORKER_AFTER_SPAWN;

/** Every point `QLR_FAULT_POINT` accepts for `qlr worker`, in the order a lease meets them. */
export const WORKER_FAULT_POINTS: readonly WorkerFaultPoint[] = [
  LAUNCH_AFTER_JOURNAL,
  WORKER_AFTER_SPAWN,
];

/** The most reaches a fault may wait for: a scenario names a small count, never a loop's. */
export const MAX_FAULT_OCCURRENCE = 1000;

export interface FaultInjection<Point extends string = DeviceFaultPoint> {
  readonly point: Point;
  /** Fires at this reach of the point (1 = the first). */
  readonly occurrence: number;
  /** `sigkill` dies there, as a power cut or an OOM kill would; `throw` fails that one cycle there. */
  readonly action: "sigkill" | "throw";
}

/**
 * Reads `QLR_FAULT_POINT`, `QLR_FAULT_OCCURRENCE` and `QLR_FAULT_ACTION` against the points one
 * command accepts (`qlr serve`'s by default); null when no point is set. A bad value is an
 * error naming what is accepted.
 */
export function faultInjectionFromEnv(env: NodeJS.ProcessEnv): FaultInjection | null;
export function faultInjectionFromEnv<Point extends string>(
  env: NodeJS.ProcessEnv,
  accepted: readonly Point[],
): FaultInjection<Point> | null;
export function faultInjectionFromEnv(
  env: NodeJS.ProcessEnv,
  accepted: readonly string[] = DEVICE_FAULT_POINTS,
): FaultInjection<string> | null {
  const point = env.QLR_FAULT_POINT;
  const occurrenceText = env.QLR_FAULT_OCCURRENCE;
  const action = env.QLR_FAULT_ACTION ?? "sigkill";
  if (action !== "sigkill" && action !== "throw")
    throw new Error("QLR_FAULT_ACTION must be sigkill or throw");
  if (point === undefined || point === "") {
    if (occurrenceText !== undefined && occurrenceText !== "")
      throw new Error("QLR_FAULT_OCCURRENCE needs QLR_FAULT_POINT");
    return null;
  }
  if (!accepted.includes(point))
    throw new Error(`QLR_FAULT_POINT must be one of ${accepted.join(", ")}`);
  const occurrence =
    occurrenceText === undefined || occurrenceText === "" ? 1 : Number(occurrenceText);
  if (
    !/^[0-9]+$/.test(occurrenceText ?? "1") ||
    !Number.isSafeInteger(occurrence) ||
    occurrence < 1 ||
    occurrence > MAX_FAULT_OCCURRENCE
  )
    throw new Error(
      `QLR_FAULT_OCCURRENCE must be a whole number from 1 to ${MAX_FAULT_OCCURRENCE}`,
    );
  return { point, occurrence, action };
}

/**
 * The callback every fault point of one runtime calls. It counts the reaches of the armed
 * point and acts at the chosen one, once; every other point, and every other reach, does nothing.
 */
export function faultTrigger<Point extends string>(
  injection: FaultInjection<Point> | null,
  kill: () => void,
): (point: Point) => void {
  let reached = 0;
  return (point) => {
    if (injection === null || point !== injection.point) return;
    reached += 1;
    if (reached !== injection.occurrence) return;
    if (injection.action === "sigkill") kill();
    else throw new Error(`injected fault at ${point}`);
  };
}
