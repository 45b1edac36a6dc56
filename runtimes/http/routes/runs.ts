import { Hono } from "hono";
import { z } from "zod";
import {
  isPortableId,
  PACKAGE_NAME_PATTERN,
  RESOURCE_NAME_PATTERN,
} from "../../../src/identity.ts";
import { explainWaiting } from "../../../src/backpressure.ts";
import { RUN_STATUSES } from "../../../src/model.ts";
import {
  cancelRun,
  getRunDetail,
  getRunEvents,
  rerunRun,
  startRun,
  stepAttempt,
} from "../../../src/operations.ts";
import {
  attemptView,
  type ErrorBody,
  eventView,
  runView,
  stepView,
  type EventPage,
  type RunAnswer,
  type RunDetail,
  type RunPage,
} from "../contract.ts";
import { writeTransaction, type RouteDeps } from "../deps.ts";
import {
  DEFAULT_RUN_WAIT_MS,
  MAX_RUN_WAIT_MS,
  TooManyWaiters,
  type RunWaitCondition,
} from "../run-waiters.ts";
import {
  fail,
  jsonBody,
  queryOf,
  runParam,
  runStepParams,
  wholeNumberText,
} from "../validation.ts";

export const MAX_LIST_LIMIT = 200;
export const MAX_EVENTS_PAGE = 500;
/** The most bytes of log one answer carries, stdout and stderr together (README: 1 MiB). */
export const LOG_ANSWER_MAX_BYTES = 1024 * 1024;

/** A client's idempotency key: printable ASCII, as a start and a rerun both take it. */
const idempotencyKey = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[\x20-\x7e]+$/);

const startRunBody = z
  .object({
    package: z.string().regex(PACKAGE_NAME_PATTERN),
    workflow: z.string().regex(RESOURCE_NAME_PATTERN).optional(),
    task: z.string().regex(RESOURCE_NAME_PATTERN).optional(),
    idempotencyKey: idempotencyKey.optional(),
    // Checked by the core (resolveRunInput): keys, types, declarations, size.
    input: z.record(z.string(), z.unknown()).optional(),
  })
  .strict()
  .refine((body) => (body.workflow === undefined) !== (body.task === undefined), {
    message: "exactly one of workflow or task",
    path: ["workflow"],
  });

const rerunBody = z
  .object({
    fromFailed: z.boolean().default(false),
    idempotencyKey: idempotencyKey.optional(),
  })
  .strict();

const listQuery = z
  .object({
    status: z.enum(RUN_STATUSES).optional(),
    limit: wholeNumberText(1, MAX_LIST_LIMIT).default(50),
    cursor: z.string().refine(isPortableId, "cursor must be a run id").optional(),
  })
  .strict();

/** `GET /runs/:id`: no query, or a long-poll (`wait`, docs/API.md). */
const runQuery = z
  .object({
    wait: z.enum(["terminal", "change"]).optional(),
    after: wholeNumberText(0, Number.MAX_SAFE_INTEGER).optional(),
    timeoutMs: wholeNumberText(0, MAX_RUN_WAIT_MS).optional(),
  })
  .strict()
  .superRefine((query, context) => {
    if (query.after !== undefined && query.wait !== "change")
      context.addIssue({ code: "custom", path: ["after"], message: "only with wait=change" });
    if (query.timeoutMs !== undefined && query.wait === undefined)
      context.addIssue({ code: "custom", path: ["timeoutMs"], message: "only with wait" });
  });

const eventsQuery = z
  .object({
    after: wholeNumberText(0, Number.MAX_SAFE_INTEGER).default(0),
    limit: wholeNumberText(1, MAX_EVENTS_PAGE).default(MAX_EVENTS_PAGE),
  })
  .strict();

