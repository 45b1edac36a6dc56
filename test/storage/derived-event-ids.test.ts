/**
 * Migration 0009 stores the `evt:` event ids, which derive from the run and sequence, as NULL
 * (and on SQLite rebuilds run_events and step_mutations WITHOUT ROWID). A store written by the
 * version before it holds every id: it must migrate and read exactly as it did, and what is
 * written after must read the same ids while storing none of the derived ones.
 *
 * The "previous version" database is made by applying migrations up to 0008 and copying in the
 * rows a run leaves (as the previous writer stored them: every event id present), taken from a
 * store that ran the same workload.
 */
import { describe, expect, it } from "vitest";
import { eventId } from "../../src/aggregate.ts";
import type { SqlDriver } from "../../storage/driver.ts";
import {
  earlierWorkloadOfFile,
  itUpgradesOnEveryDriver,
  placeholder,
} from "./fixtures/earlier-store.ts";

const BEFORE_DERIVED_IDS = 8;

async function storedEventIds(driver: SqlDriver, runId: string): Promise<(string | null)[]> {
  return driver.transaction(async (tx) =>
    (
      await tx.query<{ id: string | null }>(
        `SELECT id FROM run_events WHERE run_id = ${placeholder(driver, 1)} ORDER BY seq`,
        [runId],
      )
    ).map((row) => row.id),
  );
}

describe("event ids derived from run and sequence (migration 0009)", () => {
  const earlier = earlierWorkloadOfFile("legacy");

  it("the current writer stores no derived event id, and reads every id back", async () => {
    const { workload } = earlier;
    const runId = workload.runIds[0] ?? "";
    const stored = await storedEventIds(workload.source.driver, runId);
    const events = await workload.source.transaction((tx) => tx.listEvents(runId, 0, 1_000));
    expect(events.length).toBeGreaterThan(20);
    expect(stored).toHaveLength(events.length);
    for (const [index, event] of events.entries()) {
      if (event.id.startsWith("evt:")) {
        expect(event.id).toBe(eventId(runId, event.seq));
        expect(stored[index]).toBeNull();
      } else {
        // An admitted attempt's event id derives from the step epoch: stored as it is.
        expect(event.type).toBe("workflow.task_attempt_admitted");
        expect(stored[index]).toBe(event.id);
      }
    }
  });

  itUpgradesOnEveryDriver(
    "a store written before opens, keeps its stored ids and reads its runs as before",
    BEFORE_DERIVED_IDS,
    earlier,
    async (driver, store) => {
      for (const runId of earlier.workload.runIds)
        expect((await storedEventIds(driver, runId)).every((id) => id !== null)).toBe(true);

      // New runs on the migrated store: derived ids stored as NULL, read back whole.
      const fresh = await earlier.freshRun(store);
      const events = await store.transaction((tx) => tx.listEvents(fresh, 0, 1_000));
      const stored = await storedEventIds(driver, fresh);
      expect(events.map((event) => event.seq)).toEqual(events.map((_, index) => index + 1));
      for (const [index, event] of events.entries())
        expect(stored[index]).toBe(event.id.startsWith("evt:") ? null : event.id);
      expect(stored.filter((id) => id === null).length).toBeGreaterThan(events.length / 2);
      expect(
        events.every(
          (event) => event.id === eventId(event.runId, event.seq) || event.id.startsWith("wte:"),
        ),
      ).toBe(true);
    },
  );
});
