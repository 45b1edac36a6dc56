import { describe, expect, it } from "vitest";
import { storePageSize, walkKeyset, type KeysetWalk } from "../../src/paging.ts";
import { MAX_STORE_PAGE } from "../../src/ports.ts";

/**
 * The keyset walk every paged stage of the coordinator uses: it must visit each item once, in
 * order, resume where a saved cursor says, stop on a short page or a spent budget, and never ask
 * the store for more than it returns in one call.
 */

type WalkOptions = Pick<KeysetWalk<number, number>, "pageSize" | "pages"> &
  Partial<Pick<KeysetWalk<number, number>, "after" | "cursorOf" | "saved" | "done">>;

/**
 * A sorted list served like a store list: items after the cursor, at most MAX_STORE_PAGE of them.
 * `walk` walks it from the start (unless `after` says otherwise), each item its own cursor, and
 * pushes every item it handles into `seen`.
 */
function source(items: readonly number[]): {
  reads: { after: number | null; limit: number }[];
  seen: number[];
  walk: (options: WalkOptions) => Promise<boolean>;
} {
  const reads: { after: number | null; limit: number }[] = [];
  const seen: number[] = [];
  const read = (after: number | null, limit: number): Promise<number[]> => {
    reads.push({ after, limit });
    return Promise.resolve(
      items
        .filter((item) => after === null || item > after)
        .slice(0, Math.min(limit, MAX_STORE_PAGE)),
    );
  };
  return {
    reads,
    seen,
    walk: (options) =>
      walkKeyset({
        after: null,
        read,
        cursorOf: (item) => item,
        handle: (item) => Promise.resolve(void seen.push(item)),
        ...options,
      }),
  };
}

const range = (count: number): number[] => Array.from({ length: count }, (_, index) => index + 1);

describe("the keyset walk", () => {
  it("visits every item once, in order, and reports the end of the list", async () => {
    const list = source(range(10));
    const saved: (number | null)[] = [];
    const more = await list.walk({
      pageSize: 4,
      pages: 10,
      saved: (after) => void saved.push(after),
    });
    expect(more).toBe(false);
    expect(list.seen).toEqual(range(10));
    expect(list.reads).toEqual([
      { after: null, limit: 4 },
      { after: 4, limit: 4 },
      { after: 8, limit: 4 },
    ]);
    expect(saved).toEqual([4, 8, null]);
  });

  it("stops when the page budget is spent and says pages were left; a later walk resumes from the saved cursor", async () => {
    const list = source(range(10));
    let cursor: number | null = null;
    const walk = () =>
      list.walk({ after: cursor, pageSize: 3, pages: 2, saved: (after) => void (cursor = after) });
    expect(await walk()).toBe(true);
    expect(list.seen).toEqual(range(6));
    expect(cursor).toBe(6);
    expect(await walk()).toBe(false);
    expect(list.seen).toEqual(range(10));
    expect(cursor).toBeNull();
  });

  it("a full last page within the budget is not the end: the walk reads one more (empty) page to know", async () => {
    const list = source(range(6));
    const more = await list.walk({ pageSize: 3, pages: 5 });
    expect(more).toBe(false);
    expect(list.reads.map((read) => read.after)).toEqual([null, 3, 6]);
  });

  it("never asks for more than the store returns: a larger page size is cut to MAX_STORE_PAGE, so a full store page is not taken for the end", async () => {
    const list = source(range(MAX_STORE_PAGE + 5));
    const more = await list.walk({ pageSize: MAX_STORE_PAGE * 4, pages: Infinity });
    expect(more).toBe(false);
    expect(list.seen).toHaveLength(MAX_STORE_PAGE + 5);
    expect(list.reads.every((read) => read.limit === MAX_STORE_PAGE)).toBe(true);
  });

  it("a cursor of null ends the walk at that item; `done` ends it before the next page", async () => {
    const stopped = source(range(10));
    expect(
      await stopped.walk({
        pageSize: 2,
        pages: 10,
        cursorOf: (item) => (item === 4 ? null : item),
      }),
    ).toBe(false);
    expect(stopped.seen).toEqual([1, 2, 3, 4]);
    const limited = source(range(10));
    expect(
      await limited.walk({ pageSize: 3, pages: Infinity, done: () => limited.seen.length >= 4 }),
    ).toBe(true);
    expect(limited.seen).toEqual(range(6));
  });

  it("a page size that is not a positive integer is refused before anything is read", async () => {
    for (const bad of [0, -1, 1.5, Number.NaN])
      expect(() => storePageSize(bad)).toThrow(/page size/);
    expect(storePageSize(1)).toBe(1);
    expect(storePageSize(MAX_STORE_PAGE)).toBe(MAX_STORE_PAGE);
    expect(storePageSize(MAX_STORE_PAGE + 1)).toBe(MAX_STORE_PAGE);
    const list = source(range(3));
    await expect(list.walk({ pageSize: 0, pages: 1 })).rejects.toThrow(/page size/);
    expect(list.reads).toEqual([]);
  });
});
