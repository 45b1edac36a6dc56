import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { isPortableId } from "../../src/identity.ts";
import { INPUT_KEY_PATTERN } from "../../src/run-inputs.ts";
import type { RetentionPolicy } from "../../src/retention.ts";
import { tryParseDurationMs } from "../../src/manifest/duration.ts";
import { errorMessage } from "../../src/errors.ts";
import { TERMINAL_RUN_STATUSES } from "../../src/model.ts";
import { ApiError, QlrClient } from "../http/client.ts";
import type {
  LogChunkView,
  NotificationView,
  RunDetail,
  RunPage,
  RunView,
} from "../http/contract.ts";
import {
  commonConfig,
  loadOrCreateToken,
  readStoredToken,
  retentionConfig,
  UsageError,
  type CommonConfig,
} from "./config.ts";
import { MAX_MAX_RUNNING } from "../../src/backpressure.ts";
import { describeStartupError, DeviceRuntime } from "./device.ts";
import {
  faultInjectionFromEnv,
  WORKER_FAULT_POINTS,
  type FaultInjection,
  type WorkerFaultPoint,
} from "./fault-points.ts";
import { describeTightened, secureStateDir } from "./state-dir.ts";

/**
 * `qlr`: the device runtime (`serve`) and a client of its HTTP API (every other command), so
 * the commands work the same against a router, a server or a Worker.
 */

const USAGE = `qlr — durable workflows and tasks

Usage:
  qlr serve [--apply FILE]...        run the runtime: store, cadence, launcher, HTTP API
            [--tick-interval D]      cadence interval when nothing wakes it (QLR_TICK_INTERVAL;
                                     default per profile: edge 1s, standalone 500ms, cluster 250ms)
            [--max-running N]        live local tasks at once; more wait as ready (QLR_MAX_RUNNING;
                                     default per profile: edge 4, standalone 32, cluster 128)
            [--retention D]          purge runs that ended longer ago (QLR_RETENTION, default 7d)
            [--retention-runs N]     keep at most N ended runs (QLR_RETENTION_RUNS, default 10000)
  qlr apply FILE                     apply a package manifest (YAML or JSON)
  qlr start PACKAGE/NAME [--wait]    start a workflow (or a task) run; --wait follows it
            [--input KEY=VALUE]...   the run's input (checked against the workflow's inputs:)
  qlr rerun RUN [--from-failed] [--wait]
                                     run a finished run again (same generation and input);
                                     --from-failed reuses its succeeded steps and their outputs
  qlr cancel RUN                     cancel a run (stops its processes)
  qlr resolve ATTEMPT --as lost --reason TEXT
                                     settle an attempt that failed closed, after checking
                                     its process is gone (its step fails, never re-run)
  qlr runs [--status S]              list runs, newest first
  qlr status RUN                     a run with its steps and attempts
  qlr logs RUN STEP [-f]             the latest attempt log of a step; -f follows it live
                                     until the attempt ends
  qlr notifications [--run RUN] [--state pending|delivered|failed]
                                     alerts sent for failed, timed-out and lost runs
  qlr tick                           run one cadence cycle now
  qlr worker --coordinator URL --pool P [--capacity N] [--insecure]
                                     run remote_worker tasks leased from a coordinator
            [--poll-interval D]      how often it asks for work (QLR_POLL_INTERVAL, default 1s);
                                     a task's exit and a reported completion wake it sooner

Options:
  --state-dir DIR   (QLR_STATE_DIR, default ./.qlr)     --port N (QLR_PORT, default 8787)
  --host H          (default 127.0.0.1)                  --url URL of a running runtime
  --token-file PATH the admin token (else QLR_TOKEN, else the state dir's token file)
  --worker-token-file PATH
                    the token remote workers use, valid on /worker/* only (else QLR_WORKER_TOKEN)
  --token T, --worker-token T
                    the same on the command line: every local user can read it there
  --profile edge|standalone|cluster                      --store sqlite|pglite|postgres
  --database-url URL (QLR_DATABASE_URL)                  --json machine-readable output
  --insecure        qlr worker: allow plain http to a coordinator that is not on loopback
`;

