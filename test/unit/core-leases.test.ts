import { describe, expect, it } from "vitest";
import type { AttemptScope, CompletionFacts } from "../../src/execution.ts";
import {
  checkFence,
  checkWorkerTimes,
  expireLease,
  extendLease,
  grantLease,
  heartbeat,
  isClaimable,
  leaseSecretDigest,
  MAX_CLAIM_CAPACITY,
  MAX_LEASE_TTL_MS,
  MIN_LEASE_TTL_MS,
  DEFAULT_LEASE_TTL_MS,
  staleFence,
  WORKER_CLOCK_SKEW_MAX_MS,
  workerComplete,
  workerRunning,
  workerStarting,
  type LeaseFence,
} from "../../src/leases.ts";
import { EMPTY_CHANGE_SET, type RunAttempt } from "../../src/model.ts";
import { requestCancel } from "../../src/runs.ts";
import {
  type CoreWorld,
  errorCode,
  exitFacts,
  expectLostIntoNewEpoch,
  expectOneVersionBump,
  handleAt,
  readyDiamondWorld,
  T0,
} from "./core-fixtures.ts";

/**
 * The lease rules for remote workers as pure decisions (ADR-0227 §4–§6): who may claim, the
 * fence every later call must present, the worker's reported times, heartbeats, completion
 * under the fence and lease expiry. The same rules over real stores: test/leases/.
 */

const TIMEOUT_MS = 1_000;
const TTL_MS = 10_000;
const NO_RETRY = { max: 0, backoffMs: 0, idempotent: false };
const SECRET = "secret-of-worker-1-0001";
const OTHER_SECRET = "secret-of-worker-2-0002";

function remoteWorld(): CoreWorld {
  return readyDiamondWorld({ executor: "remote_worker", pool: "pool-1", timeoutMs: TIMEOUT_MS });
}

/** Step `a`'s remote attempt admitted `claimed` at T0 + 2, no lease yet. */
function claimed(world: CoreWorld): RunAttempt {
  return world.admit("run-1", "a", T0 + 2);
}

/** Claimed and leased to worker-1 at T0 + 3 for TTL_MS; its fence. */
function leased(world: CoreWorld): { attempt: RunAttempt; fence: LeaseFence } {
  const attempt = claimed(world);
  world.apply(grantLease(world.model.scope(attempt.id), "worker-1", SECRET, T0 + 3, TTL_MS));
  return {
    attempt: world.model.attempt(attempt.id),
    fence: { workerId: "worker-1", leaseVersion: 1, leaseSecret: SECRET },
  };
}

/** Leased, then `starting` under the fence at T0 + 4. */
function starting(world: CoreWorld): { attempt: RunAttempt; fence: LeaseFence } {
  const { attempt, fence } = leased(world);
  world.apply(workerStarting(world.model.scope(attempt.id), fence, T0 + 4, TTL_MS));
  return { attempt: world.model.attempt(attempt.id), fence };
}

/** Starting, then `running` with the worker's handle started at T0 + 5, reported at T0 + 6. */
function running(world: CoreWorld): { attempt: RunAttempt; fence: LeaseFence } {
  const { attempt, fence } = starting(world);
  world.apply(
    workerRunning(world.model.scope(attempt.id), fence, handleAt(T0 + 5), T0 + 6, TTL_MS),
  );
  return { attempt: world.model.attempt(attempt.id), fence };
}

/** Running, then completed with exit 0 (started T0 + 5, finished T0 + 20) recorded at T0 + 21. */
function succeeded(world: CoreWorld): { attempt: RunAttempt; fence: LeaseFence } {
  const { attempt, fence } = running(world);
  const answer = workerComplete(
    world.model.scope(attempt.id),
    fence,
    exitFacts(T0 + 5, T0 + 20, 0),
    NO_RETRY,
    T0 + 21,
  );
  if (answer.kind !== "recorded") throw new Error("the completion was not recorded");
  world.apply(answer.change);
  return { attempt: world.model.attempt(attempt.id), fence };
}

function messageOf(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    return (error as Error).message;
  }
  return "no error";
}

function detailsOf(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return (error as { details?: unknown }).details;
  }
  return "no error";
}

/**
 * The error code of `call` on step `a`'s remote attempt brought to `phase`, presenting the
 * holder's fence with `staleness` changed.
 */
