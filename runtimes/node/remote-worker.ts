import { randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { assertPortableId, isPortableId } from "../../src/identity.ts";
import type { Lease } from "../../src/lease-service.ts";
import type { HeldLock } from "../../storage/node/lock.ts";
import { LEASE_SECRET_PATTERN } from "../../src/leases.ts";
import { errorMessage } from "../../src/errors.ts";
import { ApiError, QlrClient } from "../http/client.ts";
import type { LeaseFenceRequest } from "../http/contract.ts";
import { systemClock } from "./host.ts";
import { receiptCompletion } from "./local-executor.ts";
import { prepareTaskEnvironment } from "./task-env.ts";
import { describeTightened, lockStateDir, secureStateDir } from "./state-dir.ts";
import {
  faultTrigger,
  LAUNCH_AFTER_JOURNAL,
  WORKER_AFTER_SPAWN,
  type FaultInjection,
  type WorkerFaultPoint,
} from "./fault-points.ts";
import {
  DEFAULT_LOG_MAX_BYTES,
  isSpawnFailedError,
  loadOrCreateReceiptKey,
  PosixLauncher,
  type ProcessHandle,
  type StopReason,
} from "./launcher/index.ts";

/**
 * `qlr worker`: a remote worker holding leases from a coordinator (a Worker, a server, a
 * cluster replica) over HTTP. It runs tasks with the same POSIX launcher as the device runtime,
 * heartbeats each lease, stops a process on `stop_requested`, and reports completion with
 * retries until the coordinator acknowledges it. Its leases are kept in its state dir, so a
 * restarted worker re-adopts running processes or reports them from their receipts. A lease
 * whose process handle never reached the lease file is judged by the launcher's own records
 * (`PosixLauncher.launchEvidence`), as the device runtime judges the same window.
 */

/**
 * After a completion is reported the coordinator admits the steps that needed it at once (its
 * cadence wakes on the report), so the worker asks for work again soon instead of a whole poll
 * interval later: a few quick rounds, then the interval again.
 */
const FOLLOW_UP_DELAYS_MS = [20, 100, 400] as const;

export interface RemoteWorkerOptions {
  readonly coordinatorUrl: string;
  readonly token: string;
  readonly pool: string;
  readonly capacity: number;
  readonly stateDir: string;
  readonly pollIntervalMs?: number;
  readonly heartbeatIntervalMs?: number;
  readonly log?: (line: string) => void;
  /**
   * Crash tests (fault-points.ts): at the named point's chosen reach, `sigkill` kills this
   * process, `throw` fails that one launch there. Null or absent: no fault point does anything.
   */
  readonly fault?: FaultInjection<WorkerFaultPoint> | null;
}

interface HeldLease {
  readonly lease: Lease;
  readonly workerId: string;
  handle: ProcessHandle | null;
  /** The receipt is reported and acknowledged: the lease file can go. */
  done: boolean;
  lastHeartbeatMs: number;
  /** When the process (or, without a handle, its supervisor) was first seen gone without a receipt. */
  goneSinceMs: number | null;
  /** The coordinator acknowledged the running report with this handle (in this life). */
  runningReported: boolean;
  /** A stop was asked of the supervisor for this handle-less lease: asked once per life. */
  stopAsked: boolean;
  /** The last condition logged for this lease, so a lease waiting round after round logs it once. */
  noted: string | null;
}

/**
 * How long a process may be gone before its receipt appears: the supervisor writes the receipt
 * right after reaping it, so a longer absence is trusted evidence that no receipt is coming.
 */
const RECEIPT_GRACE_MS = 10_000;

/**
 * The coordinator refuses the fence (409) or does not know the attempt at all (404, e.g. a
 * state dir reused against another coordinator): another authority owns it, and retrying
 * the report can never succeed.
 */
function settledElsewhere(error: unknown): error is ApiError {
  return error instanceof ApiError && (error.status === 409 || error.status === 404);
}

/** Bounded request timeout; a coordinator that does not answer is retried on the next round. */
const REQUEST_TIMEOUT_MS = 15_000;

export class RemoteWorker {
  private readonly coordinator: QlrClient;
  private readonly held = new Map<string, HeldLease>();
  private readonly leaseDir: string;
  private running = false;
  private loop: Promise<void> | null = null;
  private endWait: (() => void) | null = null;
  /** A task's receipt landed while a round ran: the next round starts at once. */
  private wakeRequested = false;
  /** Quick rounds left after a completion (an index into FOLLOW_UP_DELAYS_MS). */
  private followUp: number = FOLLOW_UP_DELAYS_MS.length;
  private completedInRound = false;

  private constructor(
    private readonly options: RemoteWorkerOptions,
    readonly workerId: string,
    private readonly launcher: PosixLauncher,
    private readonly fault: (point: WorkerFaultPoint) => void,
    /** This worker's hold on its state dir (`runtime.lock`), released at stop. */
    private readonly stateLock: HeldLock,
  ) {
    this.coordinator = new QlrClient({
      baseUrl: options.coordinatorUrl,
      token: options.token,
      timeoutMs: REQUEST_TIMEOUT_MS,
    });
    this.leaseDir = join(options.stateDir, "leases");
  }

  static async create(options: RemoteWorkerOptions): Promise<RemoteWorker> {
    const stateDir = resolve(options.stateDir);
    const secured = await secureStateDir(stateDir);
    if (secured.tightenedFromMode !== null)
      (options.log ?? ((line: string) => process.stderr.write(`${line}\n`)))(
        describeTightened(stateDir, secured.tightenedFromMode),
      );
    const stateLock = await lockStateDir(stateDir);
    try {
      return await RemoteWorker.createLocked(options, stateDir, stateLock);
    } catch (error) {
      stateLock.release();
      throw error;
    }
  }

  private static async createLocked(
    options: RemoteWorkerOptions,
    stateDir: string,
    stateLock: HeldLock,
  ): Promise<RemoteWorker> {
    await mkdir(join(stateDir, "leases"), { recursive: true, mode: 0o700 });
    const idPath = join(stateDir, "worker-id");
    let workerId = (await readFile(idPath, "utf8").catch(() => "")).trim();
    if (!isPortableId(workerId)) {
      workerId = `w-${randomBytes(12).toString("hex")}`;
      await writeFile(idPath, `${workerId}\n`, { mode: 0o600 });
    }
    const hmacKey = await loadOrCreateReceiptKey(stateDir);
    const fault = faultTrigger(options.fault ?? null, () => process.kill(process.pid, "SIGKILL"));
    let workerForWake: RemoteWorker | null = null;
    const launcher = new PosixLauncher({
      stateDir,
      hmacKey,
      nowMs: () => systemClock.nowMs(),
      // A durable receipt is reported now rather than at the next poll.
      onSupervisorExit: () => workerForWake?.wake(),
      afterJournal: () => fault(LAUNCH_AFTER_JOURNAL),
    });
    workerForWake = new RemoteWorker(
      { ...options, stateDir },
      workerId,
      launcher,
      fault,
      stateLock,
    );
    return workerForWake;
  }

  private log(line: string): void {
    (this.options.log ?? ((text: string) => process.stderr.write(`${text}\n`)))(line);
  }

  private leaseFile(attemptId: string): string {
    return join(this.leaseDir, `${assertPortableId(attemptId, "attemptId")}.json`);
  }

  /**
   * The lease file holds the lease secret (the coordinator keeps only its digest, so a worker
   * that lost it could never report this attempt again): owner-only, written whole and renamed
   * into place.
   */
  private async persist(held: HeldLease): Promise<void> {
    const path = this.leaseFile(held.lease.attemptId);
    await writeFile(
      `${path}.tmp`,
      JSON.stringify({ lease: held.lease, workerId: held.workerId, handle: held.handle }),
      { mode: 0o600 },
    );
    await rename(`${path}.tmp`, path);
  }

  /** Re-adopts the leases of a previous life of this worker from its state dir. */
  private async readopt(): Promise<void> {
    for (const name of await readdir(this.leaseDir)) {
      if (!name.endsWith(".json")) continue;
      const attemptId = name.slice(0, -".json".length);
      if (!isPortableId(attemptId)) {
        this.log(`ignoring lease file with a non-portable name: ${name}`);
        continue;
      }
      try {
        const saved = JSON.parse(await readFile(join(this.leaseDir, name), "utf8")) as {
          lease: Lease;
          workerId: string;
          handle: ProcessHandle | null;
        };
        if (saved.lease.attemptId !== attemptId || saved.workerId !== this.workerId) continue;
        if (
          typeof saved.lease.leaseSecret !== "string" ||
          !LEASE_SECRET_PATTERN.test(saved.lease.leaseSecret)
        ) {
          this.log(
            `lease file ${name} has no lease secret (written by an older worker); the coordinator settles its attempt when the lease expires`,
          );
          continue;
        }
        this.held.set(attemptId, {
          lease: saved.lease,
          workerId: saved.workerId,
          handle: saved.handle,
          done: false,
          lastHeartbeatMs: 0,
          goneSinceMs: null,
          // Reported again after a restart: a repeated report with the same handle writes nothing.
          runningReported: false,
          stopAsked: false,
          noted: null,
        });
        this.log(`re-adopted lease of ${attemptId}`);
      } catch (error) {
        this.log(`unreadable lease file ${name}: ${errorMessage(error)}`);
      }
    }
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = (async () => {
      await this.readopt();
      // Deliberately unbounded: the worker runs until stop(); each round is bounded and sleeps.
      while (this.running) {
        await this.round().catch((error: unknown) =>
          this.log(`round failed: ${errorMessage(error)}`),
        );
        const delayMs = this.nextDelayMs();
        if (this.wakeRequested || !this.running) {
          this.wakeRequested = false;
          continue;
        }
        await new Promise<void>((endWait) => {
          this.endWait = endWait;
          setTimeout(endWait, delayMs);
        });
        this.endWait = null;
      }
    })();
  }

  async stop(): Promise<void> {
    this.running = false;
    this.endWait?.();
    await this.loop;
    this.stateLock.release();
  }

  /** Something to report or claim may be waiting: run a round now (after the current one). */
  wake(): void {
    if (this.endWait !== null) this.endWait();
    else this.wakeRequested = true;
  }

  private nextDelayMs(): number {
    // Heartbeats go out in rounds: while a lease is held, a round comes at least this often.
    const pollIntervalMs =
      this.active > 0
        ? Math.min(this.options.pollIntervalMs ?? 1000, this.heartbeatIntervalMs)
        : (this.options.pollIntervalMs ?? 1000);
    if (this.completedInRound) {
      this.completedInRound = false;
      this.followUp = 0;
    }
    const followUpMs = FOLLOW_UP_DELAYS_MS[this.followUp];
    if (followUpMs === undefined) return pollIntervalMs;
    this.followUp += 1;
    return Math.min(followUpMs, pollIntervalMs);
  }

  private get heartbeatIntervalMs(): number {
    return this.options.heartbeatIntervalMs ?? 2000;
  }

  get active(): number {
    return [...this.held.values()].filter((held) => !held.done).length;
  }

  /** One round: settle what finished, heartbeat what runs, then claim free capacity. */
  private async round(): Promise<void> {
    // One lease's failure (a coordinator error, a refused report) must not starve the others'
    // heartbeats and completions, nor stop the worker from claiming.
    for (const held of [...this.held.values()]) {
      await this.tend(held).catch((error: unknown) =>
        this.log(`lease of ${held.lease.attemptId}: ${errorMessage(error)}`),
      );
    }
    const free = this.options.capacity - this.active;
    if (free <= 0 || !this.running) return;
    const { leases } = await this.coordinator.claim({
      workerId: this.workerId,
      pool: this.options.pool,
      capacity: free,
    });
    for (const lease of leases) {
      // The attempt id names the lease, journal, receipt and log files: a coordinator (or
      // anything posing as one) must not be able to name a path outside the state dir.
      if (
        !isPortableId(lease.attemptId) ||
        typeof lease.leaseSecret !== "string" ||
        !LEASE_SECRET_PATTERN.test(lease.leaseSecret)
      ) {
        this.log(
          `claim answered a lease with an invalid attempt id or secret (${JSON.stringify(String(lease.attemptId).slice(0, 64))}); ignored`,
        );
        continue;
      }
      const held: HeldLease = {
        lease,
        workerId: this.workerId,
        handle: null,
        done: false,
        lastHeartbeatMs: systemClock.nowMs(),
        goneSinceMs: null,
        runningReported: false,
        stopAsked: false,
        noted: null,
      };
      this.held.set(lease.attemptId, held);
      await this.persist(held);
      // A launch that fails part way leaves its lease held: tend() settles it from the
      // launcher's records, and the other leases of this claim still launch.
      await this.launch(held).catch((error: unknown) =>
        this.log(`launch of ${lease.attemptId}: ${errorMessage(error)}`),
      );
    }
  }

  /**
   * Reports the attempt lost (no process ran or none is left to report), then lets it go.
   * `neverSpawned` only when the launcher's records prove the process never started: the
   * coordinator then gives the step a new ready epoch instead of failing it.
   */
  private async reportLost(
    held: HeldLease,
    attemptId: string,
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
    await this.release(held, attemptId);
  }

  /** The attempt is settled on the coordinator: forget the lease and its file. */
  private async release(held: HeldLease, attemptId: string): Promise<void> {
    held.done = true;
    this.held.delete(attemptId);
    await rm(this.leaseFile(attemptId), { force: true });
  }

  private fence(held: HeldLease): LeaseFenceRequest {
    return {
      attemptId: held.lease.attemptId,
      workerId: held.workerId,
      leaseVersion: held.lease.leaseVersion,
      leaseSecret: held.lease.leaseSecret,
    };
  }

  private async launch(held: HeldLease): Promise<void> {
    const { lease } = held;
    await this.coordinator.leaseStart({ ...this.fence(held), phase: "starting" });
    let handle: ProcessHandle;
    try {
      const env = await prepareTaskEnvironment(
        this.launcher.stateDir,
        lease.context,
        lease.execution.env,
      );
      handle = await this.launcher.launch({
        attemptId: lease.attemptId,
        argv: lease.execution.argv,
        env,
        cwd: null,
        logMaxBytes: DEFAULT_LOG_MAX_BYTES,
      });
    } catch (error) {
      if (!isSpawnFailedError(error)) throw error;
      // Nothing ran; the receipt with the spawn error is on disk and is reported by tend().
      return;
    }
    this.fault(WORKER_AFTER_SPAWN);
    held.handle = handle;
    await this.persist(held);
    await this.reportRunning(held, handle);
  }

  /**
   * `starting → running` with the handle. Until the coordinator has it, the attempt stays
   * `starting` and a cancel cannot reach it (a starting attempt waits for its start to be
   * settled), so a report that failed is sent again each round.
   */
  private async reportRunning(held: HeldLease, handle: ProcessHandle): Promise<void> {
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

  /** Logs a lease's condition once, not every round it persists. */
  private note(held: HeldLease, line: string): void {
    if (held.noted === line) return;
    held.noted = line;
    this.log(line);
  }

  private async tend(held: HeldLease): Promise<void> {
    if (held.done) return;
    const attemptId = held.lease.attemptId;
    const receipt = await this.launcher.readReceipt(attemptId);
    if (receipt.status === "valid") {
      // The output travels with the completion it was signed with; a repeated call (a lost
      // answer) carries the same receipt, and the coordinator records the first one only.
      try {
        await this.coordinator.leaseComplete({
          ...this.fence(held),
          ...receiptCompletion(receipt.receipt),
        });
      } catch (error) {
        // A completion is retried until acknowledged; only a refused fence ends it (another
        // worker or the coordinator settled the attempt).
        if (!settledElsewhere(error)) throw error;
        this.log(`completion of ${attemptId} refused: ${error.message}`);
      }
      this.completedInRound = true;
      await this.release(held, attemptId);
      return;
    }
    if (receipt.status === "invalid") {
      this.note(held, `receipt of ${attemptId} rejected (${receipt.reason}); not reported`);
      return;
    }
    if (held.handle === null) {
      await this.tendWithoutHandle(held, attemptId);
      return;
    }
    const handle = held.handle;
    const inspection = await this.launcher.inspect(handle);
    if (inspection.state === "not_running") {
      await this.lostAfterGrace(held, attemptId, "the process is gone and left no receipt");
      return;
    }
    held.goneSinceMs = null;
    // A running report the coordinator does not take must not starve the heartbeat.
    if (!held.runningReported)
      await this.reportRunning(held, handle).catch((error: unknown) =>
        this.note(held, `running report of ${attemptId}: ${errorMessage(error)}`),
      );
    await this.heartbeat(held, attemptId, (reason) => this.launcher.stop(handle, reason));
  }

  /**
   * A lease whose process handle this worker never got or never persisted: it died between
   * the journal and the lease file, or the launch failed after the journal. The launcher's
   * records decide, as they do for the device's recovery.
   */
  private async tendWithoutHandle(held: HeldLease, attemptId: string): Promise<void> {
    const evidence = await this.launcher.launchEvidence(attemptId);
    switch (evidence) {
      case "not_journaled":
        // The journal is the launcher's barrier: without it nothing ran, nor ever will.
        if (this.running)
          await this.reportLost(held, attemptId, "the worker stopped before spawning", {
            neverSpawned: true,
          });
        return;
      case "never_spawned":
        await this.reportLost(
          held,
          attemptId,
          "journaled but never spawned: no spawn record and no supervisor that could still write one",
          { neverSpawned: true },
        );
        return;
      case "gone":
        await this.lostAfterGrace(held, attemptId, "the supervisor is gone and left no receipt");
        return;
      case "live": {
        // The supervisor owns the exact process and names it: with the handle back, the
        // ordinary path applies (running reported, stops by exact identity).
        held.goneSinceMs = null;
        const recovered = await this.launcher.recoverHandle(attemptId);
        if (recovered !== null) {
          held.handle = recovered;
          await this.persist(held);
          this.log(
            `recovered the process handle of ${attemptId} (pid ${recovered.pid}) from its supervisor`,
          );
          await this.reportRunning(held, recovered);
          return;
        }
        // The task is not (or no longer) the supervisor's to name: keep the lease alive, stop
        // through the supervisor, and its receipt completes the attempt as usual.
        await this.heartbeat(held, attemptId, async (reason) => {
          if (held.stopAsked) return;
          held.stopAsked = true;
          try {
            const { known } = await this.launcher.stopBySupervisor(attemptId, reason);
            // The intent is durable either way; a supervisor that did not know the attempt
            // yet is asked again with the next stop request.
            if (!known) held.stopAsked = false;
          } catch (error) {
            held.stopAsked = false;
            throw error;
          }
        });
        return;
      }
      case "journal_invalid":
      case "unknown":
        // Nothing is proven: no report, no heartbeat. The coordinator fails closed when the
        // lease expires and keeps the fence, so the receipt can still complete it later.
        this.note(
          held,
          `lease of ${attemptId}: no process handle and ${evidence === "unknown" ? "the supervisor cannot be asked whether it spawned the task" : "its journal record is unreadable"}; asking again each round`,
        );
        return;
    }
  }

  /**
   * Gone without a receipt: give the supervisor its grace to write one before calling it lost,
   * since it writes the receipt right after reaping the task.
   */
  private async lostAfterGrace(held: HeldLease, attemptId: string, reason: string): Promise<void> {
    held.goneSinceMs ??= systemClock.nowMs();
    if (systemClock.nowMs() - held.goneSinceMs < RECEIPT_GRACE_MS) return;
    const again = await this.launcher.readReceipt(attemptId);
    if (again.status === "none")
      await this.reportLost(held, attemptId, reason, { neverSpawned: false });
  }

  /** Heartbeats are spaced (each one is a write on the coordinator); stop requests arrive with them. */
  private async heartbeat(
    held: HeldLease,
    attemptId: string,
    stop: (reason: StopReason) => Promise<unknown>,
  ): Promise<void> {
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
