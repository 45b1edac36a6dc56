/**
 * Where PostgreSQL's own time goes per unit of work (run on its own, not by the orchestrator):
 * the throughput bench's cluster workload (diamond runs, then ordinary runs) on a throwaway
 * embedded server started with `pg_stat_statements` (planning tracked too), measured per phase
 * inside the ticks' window:
 * - the server's CPU (user + system of every server process, from /proc), ms per unit;
 * - each statement's execution and planning time, calls and rows, from pg_stat_statements;
 * - sequential and index scans per table (pg_stat_user_tables), commits, rollbacks and
 *   conflicts (pg_stat_database), WAL bytes (`pg_current_wal_lsn` before and after);
 * - transactions, statements and serializable retries from the bench's counting driver.
 * The count of runs between ticks (`countRuns`, outside the ticks) is listed apart.
 *
 * `QLR_BENCH_CONFIG` (optional): `{"profile": "cluster", "workflowRuns": 2500, "ordinaryRuns":
 * 10000, "top": 25}`. `QLR_BENCH_SERVER_URL` names an existing server instead (its user needs
 * CREATEDB, and pg_stat_statements must be in its shared_preload_libraries).
 * Prints one JSON document on stdout. Needs root or a user that may run the embedded server.
 */
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { startEmbeddedPostgres } from "../test/support/embedded-postgres.ts";
import type { RunTarget } from "../src/operations.ts";
import type { ProfileName } from "../src/profiles.ts";
import { diamondManifest, log, round } from "./lib/common.ts";
import { openBenchStore, type OpenedStore } from "./lib/stores.ts";
import {
  applyManifest,
  createWorld,
  diamondsThenOrdinary,
  driveUntilTerminal,
  startRuns,
} from "./lib/world.ts";

interface ServerTimeConfig {
  /** The coordinator's profile; the cluster's is the one PostgreSQL serves in production. */
  readonly profile: ProfileName;
  readonly workflowRuns: number;
  readonly ordinaryRuns: number;
  /** Statements listed per phase, by total server time. */
  readonly top: number;
}

const DEFAULTS: ServerTimeConfig = {
  profile: "cluster",
  workflowRuns: 2_500,
  ordinaryRuns: 10_000,
  top: 25,
};
/** The ticks at most per phase: only a hang reaches it. */
const MAX_TICKS = 100_000;
/** Idle backends report their table and database counters within 10 s (PGSTAT_IDLE_INTERVAL). */
const STATS_SETTLE_MS = 11_000;
const CLOCK_TICKS_PER_SECOND = 100;

/** User + system CPU of the postmaster and every process it started, ms. */
function serverCpuMs(postmasterPid: number): number {
  let ticks = 0;
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(join("/proc", entry, "stat"), "utf8");
    } catch {
      continue;
    }
    // Fields after the command (which may hold spaces), from field 3 on.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const pid = Number(entry);
    const parentPid = Number(fields[1]);
    if (pid !== postmasterPid && parentPid !== postmasterPid) continue;
    ticks += Number(fields[11]) + Number(fields[12]);
  }
  return (ticks * 1000) / CLOCK_TICKS_PER_SECOND;
}

type Row = Record<string, unknown>;

async function query(opened: OpenedStore, sql: string): Promise<Row[]> {
  return opened.driver.transaction((tx) => tx.query(sql));
}

const TABLE_COUNTERS = `SELECT relname, seq_scan, seq_tup_read, idx_scan, idx_tup_fetch,
  n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables`;
const DATABASE_COUNTERS = `SELECT xact_commit, xact_rollback, conflicts, deadlocks, blks_read,
  blks_hit, tup_returned, tup_fetched, temp_bytes FROM pg_stat_database WHERE datname = current_database()`;
const WAL_POSITION = "SELECT pg_current_wal_lsn()::text AS lsn";

interface Snapshot {
  readonly tables: Map<string, Row>;
  readonly database: Row;
  readonly lsn: string;
  readonly cpuMs: number;
}

async function snapshot(opened: OpenedStore, postmasterPid: number): Promise<Snapshot> {
  await new Promise((resolve) => setTimeout(resolve, STATS_SETTLE_MS));
  const tables = new Map(
    (await query(opened, TABLE_COUNTERS)).map((row) => [String(row.relname), row]),
  );
  const database = (await query(opened, DATABASE_COUNTERS))[0] ?? {};
  const lsn = String((await query(opened, WAL_POSITION))[0]?.lsn);
  return { tables, database, lsn, cpuMs: serverCpuMs(postmasterPid) };
}

function lsnBytes(lsn: string): bigint {
  const [high = "0", low = "0"] = lsn.split("/");
  return (BigInt(`0x${high}`) << 32n) + BigInt(`0x${low}`);
}

function difference(after: Row, before: Row | undefined, units: number): Row {
  const out: Row = {};
  for (const [key, value] of Object.entries(after)) {
    if (typeof value !== "number") continue;
    const delta = value - Number(before?.[key] ?? 0);
    if (delta !== 0) out[key] = round(delta / units, 3);
  }
  return out;
}

const STATEMENT_COUNTERS = `SELECT query, calls, plans, total_exec_time, total_plan_time, rows,
  shared_blks_hit, shared_blks_read, shared_blks_dirtied, wal_bytes, temp_blks_written
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`;

