import { nodeNotificationSender } from "./notification-sender.ts";
import { readFile } from "node:fs/promises";
import { Server as HttpServer } from "node:http";
import { resolve } from "node:path";
import { serve, type ServerType } from "@hono/node-server";
import { Coordinator, type TickReport } from "../../src/coordinator.ts";
import { DEFAULT_LEASE_TTL_MS } from "../../src/leases.ts";
import { manifestError, parseManifest } from "../../src/manifest/index.ts";
import type { RunAttempt } from "../../src/model.ts";
import { applyPackage, type ApplyResult } from "../../src/operations.ts";
import { PROFILES, type ProfileName } from "../../src/profiles.ts";
import { transactAtStoreTime } from "../../src/ports.ts";
import { DEFAULT_RETENTION, type RetentionPolicy } from "../../src/retention.ts";
import { isQlrError, errorMessage } from "../../src/errors.ts";
import type { HeldLock } from "../../storage/node/lock.ts";
import type { SqlStore } from "../../storage/sql-store.ts";
import { mountDashboard } from "./serve-dashboard.ts";
import { createApp } from "../http/app.ts";
import { Metrics } from "../http/metrics.ts";
import { RunWaiters } from "../http/run-waiters.ts";
import { processMemory, randomSecrets, systemClock, uuidv7Ids } from "./host.ts";
import {
  DEFAULT_GRACE_MS,
  DEFAULT_LOG_MAX_BYTES,
  loadOrCreateReceiptKey,
  PosixLauncher,
} from "./launcher/index.ts";
import { BufferReclaimer } from "./buffer-reclaimer.ts";
import { Cadence } from "./cadence.ts";
import { LocalProcessExecutor } from "./local-executor.ts";
import { openConfiguredStore, type StoreKind } from "./open-store.ts";
import { readAttemptLog, readLogChunk } from "./read-log.ts";
import { describeTightened, lockStateDir, secureStateDir } from "./state-dir.ts";
import { loadOrCreateNodeIdentity } from "./node-identity.ts";
import {
  API_AFTER_CHANGE,
  faultTrigger,
  STOP_AFTER_INTENT,
  STOP_AFTER_TERM,
  type FaultInjection,
} from "./fault-points.ts";

export interface DeviceOptions {
  readonly stateDir: string;
  readonly host: string;
  readonly port: number;
  readonly token: string;
  /** Accepted on /worker/* only; null when remote workers use the admin token. */
  readonly workerToken?: string | null;
  readonly profile: ProfileName;
  readonly store: StoreKind;
  readonly databaseUrl: string | null;
  readonly applyFiles: readonly string[];
  readonly tickIntervalMs?: number;
  /** `--max-running`: live local attempts at once; absent: the profile's default. */
  readonly maxRunning?: number;
  readonly logMaxBytes?: number;
  readonly graceMs?: number;
  /** How long stopping waits for remote workers to carry out their shutdown stops (REMOTE_DRAIN_MS). */
  readonly remoteDrainMs?: number;
  readonly supervisorPath?: string;
  /**
   * Crash tests (fault-points.ts): at the named point's chosen reach, `sigkill` kills this
   * process; `throw` fails that one cycle there and lives on, so what was in flight (launch
   * handles) is lost without a restart. Null or absent: no fault point does anything.
   */
  readonly fault?: FaultInjection | null;
  /** Retention (bounded history); default 7 days and 10 000 terminal runs. */
  readonly retention?: RetentionPolicy;
  readonly log?: (line: string) => void;
}

export interface RecoveryEntry {
  readonly attemptId: string;
  readonly decision: string;
  readonly reason: string | null;
}

/**
 * How long a stopping runtime keeps answering its remote workers so their heartbeats carry the
 * shutdown intent and their completions land: one lease TTL, because a worker that holds a
 * live lease heartbeats within it. A worker that misses the window is told on its first
 * heartbeat after the restart (the intent is durable).
 */
export const REMOTE_DRAIN_MS = DEFAULT_LEASE_TTL_MS;

/** The lease calls of a worker already holding a lease; while stopping, nothing else is served. */
const DRAIN_PATHS: ReadonlySet<string> = new Set([
  "/worker/start",
  "/worker/heartbeat",
  "/worker/complete",
  "/worker/lost",
]);

/** While stopping, intake is closed but workers holding leases are still answered. */
interface Intake {
  open: boolean;
}

