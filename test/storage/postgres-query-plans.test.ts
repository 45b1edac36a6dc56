/**
 * The plans PostgreSQL picks for the statements a stage page sends, read with EXPLAIN on the
 * very text and parameters the store sent, over a few thousand runs: each must probe by key
 * what the page names instead of scanning a table, whatever the statistics say. In the cluster
 * bench these were the lead of the server's time (docs/PERFORMANCE.md, "PostgreSQL's server
 * time per unit"): the receipts of a page's runs joined to every step mutation by a hash join,
 * the admission candidates walked from every running run (statistics taken while the tables
 * were small), and the lookups by a list of keys scanned whole tables under the default
 * `random_page_cost`.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EMPTY_CHANGE_SET, type ChangeSet } from "../../src/model.ts";
import type { SqlDriver, SqlParam } from "../../storage/driver.ts";
import { openPgDriver, sessionOptions } from "../../storage/postgres/pg-driver.ts";
import { openPostgresStore } from "../../storage/postgres/store.ts";
import type { SqlStore } from "../../storage/sql-store.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

const NOW_MS = 1_800_000_000_000;
/** Runs written straight into the tables: enough that a scan costs more than a page's probes. */
const RUNS = 3_000;
/** The first runs are done (their steps succeeded), the rest running with one ready step each. */
const DONE_RUNS = 2_000;
const PAGE_RUNS = 64;

const runId = (index: number): string => `run-${String(index).padStart(6, "0")}`;

/**
 * Runs of the diamond's shape: four steps, an attempt, a mutation and a receipt per step. The
 * done runs' steps succeeded; each running run has its first step running (admitted) and its
 * second ready without a receipt.
 */
const POPULATE = [
  `INSERT INTO runs (id, kind, package, generation, target, reconciliation_digest, status, version,
     event_seq, attempt_seq, created_at_ms, updated_at_ms, finished_at_ms)
   SELECT 'run-' || lpad(n::text, 6, '0'), 'workflow', 'bench', 1, 'diamond', 'rd', CASE WHEN n <= ${DONE_RUNS} THEN 'succeeded' ELSE 'running' END,
     5, 10, 4, ${NOW_MS}, ${NOW_MS}, CASE WHEN n <= ${DONE_RUNS} THEN ${NOW_MS} END
   FROM generate_series(1, ${RUNS}) AS n`,
  `INSERT INTO step_runs (id, run_id, position, name, task, needs, status, version, digest, attempt_count, created_at_ms)
   SELECT 'stp-' || lpad(n::text, 6, '0') || '-' || p, 'run-' || lpad(n::text, 6, '0'), p, 's' || p, 'work', '[]',
     CASE WHEN n <= ${DONE_RUNS} THEN 'succeeded' WHEN p = 0 THEN 'running' WHEN p = 1 THEN 'ready' ELSE 'pending' END,
     2, 'digest', 1, ${NOW_MS}
   FROM generate_series(1, ${RUNS}) AS n, generate_series(0, 3) AS p`,
  `INSERT INTO run_attempts (id, run_id, step_run_id, step_run_version, number, status, executor, version, created_at_ms, timeout_ms, lease_version)
   SELECT 'att-' || s.id, s.run_id, s.id, 1, s.position + 1, CASE WHEN s.status = 'running' THEN 'running' ELSE 'succeeded' END,
     'local_process', 3, ${NOW_MS}, 60000, 0
   FROM step_runs s WHERE s.status IN ('succeeded', 'running')`,
  `INSERT INTO step_mutations (run_id, step_run_id, version, from_status, to_status, from_digest, to_digest, event_seq, at_ms)
   SELECT s.run_id, s.id, v, NULL, 'ready', NULL, 'digest', s.position * 2 + v, ${NOW_MS}
   FROM step_runs s, generate_series(1, 2) AS v`,
  `INSERT INTO admission_receipts (run_id, step_run_id, step_run_version, body)
   SELECT s.run_id, s.id, 1, '{}' FROM step_runs s WHERE s.status IN ('succeeded', 'running')`,
];

