/**
 * The run long-poll, `GET /runs/:id?wait=terminal|change&after=SEQ&timeoutMs=N` (docs/API.md),
 * on sql.js and PGlite: it answers the run detail once the run is terminal (or has an event
 * after `after`), or as it stands when the timeout passed; bad parameters are
 * `400 invalid_request`; beyond the waiter cap a request is `429 too_many_waiters`. The registry
 * itself (runtimes/http/run-waiters.ts) is driven with timers that only the test fires, so what
 * releases a waiter — a re-read after the run ended, its timeout, the client going away, the
 * runtime stopping — is asserted without waiting for any clock.
 */
import { describe, expect, it } from "vitest";
import { createApp } from "../../runtimes/http/app.ts";
import {
  MAX_RUN_WAIT_MS,
  RunWaiters,
  TooManyWaiters,
  type WaitTimers,
} from "../../runtimes/http/run-waiters.ts";
import { SequentialIds, SequentialSecrets } from "../support/fixtures.ts";
import {
  RUN_VIEW_KEYS,
  STORE_FACTORIES,
  TOKEN,
  diamondYaml,
  errorOf,
  harnessForBlock,
  type Harness,
  type RunDetail,
} from "./support.ts";

/** Timers that never fire by themselves: the test fires them (`fire`) or leaves them pending. */
class ManualTimers implements WaitTimers {
  private next = 1;
  readonly pending = new Map<number, { callback: () => void; delayMs: number }>();
  setTimeout(callback: () => void, delayMs: number): unknown {
    const handle = this.next++;
    this.pending.set(handle, { callback, delayMs });
    return handle;
  }
  clearTimeout(handle: unknown): void {
    this.pending.delete(handle as number);
  }
  /** Fires every pending timer of `delayMs`. */
  fire(delayMs: number): void {
    for (const [handle, timer] of [...this.pending])
      if (timer.delayMs === delayMs) {
        this.pending.delete(handle);
        timer.callback();
      }
  }
}

/** A promise's settled state without waiting for it. */
function tracked(promise: Promise<unknown>): { readonly settled: () => boolean } {
  let settled = false;
  void promise.then(() => (settled = true));
  return { settled: () => settled };
}

/** Lets every promise job and I/O callback already queued run (the store's reads included). */
const flush = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 0));

const sortedKeys = (value: object): string[] => Object.keys(value).sort();