async function main(): Promise<void> {
  const config: ServerTimeConfig = {
    ...DEFAULTS,
    ...(JSON.parse(process.env.QLR_BENCH_CONFIG ?? "{}") as Partial<ServerTimeConfig>),
  };
  // An existing server (say one started with auto_explain logging to a file) when given;
  // its user needs CREATEDB and pg_stat_statements in shared_preload_libraries.
  const given = process.env.QLR_BENCH_SERVER_URL;
  const server =
    given !== undefined && given !== ""
      ? { url: given, stop: () => Promise.resolve() }
      : await startEmbeddedPostgres({
          user: "qlr_bench",
          settings: [
            ["shared_preload_libraries", "pg_stat_statements"],
            ["pg_stat_statements.track_planning", "on"],
            ["pg_stat_statements.max", "5000"],
          ],
        });
  const opened = await openBenchStore("pg", { dataRoot: "/tmp", postgresAdminUrl: server.url });
  try {
    await query(opened, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    // A backend's parent is the postmaster.
    const backendPid = Number((await query(opened, "SELECT pg_backend_pid() AS pid"))[0]?.pid);
    const postmasterPid = Number(
      readFileSync(`/proc/${backendPid}/stat`, "utf8").split(") ")[1]?.split(" ")[1],
    );
    const world = createWorld(opened.store, { profile: config.profile });
    await applyManifest(world, diamondManifest("bench"));

    const measure = async (
      target: RunTarget,
      runs: number,
      expectedTerminal: number,
      units: number,
    ): Promise<Row> => {
      await startRuns(world, "bench", target, runs);
      const before = await snapshot(opened, postmasterPid);
      await query(opened, "SELECT pg_stat_statements_reset()");
      opened.driver.reset();
      const drive = await driveUntilTerminal(
        world,
        expectedTerminal,
        MAX_TICKS,
        undefined,
        opened.driver,
      );
      const statements = await query(opened, STATEMENT_COUNTERS);
      const after = await snapshot(opened, postmasterPid);
      const tally = opened.driver.tally;
      const per = (value: unknown): number => round(Number(value) / units, 4);
      const isBench = (row: Row): boolean =>
        /GROUP BY status|pg_stat|pg_current_wal_lsn|pg_database/.test(String(row.query));
      const store = statements.filter((row) => !isBench(row));
      const sum = (rows: Row[], key: string): number =>
        rows.reduce((total, row) => total + Number(row[key]), 0);
      log(`${target.name}: ${runs} runs, ${drive.ticks} ticks, ${Math.round(drive.tickWallMs)} ms`);
      return {
        runs,
        units,
        ticks: drive.ticks,
        finished: drive.finished,
        perSecond: round((units / drive.tickWallMs) * 1000, 1),
        clientCpuMsPerUnit: round(drive.tickCpuMs / units, 3),
        serverCpuMsPerUnit: round((after.cpuMs - before.cpuMs) / units, 3),
        serverExecMsPerUnit: round(sum(store, "total_exec_time") / units, 3),
        serverPlanMsPerUnit: round(sum(store, "total_plan_time") / units, 3),
        betweenTicksExecMsPerUnit: round(
          sum(
            statements.filter((row) => /GROUP BY status/.test(String(row.query))),
            "total_exec_time",
          ) / units,
          3,
        ),
        walBytesPerUnit: round(Number(lsnBytes(after.lsn) - lsnBytes(before.lsn)) / units, 1),
        statementWalBytesPerUnit: round(sum(store, "wal_bytes") / units, 1),
        transactionsPerUnit: per(tally.transactions),
        statementsPerUnit: per(tally.statements),
        serializableRetries: tally.bodyRuns - tally.transactions,
        failedTransactions: tally.failedTransactions,
        database: difference(after.database, before.database, units),
        tables: Object.fromEntries(
          [...after.tables].map(([name, row]) => [
            name,
            difference(row, before.tables.get(name), units),
          ]),
        ),
        top: store
          .sort(
            (left, right) =>
              Number(right.total_exec_time) +
              Number(right.total_plan_time) -
              (Number(left.total_exec_time) + Number(left.total_plan_time)),
          )
          .slice(0, config.top)
          .map((row) => ({
            execMsPerUnit: per(row.total_exec_time),
            planMsPerUnit: per(row.total_plan_time),
            callsPerUnit: per(row.calls),
            plansPerUnit: per(row.plans),
            msPerCall: round(Number(row.total_exec_time) / Math.max(1, Number(row.calls)), 4),
            rowsPerCall: round(Number(row.rows) / Math.max(1, Number(row.calls)), 2),
            blocksHitPerCall: round(
              Number(row.shared_blks_hit) / Math.max(1, Number(row.calls)),
              1,
            ),
            walBytesPerUnit: per(row.wal_bytes),
            query: String(row.query).replace(/\s+/g, " ").slice(0, 400),
          })),
      };
    };

    const { workflow, ordinary } = await diamondsThenOrdinary(config, measure);
    process.stdout.write(
      `${JSON.stringify({ engineVersion: opened.engineVersion, config, workflow, ordinary }, null, 2)}\n`,
    );
  } finally {
    await opened.close();
    await server.stop();
  }
}

await main();
