import { timingSafeEqualText } from "../../src/digest.ts";

/**
 * Bearer authentication shared by every runtime that serves the app (the Hono middleware and
 * the Worker's Durable Object, which authenticates before it opens its store).
 *
 * Two credentials: the admin token opens every route; the worker token opens only the lease
 * routes under `/worker/`, so a machine that runs `qlr worker` cannot apply packages, start or
 * cancel runs, or read logs. The admin token still works on `/worker/` for compatibility.
 */

export interface Tokens {
  readonly admin: string;
  /** Accepted only on `/worker/*`; null when no worker token is configured. */
  readonly worker: string | null;
}

/** The shortest token either runtime accepts: a guessable secret is no secret. */
export const MIN_TOKEN_LENGTH = 16;
export const MAX_TOKEN_LENGTH = 256;

/**
 * The bearer token alphabet (RFC 6750 §2.1, b64token): a token outside it cannot be sent in an
 * Authorization header, so it is refused where it is configured rather than at every request.
 */
export const TOKEN_PATTERN = /^[A-Za-z0-9._~+/-]+=*$/;

/** Why a configured token cannot serve, or null when it can. */
export function tokenProblem(token: string): string | null {
  if (
    token.length < MIN_TOKEN_LENGTH ||
    token.length > MAX_TOKEN_LENGTH ||
    !TOKEN_PATTERN.test(token)
  ) {
    return `must be ${MIN_TOKEN_LENGTH}–${MAX_TOKEN_LENGTH} characters of letters, digits and - . _ ~ + / (then = padding), as bearer tokens are`;
  }
  return null;
}

export const WORKER_ROUTE_PREFIX = "/worker/";

/** The presented bearer token, or "" when the header is absent or not `Bearer <token>`. */
export function presentedToken(authorization: string | null | undefined): string {
  const header = authorization ?? "";
  // The auth scheme is case-insensitive (RFC 9110 §11.1).
  return /^bearer +/i.test(header) ? header.replace(/^bearer +/i, "") : "";
}

/**
 * Whether a presented token opens `pathname`. Both comparisons always run, so the answer's
 * timing does not say which token came close; each is constant-time in the token's bytes.
 */
export function isTokenAuthorized(presented: string, pathname: string, tokens: Tokens): boolean {
  if (presented.length === 0) return false;
  const isAdmin = tokens.admin.length > 0 && timingSafeEqualText(presented, tokens.admin);
  const isWorker =
    tokens.worker !== null &&
    tokens.worker.length > 0 &&
    timingSafeEqualText(presented, tokens.worker);
  return isAdmin || (isWorker && pathname.startsWith(WORKER_ROUTE_PREFIX));
}

/** Whether a request with this Authorization header may proceed to `pathname`. */
export function isAuthorized(
  authorization: string | null | undefined,
  pathname: string,
  tokens: Tokens,
): boolean {
  return isTokenAuthorized(presentedToken(authorization), pathname, tokens);
}
