import type { Context, MiddlewareHandler } from "hono";
import { validator } from "hono/validator";
import { z } from "zod";
import { QlrError, type QlrErrorCode } from "../../src/errors.ts";
import { isPortableId, RESOURCE_NAME_PATTERN } from "../../src/identity.ts";
import type { ErrorDetail } from "./contract.ts";

/**
 * Input validation at the boundary, shared by every route: queries and path parameters go
 * through Hono's validator, bodies through `jsonBody` (Hono's JSON validator reads a body
 * without a content-type as `{}`, where the contract reads it as JSON, and answers malformed
 * JSON in its own shape). Every refusal is a `QlrError` with one detail per problem, answered
 * by the app's error handler; nothing is written.
 */

export function fail(code: QlrErrorCode, message: string, details: ErrorDetail[] = []): never {
  throw new QlrError(code, message, { details });
}

export function zodDetails(error: z.ZodError): ErrorDetail[] {
  const pathOf = (segments: readonly PropertyKey[]): string =>
    segments.length === 0 ? "$" : segments.map(String).join(".");
  // An unknown field is named by its own path, one detail per field, as manifest issues are.
  return error.issues.flatMap((issue) =>
    issue.code === "unrecognized_keys"
      ? issue.keys.map((key) => ({ path: pathOf([...issue.path, key]), message: "unknown field" }))
      : [{ path: pathOf(issue.path), message: issue.message }],
  );
}

/** The media type of the request without parameters, lower-case; "" when absent. */
export function mediaType(c: Context): string {
  return (c.req.header("content-type") ?? "").split(";")[0]?.trim().toLowerCase() ?? "";
}

async function readJson(c: Context): Promise<unknown> {
  const contentType = mediaType(c);
  if (contentType !== "application/json" && contentType !== "")
    fail("invalid_request", `unsupported content-type ${contentType}; use application/json`, [
      { path: "content-type", message: "unsupported" },
    ]);
  const text = await c.req.text();
  try {
    return JSON.parse(text) as unknown;
  } catch {
    fail("invalid_request", "the body is not valid JSON", [
      { path: "$", message: "malformed JSON" },
    ]);
  }
}

/** A JSON body (content-type JSON or none) checked by `schema`; the route reads it with `c.req.valid("json")`. */
export function jsonBody<S extends z.ZodType<object>>(
  schema: S,
  what: string,
): MiddlewareHandler<object, string, { in: { json: z.input<S> }; out: { json: z.output<S> } }> {
  return async (c, next) => {
    const parsed = schema.safeParse(await readJson(c));
    if (!parsed.success) fail("invalid_request", `${what} is not valid`, zodDetails(parsed.error));
    c.req.addValidatedData("json", parsed.data);
    await next();
  };
}

/** A query string's values checked by `schema`, or the refusal of an invalid query. */
export function checkQuery<S extends z.ZodType>(schema: S, value: unknown): z.output<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) fail("invalid_request", "the query is not valid", zodDetails(parsed.error));
  return parsed.data;
}

/** The query string checked by `schema`; the route reads it with `c.req.valid("query")`. */
export function queryOf<S extends z.ZodType>(schema: S) {
  return validator("query", (value): z.output<S> => checkQuery(schema, value));
}

/** The path parameters checked by `check`, which throws the route's own refusal. */
export function paramsOf<T>(check: (params: Record<string, string>) => T) {
  return validator("param", (value: Record<string, string>): T => check(value));
}

/**
 * A whole number in a query string: decimal digits only, at most 16 of them (every safe
 * integer fits). `Number()` alone would read "" and " 5" as numbers, so an empty `after=`
 * silently meant 0; `min` and `max` bound each field's own range.
 */
export function wholeNumberText(min: number, max: number): z.ZodType<number, string> {
  return z
    .string()
    .regex(/^[0-9]{1,16}$/, "must be a whole number (decimal digits only)")
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));
}

function checkRunId(params: Record<string, string>): string {
  const id = params.id ?? "";
  if (!isPortableId(id))
    fail("invalid_request", "run id must be a portable identity", [
      { path: "id", message: "not a portable identity" },
    ]);
  return id;
}

/** `:id`, a run id. */
export const runParam = paramsOf((params) => ({ id: checkRunId(params) }));

/**
 * `:id` and `:name`, a run and one of its steps. One validator for both: a later param
 * validator would replace the earlier one's data.
 */
export const runStepParams = paramsOf((params) => {
  const id = checkRunId(params);
  const name = params.name ?? "";
  if (!RESOURCE_NAME_PATTERN.test(name))
    fail("invalid_request", "step name is not valid", [{ path: "name", message: "invalid" }]);
  return { id, name };
});
