/**
 * The sqljs-file driver under real SIGKILL. A child process commits numbered transactions
 * (each inserts two rows) and prints every acknowledged number; the parent kills it at a
 * seeded random moment and checks the files: every acknowledged number is present, no number
 * has only one of its rows, at most the one commit in flight appears unacknowledged, and a
 * fresh child carries on. Then the child kills itself inside each fault point.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { SQLJS_CHECKPOINT_STEPS } from "../../storage/sqljs/node/file-driver.ts";
import { committedNumbers } from "./fixtures/pairs.ts";
import type { SqlJsChildFault } from "./fixtures/sqljs-child.ts";
import type { SqlJsChild } from "./fixtures/sqljs-child-process.ts";
import { seededRandom } from "./fixtures/power-cut-fs.ts";
import { useSqlJsFileScratch } from "./fixtures/sqljs-file-scratch.ts";

const SEED = 0x51_4c_52_01;
const KILL_ROUNDS = 10;
/** The child starts committing after "ready"; it is killed this long after, at a seeded random point. */
const KILL_DELAY_MS = { min: 2, max: 120 } as const;
/** Small, so that checkpoints run often and some kills land inside one. */
const CHILD_CHECKPOINT_JOURNAL_BYTES = 4096;
const CHILD_TIMEOUT_MS = 20_000;

const { newDirectory, crashImage, open, close, startChild, forgetChild } =
  useSqlJsFileScratch("qlr-sqljs-crash-");

async function exitedWithin(
  child: SqlJsChild,
  timeoutMs: number,
): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  const timeout = sleep(timeoutMs).then(() => {
    throw new Error(
      `the child did not exit within ${timeoutMs} ms; lines: ${child.lines.slice(-5).join(" | ")}; stderr: ${child.errorOutput}`,
    );
  });
  const exit = await Promise.race([child.exited, timeout]);
  forgetChild(child);
  return exit;
}

function range(first: number, last: number): number[] {
  return Array.from({ length: Math.max(0, last - first + 1) }, (_, index) => first + index);
}

describe("sqljs-file under SIGKILL", () => {
  it(
    `keeps every acknowledged commit whole across ${KILL_ROUNDS} random kills, and a fresh child continues (seed ${SEED})`,
    async () => {
      const random = seededRandom(SEED);
      const path = newDirectory();
      const acknowledged = new Set<number>();
      let lastPresent = 0;
      let totalAcknowledged = 0;
      for (let round = 0; round < KILL_ROUNDS; round += 1) {
        const context = `seed ${SEED}, round ${round}`;
        const child = startChild({
          mode: "commit-loop",
          path,
          checkpointJournalBytes: CHILD_CHECKPOINT_JOURNAL_BYTES,
        });
        const ready = await child.waitForLine(
          (line) => line.startsWith("ready "),
          CHILD_TIMEOUT_MS,
        );
        expect(
          Number(ready.slice("ready ".length)),
          `${context}: the child continues after the last present number`,
        ).toBe(lastPresent + 1);
        // The random delay counts from the first acknowledged commit, so every round kills a
        // child in the middle of its commits, however slowly a loaded machine lets it start.
        await child.waitForLine((line) => line.startsWith("ack "), CHILD_TIMEOUT_MS);
        await sleep(
          KILL_DELAY_MS.min + Math.floor(random() * (KILL_DELAY_MS.max - KILL_DELAY_MS.min)),
        );
        child.kill();
        const exit = await exitedWithin(child, CHILD_TIMEOUT_MS);
        expect(exit.signal, `${context}: ${child.errorOutput}`).toBe("SIGKILL");
        const acknowledgedNow = child.acknowledged();
        for (const number of acknowledgedNow) acknowledged.add(number);
        totalAcknowledged += acknowledgedNow.length;

        // Every other round checks a copy, leaving the stale lock, the journal and any torn
        // tail for the next child to recover; the other rounds recover here and checkpoint.
        const checkCopy = round % 2 === 0;
        const driver = await open(checkCopy ? crashImage(path) : path);
        const numbers = await committedNumbers(driver, context);
        const present = new Set(numbers);
        for (const number of acknowledged)
          expect(present.has(number), `${context}: acknowledged ${number} is missing`).toBe(true);
        const lastAcknowledged = acknowledgedNow.at(-1) ?? lastPresent;
        expect(
          numbers,
          `${context}: numbers are contiguous and at most one commit was in flight`,
        ).toEqual(range(1, numbers.at(-1) ?? 0));
        expect(numbers.at(-1) ?? 0, context).toBeLessThanOrEqual(lastAcknowledged + 1);
        lastPresent = numbers.at(-1) ?? 0;
        await close(driver);
      }
      expect(
        totalAcknowledged,
        "every child acknowledged a commit before its kill",
      ).toBeGreaterThanOrEqual(KILL_ROUNDS);
      // A hang-catcher, not a speed bound: every child (the killed ones and the fresh one) may take
      // its own bound on a loaded machine, one after another.
    },
    (KILL_ROUNDS + 2) * CHILD_TIMEOUT_MS,
  );

  const faultCases: { fault: SqlJsChildFault; unacknowledgedPresent: boolean }[] = [
    { fault: "beforeJournalWrite", unacknowledgedPresent: false },
    // The record was written before the kill: the page cache outlives the process, so the
    // unacknowledged commit is there. Only a power loss could lose it (the torn tail tests cut it).
    { fault: "beforeJournalSync", unacknowledgedPresent: true },
    { fault: "afterJournalSync", unacknowledgedPresent: true },
    { fault: "afterCommit", unacknowledgedPresent: true },
    ...SQLJS_CHECKPOINT_STEPS.map((step) => ({
      fault: `duringCheckpoint:${step}` as const,
      unacknowledgedPresent: false,
    })),
  ];

  it.each(faultCases)(
    "opens correctly after the child killed itself at $fault",
    async ({ fault, unacknowledgedPresent }) => {
      const path = newDirectory();
      const child = startChild({ mode: "fault", path, fault, commitsBeforeFault: 3 });
      const exit = await exitedWithin(child, CHILD_TIMEOUT_MS);
      expect(exit.signal, `${fault}: ${child.lines.join(" | ")} ${child.errorOutput}`).toBe(
        "SIGKILL",
      );
      expect(child.lines).toContain("armed");
      expect(child.lines).not.toContain("survived");
      expect(child.acknowledged()).toEqual([1, 2, 3]);

      const driver = await open(path);
      // Only a commit can leave an unacknowledged transaction behind; a checkpoint adds none.
      expect(await committedNumbers(driver, fault)).toEqual(
        unacknowledgedPresent ? [1, 2, 3, 4] : [1, 2, 3],
      );
      await close(driver);

      // A fresh child carries on from there.
      const next = startChild({
        mode: "commit-loop",
        path,
        checkpointJournalBytes: CHILD_CHECKPOINT_JOURNAL_BYTES,
      });
      await next.waitForLine((line) => line.startsWith("ack "), CHILD_TIMEOUT_MS);
      next.kill();
      await exitedWithin(next, CHILD_TIMEOUT_MS);
      const after = await open(path);
      const numbers = await committedNumbers(after, `${fault}, after a fresh child`);
      expect(numbers).toEqual(range(1, numbers.at(-1) ?? 0));
      expect(next.acknowledged()[0]).toBe(unacknowledgedPresent ? 5 : 4);
      for (const number of next.acknowledged()) expect(numbers).toContain(number);
    },
  );
});
