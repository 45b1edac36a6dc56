import { Hono } from "hono";
import { z } from "zod";
import { isPortableId } from "../../../src/identity.ts";
import { LeaseService } from "../../../src/lease-service.ts";
import { LEASE_SECRET_PATTERN, MAX_CLAIM_CAPACITY } from "../../../src/leases.ts";
import { checkOutput } from "../../../src/task-output.ts";
import type {
  ClaimAnswer,
  LeaseControlView,
  LeaseStartAnswer,
  WorkerCompletionView,
} from "../contract.ts";
import type { AppDeps } from "../deps.ts";
import { jsonBody } from "../validation.ts";

/**
 * The lease protocol for remote workers under `/worker/`, behind the worker token (or the admin
 * token). Every call but claim carries the fence (worker id + lease version + the lease secret
 * the claim answered); a fence that does not match answers a 409 `conflict` that names no
 * holder, and changes nothing.
 */

const portable = z.string().refine(isPortableId, "must be a portable identity");
const millis = z.number().int().min(0).max(8_640_000_000_000_000);
const fence = {
  attemptId: portable,
  workerId: portable,
  leaseVersion: z.number().int().min(1).max(1_000_000_000),
  leaseSecret: z
    .string()
    .regex(LEASE_SECRET_PATTERN, "must be the lease secret the claim answered"),
};

const claimBody = z
  .object({
    workerId: portable,
    pool: portable,
    capacity: z.number().int().min(0).max(MAX_CLAIM_CAPACITY),
  })
  .strict();
const handleBody = z
  .object({
    pid: z.number().int().min(1).max(4_194_304),
    processStartTicks: z.string().regex(/^[0-9]{1,20}$/),
    bootId: z
      .string()
      .min(1)
      .max(64)
      .regex(/^[A-Za-z0-9-]+$/),
    startedAtMs: millis,
  })
  .strict();
const startBody = z
  .object({ ...fence, phase: z.enum(["starting", "running"]), handle: handleBody.optional() })
  .strict();
const heartbeatBody = z.object(fence).strict();
const completeBody = z
  .object({
    ...fence,
    startedAtMs: millis,
    finishedAtMs: millis,
    exitCode: z.number().int().min(-1).max(255).nullable(),
    signal: z
      .string()
      .max(16)
      .regex(/^[A-Z0-9]*$/)
      .nullable(),
    stopReason: z.enum(["cancel", "timeout", "shutdown"]).nullable(),
    spawnError: z.string().max(1024).nullable(),
    /** The task's output as its receipt carries it; checked against the output rules below. */
    output: z.unknown().optional(),
    outputError: z.string().max(1024).nullable().optional(),
  })
  .strict();
const lostBody = z
  .object({ ...fence, reason: z.string().min(1).max(512), neverSpawned: z.boolean().optional() })
  .strict();

const WHAT = "the worker request";

export function workerRoutes(deps: AppDeps): Hono {
  const leases = new LeaseService({
    store: deps.store,
    clock: deps.clock,
    secrets: deps.secrets,
    ...(deps.leaseTtlMs === undefined ? {} : { ttlMs: deps.leaseTtlMs }),
  });
  return new Hono()
    .post("/worker/claim", jsonBody(claimBody, WHAT), async (c) => {
      const request = c.req.valid("json");
      return c.json({
        leases: await leases.claim(request.workerId, request.pool, request.capacity),
      } satisfies ClaimAnswer);
    })
    .post("/worker/start", jsonBody(startBody, WHAT), async (c) => {
      const { attemptId, phase, handle, ...leaseFence } = c.req.valid("json");
      const answer = await leases.start(attemptId, leaseFence, phase, handle ?? null);
      return c.json(answer satisfies LeaseStartAnswer);
    })
    .post("/worker/heartbeat", jsonBody(heartbeatBody, WHAT), async (c) => {
      const { attemptId, ...leaseFence } = c.req.valid("json");
      return c.json((await leases.heartbeat(attemptId, leaseFence)) satisfies LeaseControlView);
    })
    .post("/worker/complete", jsonBody(completeBody, WHAT), async (c) => {
      const { attemptId, workerId, leaseVersion, leaseSecret, output, outputError, ...facts } =
        c.req.valid("json");
      // An output the rules refuse (too large, too deep) is recorded as a refused output, like a
      // local one: the completion itself is still the worker's evidence and is kept.
      const checked =
        outputError === undefined || outputError === null
          ? checkOutput(output ?? null)
          : { output: null, outputError };
      return c.json(
        (await leases.complete(
          attemptId,
          { workerId, leaseVersion, leaseSecret },
          { ...facts, ...checked },
        )) satisfies WorkerCompletionView,
      );
    })
    .post("/worker/lost", jsonBody(lostBody, WHAT), async (c) => {
      const { attemptId, reason, neverSpawned, ...leaseFence } = c.req.valid("json");
      return c.json(
        (await leases.lost(attemptId, leaseFence, reason, {
          neverSpawned: neverSpawned ?? false,
        })) satisfies WorkerCompletionView,
      );
    });
}
