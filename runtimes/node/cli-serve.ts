import { isPortableId } from "../../src/identity.ts";
import type { RetentionPolicy } from "../../src/retention.ts";
import { tryParseDurationMs } from "../../src/manifest/duration.ts";
import { errorMessage } from "../../src/errors.ts";
import { MAX_MAX_RUNNING } from "../../src/backpressure.ts";
import { loadOrCreateToken, retentionConfig, UsageError, type CommonConfig } from "./config.ts";
import { describeStartupError, DeviceRuntime } from "./device.ts";
import {
  faultInjectionFromEnv,
  WORKER_FAULT_POINTS,
  type FaultInjection,
  type WorkerFaultPoint,
} from "./fault-points.ts";
import { describeTightened, secureStateDir } from "./state-dir.ts";
import type { CommandInput } from "./cli-options.ts";

/**
 * The commands that run until a signal: `qlr serve` (the device runtime) and `qlr worker` (a
 * remote worker leasing from a coordinator). Every option is checked before anything is written.
 */

/** `qlr serve`: validated before the token or the state dir is written, so bad input writes nothing. */
export async function serveCommand({ config, values }: CommandInput): Promise<number> {
  return await runServe(
    config,
    values.apply ?? [],
    intervalOption("--tick-interval", values["tick-interval"] ?? process.env.QLR_TICK_INTERVAL, {
      minMs: 10,
      maxMs: MAX_TICK_INTERVAL_MS,
      words: "10ms to 24h",
    }),
    maxRunningOption(values["max-running"] ?? process.env.QLR_MAX_RUNNING),
    retentionConfig(values, process.env),
  );
}

/** `qlr worker`: the poll interval is checked first, then the coordinator, pool and token. */
export async function workerCommand({ config, values }: CommandInput): Promise<number> {
  const pollIntervalMs = intervalOption(
    "--poll-interval",
    values["poll-interval"] ?? process.env.QLR_POLL_INTERVAL,
    { minMs: 50, maxMs: MAX_POLL_INTERVAL_MS, words: "50ms to 1h" },
  );
  return await runWorker(
    config,
    values.coordinator,
    values.pool,
    values.capacity,
    values.insecure === true,
    pollIntervalMs,
  );
}

/** The longest interval: a wake (a start, a cancel, an exit) runs the cadence sooner anyway. */
const MAX_TICK_INTERVAL_MS = 24 * 3_600_000;

/** A worker asks at least this often: a lease it holds is heartbeated in its rounds too. */
const MAX_POLL_INTERVAL_MS = 3_600_000;

/** A duration option within [minMs, maxMs], named by its flag in the error. */
function intervalOption(
  flag: string,
  text: string | undefined,
  bounds: { readonly minMs: number; readonly maxMs: number; readonly words: string },
): number | undefined {
  if (text === undefined || text === "") return undefined;
  const parsed = tryParseDurationMs(text);
  if (!parsed.ok) throw new UsageError(`${flag}: ${parsed.reason}`);
  if (parsed.ms < bounds.minMs || parsed.ms > bounds.maxMs)
    throw new UsageError(`${flag} must be from ${bounds.words}, got ${text}`);
  return parsed.ms;
}

function maxRunningOption(text: string | undefined): number | undefined {
  if (text === undefined || text === "") return undefined;
  const value = /^[0-9]{1,6}$/.test(text) ? Number(text) : Number.NaN;
  if (!Number.isInteger(value) || value < 1 || value > MAX_MAX_RUNNING)
    throw new UsageError(
      `--max-running must be a whole number from 1 to ${MAX_MAX_RUNNING}, got ${text}`,
    );
  return value;
}

