import { describe, expect, it } from "vitest";
import { storePageSize, walkKeyset, type KeysetWalk } from "../../src/paging.ts";
import { MAX_STORE_PAGE } from "../../src/ports.ts";

/**
 * The keyset walk every paged stage of the coordinator uses: it must visit each item once, in
 * order, resume where a saved cursor says, stop on a short page or a spent budget, and never ask
 * the store for more than it returns in one call.
 */

type WalkOptions = Pick<KeysetWalk<number, number>, "pageSize" | "pages"> &
  Partial<
    Pick<KeysetWalk<number, number>, "after" | "cursorOf" | "saved" | "done" | "pagesAtOnce">
  >;

/**
 * A sorted list served like a store list: items after the cursor, at most MAX_STORE_PAGE of them.
 * `walk` walks it from the start (unless `after` says otherwise), each item its own cursor, and
 * pushes every item it handles into `seen`.
 */
function source(items: readonly number[]): {
  reads: { after: number | null; limit: number; pages: number }[];
  seen: number[];
  walk: (options: WalkOptions) => Promise<boolean>;
} {
  const reads: { after: number | null; limit: number; pages: number }[] = [];
  const seen: number[] = [];
  const read = (after: number | null, limit: number, pages: number): Promise<number[]> => {
    reads.push({ after, limit, pages });
    return Promise.resolve(
      items
        .filter((item) => after === null || item > after)
        .slice(0, Math.min(limit, MAX_STORE_PAGE) * pages),
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
      { after: null, limit: 4, pages: 1 },
      { after: 4, limit: 4, pages: 1 },
      { after: 8, limit: 4, pages: 1 },
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

  it("reading several pages at once hands them over a page at a time and ends exactly where a page-at-a-time walk ends", async () => {
    for (let size = 0; size <= 20; size += 1)
      for (const pages of [1, 2, 4, Infinity])
        for (const stopAt of [Infinity, 5]) {
          const run = async (pagesAtOnce?: () => number) => {
            const list = source(range(size));
            const saved: (number | null)[] = [];
            const handed: number[][] = [];
            const more = await walkKeyset<number, number>({
              after: null,
              pageSize: 3,
              pages,
              read: (after, limit, pagesAtOnce) => {
                list.reads.push({ after, limit, pages: pagesAtOnce });
                return Promise.resolve(
                  range(size)
                    .filter((item) => after === null || item > after)
                    .slice(0, limit * pagesAtOnce),
                );
              },
              cursorOf: (item) => item,
              saved: (after) => void saved.push(after),
              done: () => handed.flat().length >= stopAt,
              handlePage: (items) => Promise.resolve(void handed.push([...items])),
              ...(pagesAtOnce === undefined ? {} : { pagesAtOnce }),
            });
            return { more, saved, handed, reads: list.reads };
          };
          const onePage = await run();
          const atOnce = await run(() => 3);
          const label = `${size} items, ${pages} pages, done at ${stopAt}`;
          expect(atOnce.handed, label).toEqual(onePage.handed);
          expect(atOnce.saved, label).toEqual(onePage.saved);
          expect(atOnce.more, label).toBe(onePage.more);
          expect(atOnce.reads.length, label).toBeLessThanOrEqual(onePage.reads.length);
          // Pages of the walk's size, never more at once than the budget has left.
          for (const read of atOnce.reads) {
            expect(read.limit, label).toBe(3);
            expect(read.pages, label).toBeLessThanOrEqual(Math.min(3, pages));
          }
        }
  });

  it("reads the rest of its pages at once from when the walk asks, cut to MAX_STORE_PAGE", async () => {
    const list = source(range(40));
    let atOnce = 1;
    const more = await list.walk({
      pageSize: 4,
      pages: 6,
      pagesAtOnce: () => atOnce,
      saved: () => void (atOnce = 10),
    });
    expect(more).toBe(true);
    expect(list.seen).toEqual(range(24));
    // The first page alone, then the five pages left in one read.
    expect(list.reads).toEqual([
      { after: null, limit: 4, pages: 1 },
      { after: 4, limit: 4, pages: 5 },
    ]);
    const big = source(range(MAX_STORE_PAGE * 2));
    await big.walk({ pageSize: 100, pages: Infinity, pagesAtOnce: () => 50 });
    expect(big.seen).toHaveLength(MAX_STORE_PAGE * 2);
    expect(big.reads.every((read) => read.limit * read.pages <= MAX_STORE_PAGE)).toBe(true);
  });
});
