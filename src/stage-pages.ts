import { isQlrError } from "./errors.ts";
import type { ChangeSet, Run, RunAttempt, StepRun } from "./model.ts";
import type { Clock, Store, StoreTransactionOptions, StoreTx } from "./ports.ts";
import type { NodeIdentity } from "./ownership.ts";
import type { StageBudget } from "./profiles.ts";
import { walkKeyset } from "./paging.ts";

/**
 * The stage kit: what every stage of the cycle (src/coordinator.ts) writes and walks with. One
 * write transaction at store time, a stage page in one transaction (group commit), a keyset
 * walk over a store list with its round-robin cursor, and the stage's report into the cycle's.
 */

/** Named points where crash and race tests inject faults; injected per coordinator, never global. */
export type FaultPoint =
  | "admission.after_commit"
  | "dispatch.after_starting"
  | "dispatch.after_spawn"
  | "dispatch.after_running"
  | "completion.before_commit"
  | "completion.after_commit"
  | "cancellation.after_stop_intent"
  | "cancellation.after_stop"
  /** A frontier change (steps ready, or the run finalized with its alerts) is committed. */
  | "frontier.after_commit"
  | "purge.after_commit"
  | "purge.after_discard"
  | "purge.discard_before_journal"
  /** The executor's journal record is durable; nothing has been asked to spawn yet. */
  | "launch.after_journal"
  | "notification.after_send";

/** Passes through a fault point (`CoordinatorDeps.fault`); a no-op where nothing is injected. */
export type FaultHook = (point: FaultPoint) => Promise<void>;

export interface PageReport {
  /** Items the page wrote (or decided) in its shared transaction. */
  readonly size: number;
  /** False: the shared transaction failed and the items were written one transaction each. */
  readonly committed: boolean;
}

/** What a stage reports into the cycle's report (`StageReport`). */
export interface StageContext {
  processed: number;
  more: boolean;
  errors: { code: string; message: string; subject: string | null }[];
}

/** One item's reads, decision and write inside a page transaction (see `StagePages.writePage`). */
export type PageWrite<T> = (tx: StoreTx, nowMs: number, hostOffsetMs: number) => Promise<T>;

type PageOutcome<T> =
  { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: unknown };

interface PageResult<T> {
  /** One outcome per write, in page order. */
  readonly outcomes: readonly PageOutcome<T>[];
  /**
   * Why the shared transaction failed, when it did (the outcomes then come from one
   * transaction per item); null when the page committed as one. After a lost commit response
   * the page may have committed all the same, which the per-item writes then find.
   */
  readonly pageError: unknown;
}

/**
 * Pages take turns across coordinators (`StoreTransactionOptions.inTurn`): on one PostgreSQL,
 * pages that overlapped aborted each other (serializable isolation locks what an index scan
 * read by whole index page, and a page reads and writes the newest rows of every table), and
 * an aborted page is written again item by item. Measured in docs/PERFORMANCE.md, "Pages take
 * turns".
 */
const PAGE_IN_TURN: StoreTransactionOptions = { inTurn: true };

/**
 * Thrown into a page transaction that the store calls a second time (a PostgreSQL
 * serialization failure): a page that met a competitor once is written item by item at once,
 * rather than retried whole against the same competitors (see `StagePages.writePage`).
 */
export class PageAbandoned extends Error {
  constructor() {
    super("the page transaction met a serialization failure; written item by item instead");
  }
}

/**
 * A keyset walk over one store list (`walkKeyset`, src/paging.ts) whose cursor is an item's
 * id: each page is read in a short transaction of its own, then handled item by item
 * (`handle`) or as one page (`handlePage`, group commit).
 */
export type StoreWalk<Item> = {
  /** Round robin: the walk resumes next cycle where this one stopped, under this key; absent: from the start. */
  readonly resume?: string;
  readonly budget: StageBudget;
  /** One page of the list after `after`, at most `limit` items (never more than the store caps). */
  readonly list: (tx: StoreTx, after: string | null, limit: number) => Promise<readonly Item[]>;
  readonly idOf: (item: Item) => string;
  /** How a page's read runs (default: one store transaction); start-up recovery retries its reads. */
  readonly read?: <T>(fn: (tx: StoreTx) => Promise<T>) => Promise<T>;
  /** Checked before each page: true ends the walk. */
  readonly done?: () => boolean;
} & (
  | { readonly handle: (item: Item) => Promise<void> }
  | { readonly handlePage: (items: readonly Item[]) => Promise<void> }
);

