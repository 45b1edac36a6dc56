import type { JsonValue } from "../canonical-json.ts";
import { QlrError } from "../errors.ts";
import { checkOutput } from "../task-output.ts";
import type { ProcessHandleFacts, RunAttempt, StopReason } from "../model.ts";
import type { Clock, Executor, LaunchRequest } from "../ports.ts";
import type { LiveInspection, ReceiptEvidence } from "../recovery.ts";
import type { Prng } from "./prng.ts";

/**
 * A simulated local executor on a virtual clock: "processes" get a seeded duration and exit
 * code, keep running while the coordinator crashes (as the real supervisor does), honour stop
 * requests after a grace, and leave exactly one receipt. It keeps a spawn count per attempt so
 * invariant checkers can prove nothing was started twice.
 */
export interface SimulatedProcess {
  readonly attemptId: string;
  readonly pid: number;
  readonly startedAtMs: number;
  finishAtMs: number;
  exitCode: number | null;
  signal: string | null;
  stopReason: StopReason | null;
  spawnError: string | null;
  /** What the process leaves at `QLR_OUTPUT` (null: nothing) and why it was refused. */
  output: JsonValue | null;
  outputError: string | null;
}

export interface SimulatedExecutorOptions {
  readonly clock: Clock;
  readonly prng: Prng;
  /** Probability that a simulated process exits non-zero. */
  readonly failureRate?: number;
  readonly minDurationMs?: number;
  readonly maxDurationMs?: number;
  /** Probability that a spawn fails outright (ENOENT-like). */
  readonly spawnFailureRate?: number;
  readonly stopGraceMs?: number;
  /**
   * Decides one launch's outcome instead of the PRNG (the draws still happen, so the sequence
   * stays the same): a deterministic test names which task fails or runs long. Must be pure.
   */
  readonly outcome?: (request: LaunchRequest) => SimulatedOutcome | undefined;
}

export interface SimulatedOutcome {
  readonly exitCode: number;
  readonly durationMs: number;
  /** The output the process leaves, as the runtime reads it (checked by the output rules). */
  readonly output?: unknown;
}

export class SimulatedExecutor implements Executor {
  readonly type = "local_process" as const;
  readonly processes = new Map<string, SimulatedProcess>();
  readonly spawnCounts = new Map<string, number>();
  readonly journal = new Set<string>();
  /** Attempts whose files retention discarded, with the virtual time it happened. */
  readonly discarded = new Map<string, number>();
  private nextPid = 1000;
  private readonly options: Required<Omit<SimulatedExecutorOptions, "clock" | "prng" | "outcome">> &
    Pick<SimulatedExecutorOptions, "clock" | "prng" | "outcome">;

  constructor(options: SimulatedExecutorOptions) {
    this.options = {
      failureRate: 0.15,
      minDurationMs: 100,
      maxDurationMs: 5_000,
      spawnFailureRate: 0.02,
      stopGraceMs: 200,
      ...options,
    };
  }

  launch(request: LaunchRequest): Promise<ProcessHandleFacts> {
    const { attempt } = request;
    if (this.journal.has(attempt.id)) {
      return Promise.reject(
        new QlrError(
          "conflict",
          `attempt ${attempt.id} already has a journal record; refusing a second spawn`,
        ),
      );
    }
    const startedAtMs = this.options.clock.nowMs();
    // The journal record is the start barrier: it exists before the process does.
    this.journal.add(attempt.id);
    this.spawnCounts.set(attempt.id, (this.spawnCounts.get(attempt.id) ?? 0) + 1);
    const pid = (this.nextPid += 1);
    const spawnFails = this.options.prng.chance(this.options.spawnFailureRate);
    const duration = this.options.prng.int(this.options.minDurationMs, this.options.maxDurationMs);
    const fails = this.options.prng.chance(this.options.failureRate);
    const forced = this.options.outcome?.(request);
    const simulated: SimulatedProcess =
      forced === undefined
        ? {
            attemptId: attempt.id,
            pid,
            startedAtMs,
            finishAtMs: spawnFails ? startedAtMs : startedAtMs + duration,
            exitCode: spawnFails ? null : fails ? 1 : 0,
            signal: null,
            stopReason: null,
            spawnError: spawnFails ? "ENOENT: simulated spawn failure" : null,
            output: null,
            outputError: null,
          }
        : {
            attemptId: attempt.id,
            pid,
            startedAtMs,
            finishAtMs: startedAtMs + forced.durationMs,
            exitCode: forced.exitCode,
            signal: null,
            stopReason: null,
            spawnError: null,
            ...checkOutput(forced.output ?? null),
          };
    this.processes.set(attempt.id, simulated);
    return Promise.resolve({
      pid,
      processStartTicks: String(startedAtMs),
      bootId: "sim-boot",
      startedAtMs,
    });
  }