async function runServe(
  config: CommonConfig,
  applyFiles: string[],
  tickIntervalMs: number | undefined,
  maxRunning: number | undefined,
  retention: RetentionPolicy,
): Promise<number> {
  let fault: FaultInjection | null;
  try {
    fault = faultInjectionFromEnv(process.env);
  } catch (error) {
    throw new UsageError(errorMessage(error));
  }
  // Before the token is written into it: the state dir must be the runtime's own and owner-only.
  const secured = await secureStateDir(config.stateDir);
  if (secured.tightenedFromMode !== null)
    process.stderr.write(`${describeTightened(config.stateDir, secured.tightenedFromMode)}\n`);
  const stored = config.token === null ? await loadOrCreateToken(config.stateDir) : null;
  const token = config.token ?? stored?.token ?? "";
  const runtime = await DeviceRuntime.start({
    stateDir: config.stateDir,
    host: config.host,
    port: config.port,
    token,
    workerToken: config.workerToken,
    profile: config.profile,
    store: config.store,
    databaseUrl: config.databaseUrl,
    applyFiles,
    ...(tickIntervalMs === undefined ? {} : { tickIntervalMs }),
    ...(maxRunning === undefined ? {} : { maxRunning }),
    fault,
    retention,
  });
  const lines = [
    `qlr serving ${runtime.url} (profile ${config.profile}, store ${config.store}, state ${config.stateDir})`,
  ];
  // The token itself is never printed: terminal scrollback, CI logs and service journals keep
  // stdout. Its file is readable by the owner only.
  if (stored?.created === true)
    lines.push(`token: created in ${stored.path} (readable by its owner only)`);
  else if (stored !== null) lines.push(`token: stored in ${stored.path}`);
  if (config.workerToken !== null) lines.push("worker token: set (accepted on /worker/* only)");
  lines.push(`try: qlr runs --state-dir ${config.stateDir}`);
  process.stdout.write(`${lines.join("\n")}\n`);
  await new Promise<void>((resolveStop) => {
    const onSignal = (signal: NodeJS.Signals): void => {
      process.stdout.write(
        `${signal}: stopping (admission frozen, running steps stopped, store closed)\n`,
      );
      void runtime.stop().then(resolveStop, (error: unknown) => {
        process.stderr.write(`stop failed: ${describeStartupError(error)}\n`);
        resolveStop();
      });
    };
    process.once("SIGTERM", onSignal);
    process.once("SIGINT", onSignal);
  });
  return 0;
}

/** Loopback hosts: a token sent there in clear never leaves the machine. */
function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, "").toLowerCase();
  return host === "localhost" || host === "::1" || /^127(\.[0-9]{1,3}){3}$/.test(host);
}

/** The coordinator URL, refused when it would carry the token in clear across a network. */
export function checkCoordinatorUrl(text: string, insecure: boolean): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new UsageError(`--coordinator ${text} is not a URL`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:")
    throw new UsageError(`--coordinator must be an http(s) URL, got ${url.protocol}`);
  if (url.protocol === "http:" && !isLoopbackHost(url.hostname) && !insecure) {
    throw new UsageError(
      `--coordinator ${text} is plain http to another machine: the token would cross the network in clear. Use https, or pass --insecure on a network you trust`,
    );
  }
  return text;
}

async function runWorker(
  config: CommonConfig,
  coordinator: string | undefined,
  pool: string | undefined,
  capacityText: string | undefined,
  insecure: boolean,
  pollIntervalMs: number | undefined,
): Promise<number> {
  const coordinatorText = coordinator ?? process.env.QLR_COORDINATOR ?? config.url;
  if (coordinatorText === null || coordinatorText === undefined)
    throw new UsageError("qlr worker needs --coordinator URL");
  const coordinatorUrl = checkCoordinatorUrl(coordinatorText, insecure);
  if (pool === undefined || !isPortableId(pool))
    throw new UsageError("qlr worker needs --pool NAME (a portable name)");
  const capacity = Number(capacityText ?? "1");
  if (!Number.isInteger(capacity) || capacity < 1 || capacity > 64)
    throw new UsageError("--capacity must be 1–64");
  // The worker token opens only the lease routes; the admin token still works for compatibility.
  const token = config.workerToken ?? config.token;
  if (token === null)
    throw new UsageError(
      "qlr worker needs --worker-token-file or QLR_WORKER_TOKEN (or the admin --token-file / QLR_TOKEN)",
    );
  let fault: FaultInjection<WorkerFaultPoint> | null;
  try {
    fault = faultInjectionFromEnv(process.env, WORKER_FAULT_POINTS);
  } catch (error) {
    throw new UsageError(errorMessage(error));
  }
  const { RemoteWorker } = await import("./remote-worker.ts");
  const worker = await RemoteWorker.create({
    coordinatorUrl,
    token,
    pool,
    capacity,
    stateDir: config.stateDir,
    fault,
    ...(pollIntervalMs === undefined ? {} : { pollIntervalMs }),
  });
  worker.start();
  process.stdout.write(
    `qlr worker ${worker.workerId} leasing pool ${pool} from ${coordinatorUrl} (capacity ${capacity}, state ${config.stateDir})\n`,
  );
  await new Promise<void>((resolveStop) => {
    const onSignal = (): void => {
      // Running tasks keep running under their supervisors; a restarted worker re-adopts them.
      void worker.stop().then(resolveStop, resolveStop);
    };
    process.once("SIGTERM", onSignal);
    process.once("SIGINT", onSignal);
  });
  return 0;
}