/** A core rule that reads one run whole (`convergeCancellation`, `advanceFrontier`). */
type WholeRunRule = (
  run: Run,
  steps: readonly StepRun[],
  attempts: readonly RunAttempt[],
  nowMs: number,
) => ChangeSet | null;

/** The rule's change for a run read whole in `tx`; null when the run is gone or nothing changes. */
export async function wholeRunChange(
  tx: StoreTx,
  runId: string,
  rule: WholeRunRule,
  nowMs: number,
): Promise<ChangeSet | null> {
  const run = await tx.getRun(runId);
  if (run === null) return null;
  return rule(run, await tx.getSteps(runId), await tx.getAttempts(runId), nowMs);
}

export const attemptIdOf = (attempt: RunAttempt): string => attempt.id;

export const itself = (id: string): string => id;

export function describe(error: unknown): { code: string; message: string } {
  if (isQlrError(error)) return { code: error.code, message: error.message };
  return { code: "internal", message: error instanceof Error ? error.message : String(error) };
}

/** One item of a stage: counted when it changed something; a failure is reported for it and the stage goes on. */
export async function countOne(
  context: StageContext,
  subject: string,
  handle: () => Promise<boolean>,
): Promise<void> {
  try {
    if (await handle()) context.processed += 1;
  } catch (error) {
    context.errors.push({ ...describe(error), subject });
  }
}

export interface StagePagesDeps {
  readonly store: Store;
  readonly clock: Clock;
  /** See `CoordinatorDeps.groupCommit`; absent: on. */
  readonly groupCommit?: boolean;
  readonly onPage?: (page: PageReport) => void;
  /** See `CoordinatorDeps.node`: a node of a shared store; absent, the store's only coordinator. */
  readonly node?: NodeIdentity | null;
}

/**
 * The transactions and walks of one coordinator's stages, with the round-robin cursors they
 * resume from (in memory only: a restart simply starts over).
 */
export class StagePages {
  /** Where each paged stage resumes next cycle. */
  private readonly cursors = new Map<string, string | null>();
  /**
   * Whether this node's pages take turns: while another coordinator's lease is live (see
   * `Coordinator.notePeers`). A turn costs a page two round trips, a quarter of a lone
   * coordinator's workflow steps per second in the bench, for nothing when nobody else writes.
   */
  private turns: boolean;

  constructor(private readonly deps: StagePagesDeps) {
    // A node (one of several) takes turns until it has seen that it is alone; the store's only
    // coordinator, which has no node identity, never does.
    this.turns = (deps.node ?? null) !== null;
  }

  /** From now on this node's pages take turns (peers) or not (alone). */
  takeTurns(peers: boolean): void {
    this.turns = peers;
  }

  /** The options of a page's transaction. */
  get pageTransaction(): StoreTransactionOptions | undefined {
    return this.turns ? PAGE_IN_TURN : undefined;
  }

  /** Whether stage pages commit as one transaction (see `CoordinatorDeps.groupCommit`). */
  get grouping(): boolean {
    return this.deps.groupCommit ?? true;
  }

  /** The store every stage reads and writes. */
  get store(): Store {
    return this.deps.store;
  }

  /**
   * One write transaction at store time. `hostOffsetMs` is store time minus this host's clock,
   * measured now: host-stamped launcher facts are moved onto store time with it (host-time.ts).
   */
  async write<T>(
    fn: (tx: StoreTx, nowMs: number, hostOffsetMs: number) => Promise<T>,
    options?: StoreTransactionOptions,
  ): Promise<T> {
    return this.deps.store.transaction(async (tx) => {
      const hostNowMs = this.deps.clock.nowMs();
      const nowMs = await tx.observe(hostNowMs);
      return fn(tx, nowMs, nowMs - hostNowMs);
    }, options);
  }

  /** Reports a page written as a group (`CoordinatorDeps.onPage`). */
  reportPage(page: PageReport): void {
    this.deps.onPage?.(page);
  }

