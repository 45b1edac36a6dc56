import type { Hono } from "hono";
import { z } from "zod";
import { QlrError } from "../../src/errors.ts";
import { isPortableId } from "../../src/identity.ts";
import type { LeaseService } from "../../src/lease-service.ts";
import { LEASE_SECRET_PATTERN, MAX_CLAIM_CAPACITY } from "../../src/leases.ts";
import { checkOutput } from "../../src/task-output.ts";

/**
 * The lease protocol for remote workers under `/worker/`, behind the worker token (or the admin
 * token). Every call but claim carries the fence (worker id + lease version + the lease secret
 * the claim answered); a fence that does not match answers a 409 `conflict` that names no
 * holder, and changes nothing.
 */

const portable = z.string().refine(isPortableId, "must be a portable identity");
const millis = z.number().int().min(0).max(8_640_000_000_000_000);
const fence = { attemptId: portable, workerId: portable, leaseVersion: z.number().int().min(1).max(1_000_000_000), leaseSecret: z.string().regex(LEASE_SECRET_PATTERN, "must be the lease secret the claim answered") };

const claimBody = z.object({ workerId: portable, pool: portable, capacity: z.number().int().min(0).max(MAX_CLAIM_CAPACITY) }).strict();
const handleBody = z.object({ pid: z.number().int().min(1).max(4_194_304), processStartTicks: z.string().regex(/^[0-9]{1,20}$/), bootId: z.string().min(1).max(64).regex(/^[A-Za-z0-9-]+$/), startedAtMs: millis }).strict();
const startBody = z.object({ ...fence, phase: z.enum(["starting", "running"]), handle: handleBody.optional() }).strict();
const heartbeatBody = z.object(fence).strict();
const completeBody = z
  .object({
    ...fence,
    startedAtMs: millis,
    finishedAtMs: millis,
    exitCode: z.number().int().min(-1).max(255).nullable(),
    signal: z.string().max(16).regex(/^[A-Z0-9]*$/).nullable(),
    stopReason: z.enum(["cancel", "timeout", "shutdown"]).nullable(),
    spawnError: z.string().max(1024).nullable(),
    /** The task's output as its receipt carries it; checked against the output rules below. */
    output: z.unknown().optional(),
    outputError: z.string().max(1024).nullable().optional(),
  })
  .strict();
const lostBody = z.object({ ...fence, reason: z.string().min(1).max(512) }).strict();

async function body<T>(request: Request, schema: z.ZodType<T>): Promise<T> {
  let value: unknown;
  try {
    value = JSON.parse(await request.text());
  } catch {
    throw new QlrError("invalid_request", "the body is not valid JSON", { details: [{ path: "$", message: "malformed JSON" }] });
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const pathOf = (segments: readonly PropertyKey[]): string => (segments.length === 0 ? "$" : segments.map(String).join("."));
    // An unknown field is named by its own path, one detail per field, as in the rest of the API.
    throw new QlrError("invalid_request", "the worker request is not valid", {
      details: parsed.error.issues.flatMap((issue) =>
        issue.code === "unrecognized_keys" ? issue.keys.map((key) => ({ path: pathOf([...issue.path, key]), message: "unknown field" })) : [{ path: pathOf(issue.path), message: issue.message }],
      ),
    });
  }
  return parsed.data;
}

export function mountWorkerRoutes(app: Hono, leases: LeaseService): void {
  app.post("/worker/claim", async (c) => {
    const request = await body(c.req.raw, claimBody);
    return c.json({ leases: await leases.claim(request.workerId, request.pool, request.capacity) });
  });
  app.post("/worker/start", async (c) => {
    const request = await body(c.req.raw, startBody);
    return c.json(await leases.start(request.attemptId, request, request.phase, request.handle ?? null));
  });
  app.post("/worker/heartbeat", async (c) => {
    const request = await body(c.req.raw, heartbeatBody);
    return c.json(await leases.heartbeat(request.attemptId, request));
  });
  app.post("/worker/complete", async (c) => {
    const request = await body(c.req.raw, completeBody);
    const { attemptId, workerId, leaseVersion, leaseSecret, output, outputError, ...facts } = request;
    // An output the rules refuse (too large, too deep) is recorded as a refused output, like a
    // local one: the completion itself is still the worker's evidence and is kept.
    const checked = outputError === undefined || outputError === null ? checkOutput(output ?? null) : { output: null, outputError };
    return c.json(await leases.complete(attemptId, { workerId, leaseVersion, leaseSecret }, { ...facts, ...checked }));
  });
  app.post("/worker/lost", async (c) => {
    const request = await body(c.req.raw, lostBody);
    return c.json(await leases.lost(request.attemptId, request, request.reason));
  });
}