function codeUnderStaleFence(
  phase: (world: CoreWorld) => { attempt: RunAttempt; fence: LeaseFence },
  staleness: Partial<LeaseFence>,
  call: (scope: AttemptScope, stale: LeaseFence) => unknown,
): string {
  const world = remoteWorld();
  const { attempt, fence } = phase(world);
  return errorCode(() => call(world.model.scope(attempt.id), { ...fence, ...staleness }));
}

describe("lease limits", () => {
  it("the lease bounds are the documented ones", () => {
    expect([MIN_LEASE_TTL_MS, DEFAULT_LEASE_TTL_MS, MAX_LEASE_TTL_MS]).toEqual([
      1_000, 30_000, 600_000,
    ]);
    expect(MAX_CLAIM_CAPACITY).toBe(64);
    expect(WORKER_CLOCK_SKEW_MAX_MS).toBe(10_000);
  });
});

describe("claimable", () => {
  it("a claimed remote attempt that no worker holds is claimable", () => {
    const world = remoteWorld();
    const attempt = claimed(world);
    expect(attempt).toMatchObject({ executor: "remote_worker", leaseExpiresAtMs: null });
    expect(isClaimable(attempt, T0 + 2)).toBe(true);
  });

  it("a lease is claimable again from the very millisecond it expires, not before", () => {
    const world = remoteWorld();
    const { attempt } = leased(world);
    expect(isClaimable(attempt, T0 + 3 + TTL_MS - 1)).toBe(false);
    expect(isClaimable(attempt, T0 + 3 + TTL_MS)).toBe(true);
  });

  it("a local attempt, or one past the claim, is never claimable", () => {
    const world = remoteWorld();
    const attempt = claimed(world);
    expect(isClaimable({ ...attempt, executor: "local_process" }, T0 + 2)).toBe(false);
    expect(isClaimable({ ...attempt, status: "starting" }, T0 + 2)).toBe(false);
  });
});

describe("granting a lease", () => {
  it("the lease names the worker, bumps the fencing version, expires after the ttl and stores only the secret's digest", () => {
    const world = remoteWorld();
    const attempt = claimed(world);
    const before = world.model.run("run-1");
    const change = grantLease(world.model.scope(attempt.id), "worker-1", SECRET, T0 + 3, TTL_MS);
    expectOneVersionBump(change, before);
    expect(change.attempts).toHaveLength(1);
    expect(change.attempts[0]?.after).toMatchObject({
      status: "claimed",
      leaseWorkerId: "worker-1",
      leaseVersion: 1,
      leaseExpiresAtMs: T0 + 3 + TTL_MS,
      leaseSecretDigest: leaseSecretDigest(SECRET),
      version: attempt.version + 1,
    });
    expect(leaseSecretDigest(SECRET)).toMatch(/^[0-9a-f]{64}$/);
    expect(leaseSecretDigest(SECRET)).not.toBe(leaseSecretDigest(OTHER_SECRET));
    expect(change.events.map((event) => [event.type, event.attemptId, event.data])).toEqual([
      ["attempt.leased", attempt.id, { workerId: "worker-1", leaseVersion: 1 }],
    ]);
  });

  it("an expired lease is granted to the next worker with the next fencing version", () => {
    const world = remoteWorld();
    const { attempt } = leased(world);
    const nowMs = T0 + 3 + TTL_MS;
    world.apply(grantLease(world.model.scope(attempt.id), "worker-2", OTHER_SECRET, nowMs, TTL_MS));
    expect(world.model.attempt(attempt.id)).toMatchObject({
      leaseWorkerId: "worker-2",
      leaseVersion: 2,
      leaseExpiresAtMs: nowMs + TTL_MS,
    });
  });

  it("a live lease is not granted again", () => {
    const world = remoteWorld();
    const { attempt } = leased(world);
    const scope = world.model.scope(attempt.id);
    expect(errorCode(() => grantLease(scope, "worker-2", OTHER_SECRET, T0 + 4, TTL_MS))).toBe(
      "conflict",
    );
    expect(messageOf(() => grantLease(scope, "worker-2", OTHER_SECRET, T0 + 4, TTL_MS))).toBe(
      `attempt ${attempt.id} is not claimable`,
    );
  });

  it("a secret outside the lease secret pattern is an integrity error, never stored", () => {
    const world = remoteWorld();
    const attempt = claimed(world);
    const scope = world.model.scope(attempt.id);
    expect(messageOf(() => grantLease(scope, "worker-1", "short", T0 + 3, TTL_MS))).toBe(
      "the lease secret source returned a value outside the lease secret pattern",
    );
    for (const secret of ["short", "has spaces in the secret", "x".repeat(129)])
      expect(errorCode(() => grantLease(scope, "worker-1", secret, T0 + 3, TTL_MS))).toBe(
        "integrity",
      );
    expect(errorCode(() => grantLease(scope, "worker-1", "x".repeat(128), T0 + 3, TTL_MS))).toBe(
      "no error",
    );
  });
});

