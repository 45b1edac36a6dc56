import { Hono, type Context, type MiddlewareHandler } from "hono";
import { bearerAuth } from "hono/bearer-auth";
import { bodyLimit } from "hono/body-limit";
import { HTTPException } from "hono/http-exception";
import { isQlrError, type QlrErrorCode } from "../../src/errors.ts";
import { MANIFEST_LIMITS } from "../../src/manifest/limits.ts";
import { isTokenAuthorized } from "./auth.ts";
import type { ErrorBody } from "./contract.ts";
import type { AppDeps, RouteDeps } from "./deps.ts";
import { attemptRoutes } from "./routes/attempts.ts";
import { packageRoutes } from "./routes/packages.ts";
import { observeRoutes } from "./routes/observe.ts";
import { runRoutes } from "./routes/runs.ts";
import { RunWaiters } from "./run-waiters.ts";
import { systemRoutes } from "./routes/system.ts";
import { workerRoutes } from "./routes/workers.ts";

/**
 * The one Hono app every runtime serves (device, server, Worker), its routes split by resource
 * under routes/. It validates every input at the boundary (validation.ts), writes nothing for
 * bad input, and answers errors as `{error: {code, message, details}}` with the status words
 * of the contract (contract.ts).
 */

export type { AppDeps } from "./deps.ts";
export { LOG_ANSWER_MAX_BYTES, MAX_EVENTS_PAGE, MAX_LIST_LIMIT } from "./routes/runs.ts";

export const MAX_BODY_BYTES = MANIFEST_LIMITS.maxManifestBytes + 4096;

const STATUS_OF: Record<QlrErrorCode, 400 | 401 | 404 | 409 | 413 | 500 | 503> = {
  invalid_request: 400,
  invalid_manifest: 400,
  invalid_identity: 400,
  limit_exceeded: 400,
  payload_too_large: 413,
  unauthorized: 401,
  not_found: 404,
  conflict: 409,
  illegal_transition: 409,
  clock_regression: 503,
  schema_too_new: 500,
  storage_corrupt: 500,
  storage_locked: 503,
  storage_unavailable: 503,
  integrity: 500,
  internal: 500,
};

function publicCode(code: QlrErrorCode): string {
  switch (code) {
    case "invalid_identity":
    case "limit_exceeded":
      return "invalid_request";
    case "illegal_transition":
      return "conflict";
    case "unauthorized":
    case "not_found":
    case "conflict":
    case "payload_too_large":
    case "invalid_request":
    case "invalid_manifest":
      return code;
    // Retry later: the disk is full or failing, or another process holds the database.
    case "storage_unavailable":
    case "storage_locked":
      return "storage_unavailable";
    default:
      return "internal";
  }
}

function errorBody(
  code: string,
  message: string,
  details: ErrorBody["error"]["details"] = [],
): ErrorBody {
  return { error: { code, message, details } };
}

/**
 * Every refusal of the bearer check is the contract's 401, a malformed header too (Hono's
 * default answers that one 400 in plain text): a client learns only that a valid token is needed.
 */
function unauthorized(c: Context): Response {
  return c.json(errorBody("unauthorized", "a valid bearer token is required"), 401);
}

export function createApp(given: AppDeps): Hono {
  // One registry of run long-polls for the whole app: the runtime's, or one only the fallback re-read releases.
  const deps: RouteDeps = { ...given, runWaiters: given.runWaiters ?? new RunWaiters(given.store) };
  const app = new Hono();
  const tokens = { admin: deps.token, worker: deps.workerToken ?? null };

  app.onError((error, c) => {
    deps.metrics.observeHttpError();
    if (error instanceof HTTPException) return error.getResponse();
    if (isQlrError(error))
      return c.json(
        errorBody(publicCode(error.code), error.message, error.details),
        STATUS_OF[error.code],
      );
    return c.json(errorBody("internal", "internal error"), 500);
  });
  app.notFound((c) =>
    c.json(errorBody("not_found", `no route ${c.req.method} ${new URL(c.req.url).pathname}`), 404),
  );

  app.get("/healthz", (c) => c.json({ ok: true }));
  deps.mount?.(app);

  app.use(
    "*",
    bearerAuth({
      verifyToken: (token, c) => isTokenAuthorized(token, new URL(c.req.url).pathname, tokens),
      noAuthenticationHeader: { message: unauthorized },
      invalidAuthenticationHeader: { message: unauthorized },
      invalidToken: { message: unauthorized },
    }),
  );
  if (deps.onChange !== undefined) {
    const onChange = deps.onChange;
    app.use("*", async (c, next) => {
      await next();
      // Awaited, so a wake that writes (a Durable Object's alarm) is in place before the answer leaves.
      if (c.req.method !== "GET" && c.req.method !== "HEAD" && c.res.status < 400) await onChange();
    });
  }
  const tooLarge = (c: Context): Response =>
    c.json(errorBody("payload_too_large", `the body exceeds ${MAX_BODY_BYTES} bytes`), 413);
  const limitBody = bodyLimit({ maxSize: MAX_BODY_BYTES, onError: tooLarge });
  // GET and HEAD carry no body here. A body of declared length is checked by its header, as
  // `bodyLimit` itself does, but before anything asks for the request's stream: on Node the
  // adapter builds a whole web Request with a stream on that first access, while a route's
  // `c.req.text()` reads the message directly if nothing did (≈ 3 % of serve's CPU per run).
  // HTTP/1.1 framing holds such a body to its declared length; a chunked one is counted.
  const limitBodyWhereOne: MiddlewareHandler = (c, next) => {
    if (c.req.method === "GET" || c.req.method === "HEAD") return next();
    const declared = c.req.header("content-length");
    if (
      declared !== undefined &&
      /^[0-9]{1,15}$/.test(declared) &&
      c.req.header("transfer-encoding") === undefined
    )
      return Number(declared) > MAX_BODY_BYTES ? Promise.resolve(tooLarge(c)) : next();
    return limitBody(c, next);
  };
  app.use("*", limitBodyWhereOne);

  app.route("/", systemRoutes(deps));
  app.route("/", packageRoutes(deps));
  // Before the run routes: with `offset`, a step's log is answered here as a chunk.
  app.route("/", observeRoutes(deps));
  app.route("/", runRoutes(deps));
  app.route("/", attemptRoutes(deps));
  app.route("/", workerRoutes(deps));
  return app;
}