/** What `DeviceRuntime.start` opened and started: the cadence runs on them and `stop` closes them. */
interface DeviceParts {
  readonly url: string;
  readonly store: SqlStore;
  readonly coordinator: Coordinator;
  readonly executor: LocalProcessExecutor;
  readonly server: ServerType;
  readonly options: DeviceOptions;
  readonly recovery: RecoveryEntry[];
  readonly intake: Intake;
  /** The long-polls of `GET /runs/:id?wait=…`: released as the cadence's stages change runs. */
  readonly runWaiters: RunWaiters;
  /** This runtime's hold on its state dir (`runtime.lock`), released last at stop. */
  readonly stateLock: HeldLock;
}

/**
 * Dispatch pages whose launches may be in flight at once (`CoordinatorDeps.pipelinedLaunches`):
 * two, so the supervisor has the next page's requests in hand while it spawns one page's tasks.
 */
export const LAUNCH_PAGES_IN_FLIGHT = 2;

/** The most log bytes one API call returns, stdout and stderr together; logs are capped on disk too. */
export const LOG_READ_MAX_BYTES = 1024 * 1024;

/**
 * The device runtime (ADR-0229 §6). Start: open the store, recover, start the cadence and
 * execution control, serve HTTP. Stop: stop intake, freeze admission and drain the cadence,
 * stop in-flight processes with a durable shutdown intent and record their step-scoped
 * outcome, close the store. Concurrent stops share one promise.
 */
export class DeviceRuntime {
  readonly url: string;
  readonly recovery: RecoveryEntry[];
  private readonly cadence: Cadence;
  /** Edge profile only: frees dead database-sized buffers after a cycle (buffer-reclaimer.ts). */
  private readonly reclaimer: BufferReclaimer | null;
  private stopping: Promise<void> | null = null;

  private constructor(private readonly parts: DeviceParts) {
    this.url = parts.url;
    this.recovery = parts.recovery;
    this.reclaimer = parts.options.profile === "edge" ? new BufferReclaimer() : null;
    const { options, coordinator } = parts;
    this.cadence = new Cadence(
      () =>
        coordinator
          .tick()
          .then((report: TickReport) => {
            this.reclaimer?.afterCycle();
            // A pipelined launch in flight wakes the cadence as it settles: until then a
            // completion's follow-up waits for that cycle (sooner, each cycle would record one
            // fact and pay every stage's fixed cost for it), and a stage's `more` only while a
            // launch slot is free (so the next page is handed over at once).
            return (
              (report.more && !coordinator.launchesFull) ||
              (report.followUp && coordinator.launchesInFlight === 0)
            );
          })
          .catch((error: unknown) => {
            (options.log ?? ((line: string) => process.stderr.write(`${line}\n`)))(
              `tick failed: ${errorMessage(error)}`,
            );
            return false;
          }),
      options.tickIntervalMs ?? PROFILES[options.profile].tickIntervalMs,
    );
  }

  static async start(options: DeviceOptions): Promise<DeviceRuntime> {
    const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
    const stateDir = resolve(options.stateDir);
    const secured = await secureStateDir(stateDir);
    if (secured.tightenedFromMode !== null)
      log(describeTightened(stateDir, secured.tightenedFromMode));
    const stateLock = await lockStateDir(stateDir);
    try {
      return await DeviceRuntime.startLocked(options, log, stateDir, stateLock);
    } catch (error) {
      stateLock.release();
      throw error;
    }
  }

