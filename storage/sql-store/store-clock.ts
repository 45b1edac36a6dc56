import { QlrError } from "../../src/errors.ts";
import type { QueryContext } from "./query-context.ts";

/**
 * Where store time comes from. `host`: the caller's clock reading (one host owns the store: a
 * device, PGlite, a Durable Object, tests with an injected clock). `database`: the PostgreSQL
 * server's `clock_timestamp()`, so coordinators on several hosts share one clock whatever
 * their own skew.
 */
export type StoreClockSource = "host" | "database";

/**
 * With the database clock, the persisted observation (the fail-closed guard against time going
 * back) is the sequence `qlr_store_clock_watermark` (migration 0004), and it moves in steps of
 * this much rather than on every write. Every write transaction reads it; as a row that each
 * also wrote, any two concurrent writers conflicted on it and the serializable retries of busy
 * coordinators ran out (a sequence takes no serializable read lock either). A server clock
 * stepping back by less than one step goes unnoticed; a larger step back fails closed.
 */
export const DATABASE_CLOCK_WATERMARK_STEP_MS = 1_000;

/**
 * A transaction's view of the store clock: `observe` reads the time and checks it against the
 * persisted observation (the fail-closed guard against time going back), and
 * `advanceWatermark` moves that observation forward with the transaction's writes.
 */
export class StoreClock {
  constructor(
    private readonly tx: QueryContext,
    private readonly source: StoreClockSource,
  ) {}

  /**
   * The persisted observation as `observe` read it or this store last wrote it; null before
   * that. Kept with the rows, under the same rules (see `TransactionRows.observedMs`).
   */
  private get watermarkMs(): number | null {
    return this.tx.known.observedMs ?? null;
  }

  private set watermarkMs(observedMs: number) {
    this.tx.known.observedMs = observedMs;
  }

  async observe(hostNowMs: number): Promise<number> {
    if (!Number.isSafeInteger(hostNowMs) || hostNowMs < 0)
      throw new QlrError(
        "invalid_request",
        `host time ${hostNowMs} is not an epoch millisecond count`,
      );
    if (this.source === "database") {
      const found = await this.tx.q<{ last_observed_ms: number; database_now_ms: number }>(
        "SELECT last_value AS last_observed_ms, CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT) AS database_now_ms FROM qlr_store_clock_watermark",
      );
      const last = Number(found[0]?.last_observed_ms ?? 0);
      const databaseNowMs = Number(found[0]?.database_now_ms);
      if (!Number.isSafeInteger(databaseNowMs))
        throw new QlrError("internal", "the database server answered no clock reading");
      if (databaseNowMs < last) {
        throw new QlrError(
          "clock_regression",
          `the database server's clock reads ${databaseNowMs}, before the last persisted observation ${last}; refusing to write until it catches up`,
        );
      }
      this.watermarkMs = last;
      return databaseNowMs;
    }
    // Read once: inside a transaction only it moves the observation (`advanceWatermark` keeps
    // `watermarkMs` equal to what it wrote), and on a sole-writer driver it is kept with the rows.
    const last =
      this.watermarkMs ??
      Number(
        (
          await this.tx.q<{ last_observed_ms: number }>(
            "SELECT last_observed_ms FROM qlr_store_clock WHERE id = 1",
          )
        )[0]?.last_observed_ms ?? 0,
      );
    if (hostNowMs < last) {
      throw new QlrError(
        "clock_regression",
        `the host clock reads ${hostNowMs}, before the last persisted observation ${last}; refusing to write until it catches up`,
      );
    }
    this.watermarkMs = last;
    return hostNowMs;
  }

  /** Moves the persisted observation forward (see DATABASE_CLOCK_WATERMARK_STEP_MS for when). */
  async advanceWatermark(latestMs: number): Promise<void> {
    if (this.source === "database") {
      if (
        this.watermarkMs !== null &&
        latestMs - this.watermarkMs < DATABASE_CLOCK_WATERMARK_STEP_MS
      )
        return;
      // Not atomic with a concurrent setter: the watermark may land up to one step lower, which
      // the step already tolerates; it never moves past a time some transaction observed.
      await this.tx.q(
        "SELECT setval('qlr_store_clock_watermark', GREATEST(last_value, ?)) FROM qlr_store_clock_watermark",
        [latestMs],
      );
      this.watermarkMs = Math.max(this.watermarkMs ?? 0, latestMs);
      return;
    }
    // Already there in this transaction (the page's earlier writes moved it): the update would match no row.
    if (this.watermarkMs !== null && latestMs <= this.watermarkMs) return;
    await this.tx.q(
      "UPDATE qlr_store_clock SET last_observed_ms = ? WHERE id = 1 AND last_observed_ms < ?",
      [latestMs, latestMs],
    );
    this.watermarkMs = Math.max(this.watermarkMs ?? 0, latestMs);
  }
}
