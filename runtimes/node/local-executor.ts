import type { FaultPoint } from "../../src/coordinator.ts";
import type { CompletionFacts } from "../../src/execution.ts";
import type { ProcessHandleFacts, RunAttempt, StopReason } from "../../src/model.ts";
import type { Executor, LaunchRequest } from "../../src/ports.ts";
import type { LiveInspection, ReceiptEvidence } from "../../src/recovery.ts";
import { QlrError } from "../../src/errors.ts";
import {
  readBootId,
  type CompletionReceipt,
  type PosixLauncher,
  type ProcessHandle,
} from "./launcher/index.ts";
import { checkOutput, type OutputEvidence } from "../../src/task-output.ts";
import { prepareTaskEnvironment, userTaskEnvironment } from "./task-env.ts";

/** The output a valid receipt carries, checked against the output rules once more. */
function receiptOutput(receipt: CompletionReceipt): OutputEvidence {
  const outputError = receipt.outputError ?? null;
  if (outputError !== null) return { output: null, outputError };
  return checkOutput(receipt.output ?? null);
}

/**
 * The completion a valid receipt records, as the core takes it (from a local attempt's
 * evidence, or a remote worker's report). The output is re-checked here too: the receipt
 * authenticates the bytes, the rules are the core's.
 */
export function receiptCompletion(receipt: CompletionReceipt): CompletionFacts {
  return {
    startedAtMs: receipt.startedAtMs,
    finishedAtMs: receipt.finishedAtMs,
    exitCode: receipt.exitCode,
    signal: receipt.signal,
    stopReason: receipt.stopReason,
    spawnError: receipt.spawnError,
    ...receiptOutput(receipt),
  };
}

/**
 * The `local_process` executor: the core's Executor port over the POSIX launcher. It adds no
 * state of its own; every fact it reports comes from the launcher's files and /proc.
 */
export class LocalProcessExecutor implements Executor {
  readonly type = "local_process" as const;
  private readonly launcher: PosixLauncher;
  private readonly logMaxBytes: number;
  private readonly onStopError: (attemptId: string, error: unknown) => void;
  private readonly fault: ((point: FaultPoint) => void | Promise<void>) | undefined;
  /** Stops in flight, so shutdown can wait for them. */
  readonly stopping = new Map<string, Promise<unknown>>();

  constructor(
    launcher: PosixLauncher,
    options: {
      logMaxBytes: number;
      onStopError: (attemptId: string, error: unknown) => void;
      fault?: (point: FaultPoint) => void | Promise<void>;
    },
  ) {
    this.launcher = launcher;
    this.logMaxBytes = options.logMaxBytes;
    this.onStopError = options.onStopError;
    this.fault = options.fault;
  }

  /** Retention: the attempts' files, journal record last (see PosixLauncher.discard). */
  async discard(attemptIds: readonly string[]): Promise<void> {
    await this.launcher.discard(attemptIds, async () => {
      await this.fault?.("purge.discard_before_journal");
    });
  }

  listHeld(afterAttemptId: string | null, limit: number): Promise<string[]> {
    return this.launcher.listJournalPage(afterAttemptId, limit);
  }

  async launch(request: LaunchRequest): Promise<ProcessHandleFacts> {
    const execution = request.definition.execution;
    if (execution.executor !== "local_process")
      throw new QlrError(
        "integrity",
        `attempt ${request.attempt.id} is not a local_process attempt`,
      );
    const user = execution.user ?? null;
    // A task run as another user cannot reach the state dir: its needs and output live in a
    // folder the launcher gives to that user (launcher/user-task-files.ts).
    const prepared =
      user === null
        ? {
            env: await prepareTaskEnvironment(
              this.launcher.stateDir,
              request.context,
              execution.env,
            ),
            files: null,
          }
        : userTaskEnvironment(this.launcher.userTaskFilesRoot, request.context, execution.env);
    const handle = await this.launcher.launch({
      attemptId: request.attempt.id,
      argv: execution.argv,
      env: prepared.env,
      cwd: execution.cwd,
      user,
      userTaskFiles: prepared.files,
      logMaxBytes: this.logMaxBytes,
      // The supervisor enforces the deadline too, so it holds even while the runtime is down
      // or has not persisted the handle.
      timeoutMs: request.attempt.timeoutMs,
    });
    return {
      pid: handle.pid,
      processStartTicks: handle.processStartTicks,
      bootId: handle.bootId,
      startedAtMs: handle.startedAtMs,
    };
  }

