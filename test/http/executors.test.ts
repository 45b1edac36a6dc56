import { describe, expect, it } from "vitest";
import { createApp } from "../../runtimes/http/app.ts";
import { Metrics } from "../../runtimes/http/metrics.ts";
import { Coordinator } from "../../src/coordinator.ts";
import { PROFILES } from "../../src/profiles.ts";
import { VirtualClock } from "../../src/sim/virtual-clock.ts";
import { openSqlStore } from "../../storage/sql-store.ts";
import { MIGRATIONS } from "../../storage/sqlite/migrations.generated.ts";
import { loadSqlJs } from "../../storage/sqljs/node/load.ts";
import { openSqlJsMemoryDriver } from "../../storage/sqljs/memory-driver.ts";
import { SequentialIds, SequentialSecrets } from "../support/fixtures.ts";

const MANIFEST = `package: mixed
tasks:
  local: { run: ["true"] }
  remote: { run: ["true"], executor: remote_worker, pool: p1 }
`;

describe("a runtime that cannot spawn processes", () => {
  it("refuses local_process tasks at apply time, naming each one, and writes nothing", async () => {
    const clock = new VirtualClock(1_900_000_000_000);
    const ids = new SequentialIds("edge");
    const store = await openSqlStore(
      openSqlJsMemoryDriver(await loadSqlJs()),
      MIGRATIONS,
      clock.nowMs(),
    );
    const coordinator = new Coordinator({
      store,
      clock,
      ids,
      profile: PROFILES.edge,
      executors: {},
    });
    const app = createApp({
      store,
      coordinator,
      clock,
      ids,
      secrets: new SequentialSecrets(),
      token: "edge-token-0123456789",
      metrics: new Metrics(),
      supportedExecutors: ["remote_worker"],
    });
    const response = await app.request("/packages", {
      method: "POST",
      headers: {
        authorization: "Bearer edge-token-0123456789",
        "content-type": "application/yaml",
      },
      body: MANIFEST,
    });
    expect(response.status).toBe(400);
    const body = (await response.json()) as {
      error: { code: string; details: { path: string }[] };
    };
    expect(body.error.code).toBe("invalid_manifest");
    expect(body.error.details.map((detail) => detail.path)).toEqual(["tasks.local.executor"]);
    const packages = await store.transaction(async (tx) => tx.listPackageHeads(10));
    expect(packages).toEqual([]);
    await store.close();
  });
});
