import type { Lease } from "../../src/lease-service.ts";
import { ApiError, QlrClient } from "../http/client.ts";
import type { ClaimRequest, LeaseFenceRequest } from "../http/contract.ts";
import { systemClock } from "./host.ts";
import { receiptCompletion } from "./local-executor.ts";
import type { CompletionReceipt, ProcessHandle, StopReason } from "./launcher/index.ts";
import type { HeldLease } from "./remote-worker-lease-files.ts";

/**
 * What the remote worker tells its coordinator about its leases: the claim, the start in two
 * phases, the spaced heartbeat that brings stop requests, the completion and the loss. Each
 * report carries the lease's fence; a refused fence (another authority settled the attempt)
 * ends that report, any other failure is thrown so the next round sends it again.
 */

/** Bounded request timeout; a coordinator that does not answer is retried on the next round. */
const REQUEST_TIMEOUT_MS = 15_000;

/**
 * The coordinator refuses the fence (409) or does not know the attempt at all (404, e.g. a
 * state dir reused against another coordinator): another authority owns it, and retrying
 * the report can never succeed.
 */
function settledElsewhere(error: unknown): error is ApiError {
  return error instanceof ApiError && (error.status === 409 || error.status === 404);
}

export class LeaseReports {
  private readonly coordinator: QlrClient;

  constructor(
    options: { readonly coordinatorUrl: string; readonly token: string },
    private readonly heartbeatIntervalMs: number,
    private readonly log: (line: string) => void,
  ) {
    this.coordinator = new QlrClient({
      baseUrl: options.coordinatorUrl,
      token: options.token,
      timeoutMs: REQUEST_TIMEOUT_MS,
    });
  }

  async claim(request: ClaimRequest): Promise<readonly Lease[]> {
    const { leases } = await this.coordinator.claim(request);
    return leases;
  }

  private fence(held: HeldLease): LeaseFenceRequest {
    return {
      attemptId: held.lease.attemptId,
      workerId: held.workerId,
      leaseVersion: held.lease.leaseVersion,
      leaseSecret: held.lease.leaseSecret,
    };
  }

  /** `claimed → starting`, before anything is launched. */
  async starting(held: HeldLease): Promise<void> {
    await this.coordinator.leaseStart({ ...this.fence(held), phase: "starting" });
  }

  /**
   * `starting → running` with the handle. Until the coordinator has it, the attempt stays
   * `starting` and a cancel cannot reach it (a starting attempt waits for its start to be
   * settled), so a report that failed is sent again each round.
   */
  async running(held: HeldLease, handle: ProcessHandle): Promise<void> {
    try {
      await this.coordinator.leaseStart({
        ...this.fence(held),
        phase: "running",
        handle: {
          pid: handle.pid,
          processStartTicks: handle.processStartTicks,
          bootId: handle.bootId,
          startedAtMs: handle.startedAtMs,
        },
      });
    } catch (error) {
      // Refused: another authority settled the attempt; the heartbeat stops the process.
      if (!settledElsewhere(error)) throw error;
      this.log(`running report of ${held.lease.attemptId} refused: ${error.message}`);
    }
    held.runningReported = true;
  }

  /**
   * The output travels with the completion it was signed with; a repeated call (a lost
   * answer) carries the same receipt, and the coordinator records the first one only.
   */
  async complete(held: HeldLease, receipt: CompletionReceipt): Promise<void> {
    try {
      await this.coordinator.leaseComplete({
        ...this.fence(held),
        ...receiptCompletion(receipt),
      });
    } catch (error) {
      // A completion is retried until acknowledged; only a refused fence ends it (another
      // worker or the coordinator settled the attempt).
      if (!settledElsewhere(error)) throw error;
      this.log(`completion of ${held.lease.attemptId} refused: ${error.message}`);
    }
  }

  /**
   * The attempt is lost (no process ran or none is left to report). `neverSpawned` only when
   * the launcher's records prove the process never started: the coordinator then gives the
   * step a new ready epoch instead of failing it.
   */
  async lost(
    held: HeldLease,
    reason: string,
    spawn: { readonly neverSpawned: boolean },
  ): Promise<void> {
    try {
      await this.coordinator.leaseLost({
        ...this.fence(held),
        reason,
        ...(spawn.neverSpawned ? { neverSpawned: true } : {}),
      });
    } catch (error) {
      // Refused only when another worker or the coordinator already settled the attempt.
      if (!settledElsewhere(error)) throw error;
    }
  }

  /** Heartbeats are spaced (each one is a write on the coordinator); stop requests arrive with them. */
  async heartbeat(held: HeldLease, stop: (reason: StopReason) => Promise<unknown>): Promise<void> {
    const attemptId = held.lease.attemptId;
    const nowMs = systemClock.nowMs();
    if (nowMs - held.lastHeartbeatMs < this.heartbeatIntervalMs) return;
    held.lastHeartbeatMs = nowMs;
    try {
      const control = await this.coordinator.leaseHeartbeat(this.fence(held));
      if (control.action === "stop_requested")
        void stop(control.reason).catch((error: unknown) =>
          this.log(`stop of ${attemptId} failed: ${String(error)}`),
        );
    } catch (error) {
      if (settledElsewhere(error)) {
        // The fence is stale: another authority owns this attempt now. Stop the process so
        // it never runs beside a second one.
        this.log(`lease of ${attemptId} lost (${error.message}); stopping its process`);
        void stop("cancel").catch(() => undefined);
        return;
      }
      throw error;
    }
  }
}
