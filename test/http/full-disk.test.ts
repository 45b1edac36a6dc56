/**
 * The HTTP API over the sql.js file store on a full disk (the simulated machine of
 * test/storage/fixtures/power-cut-fs.ts with a capacity): writes answer 503 with code
 * `storage_unavailable` (retry later) and change nothing, reads keep working, and once space
 * returns the same requests succeed and survive a power cut.
 */
import { describe, expect, it } from "vitest";
import { openSqlStore } from "../../storage/sql-store.ts";
import { MIGRATIONS as SQLITE_MIGRATIONS } from "../../storage/sqlite/migrations.generated.ts";
import { openSqlJsFileDriver } from "../../storage/sqljs/node/file-driver.ts";
import { loadSqlJs } from "../../storage/sqljs/node/load.ts";
import type { RunDetail } from "../support/api-views.ts";
import { PowerCutFs, seededRandom } from "../storage/fixtures/power-cut-fs.ts";
import { START_MS, diamondYaml, errorOf, harnessForBlock, type Harness } from "./support.ts";

const DB_PATH = "/machine/db";

describe("HTTP API on a full disk (sqljs-file)", () => {
  const machine = new PowerCutFs();
  let h: Harness;
  const onFullDisk = {
    name: "sqljs-file",
    open: async () =>
      openSqlStore(
        await openSqlJsFileDriver(await loadSqlJs(), { path: DB_PATH, fs: machine }),
        SQLITE_MIGRATIONS,
        START_MS,
      ),
  };
  harnessForBlock(onFullDisk, (opened) => {
    h = opened;
  });

  it("answers 503 storage_unavailable to writes while the disk is full, and succeeds once space returns", async () => {
    expect((await h.applyYaml(diamondYaml("full"))).status).toBe(201);
    const run = await h.startRun({ package: "full", workflow: "diamond" });
    const eventsBefore = (await h.events(run.id)).length;

    machine.options.capacityBytes = machine.usedBytes();
    const cancel = await h.call("POST", `/runs/${run.id}/cancel`);
    expect(cancel.status).toBe(503);
    expect(errorOf(cancel).code).toBe("storage_unavailable");
    const start = await h.call("POST", "/runs", { json: { package: "full", workflow: "diamond" } });
    expect(start.status).toBe(503);
    expect(errorOf(start).code).toBe("storage_unavailable");
    // Reads need no space, and the refused writes changed nothing.
    const detail = await h.runDetail(run.id);
    expect(detail.run.status).not.toBe("cancelled");
    expect((await h.events(run.id)).length).toBe(eventsBefore);
    expect(await h.runsOf("full")).toHaveLength(1);

    machine.options.capacityBytes = undefined;
    expect((await h.call("POST", `/runs/${run.id}/cancel`)).status).toBe(202);
    expect(
      (await h.call("POST", "/runs", { json: { package: "full", workflow: "diamond" } })).status,
    ).toBe(201);

    // What was acknowledged is durable: a power cut now keeps the cancel request and the second run.
    const afterCut = await openSqlJsFileDriver(await loadSqlJs(), {
      path: DB_PATH,
      fs: machine.clone().materialise(seededRandom(7)),
    });
    try {
      const rows = await afterCut.transaction((tx) =>
        tx.query<{ id: string; cancel_requested_at_ms: number | null }>(
          "SELECT id, cancel_requested_at_ms FROM runs ORDER BY id",
        ),
      );
      expect(rows).toHaveLength(2);
      expect(rows.find((row) => row.id === run.id)?.cancel_requested_at_ms).not.toBeNull();
    } finally {
      await afterCut.close();
    }
    const cancelled: RunDetail = await h.runUntil(run.id);
    expect(cancelled.run.status).toBe("cancelled");
  });
});