describe("PostgreSQL plans of a stage page's statements", () => {
  let database: TestDatabase;
  let driver: SqlDriver;
  let store: SqlStore;
  const sent: { sql: string; params: readonly SqlParam[] }[] = [];
  /** EXPLAIN (GENERIC_PLAN) came with PostgreSQL 16; an older QLR_TEST_DATABASE_URL checks custom plans only. */
  let explainsGenericPlans = false;

  beforeAll(async () => {
    database = await createTestDatabase();
    const pgDriver = await openPgDriver({ connectionString: database.url, poolSize: 1 });
    driver = pgDriver;
    const recording: SqlDriver = {
      dialect: pgDriver.dialect,
      name: pgDriver.name,
      close: () => pgDriver.close(),
      transaction: (fn) =>
        pgDriver.transaction((tx) =>
          fn({
            query: (sql, params = []) => {
              sent.push({ sql, params });
              return tx.query(sql, params);
            },
          }),
        ),
    };
    store = await openPostgresStore(recording, NOW_MS);
    const version = await driver.transaction((tx) =>
      tx.query<{ server_version_num: string }>("SHOW server_version_num"),
    );
    explainsGenericPlans = Number(version[0]?.server_version_num) >= 160_000;
    // Statistics of nearly empty tables, as a burst of new runs leaves them until autovacuum's
    // next pass: the planner then believes each condition matches a row or two.
    await driver.transaction(async (tx) => {
      await tx.query(POPULATE[0]!.replace(`generate_series(1, ${RUNS})`, "generate_series(1, 1)"));
      await tx.query("ANALYZE");
      await tx.query("DELETE FROM runs");
    });
    await driver.transaction(async (tx) => {
      for (const statement of POPULATE) await tx.query(statement);
    });
  }, 120_000);
  afterAll(async () => {
    await store?.close();
    await database?.drop();
  });

  /** The plan of the last statement the store sent whose text contains `marker`. */
  async function planOfLast(marker: string, generic = false): Promise<string> {
    const statement = sent.findLast((entry) => entry.sql.includes(marker));
    if (statement === undefined) throw new Error(`no statement containing ${marker} was sent`);
    const rows = await driver.transaction((tx) =>
      generic
        ? // The plan a named statement may switch to; the ";" sends it by the simple protocol,
          // since a generic plan is explained without parameter values.
          tx.query<{ "QUERY PLAN": string }>(`EXPLAIN (COSTS OFF, GENERIC_PLAN) ${statement.sql};`)
        : tx.query<{ "QUERY PLAN": string }>(
            `EXPLAIN (COSTS OFF) ${statement.sql}`,
            statement.params,
          ),
    );
    return rows.map((row) => row["QUERY PLAN"]).join("\n");
  }

  async function analyze(): Promise<void> {
    await driver.transaction((tx) => tx.query("ANALYZE"));
  }

  /** The ids of the page of running runs the checks read. */
  const pageRuns = Array.from({ length: PAGE_RUNS }, (_, index) => runId(DONE_RUNS + 1 + index));

  for (const statistics of ["stale", "fresh"] as const) {
    describe(`with ${statistics} statistics`, () => {
      beforeAll(async () => {
        if (statistics === "fresh") await analyze();
      });

      it("admission candidates: the ready steps from the cursor, in order, each run by id", async () => {
        for (const after of [
          null,
          { runId: runId(DONE_RUNS + 500), stepRunId: "stp-", stepRunVersion: 1 },
        ]) {
          const found = await store.transaction((tx) =>
            tx.listAdmissionCandidates(after, 64, NOW_MS),
          );
          expect(found).toHaveLength(64);
          for (const generic of explainsGenericPlans ? [false, true] : [false]) {
            const plan = await planOfLast("FROM step_runs s", generic);
            expect(plan).toMatch(
              /Index Scan using step_runs_ready on step_runs s\n.*Index Cond: \(ROW\(run_id, id\) >/,
            );
            expect(plan).not.toContain("Sort");
            expect(plan).not.toContain("Seq Scan");
            // The run is probed by its id for each step (by whichever index), never walked.
            expect(plan).toMatch(/ on runs\n\s+Index Cond: \([^\n]*\bid = s\.run_id\)/);
          }
        }
      });

      it("a page's updates of several rows join their arrays to the table by key, no scan", async () => {
        const rollBack = new Error("rolled back on purpose: only the plan is wanted");
        await expect(
          store.transaction(async (tx) => {
            const runs: ChangeSet["runs"][number][] = [];
            for (const id of pageRuns.slice(0, 16)) {
              const run = await tx.getRun(id);
              if (run !== null)
                runs.push({ before: run, after: { ...run, version: run.version + 1 } });
            }
            await tx.apply({ ...EMPTY_CHANGE_SET, runs });
            await tx.flush();
            throw rollBack;
          }),
        ).rejects.toBe(rollBack);
        const plan = await planOfLast("UPDATE runs AS t");
        expect(plan).toMatch(/Index Scan using runs_pkey on runs t/);
        expect(plan).toMatch(/Nested Loop\n\s+-> {2}Function Scan on v\n/);
        expect(plan).not.toContain("Seq Scan");
        expect(plan).not.toContain("Hash");
      });

      it("a page's runs read whole: steps, attempts and receipts by key, no scan", async () => {
        await store.transaction((tx) => tx.preloadRuns(pageRuns));
        for (const marker of [
          "FROM runs WHERE id = ANY(",
          "FROM step_runs WHERE run_id = ANY(",
          "FROM run_attempts WHERE run_id = ANY(",
          "FROM admission_receipts a",
        ]) {
          const plan = await planOfLast(marker);
          expect(plan, marker).not.toContain("Seq Scan");
          expect(plan, marker).not.toContain("Hash");
        }
      });
    });
  }

  it("a run is found by its idempotency key through the index of the runs that have one", async () => {
    await driver.transaction((tx) =>
      tx.query("UPDATE runs SET idempotency_key = 'key-' || id WHERE id <= $1", [runId(50)]),
    );
    await analyze();
    const found = await store.transaction((tx) => tx.getRunByIdempotencyKey(`key-${runId(7)}`));
    expect(found?.id).toBe(runId(7));
    for (const generic of explainsGenericPlans ? [false, true] : [false]) {
      const plan = await planOfLast("WHERE idempotency_key =", generic);
      expect(plan).toMatch(/Index Scan using runs_idempotency_key on runs/);
    }
    // The index holds only those runs: a run without a key (most) costs it no entry, at its
    // insert or at any update that is not HOT.
    const entries = await driver.transaction((tx) =>
      tx.query<{ indexdef: string; entries: string }>(
        `SELECT pg_get_indexdef('runs_idempotency_key'::regclass) AS indexdef,
                (SELECT reltuples FROM pg_class WHERE relname = 'runs_idempotency_key')::text AS entries`,
      ),
    );
    expect(entries[0]?.indexdef).toContain("WHERE (idempotency_key IS NOT NULL)");
    expect(Number(entries[0]?.entries)).toBe(50);
  });

  it("the events' unique index holds only stored ids: a derived id (NULL) costs no entry, a stored one stays unique", async () => {
    const event = (seq: number, id: string | null) =>
      driver.transaction((tx) =>
        tx.query(
          `INSERT INTO run_events (run_id, seq, id, type, at_ms, data) VALUES ($1, $2, $3, 'step.ready', $4, '{}')`,
          [runId(RUNS), seq, id, NOW_MS],
        ),
      );
    for (let seq = 1; seq <= 40; seq += 1) await event(seq, seq === 7 ? "wte:stored" : null);
    await expect(event(41, "wte:stored")).rejects.toThrow(/duplicate/);
    await analyze();
    const [index] = await driver.transaction((tx) =>
      tx.query<{ indexdef: string; entries: string }>(
        `SELECT pg_get_indexdef('run_events_stored_id'::regclass) AS indexdef,
                (SELECT reltuples FROM pg_class WHERE relname = 'run_events_stored_id')::text AS entries`,
      ),
    );
    expect(index?.indexdef).toContain("UNIQUE INDEX");
    expect(index?.indexdef).toContain("WHERE (id IS NOT NULL)");
    expect(Number(index?.entries)).toBe(1);
  });

  it("a run's rows carry no foreign key: a row is written without a trigger or a lock on its run (migration 0014)", async () => {
    const found = await driver.transaction((tx) =>
      tx.query<{ relation: string; name: string }>(
        `SELECT conrelid::regclass::text AS relation, conname AS name FROM pg_constraint
         WHERE contype = 'f' AND connamespace = current_schema()::regnamespace`,
      ),
    );
    expect(found).toEqual([]);
    // What checks instead: the store refuses a run's rows without its run's compare-and-set
    // (test/storage/runs-kept-by-version.test.ts), and every simulated seed and the cluster
    // harness count the rows naming a run or step that does not exist (countOrphanRows).
  });

  it("the store's sessions plan with the page cost of data in memory", async () => {
    const found = await driver.transaction((tx) =>
      tx.query<{ random_page_cost: string }>("SHOW random_page_cost"),
    );
    expect(found[0]?.random_page_cost).toBe("1.1");
  });
});

describe("the pg driver's session options", () => {
  it("put the page cost first, so PGOPTIONS wins, and refuse a bad cost", () => {
    expect(sessionOptions(1.1, undefined)).toBe("-c random_page_cost=1.1");
    expect(sessionOptions(1.1, " -c random_page_cost=4 ")).toBe(
      "-c random_page_cost=1.1 -c random_page_cost=4",
    );
    expect(sessionOptions(null, "-c work_mem=8MB")).toBe("-c work_mem=8MB");
    expect(sessionOptions(null, undefined)).toBeUndefined();
    for (const bad of [0, -1, Number.NaN, Number.POSITIVE_INFINITY])
      expect(() => sessionOptions(bad, undefined)).toThrow(/randomPageCost/);
  });
});
