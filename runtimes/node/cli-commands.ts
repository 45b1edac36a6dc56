import { readFile } from "node:fs/promises";
import { isPortableId } from "../../src/identity.ts";
import { INPUT_KEY_PATTERN } from "../../src/run-inputs.ts";
import { TERMINAL_RUN_STATUSES } from "../../src/model.ts";
import { ApiError, QlrClient } from "../http/client.ts";
import type { LogChunkView, RunDetail, RunPage } from "../http/contract.ts";
import { readStoredToken, UsageError, type CommonConfig } from "./config.ts";
import type { CommandInput } from "./cli-options.ts";
import {
  print,
  renderDetail,
  renderNotification,
  renderRunNotifications,
  renderRuns,
  time,
} from "./cli-render.ts";

/**
 * The commands that are clients of a running runtime's HTTP API (`apply`, `start`, `rerun`,
 * `cancel`, `resolve`, `runs`, `status`, `logs`, `notifications`, `tick`), so they work the same
 * against a router, a server or a Worker. Each checks its input before it sends anything.
 */

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

function runRequired(positionals: readonly string[], index: number, what: string): string {
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

/** The alerts `qlr status` shows for one run (a run has one per notifier and event). */
const STATUS_NOTIFICATIONS = 50;

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

export async function applyCommand({ config, args }: CommandInput): Promise<number> {
  const file = runRequired(args, 0, "FILE");
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

export async function startCommand({ config, values, args }: CommandInput): Promise<number> {
  const target = runRequired(args, 0, "PACKAGE/NAME");
  const match = /^([a-z0-9][a-z0-9-]{0,31})\/([A-Za-z0-9][A-Za-z0-9_-]{0,31})$/.exec(target);
  if (match === null) throw new UsageError(`expected PACKAGE/NAME, got ${target}`);
  const [, packageName, name] = match as unknown as [string, string, string];
  const api = await client(config);
  const info = await api.packageDetail(packageName);
  const isWorkflow = info.workflows.some((workflow) => workflow.name === name);
  if (!isWorkflow && !info.tasks.some((task) => task.name === name))
    throw new UsageError(`package ${packageName} has no workflow or task named ${name}`);
  const key = values["idempotency-key"];
  const input = parseInputOptions(values.input ?? []);
  const body = {
    package: packageName,
    ...(isWorkflow ? { workflow: name } : { task: name }),
    ...(key === undefined ? {} : { idempotencyKey: key }),
    ...(Object.keys(input).length === 0 ? {} : { input }),
  };
  const { run } = await api.startRun(body);
  if (values.wait === true) {
    if (!config.json) process.stdout.write(`run ${run.id} started\n`);
    return await waitForRun(api, config, run.id);
  }
  print(config, { run }, () => `run ${run.id} ${run.status}`);
  return 0;
}

export async function rerunCommand({ config, values, args }: CommandInput): Promise<number> {
  const runId = runRequired(args, 0, "RUN");
  if (!isPortableId(runId)) throw new UsageError("RUN must be a run id");
  const key = values["idempotency-key"];
  const api = await client(config);
  const body = {
    fromFailed: values["from-failed"] === true,
    ...(key === undefined ? {} : { idempotencyKey: key }),
  };
  const { run } = await api.rerun(runId, body);
  if (values.wait === true) {
    if (!config.json) process.stdout.write(`run ${run.id} started (rerun of ${runId})\n`);
    return await waitForRun(api, config, run.id);
  }
  print(config, { run }, () => `run ${run.id} ${run.status} (rerun of ${runId})`);
  return 0;
}

export async function cancelCommand({ config, args }: CommandInput): Promise<number> {
  const runId = runRequired(args, 0, "RUN");
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

export async function resolveCommand({ config, values, args }: CommandInput): Promise<number> {
  const attemptId = runRequired(args, 0, "ATTEMPT");
  if (!isPortableId(attemptId))
    throw new UsageError("ATTEMPT must be an attempt id (qlr status RUN lists them)");
  if (values.as !== "lost")
    throw new UsageError(
      "qlr resolve needs --as lost (the only resolution: the process is gone and its outcome unknown)",
    );
  const reason = values.reason;
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

export async function runsCommand({ config, values }: CommandInput): Promise<number> {
  const api = await client(config);
  // The status and the limit go to the runtime as written: it is the one that validates them.
  const query = new URLSearchParams();
  if (values.status !== undefined) query.set("status", values.status);
  query.set("limit", values.limit ?? "50");
  const page = await api.json<RunPage>("GET", `runs?${query.toString()}`);
  print(config, page, () => renderRuns(page.runs));
  return 0;
}

export async function statusCommand({ config, args }: CommandInput): Promise<number> {
  const runId = runRequired(args, 0, "RUN");
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

export async function logsCommand({ config, values, args }: CommandInput): Promise<number> {
  const runId = runRequired(args, 0, "RUN");
  const step = runRequired(args, 1, "STEP");
  if (!isPortableId(runId)) throw new UsageError("RUN must be a run id");
  const api = await client(config);
  if (values.follow === true) return await followLog(api, runId, step);
  process.stdout.write(await api.log(runId, step));
  return 0;
}

export async function notificationsCommand({ config, values }: CommandInput): Promise<number> {
  const run = values.run;
  if (run !== undefined && !isPortableId(run)) throw new UsageError("--run must be a run id");
  const state = values.state;
  if (state !== undefined && state !== "pending" && state !== "delivered" && state !== "failed")
    throw new UsageError("--state must be pending, delivered or failed");
  const limit = Number(values.limit ?? "50");
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

export async function tickCommand({ config }: CommandInput): Promise<number> {
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
