import { QlrError } from "./errors.ts";
import { MAX_STORE_PAGE } from "./ports.ts";

/**
 * The one keyset walk of the coordinator's stages: read a page (its own short transaction),
 * handle each item, continue after the last item; stop on a short page (the list is
 * exhausted) or when the page budget is spent.
 */

/**
 * The page size a list may ask the store for: a positive integer, cut to MAX_STORE_PAGE. A walk
 * asking for more than the store returns would take the store's full page for a short one and
 * stop early, silently leaving the rest for a later cycle.
 */
export function storePageSize(requested: number): number {
  if (!Number.isSafeInteger(requested) || requested < 1)
    throw new QlrError("internal", `page size ${requested} is not a positive integer`);
  return Math.min(requested, MAX_STORE_PAGE);
}

interface KeysetWalkBase<Item, Cursor> {
  /** Where the walk starts: null for the beginning of the list, or a cursor saved by an earlier walk. */
  readonly after: Cursor | null;
  /** Items per page, cut to MAX_STORE_PAGE (see `storePageSize`). */
  readonly pageSize: number;
  /** At most this many pages; `Infinity` walks until the list is exhausted or `done` says so. */
  readonly pages: number;
  /**
   * Up to `pages` pages of at most `limit` items each, in order, from `after`: each page one
   * list call of the store (a page is never larger than `limit`), all of them in one short
   * transaction when several are asked (see `pagesAtOnce`). A reader that returns fewer full
   * pages than asked is read again from where it stopped.
   */
  read(after: Cursor | null, limit: number, pages: number): Promise<readonly Item[]>;
  /** The cursor after an item; null ends the walk there (an item past which the list cannot continue). */
  cursorOf(item: Item): Cursor | null;
  /** After each page: where the next page starts, or null when the walk has reached the end. */
  saved?(after: Cursor | null): void;
  /** Checked before each page: true ends the walk with nothing more of it read or handled. */
  done?(): boolean;
  /**
   * Asked before each read: how many of the walk's remaining pages to read in that one read
   * (default one). The items are still handed over a page at a time, `done` asked before each,
   * and the walk ends at the same place: a walk that expects to pass over its next pages
   * (candidates held back by a limit) reads them in one short transaction instead of one each.
   * At most MAX_STORE_PAGE items a read.
   */
  pagesAtOnce?(): number;
}

/**
 * A walk handles its items one at a time (`handle`), or a whole page at once (`handlePage`:
 * a stage that commits the page's transitions in one transaction, see the coordinator's group
 * commit).
 */
export type KeysetWalk<Item, Cursor> = KeysetWalkBase<Item, Cursor> &
  ({ handle(item: Item): Promise<void> } | { handlePage(items: readonly Item[]): Promise<void> });

/** Walks the list; true when pages were left unread (the budget or `done` stopped it before the end). */
export async function walkKeyset<Item, Cursor>(walk: KeysetWalk<Item, Cursor>): Promise<boolean> {
  const limit = storePageSize(walk.pageSize);
  let after = walk.after;
  let page = 0;
  while (page < walk.pages) {
    if (walk.done?.() === true) return true;
    const wanted = Math.min(walk.pagesAtOnce?.() ?? 1, walk.pages - page);
    const pagesRead = Math.max(1, Math.min(Math.floor(wanted), Math.floor(MAX_STORE_PAGE / limit)));
    const items = await walk.read(after, limit, pagesRead);
    // The items a page at a time; an empty read is one empty page, the end of the list.
    for (let start = 0; start === 0 || start < items.length; start += limit) {
      if (start > 0 && walk.done?.() === true) return true;
      const pageItems = pagesRead === 1 ? items : items.slice(start, start + limit);
      if ("handlePage" in walk) {
        if (pageItems.length > 0) await walk.handlePage(pageItems);
      } else {
        for (const item of pageItems) await walk.handle(item);
      }
      page += 1;
      const last = pageItems[pageItems.length - 1];
      const next = pageItems.length < limit || last === undefined ? null : walk.cursorOf(last);
      walk.saved?.(next);
      if (next === null) return false;
      after = next;
    }
  }
  return true;
}
