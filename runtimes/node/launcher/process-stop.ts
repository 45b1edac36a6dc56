/**
 * How the launcher stops a task whose handle it holds: the reason recorded durably first, then
 * SIGTERM to the task's process group, up to the grace for it to end, then SIGKILL to the
 * group, the exact identity checked again before each signal (README.md, "Stop protocol").
 */
import { setTimeout as sleep } from "node:timers/promises";
import { assertPortableId } from "../../../src/identity.ts";
import { QlrError, errorCode } from "../../../src/errors.ts";
import type { Inspection, ProcessHandle, StopResult } from "./launch-evidence.ts";
import { isStopReason, type StopReason } from "./receipt.ts";
import type { StateLayout } from "./state-layout.ts";
import { recordStopIntent } from "./stop-intent.ts";

/** After SIGKILL, how long stop waits for the process to be gone before reporting what it sees. */
const KILL_SETTLE_MS = 5000;
const POLL_INTERVAL_MS = 20;

type StopSignal = "SIGTERM" | "SIGKILL";

/** What a stop needs of its launcher. */
export interface ProcessStopperDeps {
  readonly layout: StateLayout;
  readonly nowMs: () => number;
  /** Time between SIGTERM and SIGKILL. */
  readonly graceMs: number;
  /** The launcher's identity check (`PosixLauncher.inspect`). */
  readonly inspect: (handle: ProcessHandle) => Promise<Inspection>;
  /** The state directory's folders are in place. */
  readonly prepare: () => Promise<void>;
  /** Crash tests: once the intent is durable, before any signal. */
  readonly afterStopIntent: ((attemptId: string) => void | Promise<void>) | undefined;
  /** Crash tests: once SIGTERM reached the group, before its grace runs out. */
  readonly afterStopTerm: ((attemptId: string) => void | Promise<void>) | undefined;
}

/** A stop reason from outside, checked: cancel, timeout or shutdown. */
export function checkedStopReason(reason: StopReason): StopReason {
  if (!isStopReason(reason))
    throw new QlrError(
      "invalid_request",
      `stop reason must be cancel, timeout or shutdown, got ${String(reason)}`,
    );
  return reason;
}

export class ProcessStopper {
  private readonly stopsInFlight = new Map<string, Promise<StopResult>>();

  constructor(private readonly deps: ProcessStopperDeps) {}

  /** Stops the task of `handle` (see the top of the file). Concurrent stops of one attempt share one promise. */
  stop(handle: ProcessHandle, reason: StopReason): Promise<StopResult> {
    const attemptId = assertPortableId(handle.attemptId, "attemptId");
    checkedStopReason(reason);
    const inFlight = this.stopsInFlight.get(attemptId);
    if (inFlight !== undefined) return inFlight;
    const stopping = this.stopExact(handle, reason).finally(() =>
      this.stopsInFlight.delete(attemptId),
    );
    this.stopsInFlight.set(attemptId, stopping);
    return stopping;
  }

  /**
   * The first step of every stop, this one's and the supervisor's (a stop without a handle):
   * the intent durable before any signal. Answers the reason on record (the first one wins).
   */
  async recordIntent(attemptId: string, reason: StopReason): Promise<StopReason> {
    const { deps } = this;
    await deps.prepare();
    const recordedReason = await recordStopIntent(deps.layout, attemptId, reason, deps.nowMs());
    await deps.afterStopIntent?.(attemptId);
    return recordedReason;
  }

  private async stopExact(handle: ProcessHandle, reason: StopReason): Promise<StopResult> {
    const { deps } = this;
    const recordedReason = await this.recordIntent(handle.attemptId, reason);
    const signalsSent: StopSignal[] = [];
    let inspection = await this.signalIfSame(handle, "SIGTERM", signalsSent);
    if (signalsSent.includes("SIGTERM")) await deps.afterStopTerm?.(handle.attemptId);
    if (inspection.state === "running")
      inspection = await this.waitWhileRunning(handle, deps.graceMs);
    if (inspection.state === "running") {
      inspection = await this.signalIfSame(handle, "SIGKILL", signalsSent);
      if (inspection.state === "running")
        inspection = await this.waitWhileRunning(handle, KILL_SETTLE_MS);
    }
    return { signalsSent, finalInspection: inspection, recordedReason };
  }

  /**
   * Signals the task's group only if the exact process still runs. The check and the kill are
   * two system calls; in between, the process would have to exit, be reaped by its
   * supervisor and have its pid reused by a new group leader, which needs the pid space to
   * wrap within microseconds.
   */
  private async signalIfSame(
    handle: ProcessHandle,
    signal: StopSignal,
    signalsSent: StopSignal[],
  ): Promise<Inspection> {
    const inspection = await this.deps.inspect(handle);
    if (inspection.state !== "running") return inspection;
    try {
      process.kill(-handle.pid, signal);
      signalsSent.push(signal);
    } catch (error) {
      if (errorCode(error) !== "ESRCH") throw error;
    }
    return inspection;
  }

  private async waitWhileRunning(handle: ProcessHandle, timeoutMs: number): Promise<Inspection> {
    const deadline = performance.now() + timeoutMs;
    let inspection = await this.deps.inspect(handle);
    while (inspection.state === "running" && performance.now() < deadline) {
      await sleep(POLL_INTERVAL_MS);
      inspection = await this.deps.inspect(handle);
    }
    return inspection;
  }
}
