/**
 * When a driver stops asking for turns (`TransactionOptions.inTurn`, docs/ARCHITECTURE.md §15,
 * "Pages take turns"). A turn is an ordering, never a guarantee: a transaction whose turn is not
 * granted within the driver's wait runs without one. A holder that stopped without dying (a
 * SIGSTOP'd process, a frozen VM) keeps its session and so its turn until TCP keepalive ends it,
 * which can take minutes; without memory every page of every other coordinator would wait the
 * whole turn wait again in the meantime. So a wait that ran out opens the breaker: for a pause
 * the driver's transactions run without asking, then one of them (the probe) asks again while
 * the others go on without. A probe that waits in vain doubles the next pause, up to a cap; the
 * first turn granted closes the breaker and resets the pause.
 *
 * Only the driver sees a wait run out (PostgreSQL's `lock_timeout`, 55P03), and only it holds a
 * clock and the connections, so the breaker lives here rather than in the pure core, which
 * decides only whether its pages want turns at all (`Coordinator.notePeers`). One breaker per
 * driver: the coordinator's pages all go through its one pool.
 */
import { QlrError } from "../../src/errors.ts";
import type { TurnCounts } from "../driver.ts";

export interface TurnBreakerPolicy {
  /** How long the driver runs without turns after the first wait that ran out. */
  readonly firstPauseMs: number;
  /** The longest pause: each probe that waits in vain doubles the pause up to this. */
  readonly maxPauseMs: number;
}

/**
 * A few seconds first (a holder that was only slow lets go within its page's milliseconds; a
 * frozen one costs the driver a turn wait per pause), doubling to a minute: a holder frozen for
 * minutes costs one turn wait (2 s by default) a minute, about 3 % of the driver's pages' time.
 */
export const DEFAULT_TURN_BREAKER_POLICY: TurnBreakerPolicy = {
  firstPauseMs: 4_000,
  maxPauseMs: 60_000,
};

/** What the breaker decided for one transaction that wanted its turn. */
export type TurnRequest = "ask" | "probe" | "skip";

export class TurnBreaker {
  private readonly policy: TurnBreakerPolicy;
  private readonly monotonicNowMs: () => number;
  /** Until when transactions run without asking; null while the breaker is closed. */
  private pausedUntilMs: number | null = null;
  /** The pause the next wait that runs out starts. */
  private nextPauseMs: number;
  /** A probe is asking: the others go on without a turn until it knows. */
  private probing = false;
  private counts = { granted: 0, waitsRunOut: 0, skipped: 0 };

  constructor(
    policy: TurnBreakerPolicy = DEFAULT_TURN_BREAKER_POLICY,
    monotonicNowMs: () => number = () => performance.now(),
  ) {
    const { firstPauseMs, maxPauseMs } = policy;
    if (
      !(Number.isFinite(firstPauseMs) && firstPauseMs > 0) ||
      !(Number.isFinite(maxPauseMs) && maxPauseMs >= firstPauseMs)
    )
      throw new QlrError(
        "invalid_request",
        `a turn breaker needs 0 < firstPauseMs <= maxPauseMs, both finite; got ${firstPauseMs} and ${maxPauseMs}`,
      );
    this.policy = policy;
    this.monotonicNowMs = monotonicNowMs;
    this.nextPauseMs = firstPauseMs;
  }

  /**
   * Whether a transaction that wants its turn asks for it: `ask` (closed), `probe` (the pause
   * is over and it is the one to try again), or `skip` (run without a turn, counted). An `ask`
   * or `probe` must be followed by exactly one of `granted`, `ranOut` or `abandoned`.
   */
  request(): TurnRequest {
    if (this.pausedUntilMs === null) return "ask";
    if (this.probing || this.monotonicNowMs() < this.pausedUntilMs) {
      this.counts.skipped += 1;
      return "skip";
    }
    this.probing = true;
    return "probe";
  }

  /** The turn was granted: whoever held it lets go again, so the breaker closes. */
  granted(request: TurnRequest): void {
    this.counts.granted += 1;
    if (request === "probe") this.probing = false;
    this.pausedUntilMs = null;
    this.nextPauseMs = this.policy.firstPauseMs;
  }

  /**
   * The wait ran out. A wait that began before the breaker opened is the same stopped holder
   * seen once more, so only a closed breaker or the probe starts a pause (and doubles the next).
   */
  ranOut(request: TurnRequest): void {
    this.counts.waitsRunOut += 1;
    if (request === "probe") this.probing = false;
    else if (this.pausedUntilMs !== null) return;
    this.pausedUntilMs = this.monotonicNowMs() + this.nextPauseMs;
    this.nextPauseMs = Math.min(this.nextPauseMs * 2, this.policy.maxPauseMs);
  }

  /** The request failed for another reason (its connection): it says nothing of the holder. */
  abandoned(request: TurnRequest): void {
    if (request === "probe") this.probing = false;
  }

  /** A copy of the counts. */
  get turns(): TurnCounts {
    return { ...this.counts };
  }
}