  async readReceipt(attempt: RunAttempt): Promise<ReceiptEvidence> {
    const reading = await this.launcher.readReceipt(attempt.id);
    if (reading.status !== "valid") return reading;
    return { status: "valid", facts: receiptCompletion(reading.receipt) };
  }

  async hasJournal(
    attempt: RunAttempt,
  ): Promise<"present" | "absent" | "invalid" | "never_spawned"> {
    // Journaled, but no spawn record and no supervisor that could still write one: the task
    // provably never started (the second barrier), so the attempt is lost before the start.
    switch (await this.launcher.launchEvidence(attempt.id)) {
      case "not_journaled":
        return "absent";
      case "journal_invalid":
        return "invalid";
      case "never_spawned":
        return "never_spawned";
      default:
        return "present";
    }
  }

  async inspect(attempt: RunAttempt): Promise<LiveInspection> {
    const handle = this.handleOf(attempt);
    if (handle === null) {
      // No persisted handle: only a journal from an earlier boot is trusted evidence.
      const journal = await this.launcher.readJournal(attempt.id).catch(() => null);
      const bootId = await readBootId();
      if (journal !== null && bootId !== null && journal.bootId !== bootId) return "not_running";
      return "unverifiable";
    }
    const inspection = await this.launcher.inspect(handle);
    // The task is gone but its supervisor is still writing the receipt: not yet evidence.
    if (
      inspection.state === "not_running" &&
      (await this.launcher.supervision(attempt.id)) === "live"
    )
      return "running";
    return inspection.state;
  }

  async orphaned(attempt: RunAttempt): Promise<boolean> {
    return (await this.launcher.supervision(attempt.id)) === "gone";
  }

  stop(attempt: RunAttempt, reason: StopReason): Promise<void> {
    const handle = this.handleOf(attempt);
    if (this.stopping.has(attempt.id)) return Promise.resolve();
    if (handle === null) {
      // The runtime never persisted the handle (it died, or its running write failed): the
      // supervisor knows the exact process and stops it from the durable intent.
      const stopping = this.launcher
        .stopBySupervisor(attempt.id, reason)
        .catch((error: unknown) => this.onStopError(attempt.id, error))
        .finally(() => this.stopping.delete(attempt.id));
      this.stopping.set(attempt.id, stopping);
      return Promise.resolve();
    }
    // The launcher waits out the grace period itself; the cadence must not, so the stop runs on
    // and its outcome arrives as the receipt.
    const stopping = this.launcher
      .stop(handle, reason)
      .catch((error: unknown) => this.onStopError(attempt.id, error))
      .finally(() => this.stopping.delete(attempt.id));
    this.stopping.set(attempt.id, stopping);
    return Promise.resolve();
  }

  async drainStops(): Promise<void> {
    await Promise.allSettled([...this.stopping.values()]);
  }

  private handleOf(attempt: RunAttempt): ProcessHandle | null {
    if (
      attempt.pid === null ||
      attempt.processStartTicks === null ||
      attempt.bootId === null ||
      attempt.startedAtMs === null
    )
      return null;
    return {
      attemptId: attempt.id,
      pid: attempt.pid,
      processStartTicks: attempt.processStartTicks,
      bootId: attempt.bootId,
      startedAtMs: attempt.startedAtMs,
    };
  }
}