  private static async startLocked(
    options: DeviceOptions,
    log: (line: string) => void,
    stateDir: string,
    stateLock: HeldLock,
  ): Promise<DeviceRuntime> {
    const hmacKey = await loadOrCreateReceiptKey(stateDir);
    // Local facts wake the cadence early; the runtime exists only once the server is up.
    let runtimeForWake: DeviceRuntime | null = null;
    const wake = (): void => runtimeForWake?.wake();
    const launchSettled = (): void => runtimeForWake?.launchSettled();
    const store = await openConfiguredStore({
      kind: options.store,
      stateDir,
      databaseUrl: options.databaseUrl,
      nowMs: systemClock.nowMs(),
      lowMemory: options.profile === "edge",
    });
    try {
      for (const file of options.applyFiles) {
        const applied = await applyFile(store, file);
        log(
          `applied ${file}: package ${applied.package} generation ${applied.generation}${applied.changed ? " (new)" : " (unchanged)"}`,
        );
      }
      // A crash test's named point: die exactly here, as a power cut or OOM kill would, or
      // fail this one cycle here as a store error would.
      const fault = faultTrigger(options.fault ?? null, () => process.kill(process.pid, "SIGKILL"));
      const launcher = new PosixLauncher({
        stateDir,
        hmacKey,
        nowMs: () => systemClock.nowMs(),
        graceMs: options.graceMs ?? DEFAULT_GRACE_MS,
        lowMemory: options.profile === "edge",
        onSupervisorExit: wake,
        afterJournal: () => fault("launch.after_journal"),
        afterStopIntent: () => fault(STOP_AFTER_INTENT),
        afterStopTerm: () => fault(STOP_AFTER_TERM),
        ...(options.supervisorPath === undefined ? {} : { supervisorPath: options.supervisorPath }),
      });
      const executor = new LocalProcessExecutor(launcher, {
        logMaxBytes: options.logMaxBytes ?? DEFAULT_LOG_MAX_BYTES,
        onStopError: (attemptId, error) =>
          log(`stop of ${attemptId} failed: ${errorMessage(error)}`),
        fault,
      });
      const metrics = new Metrics(processMemory, () => store.driver.turns);
      const runWaiters = new RunWaiters(store);
      const retention = options.retention ?? DEFAULT_RETENTION;
      // A PostgreSQL server may be shared by several coordinators: this runtime is one node of
      // it (src/ownership.ts). The embedded stores have exactly one coordinator.
      const node =
        options.store === "postgres" ? await loadOrCreateNodeIdentity(stateDir) : undefined;
      const coordinator = new Coordinator({
        ...(node === undefined ? {} : { node }),
        store,
        clock: systemClock,
        ids: uuidv7Ids,
        profile: PROFILES[options.profile],
        ...(options.maxRunning === undefined ? {} : { maxRunning: options.maxRunning }),
        executors: { local_process: executor },
        elapsedMs: () => performance.now(),
        onStage: (stage) => {
          metrics.observeStage(stage);
          // A stage that wrote something may have ended (or moved) a run someone waits for:
          // answered now, not at the end of the cycle or at the fallback re-read.
          if (stage.processed > 0) void runWaiters.recheck();
        },
        onTick: () => metrics.observeTick(),
        // The supervisor spawns while the cycle goes on (admission, completions, the next
        // page's journals): a cycle that waited for its page left serve idle for most of it.
        pipelinedLaunches: { pages: LAUNCH_PAGES_IN_FLIGHT, settled: launchSettled },
        fault,
        retention,
        notifier: nodeNotificationSender,
      });
      const recovery: RecoveryEntry[] = await coordinator.recover();
      for (const entry of recovery.filter((item) => item.decision === "fail_closed"))
        log(`recovery failed closed for attempt ${entry.attemptId}: ${entry.reason ?? ""}`);
      // Recovery goes by the store's attempts, never by journal file names; a file whose name is
      // not `<portable id>.json` is reported here so an operator sees it, and never used.
      const journal = await launcher.listJournal().catch((error: unknown) => ({
        valid: [],
        rejected: [{ name: "journal/", reason: `cannot be listed: ${errorMessage(error)}` }],
      }));
      for (const rejected of journal.rejected) {
        log(
          `journal file ${JSON.stringify(rejected.name)} rejected: ${rejected.reason}; it is never treated as an attempt`,
        );
        // Reported beside the recovery decisions, so `GET /recovery` shows it too.
        recovery.push({
          attemptId: rejected.name.slice(0, 64),
          decision: "journal_rejected",
          reason: rejected.reason,
        });
      }
      // Temporary files of durable creates that a kill left behind (a few per crash): swept
      // here, so a device that crashes now and then over a year does not collect them.
      const swept = await launcher.sweepTemporaryFiles().catch((error: unknown) => {
        log(`temporary files were not swept: ${errorMessage(error)}`);
        return null;
      });
      if (swept !== null && swept.removed > 0)
        log(`removed ${swept.removed} temporary file(s) that stopped writers left behind`);
      const app = createApp({
        store,
        coordinator,
        clock: systemClock,
        ids: uuidv7Ids,
        secrets: randomSecrets,
        token: options.token,
        workerToken: options.workerToken ?? null,
        metrics,
        runWaiters,
        recoveryReport: () => recovery,
        retention,
        profileName: options.profile,
        mount: (app) => mountDashboard(app),
        onChange: () => {
          fault(API_AFTER_CHANGE);
          wake();
        },
        readLogChunk: (attempt, stream, offset, limitBytes, complete) =>
          readLogChunk(launcher.logPath(attempt.id, stream), offset, limitBytes, complete),
        readLog: (attempt: RunAttempt, maxBytes: number) =>
          readAttemptLog(
            launcher.logPath(attempt.id, "stdout"),
            launcher.logPath(attempt.id, "stderr"),
            Math.min(maxBytes, LOG_READ_MAX_BYTES),
          ),
      });
      const intake: Intake = { open: true };
      const fetch = (request: Request, env?: unknown): Response | Promise<Response> =>
        intake.open || DRAIN_PATHS.has(new URL(request.url).pathname)
          ? app.fetch(request, env)
          : Response.json(
              {
                error: {
                  code: "storage_unavailable",
                  message: "the runtime is stopping",
                  details: [],
                },
              },
              { status: 503 },
            );
      const server = await new Promise<ServerType>((resolveServer, rejectServer) => {
        const started = serve({ fetch, hostname: options.host, port: options.port }, () =>
          resolveServer(started),
        );
        started.once("error", rejectServer);
      });
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : options.port;
      const runtime = new DeviceRuntime({
        url: `http://${options.host}:${port}`,
        store,
        coordinator,
        executor,
        server,
        options,
        recovery,
        intake,
        runWaiters,
        stateLock,
      });
      runtimeForWake = runtime;
      runtime.cadence.start();
      return runtime;
    } catch (error) {
      await store.close();
      throw error;
    }
  }

