import { errorMessage } from "../../src/errors.ts";

/**
 * When the remote worker's rounds run: one at a time, once per poll interval (at least once per
 * heartbeat interval while a lease is held), at once after a wake, and in a few quick rounds
 * after a completion.
 */

/**
 * After a completion is reported the coordinator admits the steps that needed it at once (its
 * cadence wakes on the report), so the worker asks for work again soon instead of a whole poll
 * interval later: a few quick rounds, then the interval again.
 */
const FOLLOW_UP_DELAYS_MS = [20, 100, 400] as const;

export interface RoundWork {
  /** Runs once, before the first round. */
  readonly prepare: () => Promise<void>;
  /** One bounded round; a failure is logged and the next round comes as usual. */
  readonly round: () => Promise<void>;
  /** Leases held and not yet done: while there are any, heartbeats set the pace. */
  readonly active: () => number;
}

export class WorkerRounds {
  private isRunning = false;
  private loop: Promise<void> | null = null;
  private endWait: (() => void) | null = null;
  /** A task's receipt landed while a round ran: the next round starts at once. */
  private wakeRequested = false;
  /** Quick rounds left after a completion (an index into FOLLOW_UP_DELAYS_MS). */
  private followUp: number = FOLLOW_UP_DELAYS_MS.length;
  private completedInRound = false;

  constructor(
    private readonly intervals: { readonly pollMs: number; readonly heartbeatMs: number },
    private readonly log: (line: string) => void,
  ) {}

  /** Between start() and stop(): a round that sees false does not begin new work. */
  get running(): boolean {
    return this.isRunning;
  }

  start(work: RoundWork): void {
    if (this.isRunning) return;
    this.isRunning = true;
    this.loop = (async () => {
      await work.prepare();
      // Deliberately unbounded: the worker runs until stop(); each round is bounded and sleeps.
      while (this.isRunning) {
        await work
          .round()
          .catch((error: unknown) => this.log(`round failed: ${errorMessage(error)}`));
        const delayMs = this.nextDelayMs(work.active());
        if (this.wakeRequested || !this.isRunning) {
          this.wakeRequested = false;
          continue;
        }
        await new Promise<void>((endWait) => {
          this.endWait = endWait;
          setTimeout(endWait, delayMs);
        });
        this.endWait = null;
      }
    })();
  }

  /** Ends the loop after the round in flight, and waits for it. */
  async stop(): Promise<void> {
    this.isRunning = false;
    this.endWait?.();
    await this.loop;
  }

  /** Something to report or claim may be waiting: run a round now (after the current one). */
  wake(): void {
    if (this.endWait !== null) this.endWait();
    else this.wakeRequested = true;
  }

  /** A completion was reported in this round: the quick follow-up rounds start again. */
  completed(): void {
    this.completedInRound = true;
  }

  private nextDelayMs(active: number): number {
    // Heartbeats go out in rounds: while a lease is held, a round comes at least this often.
    const pollIntervalMs =
      active > 0
        ? Math.min(this.intervals.pollMs, this.intervals.heartbeatMs)
        : this.intervals.pollMs;
    if (this.completedInRound) {
      this.completedInRound = false;
      this.followUp = 0;
    }
    const followUpMs = FOLLOW_UP_DELAYS_MS[this.followUp];
    if (followUpMs === undefined) return pollIntervalMs;
    this.followUp += 1;
    return Math.min(followUpMs, pollIntervalMs);
  }
}