describe("the fence", () => {
  it("the holder's exact fence passes", () => {
    const world = remoteWorld();
    const { attempt, fence } = leased(world);
    expect(errorCode(() => checkFence(attempt, fence))).toBe("no error");
  });

  it("a wrong worker, version or secret is refused with one answer that names nobody", () => {
    const world = remoteWorld();
    const { attempt, fence } = leased(world);
    const refused: LeaseFence[] = [
      { ...fence, workerId: "worker-2" },
      { ...fence, leaseVersion: 2 },
      { ...fence, leaseVersion: 0 },
      { ...fence, leaseSecret: OTHER_SECRET },
    ];
    for (const wrong of refused) {
      expect(errorCode(() => checkFence(attempt, wrong))).toBe("conflict");
      expect(messageOf(() => checkFence(attempt, wrong))).toBe(
        `the lease fence for attempt ${attempt.id} does not match a live lease`,
      );
    }
    expect(staleFence("att-x").message).toBe(
      "the lease fence for attempt att-x does not match a live lease",
    );
  });

  it("a secret outside the pattern is refused even when its digest is the stored one", () => {
    const world = remoteWorld();
    const { attempt, fence } = leased(world);
    const short = { ...attempt, leaseSecretDigest: leaseSecretDigest("short") };
    expect(errorCode(() => checkFence(short, { ...fence, leaseSecret: "short" }))).toBe("conflict");
  });

  it("a secret that is not a string is refused, even when its text would be the stored secret", () => {
    const world = remoteWorld();
    const { attempt, fence } = leased(world);
    const numeric = { ...attempt, leaseSecretDigest: leaseSecretDigest("1234567890123456") };
    const forged = { ...fence, leaseSecret: 1234567890123456 as unknown as string };
    expect(errorCode(() => checkFence(numeric, forged))).toBe("conflict");
  });

  it("an attempt with no stored digest is held by nobody, whatever is presented", () => {
    const world = remoteWorld();
    const { attempt, fence } = leased(world);
    const noDigest = { ...attempt, leaseSecretDigest: null };
    expect(errorCode(() => checkFence(noDigest, fence))).toBe("conflict");
  });

  it("a local attempt carrying lease fields is not fenced by them", () => {
    const world = remoteWorld();
    const { attempt, fence } = leased(world);
    expect(errorCode(() => checkFence({ ...attempt, executor: "local_process" }, fence))).toBe(
      "conflict",
    );
  });
});