/** Runs: start, list, read, follow events, cancel, and the latest log of a step. */
export function runRoutes(deps: RouteDeps): Hono {
  const { store, runWaiters: waiters } = deps;
  return new Hono()
    .post("/runs", jsonBody(startRunBody, "the run request"), async (c) => {
      const body = c.req.valid("json");
      const target =
        body.workflow !== undefined
          ? ({ kind: "workflow", name: body.workflow } as const)
          : ({ kind: "task", name: body.task ?? "" } as const);
      const started = await writeTransaction(deps, (tx, nowMs) =>
        startRun(
          tx,
          {
            package: body.package,
            target,
            idempotencyKey: body.idempotencyKey ?? null,
            scheduleName: null,
            runId: deps.ids.runId(),
            input: body.input,
          },
          nowMs,
        ),
      );
      return c.json({ run: runView(started.run) } satisfies RunAnswer, started.created ? 201 : 200);
    })
    .get("/runs", queryOf(listQuery), async (c) => {
      const { status, limit, cursor } = c.req.valid("query");
      const runs = await store.read(async (tx) =>
        tx.listRuns({ status: status ?? null, cursor: cursor ?? null, limit: limit + 1 }),
      );
      const page = runs.slice(0, limit);
      return c.json({
        runs: page.map(runView),
        nextCursor: runs.length > limit ? (page[page.length - 1]?.id ?? null) : null,
      } satisfies RunPage);
    })
    .get("/runs/:id", runParam, queryOf(runQuery), async (c) => {
      const { id } = c.req.valid("param");
      const query = c.req.valid("query");
      if (query.wait !== undefined) {
        const condition: RunWaitCondition =
          query.wait === "terminal"
            ? { kind: "terminal" }
            : { kind: "change", afterSeq: query.after ?? 0 };
        try {
          await waiters.wait(
            id,
            condition,
            query.timeoutMs ?? DEFAULT_RUN_WAIT_MS,
            c.req.raw.signal,
          );
        } catch (error) {
          if (!(error instanceof TooManyWaiters)) throw error;
          deps.metrics.observeHttpError();
          return c.json(
            {
              error: {
                code: error.code,
                message: error.message,
                details: [{ path: "wait", message: `at most ${error.limit} waiting requests` }],
              },
            } satisfies ErrorBody,
            429,
            { "retry-after": "1" },
          );
        }
      }
      const { detail, waiting } = await store.read(async (tx) => {
        const read = await getRunDetail(tx, id);
        const explained = await explainWaiting(
          tx,
          read.run,
          read.steps,
          read.attempts,
          deps.coordinator.maxRunning,
        );
        return { detail: read, waiting: explained };
      });
      return c.json({
        run: runView(detail.run),
        steps: detail.steps.map((step) => stepView(step, waiting.steps.get(step.id) ?? null)),
        attempts: detail.attempts.map(attemptView),
        waiting: waiting.run,
      } satisfies RunDetail);
    })
    .get("/runs/:id/events", runParam, queryOf(eventsQuery), async (c) => {
      const { id } = c.req.valid("param");
      const { after, limit } = c.req.valid("query");
      const events = await store.read(async (tx) => getRunEvents(tx, id, after, limit));
      return c.json({ events: events.map(eventView) } satisfies EventPage);
    })
    .post("/runs/:id/rerun", runParam, jsonBody(rerunBody, "the rerun request"), async (c) => {
      const { id } = c.req.valid("param");
      const body = c.req.valid("json");
      const newRunId = deps.ids.runId();
      const rerun = await writeTransaction(deps, (tx, nowMs) =>
        rerunRun(
          tx,
          {
            runId: id,
            fromFailed: body.fromFailed,
            newRunId,
            idempotencyKey: body.idempotencyKey ?? null,
          },
          nowMs,
        ),
      );
      return c.json({ run: runView(rerun.run) } satisfies RunAnswer, rerun.created ? 201 : 200);
    })
    .post("/runs/:id/cancel", runParam, async (c) => {
      const { id } = c.req.valid("param");
      const run = await writeTransaction(deps, (tx, nowMs) => cancelRun(tx, id, nowMs));
      return c.json({ run: runView(run) } satisfies RunAnswer, 202);
    })
    .get("/runs/:id/steps/:name/log", runStepParams, async (c) => {
      const { id, name } = c.req.valid("param");
      const latest = await store.read(async (tx) => stepAttempt(tx, id, name));
      if (latest === null || deps.readLog === undefined)
        fail("not_found", `step ${name} has no log yet`);
      const text = await deps.readLog(latest, LOG_ANSWER_MAX_BYTES);
      if (text === null) fail("not_found", `step ${name} has no log yet`);
      return c.text(text, 200, { "content-type": "text/plain; charset=utf-8" });
    });
}
