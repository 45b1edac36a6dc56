/**
 * Which coordinators' pages ask for a turn (`StoreTransactionOptions.inTurn`): a node's, while
 * another coordinator's lease is live, and nobody else's. A turn costs a page two round trips on
 * PostgreSQL, which a lone coordinator would pay for nothing (docs/ARCHITECTURE.md §15, "Pages
 * take turns"). The drivers' side of a turn is tested on a real server in
 * test/storage/transaction-modes.test.ts; here a store wrapper records what each transaction
 * asked for.
 */
import { describe, expect, it } from "vitest";
import { Coordinator } from "../../src/coordinator.ts";
import {
  COORDINATOR_LEASE_MS,
  COORDINATOR_RENEW_EVERY_MS,
  PEERS_CHECK_EVERY_MS,
} from "../../src/ownership.ts";
import type { Store } from "../../src/ports.ts";
import { PROFILES } from "../../src/profiles.ts";
import { driverNamed, openTestStore } from "../support/drivers.ts";
import { applyAndStart, SequentialIds, TestClock, wideManifest } from "../support/fixtures.ts";
import { steadyExecutor } from "../support/simulated-executors.ts";
import { T0 } from "./core-fixtures.ts";

/** `store`, counting the transactions that asked for a turn and those that did not. */
function recording(store: Store): Store & { inTurn: number; plain: number } {
  const recorder = {
    dialect: store.dialect,
    driverName: store.driverName,
    inTurn: 0,
    plain: 0,
    close: () => store.close(),
    read: store.read.bind(store),
    transaction: ((fn, options) => {
      if (options?.inTurn === true) recorder.inTurn += 1;
      else recorder.plain += 1;
      return store.transaction(fn, options);
    }) as Store["transaction"],
  };
  return recorder;
}

describe("pages take turns only beside another coordinator", () => {
  it("a node alone takes no turns, takes them while a peer's lease is live, and stops once it expired", async () => {
    const clock = new TestClock(T0);
    const shared = await openTestStore(driverNamed("sqljs-memory"), T0 - 1);
    const ids = new SequentialIds("run");
    const node = (name: string, store: Store): Coordinator =>
      new Coordinator({
        store,
        clock,
        ids,
        profile: PROFILES.cluster,
        executors: { local_process: steadyExecutor(clock, 7) },
        node: { nodeId: `node-${name}`, host: `host-${name}`, bootId: null },
      });
    const wideRun = () =>
      applyAndStart(
        shared,
        clock,
        wideManifest("wide", 12),
        { kind: "workflow", name: "wide" },
        ids.runId(),
      );
    const a = recording(shared);
    const b = recording(shared);
    const nodeA = node("a", a);
    const nodeB = node("b", b);

    // Registered, a node takes turns until it has looked for peers; alone, its pages (a dozen
    // ready steps admitted and started in one page each) then ask for none.
    await nodeA.register();
    await wideRun();
    await nodeA.tick();
    expect(a.inTurn).toBeGreaterThan(0);
    clock.advance(PEERS_CHECK_EVERY_MS);
    await nodeA.tick();
    a.inTurn = 0;
    a.plain = 0;
    await wideRun();
    await nodeA.tick();
    expect(a.plain).toBeGreaterThan(0);
    expect(a.inTurn).toBe(0);

    // A second node starts and takes turns; looking, it sees the first one's live lease.
    await nodeB.register();
    clock.advance(PEERS_CHECK_EVERY_MS);
    await nodeB.tick();
    b.inTurn = 0;
    await wideRun();
    await nodeB.tick();
    expect(b.inTurn).toBeGreaterThan(0);

    // The first node looks again within PEERS_CHECK_EVERY_MS (sooner than its next renewal)
    // and learns of its peer.
    expect(PEERS_CHECK_EVERY_MS).toBeLessThan(COORDINATOR_RENEW_EVERY_MS);
    clock.advance(PEERS_CHECK_EVERY_MS);
    a.inTurn = 0;
    await nodeA.tick();
    await wideRun();
    await nodeA.tick();
    expect(a.inTurn).toBeGreaterThan(0);

    // The peer stops renewing; once its lease expired, the first node takes turns no more.
    for (
      let renewed = 0;
      renewed * COORDINATOR_RENEW_EVERY_MS <= COORDINATOR_LEASE_MS;
      renewed += 1
    ) {
      clock.advance(COORDINATOR_RENEW_EVERY_MS);
      await nodeA.tick();
    }
    a.inTurn = 0;
    await wideRun();
    await nodeA.tick();
    expect(a.inTurn).toBe(0);
    await shared.close();
  });

  it("the store's only coordinator, with no node identity, never asks for a turn", async () => {
    const clock = new TestClock(T0);
    const shared = await openTestStore(driverNamed("sqljs-memory"), T0 - 1);
    const ids = new SequentialIds("run");
    const only = recording(shared);
    const coordinator = new Coordinator({
      store: only,
      clock,
      ids,
      profile: PROFILES.cluster,
      executors: { local_process: steadyExecutor(clock, 7) },
    });
    await applyAndStart(
      shared,
      clock,
      wideManifest("wide", 12),
      { kind: "workflow", name: "wide" },
      ids.runId(),
    );
    for (let cycle = 0; cycle < 3; cycle += 1) await coordinator.tick();
    expect(only.plain).toBeGreaterThan(0);
    expect(only.inTurn).toBe(0);
    await shared.close();
  });
});