describe("worker-reported times", () => {
  const paths = { started: "s.path", finished: "f.path" };
  function check(startedAtMs: number, finishedAtMs?: number, nowMs = T0 + 100): string {
    return messageOf(() =>
      checkWorkerTimes(
        { createdAtMs: T0 } as RunAttempt,
        finishedAtMs === undefined ? { startedAtMs } : { startedAtMs, finishedAtMs },
        nowMs,
        paths,
      ),
    );
  }

  it("a start up to the skew before the claim, and up to the skew in the coordinator's future, is accepted", () => {
    expect(check(T0 - WORKER_CLOCK_SKEW_MAX_MS)).toBe("no error");
    expect(check(T0 + 100 + WORKER_CLOCK_SKEW_MAX_MS)).toBe("no error");
  });

  it("a start earlier than the claim by more than the skew is implausible", () => {
    expect(check(T0 - WORKER_CLOCK_SKEW_MAX_MS - 1)).toBe(
      `implausible worker time: s.path is before the attempt was claimed (${T0}) by more than 10000 ms`,
    );
  });

  it("a start further in the coordinator's future than the skew is implausible", () => {
    expect(check(T0 + 100 + WORKER_CLOCK_SKEW_MAX_MS + 1)).toBe(
      "implausible worker time: s.path is more than 10000 ms in the coordinator's future",
    );
  });

  it("a finish before the start is implausible, a finish at the start is not", () => {
    expect(check(T0 + 50, T0 + 50)).toBe("no error");
    expect(check(T0 + 50, T0 + 49)).toBe("implausible worker time: f.path is before startedAtMs");
  });

  it("a finish further in the coordinator's future than the skew is implausible", () => {
    expect(check(T0 + 50, T0 + 100 + WORKER_CLOCK_SKEW_MAX_MS)).toBe("no error");
    expect(check(T0 + 50, T0 + 100 + WORKER_CLOCK_SKEW_MAX_MS + 1)).toBe(
      "implausible worker time: f.path is more than 10000 ms in the coordinator's future",
    );
  });

  it("the refusal is invalid_request with the path, and the finish path defaults to finishedAtMs", () => {
    const attempt = { createdAtMs: T0 } as RunAttempt;
    const refuse = (): void =>
      checkWorkerTimes(attempt, { startedAtMs: T0, finishedAtMs: T0 - 1 }, T0, {
        started: "s.path",
      });
    expect(errorCode(refuse)).toBe("invalid_request");
    expect(detailsOf(refuse)).toEqual([{ path: "finishedAtMs", message: "is before startedAtMs" }]);
  });
});

describe("extending a lease", () => {
  it("a heartbeat's extension writes the attempt row alone under its own version, with no event and no run bump", () => {
    const world = remoteWorld();
    const { attempt } = leased(world);
    const change = extendLease(world.model.scope(attempt.id), T0 + 50, TTL_MS);
    expect(change.runs).toEqual([]);
    expect(change.events).toEqual([]);
    expect(change.steps).toEqual([]);
    expect(change.attempts).toEqual([
      {
        before: attempt,
        after: { ...attempt, leaseExpiresAtMs: T0 + 50 + TTL_MS, version: attempt.version + 1 },
      },
    ]);
  });

  it("a clock reading before the attempt was created extends nothing", () => {
    const world = remoteWorld();
    const { attempt } = leased(world);
    expect(errorCode(() => extendLease(world.model.scope(attempt.id), T0 + 1, TTL_MS))).toBe(
      "clock_regression",
    );
    expect(messageOf(() => extendLease(world.model.scope(attempt.id), T0 + 1, TTL_MS))).toBe(
      `attempt ${attempt.id}: observation time ${T0 + 1} is before its creation at ${T0 + 2}; refusing to write`,
    );
  });
});

