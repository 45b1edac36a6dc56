import { Hono } from "hono";
import type { RecoveryList, RuntimeInfo, TickAnswer } from "../contract.ts";
import type { RouteDeps } from "../deps.ts";

/** The runtime itself: one cadence cycle on demand, its profile and retention, recovery, metrics. */
export function systemRoutes(deps: RouteDeps): Hono {
  return new Hono()
    .post("/tick", async (c) =>
      c.json({ report: await deps.coordinator.tick() } satisfies TickAnswer),
    )
    .get("/info", (c) => {
      const retention = deps.retention ?? null;
      return c.json({
        profile: deps.profileName ?? null,
        // The idempotency window is the horizon: a key whose run was purged starts a new run.
        retention:
          retention === null
            ? null
            : {
                horizonMs: retention.horizonMs,
                maxRuns: retention.maxRuns,
                idempotencyWindowMs: retention.horizonMs,
              },
      } satisfies RuntimeInfo);
    })
    .get("/recovery", (c) =>
      c.json({ recovery: deps.recoveryReport?.() ?? [] } satisfies RecoveryList),
    )
    .get("/metrics", async (c) => {
      const counts = await deps.store.read(async (tx) => tx.countRunsByStatus());
      return c.text(deps.metrics.render(counts, deps.runWaiters.size), 200, {
        "content-type": "text/plain; version=0.0.4; charset=utf-8",
      });
    });
}
