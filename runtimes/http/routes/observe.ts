import { Hono, type Context } from "hono";
import { z } from "zod";
import { QlrError } from "../../../src/errors.ts";
import { isPortableId, RESOURCE_NAME_PATTERN } from "../../../src/identity.ts";
import { TERMINAL_ATTEMPT_STATUSES } from "../../../src/model.ts";
import { NOTIFICATION_STATES } from "../../../src/notifications.ts";
import { getRunDetail } from "../../../src/operations.ts";
import { DEFAULT_OVERVIEW_HOURS, MAX_OVERVIEW_HOURS } from "../../../src/overview.ts";
import {
  notificationView,
  type LogChunkView,
  type NotificationPage,
  type OverviewAnswer,
} from "../contract.ts";
import type { AppDeps } from "../deps.ts";

/**
 * Routes for watching the runtime: the notification outbox (`GET /notifications`), the
 * overview's aggregates (`GET /overview`) and a step's log followed by byte offset
 * (`GET /runs/:id/steps/:name/log?offset=N`). Every query is validated; every answer is
 * bounded (a page of entries, a window of hours, a chunk of bytes).
 */

export const DEFAULT_LOG_CHUNK_BYTES = 64 * 1024;
export const MAX_LOG_CHUNK_BYTES = 256 * 1024;
/** Below this a chunk could hold no whole 4-byte character. */
export const MIN_LOG_CHUNK_BYTES = 1024;
export const MAX_NOTIFICATIONS_PAGE = 200;
/** Offsets beyond any log the runtime keeps (logs are capped at 1 MiB per stream). */
const MAX_LOG_OFFSET = 1024 * 1024 * 1024;

function fail(message: string, details: { path: string; message: string }[]): never {
  throw new QlrError("invalid_request", message, { details });
}

function query(c: Context): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of new URL(c.req.url).searchParams) out[key] = value;
  return out;
}

function parseQuery<T>(schema: z.ZodType<T>, c: Context): T {
  const parsed = schema.safeParse(query(c));
  if (!parsed.success)
    fail(
      "the query is not valid",
      parsed.error.issues.map((issue) => ({
        path: issue.path.length === 0 ? "$" : issue.path.map(String).join("."),
        message: issue.message,
      })),
    );
  return parsed.data;
}

const wholeNumber = (min: number, max: number) =>
  z
    .string()
    .regex(/^[0-9]{1,12}$/, "must be a whole number")
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));

const notificationsQuery = z
  .object({
    run: z.string().refine(isPortableId, "must be a run id").optional(),
    state: z.enum(NOTIFICATION_STATES).optional(),
    limit: wholeNumber(1, MAX_NOTIFICATIONS_PAGE).default(50),
    cursor: z
      .string()
      .regex(/^ntf:[0-9a-f]{32}$/, "must be a notification id")
      .optional(),
  })
  .strict();

const overviewQuery = z
  .object({ hours: wholeNumber(1, MAX_OVERVIEW_HOURS).default(DEFAULT_OVERVIEW_HOURS) })
  .strict();

const logChunkQuery = z
  .object({
    offset: wholeNumber(0, MAX_LOG_OFFSET),
    limit: wholeNumber(MIN_LOG_CHUNK_BYTES, MAX_LOG_CHUNK_BYTES).default(DEFAULT_LOG_CHUNK_BYTES),
    stream: z.enum(["stdout", "stderr"]).default("stdout"),
    attempt: z.string().refine(isPortableId, "must be an attempt id").optional(),
  })
  .strict();

/** Watching: the notification outbox, the overview, a step's log followed by byte offset. */
export function observeRoutes(deps: AppDeps): Hono {
  const { store } = deps;
  const app = new Hono();

  app.get("/notifications", async (c) => {
    const { run, state, limit, cursor } = parseQuery(notificationsQuery, c);
    const entries = await store.transaction(async (tx) =>
      tx.listNotifications({
        runId: run ?? null,
        state: state ?? null,
        cursor: cursor ?? null,
        limit: limit + 1,
      }),
    );
    const page = entries.slice(0, limit);
    return c.json({
      notifications: page.map(notificationView),
      nextCursor: entries.length > limit ? (page[page.length - 1]?.id ?? null) : null,
    } satisfies NotificationPage);
  });

  app.get("/overview", async (c) => {
    const { hours } = parseQuery(overviewQuery, c);
    const overview = await store.transaction(async (tx) =>
      tx.overview(await tx.observe(deps.clock.nowMs()), hours),
    );
    return c.json({ overview } satisfies OverviewAnswer);
  });

  // With `offset`, the log is read as a chunk of one stream (JSON); without, the next route
  // answers the whole log as text.
  app.get("/runs/:id/steps/:name/log", async (c, next) => {
    if (new URL(c.req.url).searchParams.get("offset") === null) return next();
    const id = c.req.param("id");
    const name = c.req.param("name");
    if (!isPortableId(id))
      fail("run id must be a portable identity", [
        { path: "id", message: "not a portable identity" },
      ]);
    if (!RESOURCE_NAME_PATTERN.test(name))
      fail("step name is not valid", [{ path: "name", message: "invalid" }]);
    const { offset, limit, stream, attempt: attemptId } = parseQuery(logChunkQuery, c);
    const detail = await store.transaction(async (tx) => getRunDetail(tx, id));
    const step = detail.steps.find((candidate) => candidate.name === name);
    if (detail.run.kind === "workflow" && step === undefined)
      throw new QlrError("not_found", `run ${id} has no step ${name}`);
    const stepRunId = detail.run.kind === "ordinary" ? null : (step?.id ?? null);
    const attempts = detail.attempts.filter((candidate) => candidate.stepRunId === stepRunId);
    const attempt =
      attemptId === undefined
        ? attempts.at(-1)
        : attempts.find((candidate) => candidate.id === attemptId);
    if (attempt === undefined)
      throw new QlrError(
        "not_found",
        attemptId === undefined
          ? `step ${name} has no attempt yet`
          : `step ${name} has no attempt ${attemptId}`,
      );
    // The status is read before the file: an attempt already ended has written all its log.
    const finished = TERMINAL_ATTEMPT_STATUSES.has(attempt.status);
    const chunk =
      deps.readLogChunk === undefined
        ? null
        : await deps.readLogChunk(attempt, stream, offset, limit, finished);
    if (chunk === null && deps.readLogChunk === undefined)
      throw new QlrError("not_found", "this runtime keeps no step logs");
    const answer = chunk ?? { text: "", nextOffset: offset, sizeBytes: 0 };
    return c.json({
      attemptId: attempt.id,
      attemptStatus: attempt.status,
      stream,
      offset,
      nextOffset: answer.nextOffset,
      sizeBytes: answer.sizeBytes,
      text: answer.text,
      // Nothing more will come: the attempt ended and this chunk reached the end of its file.
      finished: finished && answer.nextOffset >= answer.sizeBytes,
    } satisfies LogChunkView);
  });
  return app;
}