describe("crossing the start barrier under the fence", () => {
  it("claimed → starting records the worker and extends the lease from now", () => {
    const world = remoteWorld();
    const { attempt, fence } = leased(world);
    const before = world.model.run("run-1");
    const change = workerStarting(world.model.scope(attempt.id), fence, T0 + 4, TTL_MS);
    expectOneVersionBump(change, before);
    expect(change.attempts[0]?.after).toMatchObject({
      status: "starting",
      leaseWorkerId: "worker-1",
      leaseExpiresAtMs: T0 + 4 + TTL_MS,
    });
  });

  it("a repeated start under the same fence writes nothing", () => {
    const world = remoteWorld();
    const { attempt, fence } = starting(world);
    expect(workerStarting(world.model.scope(attempt.id), fence, T0 + 5, TTL_MS)).toBe(
      EMPTY_CHANGE_SET,
    );
  });

  it("a repeated start under a stale fence is refused, not answered", () => {
    expect(
      codeUnderStaleFence(starting, { leaseSecret: OTHER_SECRET }, (scope, stale) =>
        workerStarting(scope, stale, T0 + 5, TTL_MS),
      ),
    ).toBe("conflict");
  });

  it("a claim whose lease expired does not start, from the very millisecond of expiry", () => {
    const world = remoteWorld();
    const { attempt, fence } = leased(world);
    const scope = world.model.scope(attempt.id);
    const expiry = T0 + 3 + TTL_MS;
    expect(messageOf(() => workerStarting(scope, fence, expiry, TTL_MS))).toBe(
      `the lease of attempt ${attempt.id} expired before it started`,
    );
    expect(errorCode(() => workerStarting(scope, fence, expiry, TTL_MS))).toBe("conflict");
    expect(errorCode(() => workerStarting(scope, fence, expiry - 1, TTL_MS))).toBe("no error");
  });

  it("a held claim with no recorded expiry has not expired", () => {
    const world = remoteWorld();
    const { attempt, fence } = leased(world);
    const scope = world.model.scope(attempt.id);
    const unbounded = { ...scope, attempt: { ...scope.attempt, leaseExpiresAtMs: null } };
    expect(errorCode(() => workerStarting(unbounded, fence, T0 + 1_000_000, TTL_MS))).toBe(
      "no error",
    );
  });

  it("an attempt past starting does not start again", () => {
    const world = remoteWorld();
    const { attempt, fence } = running(world);
    const scope = world.model.scope(attempt.id);
    expect(errorCode(() => workerStarting(scope, fence, T0 + 7, TTL_MS))).toBe("conflict");
    expect(messageOf(() => workerStarting(scope, fence, T0 + 7, TTL_MS))).toBe(
      `attempt ${attempt.id} is running, not claimed`,
    );
  });

  it("a running attempt whose lease passed is refused as not claimed, not as expired", () => {
    const world = remoteWorld();
    const { attempt, fence } = running(world);
    expect(
      messageOf(() =>
        workerStarting(world.model.scope(attempt.id), fence, T0 + 6 + TTL_MS + 1, TTL_MS),
      ),
    ).toBe(`attempt ${attempt.id} is running, not claimed`);
  });

  it("a start after the parent's cancel intent is refused", () => {
    const world = remoteWorld();
    const { attempt, fence } = leased(world);
    world.apply(requestCancel(world.model.run("run-1"), T0 + 4, "user"));
    expect(
      errorCode(() => workerStarting(world.model.scope(attempt.id), fence, T0 + 5, TTL_MS)),
    ).toBe("conflict");
  });
});

describe("the process exists", () => {
  it("starting → running with the worker's handle, the step running and the lease extended from now", () => {
    const world = remoteWorld();
    const { attempt, fence } = starting(world);
    const change = workerRunning(
      world.model.scope(attempt.id),
      fence,
      handleAt(T0 + 5),
      T0 + 6,
      TTL_MS,
    );
    expect(change.attempts[0]?.after).toMatchObject({
      status: "running",
      pid: 4242,
      startedAtMs: T0 + 5,
      deadlineAtMs: T0 + 5 + TIMEOUT_MS,
      leaseExpiresAtMs: T0 + 6 + TTL_MS,
    });
    expect(change.steps.map((step) => step.after.status)).toEqual(["running"]);
  });

  it("the same running report repeated writes nothing", () => {
    const world = remoteWorld();
    const { attempt, fence } = running(world);
    expect(
      workerRunning(world.model.scope(attempt.id), fence, handleAt(T0 + 5), T0 + 7, TTL_MS),
    ).toBe(EMPTY_CHANGE_SET);
  });

  it("a running report that differs in any handle fact is not a repeat and is refused", () => {
    const world = remoteWorld();
    const { attempt, fence } = running(world);
    const scope = world.model.scope(attempt.id);
    const handle = handleAt(T0 + 5);
    for (const other of [
      { ...handle, pid: 4243 },
      { ...handle, processStartTicks: "ticks-other" },
      { ...handle, bootId: "boot-2" },
      { ...handle, startedAtMs: T0 + 6 },
    ])
      expect(errorCode(() => workerRunning(scope, fence, other, T0 + 7, TTL_MS))).toBe(
        "illegal_transition",
      );
  });

  it("the running report repeated after the completion is refused, not answered as a repeat", () => {
    const world = remoteWorld();
    const { attempt, fence } = succeeded(world);
    expect(
      errorCode(() =>
        workerRunning(world.model.scope(attempt.id), fence, handleAt(T0 + 5), T0 + 22, TTL_MS),
      ),
    ).toBe("illegal_transition");
  });

  it("a handle started implausibly far in the future is refused at handle.startedAtMs", () => {
    const world = remoteWorld();
    const { attempt, fence } = starting(world);
    const future = handleAt(T0 + 6 + WORKER_CLOCK_SKEW_MAX_MS + 1);
    expect(
      detailsOf(() => workerRunning(world.model.scope(attempt.id), fence, future, T0 + 6, TTL_MS)),
    ).toEqual([
      { path: "handle.startedAtMs", message: "is more than 10000 ms in the coordinator's future" },
    ]);
  });

  it("a running report under a stale fence is refused", () => {
    expect(
      codeUnderStaleFence(starting, { workerId: "worker-2" }, (scope, stale) =>
        workerRunning(scope, stale, handleAt(T0 + 5), T0 + 6, TTL_MS),
      ),
    ).toBe("conflict");
  });
});