const OPTIONS = {
  "state-dir": { type: "string" },
  port: { type: "string" },
  host: { type: "string" },
  token: { type: "string" },
  "token-file": { type: "string" },
  "worker-token": { type: "string" },
  "worker-token-file": { type: "string" },
  insecure: { type: "boolean" },
  profile: { type: "string" },
  store: { type: "string" },
  "database-url": { type: "string" },
  url: { type: "string" },
  apply: { type: "string", multiple: true },
  "tick-interval": { type: "string" },
  "max-running": { type: "string" },
  as: { type: "string" },
  reason: { type: "string" },
  wait: { type: "boolean" },
  status: { type: "string" },
  limit: { type: "string" },
  "idempotency-key": { type: "string" },
  input: { type: "string", multiple: true },
  "from-failed": { type: "boolean" },
  json: { type: "boolean" },
  coordinator: { type: "string" },
  pool: { type: "string" },
  capacity: { type: "string" },
  "poll-interval": { type: "string" },
  retention: { type: "string" },
  "retention-runs": { type: "string" },
  follow: { type: "boolean", short: "f" },
  run: { type: "string" },
  state: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

/** Exit codes: 0 success, 1 a run that did not succeed, 2 an API error, 64 usage, 69 unreachable. */
const EXIT_USAGE = 64;
const EXIT_UNAVAILABLE = 69;

async function client(config: CommonConfig): Promise<QlrClient> {
  const baseUrl =
    config.url ?? `http://${config.host === "0.0.0.0" ? "127.0.0.1" : config.host}:${config.port}`;
  const token = config.token ?? (await readStoredToken(config.stateDir));
  if (token === null)
    throw new UsageError(
      `no token: pass --token-file, set QLR_TOKEN, or point --state-dir at the runtime's state dir`,
    );
  return new QlrClient({
    baseUrl,
    token,
    timeoutMs: CLI_REQUEST_TIMEOUT_MS,
    unreachableHint: "(is `qlr serve` running?)",
  });
}

/** A command waits longer than a page: an apply of a large manifest on a loaded router. */
const CLI_REQUEST_TIMEOUT_MS = 30_000;

function time(ms: number | null): string {
  return ms === null
    ? "-"
    : new Date(ms)
        .toISOString()
        .replace("T", " ")
        .replace(/\.\d+Z$/, "Z");
}

function print(config: CommonConfig, value: unknown, human: () => string): void {
  process.stdout.write(config.json ? `${JSON.stringify(value, null, 2)}\n` : `${human()}\n`);
}

function runRequired(positionals: string[], index: number, what: string): string {
  const value = positionals[index];
  if (value === undefined) throw new UsageError(`missing ${what}`);
  return value;
}

/** `--input KEY=VALUE` options as an input object; values stay text (the runtime applies declared types). */
export function parseInputOptions(options: readonly string[]): Record<string, string> {
  const input: Record<string, string> = {};
  for (const option of options) {
    const equals = option.indexOf("=");
    if (equals < 1)
      throw new UsageError(`--input expects KEY=VALUE, got ${JSON.stringify(option)}`);
    const key = option.slice(0, equals);
    if (!INPUT_KEY_PATTERN.test(key))
      throw new UsageError(
        `--input key ${JSON.stringify(key)} must match ${INPUT_KEY_PATTERN.source}`,
      );
    if (Object.hasOwn(input, key)) throw new UsageError(`--input ${key} is given twice`);
    input[key] = option.slice(equals + 1);
  }
  return input;
}

/** A JSON value on one line, cut to `width` characters. */
function brief(value: unknown, width = 72): string {
  const text = JSON.stringify(value) ?? "null";
  return text.length <= width ? text : `${text.slice(0, width - 1)}…`;
}

/** Why a run was cancelled, for people; empty from a runtime too old to say. */
function cancelReasonText(reason: RunView["cancelReason"] | undefined): string {
  if (reason === "user") return " by a user";
  if (reason === "shutdown") return " by the runtime shutting down";
  return "";
}

function renderDetail(detail: RunDetail): string {
  const lines = [
    `run ${detail.run.id}  ${detail.run.kind} ${detail.run.package}/${detail.run.target}  ${detail.run.status}`,
    `  created ${time(detail.run.createdAtMs)}  finished ${time(detail.run.finishedAtMs)}`,
  ];
  if (detail.run.input !== undefined && Object.keys(detail.run.input).length > 0)
    lines.push(`  input ${brief(detail.run.input, 200)}`);
  if (detail.run.rerunOf !== undefined && detail.run.rerunOf !== null)
    lines.push(`  rerun of ${detail.run.rerunOf}`);
  if (detail.run.cancelRequestedAtMs !== null)
    lines.push(
      `  cancel requested ${time(detail.run.cancelRequestedAtMs)}${cancelReasonText(detail.run.cancelReason)}`,
    );
  if (typeof detail.waiting === "string") lines.push(`  ${detail.waiting}`);
  for (const step of detail.steps) {
    const attempts = detail.attempts.filter((attempt) => attempt.stepRunId === step.id);
    const last = attempts.at(-1);
    lines.push(
      `  ${step.name.padEnd(16)} ${step.status.padEnd(10)} attempts ${step.attemptCount}${last === undefined ? "" : `  last ${last.status} pid ${last.pid ?? "-"} exit ${last.exitCode ?? last.signal ?? "-"}${last.error === null ? "" : `  (${last.error})`}`}`,
    );
    if (typeof step.waiting === "string") lines.push(`  ${"".padEnd(16)} ${step.waiting}`);
    if (step.output !== undefined && step.output !== null)
      lines.push(`  ${"".padEnd(16)} output ${brief(step.output)}`);
  }
  if (detail.run.kind === "ordinary") {
    for (const attempt of detail.attempts)
      lines.push(
        `  attempt ${attempt.number} ${attempt.status.padEnd(10)} pid ${attempt.pid ?? "-"} exit ${attempt.exitCode ?? attempt.signal ?? "-"}${attempt.error === null ? "" : `  (${attempt.error})`}`,
      );
  }
  return lines.join("\n");
}

/** How long each long-poll of `--wait` asks the runtime to hold (below the client's own 15 s bound). */
const WAIT_POLL_MS = 10_000;
/** The pause between reads when the runtime cannot hold a wait (an older runtime, or at its waiter cap). */
const WAIT_FALLBACK_MS = 500;

/**
 * `start --wait`, `rerun --wait`: long-polls the run (`GET /runs/:id?wait=change`), so each
 * step change is printed as the runtime records it and the command returns as soon as the run
 * is terminal, not up to half a second later. A runtime older than the long-poll answers at
 * once (its run view has no `eventSeq`), and one at its waiter cap answers 429: then the
 * command reads the run twice a second, as it always did.
 */
async function waitForRun(api: QlrClient, config: CommonConfig, runId: string): Promise<number> {
  const seen = new Map<string, string>();
  let afterSeq = 0;
  // Bounded only by the run itself: the loop ends when the run is terminal.
  for (;;) {
    let detail: RunDetail;
    try {
      detail = await api.waitRun(runId, {
        wait: "change",
        after: afterSeq,
        timeoutMs: WAIT_POLL_MS,
      });
    } catch (error) {
      if (!(error instanceof ApiError) || error.status !== 429) throw error;
      await new Promise((wait) => setTimeout(wait, WAIT_FALLBACK_MS));
      detail = await api.run(runId);
    }
    for (const step of detail.steps) {
      if (seen.get(step.id) !== step.status) {
        seen.set(step.id, step.status);
        if (!config.json)
          process.stdout.write(`${time(Date.now())}  ${step.name}: ${step.status}\n`);
      }
    }
    if (TERMINAL_RUN_STATUSES.has(detail.run.status)) {
      print(config, detail, () => renderDetail(detail));
      return detail.run.status === "succeeded" ? 0 : 1;
    }
    // An answer that did not move (the wait timed out) is asked again at once: it waited already.
    if (detail.run.eventSeq === undefined)
      await new Promise((wait) => setTimeout(wait, WAIT_FALLBACK_MS));
    else afterSeq = detail.run.eventSeq;
  }
}

/** Where an alert goes: the webhook's URL or the command line. */
function notificationTarget(entry: NotificationView): string {
  return entry.notifier.kind === "webhook" ? entry.notifier.url : entry.notifier.argv.join(" ");
}

/** How each listing words an alert's state; a time follows the delivered and pending words. */
interface NotificationStateWords {
  readonly delivered: string;
  readonly pending: string;
  readonly failed: string;
}

function notificationState(entry: NotificationView, words: NotificationStateWords): string {
  if (entry.state === "delivered") return `${words.delivered} ${time(entry.deliveredAtMs)}`;
  if (entry.state === "pending") return `${words.pending} ${time(entry.nextAttemptAtMs)}`;
  return words.failed;
}

function renderNotification(entry: NotificationView): string {
  const target = notificationTarget(entry);
  const when = notificationState(entry, {
    delivered: "delivered",
    pending: "next try",
    failed: "gave up",
  });
  return `${entry.id}  ${entry.state.padEnd(9)} ${entry.event.padEnd(14)} run ${entry.runId}${entry.step === null ? "" : ` step ${entry.step}`}  ${target}  attempts ${entry.attempts}  ${when}${entry.lastError === null ? "" : `  (${entry.lastError})`}`;
}

/** The alerts `qlr status` shows for one run (a run has one per notifier and event). */
const STATUS_NOTIFICATIONS = 50;

/** A run's alerts under its steps: what was sent, what waits, what gave up and why. */
function renderRunNotifications(entries: readonly NotificationView[]): string[] {
  if (entries.length === 0) return [];
  return [
    "  notifications",
    ...entries.map((entry) => {
      const target = notificationTarget(entry);
      const state = notificationState(entry, {
        delivered: "sent",
        pending: "pending, next try",
        failed: "failed",
      });
      const about = entry.step === null ? "" : ` step ${entry.step}`;
      return `    ${entry.event}${about}  ${target}  ${state}  attempts ${entry.attempts}${entry.lastError === null ? "" : `  last error: ${entry.lastError}`}`;
    }),
  ];
}

/** How often `logs -f` asks for more; each answer carries at most one chunk per stream. */
const FOLLOW_POLL_MS = 500;

/**
 * `qlr logs -f RUN STEP`: the step's latest attempt (waiting for one while the run has none),
 * both streams by byte offset, stdout to stdout and stderr to stderr, until the attempt ended
 * and both streams are read to their end. Memory stays at one chunk per stream.
 */
async function followLog(api: QlrClient, runId: string, step: string): Promise<number> {
  let attemptId: string | null = null;
  const offsets = { stdout: 0, stderr: 0 };
  const done = { stdout: false, stderr: false };
  // Bounded by the attempt: it ends (deadline, cancel, exit), and then both streams end.
  for (;;) {
    for (const stream of ["stdout", "stderr"] as const) {
      if (done[stream]) continue;
      let chunk: LogChunkView;
      try {
        chunk = await api.logChunk(runId, step, {
          offset: offsets[stream],
          stream,
          attempt: attemptId,
        });
      } catch (error) {
        if (!(error instanceof ApiError) || error.code !== "not_found" || attemptId !== null)
          throw error;
        // No attempt yet: wait for one unless the run ended without one (a skipped step).
        const detail = await api.run(runId);
        if (TERMINAL_RUN_STATUSES.has(detail.run.status)) throw error;
        break;
      }
      attemptId = chunk.attemptId;
      if (chunk.text !== "")
        (stream === "stdout" ? process.stdout : process.stderr).write(chunk.text);
      offsets[stream] = chunk.nextOffset;
      done[stream] = chunk.finished;
    }
    if (done.stdout && done.stderr) return 0;
    await new Promise((wait) => setTimeout(wait, FOLLOW_POLL_MS));
  }
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

async function serveCommand(
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

async function workerCommand(
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

export async function main(argv: readonly string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: true, strict: true });
  } catch (error) {
    process.stderr.write(`${errorMessage(error)}\n\n${USAGE}`);
    return EXIT_USAGE;
  }
  const [command, ...rest] = parsed.positionals;
  if (parsed.values.help === true || command === undefined || command === "help") {
    process.stdout.write(USAGE);
    return command === undefined && parsed.values.help !== true ? EXIT_USAGE : 0;
  }
  try {
    const config = await commonConfig(parsed.values, process.env);
    switch (command) {
      case "serve":
        // Validated before the token or the state dir is written: bad input writes nothing.
        return await serveCommand(
          config,
          parsed.values.apply ?? [],
          intervalOption(
            "--tick-interval",
            parsed.values["tick-interval"] ?? process.env.QLR_TICK_INTERVAL,
            { minMs: 10, maxMs: MAX_TICK_INTERVAL_MS, words: "10ms to 24h" },
          ),
          maxRunningOption(parsed.values["max-running"] ?? process.env.QLR_MAX_RUNNING),
          retentionConfig(parsed.values, process.env),
        );
      case "apply": {
        const file = runRequired(rest, 0, "FILE");
        const text = await readFile(file, "utf8");
        const api = await client(config);
        const result = await api.apply({
          text,
          contentType: file.endsWith(".json") ? "application/json" : "application/yaml",
        });
        print(
          config,
          result,
          () =>
            `package ${result.package} generation ${result.generation}${result.changed ? " (new)" : " (unchanged)"}\ndigest ${result.digest}`,
        );
        return 0;
      }
      case "start": {
        const target = runRequired(rest, 0, "PACKAGE/NAME");
        const match = /^([a-z0-9][a-z0-9-]{0,31})\/([A-Za-z0-9][A-Za-z0-9_-]{0,31})$/.exec(target);
        if (match === null) throw new UsageError(`expected PACKAGE/NAME, got ${target}`);
        const [, packageName, name] = match as unknown as [string, string, string];
        const api = await client(config);
        const info = await api.packageDetail(packageName);
        const isWorkflow = info.workflows.some((workflow) => workflow.name === name);
        if (!isWorkflow && !info.tasks.some((task) => task.name === name))
          throw new UsageError(`package ${packageName} has no workflow or task named ${name}`);
        const key = parsed.values["idempotency-key"];
        const input = parseInputOptions(parsed.values.input ?? []);
        const body = {
          package: packageName,
          ...(isWorkflow ? { workflow: name } : { task: name }),
          ...(key === undefined ? {} : { idempotencyKey: key }),
          ...(Object.keys(input).length === 0 ? {} : { input }),
        };
        const { run } = await api.startRun(body);
        if (parsed.values.wait === true) {
          if (!config.json) process.stdout.write(`run ${run.id} started\n`);
          return await waitForRun(api, config, run.id);
        }
        print(config, { run }, () => `run ${run.id} ${run.status}`);
        return 0;
      }
      case "rerun": {
        const runId = runRequired(rest, 0, "RUN");
        if (!isPortableId(runId)) throw new UsageError("RUN must be a run id");
        const key = parsed.values["idempotency-key"];
        const api = await client(config);
        const body = {
          fromFailed: parsed.values["from-failed"] === true,
          ...(key === undefined ? {} : { idempotencyKey: key }),
        };
        const { run } = await api.rerun(runId, body);
        if (parsed.values.wait === true) {
          if (!config.json) process.stdout.write(`run ${run.id} started (rerun of ${runId})\n`);
          return await waitForRun(api, config, run.id);
        }
        print(config, { run }, () => `run ${run.id} ${run.status} (rerun of ${runId})`);
        return 0;
      }
      case "cancel": {
        const runId = runRequired(rest, 0, "RUN");
        if (!isPortableId(runId)) throw new UsageError("RUN must be a run id");
        const api = await client(config);
        const { run } = await api.cancel(runId);
        print(
          config,
          { run },
          () => `run ${run.id} ${run.status}, cancel requested: its processes are being stopped`,
        );
        return 0;
      }
      case "resolve": {
        const attemptId = runRequired(rest, 0, "ATTEMPT");
        if (!isPortableId(attemptId))
          throw new UsageError("ATTEMPT must be an attempt id (qlr status RUN lists them)");
        if (parsed.values.as !== "lost")
          throw new UsageError(
            "qlr resolve needs --as lost (the only resolution: the process is gone and its outcome unknown)",
          );
        const reason = parsed.values.reason;
        if (reason === undefined || reason.trim() === "")
          throw new UsageError("qlr resolve needs --reason TEXT: what you checked on the host");
        const api = await client(config);
        const { attempt } = await api.resolve(attemptId, { as: "lost", reason });
        print(
          config,
          { attempt },
          () => `attempt ${attempt.id} ${attempt.status}: ${attempt.error ?? ""}`,
        );
        return 0;
      }
      case "runs": {
        const api = await client(config);
        // The status and the limit go to the runtime as written: it is the one that validates them.
        const query = new URLSearchParams();
        if (parsed.values.status !== undefined) query.set("status", parsed.values.status);
        query.set("limit", parsed.values.limit ?? "50");
        const page = await api.json<RunPage>("GET", `runs?${query.toString()}`);
        print(config, page, () =>
          page.runs.length === 0
            ? "no runs"
            : page.runs
                .map(
                  (run) =>
                    `${run.id}  ${run.status.padEnd(11)} ${run.kind.padEnd(8)} ${run.package}/${run.target}  ${time(run.createdAtMs)}`,
                )
                .join("\n"),
        );
        return 0;
      }
      case "status": {
        const runId = runRequired(rest, 0, "RUN");
        if (!isPortableId(runId)) throw new UsageError("RUN must be a run id");
        const api = await client(config);
        const detail = await api.run(runId);
        const { notifications } = await api.notifications({
          run: runId,
          limit: STATUS_NOTIFICATIONS,
        });
        print(config, { ...detail, notifications }, () =>
          [renderDetail(detail), ...renderRunNotifications(notifications)].join("\n"),
        );
        return 0;
      }
      case "logs": {
        const runId = runRequired(rest, 0, "RUN");
        const step = runRequired(rest, 1, "STEP");
        if (!isPortableId(runId)) throw new UsageError("RUN must be a run id");
        const api = await client(config);
        if (parsed.values.follow === true) return await followLog(api, runId, step);
        process.stdout.write(await api.log(runId, step));
        return 0;
      }
      case "notifications": {
        const run = parsed.values.run;
        if (run !== undefined && !isPortableId(run)) throw new UsageError("--run must be a run id");
        const state = parsed.values.state;
        if (
          state !== undefined &&
          state !== "pending" &&
          state !== "delivered" &&
          state !== "failed"
        )
          throw new UsageError("--state must be pending, delivered or failed");
        const limit = Number(parsed.values.limit ?? "50");
        if (!Number.isInteger(limit) || limit < 1 || limit > 200)
          throw new UsageError("--limit must be 1–200");
        const api = await client(config);
        const page = await api.notifications({ run: run ?? null, state: state ?? null, limit });
        print(config, page, () =>
          page.notifications.length === 0
            ? "no notifications"
            : page.notifications.map(renderNotification).join("\n"),
        );
        return 0;
      }
      case "tick": {
        const api = await client(config);
        const { report } = await api.tick();
        print(
          config,
          { report },
          () =>
            `${report.stages.map((stage) => `${stage.name}=${stage.processed}${stage.errors.length > 0 ? `(${stage.errors.length} errors)` : ""}`).join(" ")}  more=${report.more} ${report.durationMs.toFixed(1)}ms`,
        );
        return 0;
      }
      case "worker":
        return await workerCommand(
          config,
          parsed.values.coordinator,
          parsed.values.pool,
          parsed.values.capacity,
          parsed.values.insecure === true,
          intervalOption(
            "--poll-interval",
            parsed.values["poll-interval"] ?? process.env.QLR_POLL_INTERVAL,
            { minMs: 50, maxMs: MAX_POLL_INTERVAL_MS, words: "50ms to 1h" },
          ),
        );
      default:
        throw new UsageError(`unknown command ${command}`);
    }
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`${error.message}\n\n${USAGE}`);
      return EXIT_USAGE;
    }
    if (error instanceof ApiError) {
      process.stderr.write(
        `${error.code}: ${error.message}\n${error.details.map((detail) => `  ${detail.path}: ${detail.message}`).join("\n")}${error.details.length > 0 ? "\n" : ""}`,
      );
      return error.status === 0 ? EXIT_UNAVAILABLE : 2;
    }
    process.stderr.write(`${describeStartupError(error)}\n`);
    return 1;
  }
}