describe.each(STORE_FACTORIES)("run long-poll on $name", (factory) => {
  let h: Harness;
  harnessForBlock(factory, (opened) => {
    h = opened;
  });

  async function startDiamond(name: string): Promise<string> {
    expect((await h.applyYaml(diamondYaml(name))).status).toBe(201);
    return (await h.startRun({ package: name, workflow: "diamond" })).id;
  }

  it("answers a running run when its timeout passes, in the run detail's shape with eventSeq", async () => {
    const runId = await startDiamond("wait-timeout");
    const detail = await h.expectJson<RunDetail>(
      200,
      "GET",
      `/runs/${runId}?wait=terminal&timeoutMs=0`,
    );
    expect(detail.run.status).toBe("running");
    expect(sortedKeys(detail.run)).toEqual(RUN_VIEW_KEYS);
    expect(sortedKeys(detail)).toEqual(["attempts", "run", "steps", "waiting"]);
    expect(detail.run.eventSeq).toBe((await h.events(runId)).length);
    // A change already past `after` answers at once, whatever the timeout.
    const moved = await h.expectJson<RunDetail>(
      200,
      "GET",
      `/runs/${runId}?wait=change&after=0&timeoutMs=${MAX_RUN_WAIT_MS}`,
    );
    expect(moved.run.eventSeq).toBe(detail.run.eventSeq);
  });

  it("answers terminal once the cadence ends the run, and a change wait once the run moves", async () => {
    const runId = await startDiamond("wait-end");
    const seen = (await h.runDetail(runId)).run.eventSeq ?? -1;
    const change = h.call("GET", `/runs/${runId}?wait=change&after=${seen}&timeoutMs=30000`);
    const terminal = h.call("GET", `/runs/${runId}?wait=terminal&timeoutMs=30000`);
    await h.runUntil(runId);
    const [changed, ended] = await Promise.all([change, terminal]);
    expect(changed.status).toBe(200);
    expect(changed.json<RunDetail>().run.eventSeq).toBeGreaterThan(seen);
    expect(ended.status).toBe(200);
    const detail = ended.json<RunDetail>();
    expect(detail.run.status).toBe("succeeded");
    expect(detail.steps.map((step) => step.status)).toEqual([
      "succeeded",
      "succeeded",
      "succeeded",
      "succeeded",
    ]);
    // A terminal run answers every wait at once.
    const again = await h.expectJson<RunDetail>(
      200,
      "GET",
      `/runs/${runId}?wait=change&after=${detail.run.eventSeq ?? 0}&timeoutMs=30000`,
    );
    expect(again.run.status).toBe("succeeded");
  });

  it("refuses bad parameters with 400 invalid_request naming each, and an unknown run with 404", async () => {
    const runId = await startDiamond("wait-bad");
    const cases: [string, string][] = [
      ["wait=soon", "wait"],
      ["wait=terminal&timeoutMs=30001", "timeoutMs"],
      ["wait=terminal&timeoutMs=-1", "timeoutMs"],
      ["wait=terminal&timeoutMs=1.5", "timeoutMs"],
      ["wait=terminal&timeoutMs=", "timeoutMs"],
      ["wait=change&after=x", "after"],
      ["wait=terminal&after=3", "after"],
      ["after=3", "after"],
      ["timeoutMs=100", "timeoutMs"],
      ["wait=terminal&since=3", "since"],
    ];
    for (const [query, path] of cases) {
      const answer = await h.call("GET", `/runs/${runId}?${query}`);
      expect(answer.status, query).toBe(400);
      const error = errorOf(answer);
      expect(error.code, query).toBe("invalid_request");
      expect(
        error.details.map((detail) => detail.path),
        query,
      ).toContain(path);
    }
    const missing = await h.call("GET", "/runs/no-such-run?wait=terminal&timeoutMs=30000");
    expect(missing.status).toBe(404);
    expect(errorOf(missing).code).toBe("not_found");
    const badId = await h.call("GET", "/runs/.hidden?wait=terminal");
    expect(badId.status).toBe(400);
  });

  it("refuses a waiter beyond the cap with 429 too_many_waiters and answers the waiting one", async () => {
    const runId = await startDiamond("wait-cap");
    const timers = new ManualTimers();
    const waiters = new RunWaiters(h.store, { maxWaiters: 1, timers });
    const app = createApp({
      store: h.store,
      coordinator: h.coordinator,
      clock: h.clock,
      ids: new SequentialIds("cap"),
      secrets: new SequentialSecrets(),
      token: TOKEN,
      metrics: h.metrics,
      runWaiters: waiters,
    });
    const get = (query: string): Promise<Response> =>
      Promise.resolve(
        app.request(`/runs/${runId}?${query}`, { headers: { authorization: `Bearer ${TOKEN}` } }),
      );
    const first = get("wait=terminal&timeoutMs=30000");
    await flush();
    expect(waiters.size).toBe(1);
    const refused = await get("wait=terminal&timeoutMs=30000");
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("1");
    const body = (await refused.json()) as { error: { code: string; details: unknown[] } };
    expect(body.error.code).toBe("too_many_waiters");
    expect(body.error.details).toEqual([{ path: "wait", message: "at most 1 waiting requests" }]);
    // A plain read is never refused by the cap.
    expect((await get("")).status).toBe(200);
    timers.fire(30_000);
    const answered = await first;
    expect(answered.status).toBe(200);
    expect(((await answered.json()) as RunDetail).run.status).toBe("running");
    expect(waiters.size).toBe(0);
  });

  it("registry: a re-read after the run ended releases it; nothing else does before its timeout", async () => {
    const runId = await startDiamond("wait-registry");
    const timers = new ManualTimers();
    const waiters = new RunWaiters(h.store, { timers });
    const waiting = tracked(waiters.wait(runId, { kind: "terminal" }, 30_000));
    await waiters.recheck();
    await flush();
    expect(waiting.settled()).toBe(false);
    expect(waiters.size).toBe(1);
    // The cadence ends the run; only a re-read (the runtime's after a stage, or the fallback) tells the waiter.
    await h.runUntil(runId);
    await flush();
    expect(waiting.settled()).toBe(false);
    await waiters.recheck();
    await flush();
    expect(waiting.settled()).toBe(true);
    expect(waiters.size).toBe(0);
    // Nothing waits: no fallback timer is left behind.
    expect(timers.pending.size).toBe(0);
  });

  it("registry: the fallback re-read, the timeout, an aborted request and close each release a waiter", async () => {
    const runId = await startDiamond("wait-release");
    const timers = new ManualTimers();
    const waiters = new RunWaiters(h.store, { timers, recheckMs: 250 });
    // The fallback: the run ends and nobody calls recheck; the 250 ms timer does.
    const byFallback = tracked(
      waiters.wait(runId, { kind: "change", afterSeq: 1_000_000 }, 30_000),
    );
    const byTimeout = tracked(waiters.wait(runId, { kind: "terminal" }, 5_000));
    const aborts = new AbortController();
    const byAbort = tracked(waiters.wait(runId, { kind: "terminal" }, 30_000, aborts.signal));
    await flush();
    expect(waiters.size).toBe(3);
    timers.fire(5_000);
    await flush();
    expect(byTimeout.settled()).toBe(true);
    aborts.abort();
    await flush();
    expect(byAbort.settled()).toBe(true);
    expect(waiters.size).toBe(1);
    await h.runUntil(runId);
    expect(byFallback.settled()).toBe(false);
    timers.fire(250);
    await waiters.recheck();
    await flush();
    expect(byFallback.settled()).toBe(true);
    // Close: a waiter of a run that never ends is answered as it stands, and no more wait.
    const other = await startDiamond("wait-close");
    const byClose = tracked(waiters.wait(other, { kind: "terminal" }, 30_000));
    await flush();
    expect(byClose.settled()).toBe(false);
    waiters.close();
    await flush();
    expect(byClose.settled()).toBe(true);
    await waiters.wait(other, { kind: "terminal" }, 30_000);
    expect(waiters.size).toBe(0);
    expect(timers.pending.size).toBe(0);
  });

  it("registry: the cap throws TooManyWaiters and writes nothing", () => {
    const waiters = new RunWaiters(h.store, { maxWaiters: 0, timers: new ManualTimers() });
    expect(() => waiters.wait("any", { kind: "terminal" }, 1000)).toThrow(TooManyWaiters);
  });
});