describe("heartbeats", () => {
  it("a heartbeat of a live attempt answers continue and extends the lease from now, without an event", () => {
    const world = remoteWorld();
    const { attempt, fence } = running(world);
    const { control, change } = heartbeat(world.model.scope(attempt.id), fence, T0 + 50, TTL_MS);
    expect(control).toEqual({ action: "continue", leaseExpiresAtMs: T0 + 50 + TTL_MS });
    expect(change.events).toEqual([]);
    expect(change.attempts[0]?.after.leaseExpiresAtMs).toBe(T0 + 50 + TTL_MS);
  });

  it("a claimed attempt's heartbeat also answers continue", () => {
    const world = remoteWorld();
    const { attempt, fence } = leased(world);
    expect(heartbeat(world.model.scope(attempt.id), fence, T0 + 4, TTL_MS).control.action).toBe(
      "continue",
    );
  });

  it("a heartbeat after a recorded stop intent answers stop_requested with its reason and only extends the lease", () => {
    const world = remoteWorld();
    const { attempt, fence } = running(world);
    const stopped = { ...world.model.scope(attempt.id) };
    const scope = { ...stopped, attempt: { ...stopped.attempt, stopReason: "cancel" as const } };
    const { control, change } = heartbeat(scope, fence, T0 + 50, TTL_MS);
    expect(control).toEqual({
      action: "stop_requested",
      reason: "cancel",
      leaseExpiresAtMs: T0 + 50 + TTL_MS,
    });
    expect(change.events).toEqual([]);
    expect(change.attempts[0]?.after.leaseExpiresAtMs).toBe(T0 + 50 + TTL_MS);
  });

  it("a heartbeat at the deadline records the task-scoped timeout intent, never the parent's cancel, and answers stop_requested(timeout)", () => {
    const world = remoteWorld();
    const { attempt, fence } = running(world);
    const deadline = T0 + 5 + TIMEOUT_MS;
    const before = world.model.run("run-1");
    const { control, change } = heartbeat(world.model.scope(attempt.id), fence, deadline, TTL_MS);
    expect(control).toEqual({
      action: "stop_requested",
      reason: "timeout",
      leaseExpiresAtMs: deadline + TTL_MS,
    });
    expectOneVersionBump(change, before);
    expect(change.runs[0]?.after.cancelRequestedAtMs).toBeNull();
    expect(change.events.map((event) => event.type)).toEqual(["workflow.task_timeout_requested"]);
    expect(change.attempts[0]?.after).toMatchObject({
      stopReason: "timeout",
      leaseExpiresAtMs: deadline + TTL_MS,
    });
  });

  it("a heartbeat of a finished attempt is refused", () => {
    const world = remoteWorld();
    const { attempt, fence } = succeeded(world);
    const scope = world.model.scope(attempt.id);
    expect(messageOf(() => heartbeat(scope, fence, T0 + 22, TTL_MS))).toBe(
      `attempt ${attempt.id} is already succeeded`,
    );
    expect(errorCode(() => heartbeat(scope, fence, T0 + 22, TTL_MS))).toBe("conflict");
  });

  it("a heartbeat under a stale fence is refused", () => {
    expect(
      codeUnderStaleFence(running, { leaseVersion: 9 }, (scope, stale) =>
        heartbeat(scope, stale, T0 + 7, TTL_MS),
      ),
    ).toBe("conflict");
  });
});

