/**
 * The pg driver's extra round trip per writing transaction: just before COMMIT it reads
 * `pg_current_xact_id_if_assigned()`, the timeline and the postmaster's start
 * (`RECORD_TRANSACTION_ID_SQL` in storage/postgres/pg-driver.ts), so a COMMIT whose answer is
 * lost can be settled with `pg_xact_status`. What that costs, and what it would cost riding on
 * the transaction's last writing statement instead (`… RETURNING` the same three values):
 *
 * - `bare`: BEGIN SERIALIZABLE, one UPDATE … RETURNING, COMMIT (3 round trips);
 * - `separate`: the same plus the evidence SELECT before COMMIT (4 round trips, as the driver does);
 * - `riding`: the evidence in the UPDATE's RETURNING list (3 round trips);
 * - `driver`: `openPgDriver(...).transaction` with the same UPDATE (the real path, for scale).
 *
 * The variants take turns in blocks of `BLOCK` transactions, so they share one load window on
 * a shared machine; compare them with each other, not with figures from another run.
 * Run one file on its own (not part of `npm run bench`):
 *   npx esbuild bench/commit-evidence.ts --bundle --platform=node --format=esm \
 *     --packages=external --outfile=node_modules/.cache/qlr-bench/commit-evidence.mjs \
 *     && node node_modules/.cache/qlr-bench/commit-evidence.mjs
 * `QLR_BENCH_DATABASE_URL` names a server to use instead of a throwaway embedded one;
 * `QLR_BENCH_COMMIT_ROUNDS` sets the transactions per variant (default 2000).
 */
import { loadavg } from "node:os";
import pg from "pg";
import {
  CURRENT_TIMELINE_SQL,
  RECORD_TRANSACTION_ID_SQL,
} from "../storage/postgres/commit-evidence.ts";
import { openPgDriver } from "../storage/postgres/pg-driver.ts";
import { now, summarize, type LatencySummary } from "./lib/common.ts";
import { startBenchPostgres } from "./lib/postgres-server.ts";

const ROUNDS = Number(process.env.QLR_BENCH_COMMIT_ROUNDS ?? 2000);
const BLOCK = 50;
const WARMUP = 200;

const UPDATE_SQL = "UPDATE commit_evidence SET n = n + 1 WHERE id = 1 RETURNING n";
const RIDING_SQL = `UPDATE commit_evidence SET n = n + 1 WHERE id = 1 RETURNING n,
  pg_current_xact_id_if_assigned()::text AS xid, ${CURRENT_TIMELINE_SQL} AS timeline,
  pg_postmaster_start_time()::text AS started`;

type Variant = "bare" | "separate" | "riding" | "driver";
const VARIANTS: readonly Variant[] = ["bare", "separate", "riding", "driver"];

async function main(): Promise<void> {
  const server = await startBenchPostgres();
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  const driver = await openPgDriver({ connectionString: server.url, poolSize: 1 });
  try {
    await client.query(
      "CREATE TABLE IF NOT EXISTS commit_evidence (id int PRIMARY KEY, n bigint NOT NULL)",
    );
    await client.query(
      "INSERT INTO commit_evidence VALUES (1, 0) ON CONFLICT (id) DO UPDATE SET n = 0",
    );
    const once = async (variant: Variant): Promise<void> => {
      if (variant === "driver") {
        await driver.transaction((tx) => tx.query(UPDATE_SQL));
        return;
      }
      await client.query("BEGIN ISOLATION LEVEL SERIALIZABLE");
      if (variant === "riding") {
        const riding = await client.query<{ xid: string | null }>(RIDING_SQL);
        if (riding.rows[0]?.xid == null) throw new Error("the riding UPDATE answered no xid");
      } else {
        await client.query(UPDATE_SQL);
        if (variant === "separate") {
          const evidence = await client.query<{ xid: string | null }>(RECORD_TRANSACTION_ID_SQL);
          if (evidence.rows[0]?.xid == null) throw new Error("the evidence read answered no xid");
        }
      }
      await client.query("COMMIT");
    };
    for (const variant of VARIANTS)
      for (let index = 0; index < WARMUP / 4; index += 1) await once(variant);
    const loadBefore = loadavg();
    const samples = new Map<Variant, number[]>(VARIANTS.map((variant) => [variant, []]));
    // Bounded: ROUNDS / BLOCK turns of every variant.
    for (let done = 0; done < ROUNDS; done += BLOCK) {
      for (const variant of VARIANTS) {
        const into = samples.get(variant) ?? [];
        for (let index = 0; index < BLOCK; index += 1) {
          const startedMs = now();
          await once(variant);
          into.push(now() - startedMs);
        }
      }
    }
    const summaries: Record<string, LatencySummary> = {};
    for (const variant of VARIANTS) summaries[variant] = summarize(samples.get(variant) ?? []);
    const p50 = (variant: Variant): number => summaries[variant]?.p50Ms ?? Number.NaN;
    const result = {
      bench: "commit-evidence",
      server: server.source,
      rounds: ROUNDS,
      loadBefore,
      loadAfter: loadavg(),
      summaries,
      evidenceCostP50Ms: p50("separate") - p50("bare"),
      ridingCostP50Ms: p50("riding") - p50("bare"),
    };
    process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  } finally {
    await client.end();
    await driver.close();
    await server.stop();
  }
}

await main();
