import { Hono } from "hono";
import { z } from "zod";
import { isPortableId } from "../../../src/identity.ts";
import { TERMINAL_ATTEMPT_STATUSES } from "../../../src/model.ts";
import { NOTIFICATION_STATES } from "../../../src/notifications.ts";
import { stepAttempt } from "../../../src/operations.ts";
import { DEFAULT_OVERVIEW_HOURS, MAX_OVERVIEW_HOURS } from "../../../src/overview.ts";
import {
  notificationView,
  type LogChunkView,
  type NotificationPage,
  type OverviewAnswer,
} from "../contract.ts";
import type { AppDeps } from "../deps.ts";
import { checkQuery, fail, queryOf, runStepParams, wholeNumberText } from "../validation.ts";

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

const notificationsQuery = z
  .object({
    run: z.string().refine(isPortableId, "must be a run id").optional(),
    state: z.enum(NOTIFICATION_STATES).optional(),
    limit: wholeNumberText(1, MAX_NOTIFICATIONS_PAGE).default(50),
    cursor: z
      .string()
      .regex(/^ntf:[0-9a-f]{32}$/, "must be a notification id")
      .optional(),
  })
  .strict();

const overviewQuery = z
  .object({ hours: wholeNumberText(1, MAX_OVERVIEW_HOURS).default(DEFAULT_OVERVIEW_HOURS) })
  .strict();

const logChunkQuery = z
  .object({
    offset: wholeNumberText(0, MAX_LOG_OFFSET),
    limit: wholeNumberText(MIN_LOG_CHUNK_BYTES, MAX_LOG_CHUNK_BYTES).default(
      DEFAULT_LOG_CHUNK_BYTES,
    ),
    stream: z.enum(["stdout", "stderr"]).default("stdout"),
    attempt: z.string().refine(isPortableId, "must be an attempt id").optional(),
  })
  .strict();

/** Watching: the notification outbox, the overview, a step's log followed by byte offset. */
export function observeRoutes(deps: AppDeps): Hono {
  const { store } = deps;
  const app = new Hono();

  app.get("/notifications", queryOf(notificationsQuery), async (c) => {
    const { run, state, limit, cursor } = c.req.valid("query");
    const entries = await store.read(async (tx) =>
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

  app.get("/overview", queryOf(overviewQuery), async (c) => {
    const { hours } = c.req.valid("query");
    const overview = await store.read(async (tx) =>
      tx.overview(await tx.observe(deps.clock.nowMs()), hours),
    );
    return c.json({ overview } satisfies OverviewAnswer);
  });

  // With `offset`, the log is read as a chunk of one stream (JSON); without, the next route
  // answers the whole log as text.
  app.get("/runs/:id/steps/:name/log", runStepParams, async (c, next) => {
    if (new URL(c.req.url).searchParams.get("offset") === null) return next();
    const { id, name } = c.req.valid("param");
    // Checked here, not as middleware: without `offset` the query belongs to the next route.
    const { offset, limit, stream, attempt: attemptId } = checkQuery(logChunkQuery, c.req.query());
    const attempt = await store.read(async (tx) => stepAttempt(tx, id, name, attemptId));
    if (attempt === null)
      fail(
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
      fail("not_found", "this runtime keeps no step logs");
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