describe("completion under the fence", () => {
  function completeAt(
    world: CoreWorld,
    attempt: RunAttempt,
    fence: LeaseFence,
    facts: CompletionFacts,
    nowMs: number,
  ): ReturnType<typeof workerComplete> {
    return workerComplete(world.model.scope(attempt.id), fence, facts, NO_RETRY, nowMs);
  }

  it("a completion within the deadline is recorded with its exit", () => {
    const world = remoteWorld();
    const { attempt, fence } = running(world);
    const answer = completeAt(world, attempt, fence, exitFacts(T0 + 5, T0 + 20, 0), T0 + 21);
    expect(answer.kind).toBe("recorded");
    if (answer.kind !== "recorded") return;
    expect(answer.change.attempts[0]?.after.status).toBe("succeeded");
  });

  it("a completion observed exactly at the deadline is in time; one millisecond later is timed_out", () => {
    const world = remoteWorld();
    const { attempt, fence } = running(world);
    const deadline = T0 + 5 + TIMEOUT_MS;
    const facts = exitFacts(T0 + 5, T0 + 20, 0);
    const atDeadline = completeAt(world, attempt, fence, facts, deadline);
    const late = completeAt(world, attempt, fence, facts, deadline + 1);
    if (atDeadline.kind !== "recorded" || late.kind !== "recorded") throw new Error("not recorded");
    expect(atDeadline.change.attempts[0]?.after).toMatchObject({
      status: "succeeded",
      stopReason: null,
    });
    expect(late.change.attempts[0]?.after).toMatchObject({
      status: "timed_out",
      stopReason: "timeout",
    });
  });

  it("a late completion of a cancel or shutdown stop keeps its own reason", () => {
    for (const stopReason of ["cancel", "shutdown"] as const) {
      const world = remoteWorld();
      const { attempt, fence } = running(world);
      const facts = exitFacts(T0 + 5, T0 + 20, null, { stopReason });
      const answer = completeAt(world, attempt, fence, facts, T0 + 5 + TIMEOUT_MS + 1);
      if (answer.kind !== "recorded") throw new Error("not recorded");
      expect(answer.change.attempts[0]?.after).toMatchObject({
        status: "cancelled",
        stopReason,
      });
    }
  });

  it("a completion of a starting attempt takes the deadline from its handle's start, else from the reported start", () => {
    const world = remoteWorld();
    const { attempt, fence } = starting(world);
    expect(attempt.deadlineAtMs).toBeNull();
    // The handle started at T0 + 5: its deadline passed at T0 + 1005, though the reported
    // start (T0 + 500) would put it at T0 + 1500.
    const withHandle = exitFacts(T0 + 500, T0 + 600, 0, { handle: handleAt(T0 + 5) });
    const byHandle = completeAt(world, attempt, fence, withHandle, T0 + 5 + TIMEOUT_MS + 1);
    const withoutHandle = exitFacts(T0 + 500, T0 + 600, 0);
    const byStart = completeAt(world, attempt, fence, withoutHandle, T0 + 5 + TIMEOUT_MS + 1);
    const byStartLate = completeAt(world, attempt, fence, withoutHandle, T0 + 500 + TIMEOUT_MS + 1);
    if (byHandle.kind !== "recorded" || byStart.kind !== "recorded") throw new Error("replayed");
    if (byStartLate.kind !== "recorded") throw new Error("replayed");
    expect(byHandle.change.attempts[0]?.after.status).toBe("timed_out");
    expect(byStart.change.attempts[0]?.after.status).toBe("succeeded");
    expect(byStartLate.change.attempts[0]?.after.status).toBe("timed_out");
  });

  it("a completion already recorded is answered from the durable attempt and writes nothing", () => {
    const world = remoteWorld();
    const { attempt, fence } = running(world);
    const first = completeAt(world, attempt, fence, exitFacts(T0 + 5, T0 + 20, 1), T0 + 21);
    if (first.kind !== "recorded") throw new Error("not recorded");
    world.apply(first.change);
    // Even times that would be refused now: the durable answer is given first.
    expect(completeAt(world, attempt, fence, exitFacts(T0 + 5, T0 + 4, 0), T0 + 22)).toEqual({
      kind: "replayed",
      status: "failed",
    });
  });

  it("a completion with implausible times is refused at its path", () => {
    const world = remoteWorld();
    const { attempt, fence } = running(world);
    const refuse = (): unknown =>
      completeAt(world, attempt, fence, exitFacts(T0 + 5, T0 + 4, 0), T0 + 21);
    expect(detailsOf(refuse)).toEqual([{ path: "finishedAtMs", message: "is before startedAtMs" }]);
    const early = (): unknown =>
      completeAt(world, attempt, fence, exitFacts(T0 - 20_000, T0 + 4, 0), T0 + 21);
    expect((detailsOf(early) as { path: string }[])[0]?.path).toBe("startedAtMs");
  });

  it("a claim that never started cannot complete", () => {
    const world = remoteWorld();
    const { attempt, fence } = leased(world);
    const refuse = (): unknown =>
      completeAt(world, attempt, fence, exitFacts(T0 + 5, T0 + 20, 0), T0 + 21);
    expect(errorCode(refuse)).toBe("conflict");
    expect(messageOf(refuse)).toBe(`attempt ${attempt.id} is claimed; it never started`);
  });

  it("a completion under a stale fence is refused, even of a finished attempt", () => {
    const world = remoteWorld();
    const { attempt, fence } = running(world);
    const stale = { ...fence, leaseSecret: OTHER_SECRET };
    expect(
      errorCode(() => completeAt(world, attempt, stale, exitFacts(T0 + 5, T0 + 20, 0), T0 + 21)),
    ).toBe("conflict");
    const first = completeAt(world, attempt, fence, exitFacts(T0 + 5, T0 + 20, 0), T0 + 21);
    if (first.kind !== "recorded") throw new Error("not recorded");
    world.apply(first.change);
    expect(
      errorCode(() => completeAt(world, attempt, stale, exitFacts(T0 + 5, T0 + 20, 0), T0 + 22)),
    ).toBe("conflict");
  });
});

