import { randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { assertPortableId, isPortableId } from "../../src/identity.ts";
import type { Lease } from "../../src/lease-service.ts";
import { LEASE_SECRET_PATTERN } from "../../src/leases.ts";
import { errorMessage } from "../../src/errors.ts";
import { ApiError, QlrClient } from "../http/client.ts";
import type { LeaseFenceRequest } from "../http/contract.ts";
import { systemClock } from "./host.ts";
import { receiptCompletion } from "./local-executor.ts";
import { prepareTaskEnvironment } from "./task-env.ts";
import { describeTightened, secureStateDir } from "./state-dir.ts";
import {
  DEFAULT_LOG_MAX_BYTES,
  isSpawnFailedError,
  loadOrCreateReceiptKey,
  PosixLauncher,
  type ProcessHandle,
} from "./launcher/index.ts";

/**
 * `qlr worker`: a remote worker holding leases from a coordinator (a Worker, a server, a
 * cluster replica) over HTTP. It runs tasks with the same POSIX launcher as the device runtime,
 * heartbeats each lease, stops a process on `stop_requested`, and reports completion with
 * retries until the coordinator acknowledges it. Its leases are kept in its state dir, so a
 * restarted worker re-adopts running processes or reports them from their receipts.
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
}

interface HeldLease {
  readonly lease: Lease;
  readonly workerId: string;
  handle: ProcessHandle | null;
  /** The receipt is reported and acknowledged: the lease file can go. */
  done: boolean;
  lastHeartbeatMs: number;
  /** When the process was first seen gone without a receipt. */
  goneSinceMs: number | null;
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
  readonly workerId: string;
  private readonly options: RemoteWorkerOptions;
  private readonly launcher: PosixLauncher;
  private readonly coordinator: QlrClient;
  private readonly held = new Map<string, HeldLease>();
  private readonly leaseDir: string;
  private running = false;
  private loop: Promise<void> | null = null;
  private wake: (() => void) | null = null;

  private constructor(options: RemoteWorkerOptions, workerId: string, launcher: PosixLauncher) {
    this.options = options;
    this.workerId = workerId;
    this.launcher = launcher;
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
    await mkdir(join(stateDir, "leases"), { recursive: true, mode: 0o700 });
    const idPath = join(stateDir, "worker-id");
    let workerId = (await readFile(idPath, "utf8").catch(() => "")).trim();
    if (!isPortableId(workerId)) {
      workerId = `w-${randomBytes(12).toString("hex")}`;
      await writeFile(idPath, `${workerId}\n`, { mode: 0o600 });
    }
    const hmacKey = await loadOrCreateReceiptKey(stateDir);
    const launcher = new PosixLauncher({ stateDir, hmacKey, nowMs: () => systemClock.nowMs() });
    return new RemoteWorker({ ...options, stateDir }, workerId, launcher);
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
        await new Promise<void>((wake) => {
          this.wake = wake;
          setTimeout(wake, this.options.pollIntervalMs ?? 1000);
        });
      }
    })();
  }

  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await this.loop;
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
      };
      this.held.set(lease.attemptId, held);
      await this.persist(held);
      await this.launch(held);
    }
  }

  /** Reports the attempt lost (no process ran or none is left to report), then lets it go. */
  private async reportLost(held: HeldLease, attemptId: string, reason: string): Promise<void> {
    try {
      await this.coordinator.leaseLost({ ...this.fence(held), reason });
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
    held.handle = handle;
    await this.persist(held);
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
      await this.release(held, attemptId);
      return;
    }
    if (receipt.status === "invalid") {
      this.log(`receipt of ${attemptId} rejected (${receipt.reason}); not reported`);
      return;
    }
    if (held.handle === null) {
      // Started (or about to) but no handle: the journal decides whether anything was spawned.
      const journal = await this.launcher.readJournal(attemptId).catch(() => null);
      if (journal === null && this.running)
        await this.reportLost(held, attemptId, "the worker stopped before spawning");
      return;
    }
    const inspection = await this.launcher.inspect(held.handle);
    if (inspection.state === "not_running") {
      // Gone without a receipt: give the supervisor its grace to write one before calling it lost.
      held.goneSinceMs ??= systemClock.nowMs();
      if (systemClock.nowMs() - held.goneSinceMs < RECEIPT_GRACE_MS) return;
      const again = await this.launcher.readReceipt(attemptId);
      if (again.status === "none")
        await this.reportLost(held, attemptId, "the process is gone and left no receipt");
      return;
    }
    // Heartbeats are spaced (each one is a write on the coordinator); stop requests arrive with them.
    const nowMs = systemClock.nowMs();
    if (nowMs - held.lastHeartbeatMs < (this.options.heartbeatIntervalMs ?? 2000)) return;
    held.lastHeartbeatMs = nowMs;
    try {
      const control = await this.coordinator.leaseHeartbeat(this.fence(held));
      if (control.action === "stop_requested")
        void this.launcher
          .stop(held.handle, control.reason)
          .catch((error: unknown) => this.log(`stop of ${attemptId} failed: ${String(error)}`));
    } catch (error) {
      if (settledElsewhere(error)) {
        // The fence is stale: another authority owns this attempt now. Stop the process so
        // it never runs beside a second one.
        this.log(`lease of ${attemptId} lost (${error.message}); stopping its process`);
        void this.launcher.stop(held.handle, "cancel").catch(() => undefined);
        return;
      }
      throw error;
    }
  }
}
