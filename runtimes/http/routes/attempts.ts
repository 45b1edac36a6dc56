import { Hono } from "hono";
import { z } from "zod";
import { isPortableId } from "../../../src/identity.ts";
import { resolveAttempt } from "../../../src/operations.ts";
import { MAX_RESOLVE_REASON_LENGTH } from "../../../src/recovery.ts";
import { attemptView, type AttemptAnswer } from "../contract.ts";
import { writeTransaction, type AppDeps } from "../deps.ts";
import { fail, jsonBody, paramsOf } from "../validation.ts";

const resolveBody = z
  .object({
    as: z.literal("lost"),
    // Printable text on one line: it is shown in events, `qlr status` and the dashboard.
    reason: z
      .string()
      .min(1)
      .max(MAX_RESOLVE_REASON_LENGTH)
      .refine(
        (text) =>
          [...text].every((char) => char.charCodeAt(0) >= 0x20 && char.charCodeAt(0) !== 0x7f),
        "must be printable text on one line",
      ),
  })
  .strict();

const attemptParam = paramsOf((params) => {
  const id = params.id ?? "";
  if (!isPortableId(id))
    fail("invalid_request", "attempt id must be a portable identity", [
      { path: "id", message: "not a portable identity" },
    ]);
  return { id };
});

/** Attempts: an operator settles one that failed closed, after checking its process is gone. */
export function attemptRoutes(deps: AppDeps): Hono {
  return new Hono().post(
    "/attempts/:id/resolve",
    attemptParam,
    jsonBody(resolveBody, "the resolution"),
    async (c) => {
      const { id } = c.req.valid("param");
      const attempt = await writeTransaction(deps, (tx, nowMs) =>
        resolveAttempt(tx, id, c.req.valid("json"), nowMs),
      );
      return c.json({ attempt: attemptView(attempt) } satisfies AttemptAnswer);
    },
  );
}