describe("lease expiry", () => {
  it("a claim whose lease expired is lost and its step gets a new ready epoch, from the very millisecond of expiry", () => {
    const world = remoteWorld();
    const { attempt } = leased(world);
    const expiry = T0 + 3 + TTL_MS;
    expect(expireLease(world.model.scope(attempt.id), NO_RETRY, expiry - 1)).toBeNull();
    const stepBefore = world.model.step("run-1", "a");
    world.apply(expireLease(world.model.scope(attempt.id), NO_RETRY, expiry));
    expectLostIntoNewEpoch(
      world,
      attempt.id,
      "the lease expired before the attempt started",
      stepBefore,
    );
  });

  it("a started attempt whose lease expired fails closed: status kept, reason recorded", () => {
    for (const phase of [starting, running]) {
      const world = remoteWorld();
      const { attempt } = phase(world);
      const expiry = (attempt.leaseExpiresAtMs ?? 0) + 0;
      expect(expireLease(world.model.scope(attempt.id), NO_RETRY, expiry - 1)).toBeNull();
      world.apply(expireLease(world.model.scope(attempt.id), NO_RETRY, expiry));
      expect(world.model.attempt(attempt.id)).toMatchObject({
        status: attempt.status,
        error:
          "the lease expired while the attempt may be running; waiting for its worker's evidence",
      });
      expect(world.model.eventsOf("run-1").at(-1)?.type).toBe("attempt.recovery_failed_closed");
    }
  });

  it("an attempt without a lease, a local attempt and a finished attempt do not expire", () => {
    const world = remoteWorld();
    const attempt = claimed(world);
    const scope = world.model.scope(attempt.id);
    expect(expireLease(scope, NO_RETRY, T0 + 1_000_000)).toBeNull();
    const leasedScope = {
      ...scope,
      attempt: { ...scope.attempt, leaseExpiresAtMs: T0 + 10 },
    };
    expect(expireLease(leasedScope, NO_RETRY, T0 + 10)).not.toBeNull();
    expect(
      expireLease(
        { ...leasedScope, attempt: { ...leasedScope.attempt, executor: "local_process" } },
        NO_RETRY,
        T0 + 10,
      ),
    ).toBeNull();
    for (const status of ["succeeded", "failed", "lost"] as const)
      expect(
        expireLease(
          { ...leasedScope, attempt: { ...leasedScope.attempt, status } },
          NO_RETRY,
          T0 + 10,
        ),
      ).toBeNull();
  });
});
