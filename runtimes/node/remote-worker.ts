import { randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { isPortableId } from "../../src/identity.ts";
import type { Lease } from "../../src/lease-service.ts";
import type { HeldLock } from "../../storage/node/lock.ts";
import { LEASE_SECRET_PATTERN } from "../../src/leases.ts";
import { errorMessage } from "../../src/errors.ts";
import { systemClock } from "./host.ts";
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
} from "./launcher/index.ts";
import { LeaseFiles, type HeldLease } from "./remote-worker-lease-files.ts";
import { LeaseReports } from "./remote-worker-reports.ts";
import { WorkerRounds } from "./remote-worker-rounds.ts";

/**
 * `qlr worker`: a remote worker holding leases from a coordinator (a Worker, a server, a
 * cluster replica) over HTTP. It runs tasks with the same POSIX launcher as the device runtime,
 * heartbeats each lease, stops a process on `stop_requested`, and reports completion with
 * retries until the coordinator acknowledges it. Its leases are kept in its state dir, so a
 * restarted worker re-adopts running processes or reports them from their receipts. A lease
 * whose process handle never reached the lease file is judged by the launcher's own records
 * (`PosixLauncher.launchEvidence`), as the device runtime judges the same window.
 *
 * This class decides what each lease needs in a round; `WorkerRounds` says when rounds run,
 * `LeaseReports` carries the reports to the coordinator, `LeaseFiles` keeps the leases on disk.
 */

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

/**
 * How long a process may be gone before its receipt appears: the supervisor writes the receipt
 * right after reaping it, so a longer absence is trusted evidence that no receipt is coming.
 */
const RECEIPT_GRACE_MS = 10_000;

export class RemoteWorker {
  private readonly held = new Map<string, HeldLease>();
  private readonly files: LeaseFiles;
  private readonly reports: LeaseReports;
  private readonly rounds: WorkerRounds;

  private constructor(
    private readonly options: RemoteWorkerOptions,
    readonly workerId: string,
    private readonly launcher: PosixLauncher,
    private readonly fault: (point: WorkerFaultPoint) => void,
    /** This worker's hold on its state dir (`runtime.lock`), released at stop. */
    private readonly stateLock: HeldLock,
  ) {
    const log = (line: string): void => this.log(line);
    const heartbeatIntervalMs = options.heartbeatIntervalMs ?? 2000;
    this.files = new LeaseFiles(join(options.stateDir, "leases"), log);
    this.reports = new LeaseReports(options, heartbeatIntervalMs, log);
    this.rounds = new WorkerRounds(
      { pollMs: options.pollIntervalMs ?? 1000, heartbeatMs: heartbeatIntervalMs },
      log,
    );
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

  start(): void {
    this.rounds.start({
      prepare: () => this.readopt(),
      round: () => this.round(),
      active: () => this.active,
    });
  }

  async stop(): Promise<void> {
    await this.rounds.stop();
    this.stateLock.release();
  }

  /** Something to report or claim may be waiting: run a round now (after the current one). */
  wake(): void {
    this.rounds.wake();
  }

  get active(): number {
    return [...this.held.values()].filter((held) => !held.done).length;
  }

  /** Re-adopts the leases of a previous life of this worker from its state dir. */
  private async readopt(): Promise<void> {
    for (const held of await this.files.readopt(this.workerId))
      this.held.set(held.lease.attemptId, held);
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
    if (free <= 0 || !this.rounds.running) return;
    const leases = await this.reports.claim({
      workerId: this.workerId,
      pool: this.options.pool,
      capacity: free,
    });
    for (const lease of leases) await this.take(lease);
  }

  /** A claimed lease: checked, held, written to its file, then launched. */
  private async take(lease: Lease): Promise<void> {
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
      return;
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
    await this.files.persist(held);
    // A launch that fails part way leaves its lease held: tend() settles it from the
    // launcher's records, and the other leases of this claim still launch.
    await this.launch(held).catch((error: unknown) =>
      this.log(`launch of ${lease.attemptId}: ${errorMessage(error)}`),
    );
  }

  /** Reports the attempt lost (no process ran or none is left to report), then lets it go. */
  private async reportLost(
    held: HeldLease,
    attemptId: string,
    reason: string,
    spawn: { readonly neverSpawned: boolean },
  ): Promise<void> {
    await this.reports.lost(held, reason, spawn);
    await this.release(held, attemptId);
  }

  /** The attempt is settled on the coordinator: forget the lease and its file. */
  private async release(held: HeldLease, attemptId: string): Promise<void> {
    held.done = true;
    this.held.delete(attemptId);
    await this.files.remove(attemptId);
  }

  private async launch(held: HeldLease): Promise<void> {
    const { lease } = held;
    await this.reports.starting(held);
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
    await this.files.persist(held);
    await this.reports.running(held, handle);
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
      await this.reports.complete(held, receipt.receipt);
      this.rounds.completed();
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
      await this.reports
        .running(held, handle)
        .catch((error: unknown) =>
          this.note(held, `running report of ${attemptId}: ${errorMessage(error)}`),
        );
    await this.reports.heartbeat(held, (reason) => this.launcher.stop(handle, reason));
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
        if (this.rounds.running)
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
          await this.files.persist(held);
          this.log(
            `recovered the process handle of ${attemptId} (pid ${recovered.pid}) from its supervisor`,
          );
          await this.reports.running(held, recovered);
          return;
        }
        // The task is not (or no longer) the supervisor's to name: keep the lease alive, stop
        // through the supervisor, and its receipt completes the attempt as usual.
        await this.reports.heartbeat(held, async (reason) => {
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
}