  readReceipt(attempt: RunAttempt): Promise<ReceiptEvidence> {
    const proc = this.processes.get(attempt.id);
    if (
      proc === undefined ||
      this.discarded.has(attempt.id) ||
      this.options.clock.nowMs() < proc.finishAtMs
    )
      return Promise.resolve({ status: "none" });
    return Promise.resolve({
      status: "valid",
      facts: {
        startedAtMs: proc.startedAtMs,
        finishedAtMs: proc.finishAtMs,
        exitCode: proc.exitCode,
        signal: proc.signal,
        stopReason: proc.stopReason,
        spawnError: proc.spawnError,
        output: proc.output,
        outputError: proc.outputError,
        handle: {
          pid: proc.pid,
          processStartTicks: String(proc.startedAtMs),
          bootId: "sim-boot",
          startedAtMs: proc.startedAtMs,
        },
      },
    });
  }

  hasJournal(attempt: RunAttempt): Promise<"present" | "absent"> {
    return Promise.resolve(this.journal.has(attempt.id) ? "present" : "absent");
  }

  inspect(attempt: RunAttempt): Promise<LiveInspection> {
    const proc = this.processes.get(attempt.id);
    if (proc === undefined) return Promise.resolve("not_running");
    if (attempt.pid !== null && attempt.pid !== proc.pid)
      return Promise.resolve("changed_identity");
    return Promise.resolve(
      this.options.clock.nowMs() < proc.finishAtMs ? "running" : "not_running",
    );
  }

  stop(attempt: RunAttempt, reason: StopReason): Promise<void> {
    const proc = this.processes.get(attempt.id);
    const nowMs = this.options.clock.nowMs();
    if (proc === undefined || nowMs >= proc.finishAtMs || proc.stopReason !== null)
      return Promise.resolve();
    proc.stopReason = reason;
    proc.finishAtMs = Math.min(proc.finishAtMs, nowMs + this.options.stopGraceMs);
    proc.exitCode = null;
    proc.signal = "SIGTERM";
    return Promise.resolve();
  }

  /** Retention: forgets the attempts' journal records and receipts (the "files"); the processes themselves are the OS's. */
  discard(attemptIds: readonly string[]): Promise<void> {
    for (const attemptId of attemptIds) {
      this.journal.delete(attemptId);
      this.discarded.set(attemptId, this.options.clock.nowMs());
    }
    return Promise.resolve();
  }

  listHeld(afterAttemptId: string | null, limit: number): Promise<string[]> {
    const after = afterAttemptId ?? "";
    return Promise.resolve(
      [...this.journal]
        .filter((attemptId) => attemptId > after)
        .sort()
        .slice(0, Math.max(0, limit)),
    );
  }

  /** Simulation helper: a "kill -9" of the task from outside, not through the runtime. */
  killExternally(attemptId: string): void {
    const proc = this.processes.get(attemptId);
    const nowMs = this.options.clock.nowMs();
    if (proc === undefined || nowMs >= proc.finishAtMs) return;
    proc.finishAtMs = nowMs;
    proc.exitCode = null;
    proc.signal = "SIGKILL";
  }
}