  /**
   * Group commit: the writes of one stage page in one store transaction, so the page costs one
   * commit (one fdatasync on the file store, one COMMIT round trip on PostgreSQL) instead of
   * one per item. Each write still reads and decides against what its own reads return, in
   * page order, so it sees the page's earlier writes exactly as a transaction of its own would;
   * the version CAS guards every row. Nothing of the page is acknowledged before the shared
   * commit returns.
   *
   * When the page transaction fails as a whole (a write of one item throws: a lost CAS, an
   * integrity error, a storage error, a lost commit response), nothing of it is trusted and
   * every item is written again in a transaction of its own, re-reading and re-deciding: the
   * items that can commit do, the loser is reported for itself, and an item the page did
   * commit (a lost response) finds its versions moved and writes nothing twice.
   *
   * The page transaction first reads the page's runs whole (`runIds`, `StoreTx.preloadRuns`):
   * a few multi-row statements instead of each item reading its rows one statement at a time.
   *
   * The page runs once: a store that calls it again (PostgreSQL retries a serialization
   * failure) gets `PageAbandoned` and the page goes item by item at once. A whole page retried
   * against the same competitors loses again most of the time, and each retry re-runs every
   * item's reads and writes; one item's transaction is short, and the store's own retries
   * serve it well.
   */
  async writePage<T>(
    writes: readonly PageWrite<T>[],
    runIds: readonly string[],
  ): Promise<PageResult<T>> {
    let pageError: unknown = null;
    if (writes.length > 1 && this.grouping) {
      let runs = 0;
      try {
        const values = await this.write(async (tx, nowMs, hostOffsetMs) => {
          runs += 1;
          if (runs > 1) throw new PageAbandoned();
          await tx.preloadRuns(runIds);
          const page: T[] = [];
          for (const write of writes) page.push(await write(tx, nowMs, hostOffsetMs));
          return page;
        }, this.pageTransaction);
        this.deps.onPage?.({ size: writes.length, committed: true });
        return { outcomes: values.map((value) => ({ ok: true, value })), pageError: null };
      } catch (error) {
        // Each item's own error, if it has one, is what gets reported: see below.
        pageError = error;
        this.deps.onPage?.({ size: writes.length, committed: false });
      }
    }
    const outcomes: PageOutcome<T>[] = [];
    for (const write of writes) {
      try {
        outcomes.push({ ok: true, value: await this.write(write) });
      } catch (error) {
        outcomes.push({ ok: false, error });
      }
    }
    return { outcomes, pageError };
  }

  /**
   * Writes a stage page in one transaction (`writePage`), then, in page order, runs what
   * follows each committed item (`committed`: fault points, follow-ups; true counts it as
   * processed). A failed item is reported with its subject; the others go on.
   */
  async commitPage<Item, T>(
    context: StageContext,
    items: readonly Item[],
    subjectOf: (item: Item) => string,
    runIdOf: (item: Item) => string,
    writeOf: (item: Item) => PageWrite<T>,
    committed: (value: T) => Promise<boolean>,
  ): Promise<void> {
    const { outcomes } = await this.writePage(items.map(writeOf), items.map(runIdOf));
    for (const [index, outcome] of outcomes.entries()) {
      const item = items[index];
      try {
        if (!outcome.ok) throw outcome.error;
        if (await committed(outcome.value)) context.processed += 1;
      } catch (error) {
        context.errors.push({
          ...describe(error),
          subject: item === undefined ? null : subjectOf(item),
        });
      }
    }
  }

  /** Walks a store list (`StoreWalk`); true when pages were left unread. */
  walkStore<Item>(walk: StoreWalk<Item>): Promise<boolean> {
    const { resume } = walk;
    const read = walk.read ?? ((fn) => this.deps.store.read(fn));
    const base = {
      after: resume === undefined ? null : (this.cursors.get(resume) ?? null),
      pageSize: walk.budget.pageSize,
      pages: walk.budget.pages,
      read: (after: string | null, limit: number) => read((tx) => walk.list(tx, after, limit)),
      cursorOf: walk.idOf,
      ...(resume === undefined
        ? {}
        : { saved: (after: string | null) => this.saveCursor(resume, after) }),
      ...(walk.done === undefined ? {} : { done: walk.done }),
    };
    return walkKeyset<Item, string>(
      "handlePage" in walk
        ? { ...base, handlePage: walk.handlePage }
        : { ...base, handle: walk.handle },
    );
  }

  /** A stage's walk: pages left unread by its budget ask for the next cycle (`more`). */
  async stageWalk<Item>(context: StageContext, walk: StoreWalk<Item>): Promise<void> {
    if (await this.walkStore(walk)) context.more = true;
  }

  /** Store time, for a list that selects what is due. */
  storeNow(tx: StoreTx): Promise<number> {
    return tx.observe(this.deps.clock.nowMs());
  }

  /** Where the walk saved under `cursorKey` resumes; null: from the start. */
  cursor(cursorKey: string): string | null {
    return this.cursors.get(cursorKey) ?? null;
  }

  /** Round robin: a stage's next cycle resumes after `after`, or from the start when its walk reached the end. */
  saveCursor(cursorKey: string, after: string | null): void {
    if (after === null) this.cursors.delete(cursorKey);
    else this.cursors.set(cursorKey, after);
  }
}
