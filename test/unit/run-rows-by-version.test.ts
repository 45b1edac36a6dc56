import { describe, expect, it } from "vitest";
import type { Run, RunAttempt } from "../../src/model.ts";
import { RunRowsByVersion } from "../../storage/sql-store/run-rows-by-version.ts";
import { TransactionRows } from "../../storage/sql-store/transaction-rows.ts";

/**
 * The rules of the memory that keeps a run's steps, receipts and attempts by the run's version
 * (storage/sql-store/run-rows-by-version.ts), on their own: what it lends to which run row, what
 * it keeps, and its cap. What it saves on a real PostgreSQL, and that another coordinator's
 * change is seen, is test/storage/runs-kept-by-version.test.ts.
 */
describe("RunRowsByVersion", () => {
  const run = (id: string, version: number): Run =>
    ({ id, kind: "workflow", version, createdAtMs: 1 }) as unknown as Run;

  /** Rows of a transaction that knows `id` whole at `version`, with no steps or receipts. */
  function knowing(id: string, version: number): TransactionRows {
    const known = new TransactionRows();
    known.rememberRun(id, run(id, version));
    known.steps.rememberOfRun(id, []);
    known.attempts.rememberOfRun(id, []);
    known.rememberAdmissionsOfRun(id, new Map());
    return known;
  }

  it("lends only to the version it kept, drops one that moved, and forgets the least recently used past its cap", () => {
    const kept = new RunRowsByVersion(2);
    kept.keep(knowing("a", 3));
    expect(kept.lend(run("a", 4), new TransactionRows())).toBe("none");
    // The moved version was dropped: the one it had kept is not lent again either.
    expect(kept.lend(run("a", 3), new TransactionRows())).toBe("none");
    kept.keep(knowing("a", 4));
    kept.keep(knowing("b", 1));
    const borrower = new TransactionRows();
    expect(kept.lend(run("a", 4), borrower)).toBe("attempts too");
    expect(borrower.knowsWholeRun("a")).toBe(false);
    expect(borrower.steps.ofRun("a")).toEqual([]);
    expect(borrower.attempts.ofRun("a")).toEqual([]);
    expect(borrower.admission("a", "any")).toBeNull();
    // `a` was lent last, so `b` is the least recently used when `c` passes the cap.
    kept.keep(knowing("c", 1));
    expect(kept.size).toBe(2);
    expect(kept.lend(run("b", 1), new TransactionRows())).toBe("none");
    expect(kept.lend(run("a", 4), new TransactionRows())).toBe("attempts too");
    // A run another creation made again under the same id (after a purge) is not the one kept.
    expect(kept.lend({ ...run("a", 4), createdAtMs: 2 }, new TransactionRows())).toBe("none");
  });

  it("keeps a run's local attempts and lends them; keeps nothing of a run it did not know whole, and drops one that ended or is gone", () => {
    const kept = new RunRowsByVersion();
    const local = knowing("l", 1);
    const attempt = {
      id: "l-1",
      runId: "l",
      number: 1,
      executor: "local_process",
    } as unknown as RunAttempt;
    local.attempts.rememberOfRun("l", [attempt]);
    kept.keep(local);
    const borrower = new TransactionRows();
    expect(kept.lend(run("l", 1), borrower)).toBe("attempts too");
    expect(borrower.attempts.ofRun("l")).toEqual([attempt]);
    // Known by its row alone: nothing to keep.
    const rowOnly = new TransactionRows();
    rowOnly.rememberRun("o", run("o", 1));
    kept.keep(rowOnly);
    expect(kept.size).toBe(1);
    expect(kept.lend(run("o", 1), new TransactionRows())).toBe("none");
    // A run that ended is not kept (the stages do not read it again), and what was kept goes.
    const ended = knowing("l", 2);
    ended.rememberRun("l", { ...run("l", 2), status: "succeeded" });
    kept.keep(ended);
    expect(kept.size).toBe(0);
    expect(kept.lend({ ...run("l", 2), status: "succeeded" }, new TransactionRows())).toBe("none");
    kept.keep(local);
    expect(kept.size).toBe(1);
    // A transaction that found the run gone (purged) drops what was kept of it.
    const gone = new TransactionRows();
    gone.rememberRun("l", null);
    kept.keep(gone);
    expect(kept.size).toBe(0);
  });

  it("keeps no attempts of a run that has a remote worker's, nor of one whose attempts it did not know all", () => {
    const kept = new RunRowsByVersion();
    const remote = knowing("r", 1);
    remote.attempts.rememberOfRun("r", [
      { id: "r-1", runId: "r", number: 1, executor: "remote_worker" } as unknown as RunAttempt,
    ]);
    kept.keep(remote);
    const partial = new TransactionRows();
    partial.rememberRun("p", run("p", 1));
    partial.steps.rememberOfRun("p", []);
    partial.rememberAdmissionsOfRun("p", new Map());
    kept.keep(partial);
    for (const id of ["r", "p"]) {
      const borrower = new TransactionRows();
      expect(kept.lend(run(id, 1), borrower)).toBe("steps and receipts");
      expect(borrower.attempts.ofRun(id)).toBeUndefined();
    }
  });
});