  /**
   * Runs the cadence now instead of at the end of the interval: a run was started or cancelled,
   * a worker reported, a supervisor exited. Still one cycle at a time (cadence.ts).
   */
  wake(): void {
    if (this.stopping !== null) return;
    // A pipelined launch is in flight: it wakes the cadence as it settles (within one page's
    // spawns), and the cycle it starts sees what this wake was for.
    if (this.parts.coordinator.launchesInFlight > 0) return;
    this.cadence.wake();
  }

  /** A pipelined launch settled: the next cycle records it and hands over the next page. */
  private launchSettled(): void {
    if (this.stopping !== null) return;
    this.cadence.wake();
  }

  stop(): Promise<void> {
    this.stopping ??= this.stopInOrder();
    return this.stopping;
  }

  private async stopInOrder(): Promise<void> {
    const { intake, coordinator, executor, store, server, options, runWaiters } = this.parts;
    // 1. Stop intake: every request but a lease holder's lease calls is refused from here on.
    // Waiting requests answer their runs as they stand now, while the store is still open.
    intake.open = false;
    runWaiters.close();
    // 2. Scheduler stopAndDrain: no further cycles admit or dispatch; wait for the cycle in flight.
    this.cadence.stop();
    coordinator.freezeAdmission();
    await coordinator.idle();
    // 3. Execution control stopAndDrain: durable shutdown intent, exact stops, step-scoped outcomes.
    const stopped = await coordinator.stopRunningForShutdown();
    if (stopped > 0) {
      await executor.drainStops();
      // Bounded: receipts land right after the processes end; a few frozen cycles record them.
      for (let round = 0; round < 20; round += 1) {
        await coordinator.tick();
        const owner = coordinator.nodeId ?? undefined;
        const live = await store.read(async (tx) =>
          tx.listAttempts("local_process", ["running"], null, 1, owner),
        );
        if (live.length === 0) break;
        await new Promise((wait) => setTimeout(wait, 100));
      }
    }
    // 3b. Remote workers: durable shutdown intents, answered through their heartbeats while the
    // lease calls are still served; bounded by one lease TTL. Asked again each round, so an
    // attempt that reached running meanwhile is stopped too.
    const drainUntilMs = performance.now() + (options.remoteDrainMs ?? REMOTE_DRAIN_MS);
    if ((await coordinator.requestRemoteShutdownStops()) > 0) {
      do {
        if (performance.now() >= drainUntilMs) break;
        await new Promise((wait) => setTimeout(wait, 200));
        // A frozen cycle still converges cancellation and the frontier of what workers report.
        await coordinator.tick();
      } while ((await coordinator.requestRemoteShutdownStops()) > 0);
    }
    // 4. Close the server and the store.
    const closed = new Promise<void>((resolveClose) => server.close(() => resolveClose()));
    if (server instanceof HttpServer) server.closeIdleConnections();
    if (server instanceof HttpServer) server.closeAllConnections();
    await closed;
    await store.close();
    // 5. Let the next runtime in.
    this.parts.stateLock.release();
  }
}

export async function applyFile(store: SqlStore, file: string): Promise<ApplyResult> {
  const text = await readFile(file, "utf8");
  const result = parseManifest(text, file.endsWith(".json") ? "json" : "yaml");
  if (!result.ok) throw manifestError(result.issues);
  return transactAtStoreTime(store, systemClock, (tx, nowMs) =>
    applyPackage(tx, result.manifest, nowMs),
  );
}

export function describeStartupError(error: unknown): string {
  if (isQlrError(error))
    return `${error.code}: ${error.message}${error.details.length > 0 ? `\n${error.details.map((detail) => `  ${detail.path}: ${detail.message}`).join("\n")}` : ""}`;
  return errorMessage(error);
}
