/**
 * Typed operating errors. Errors cross realms (Workers, web workers, child processes), so
 * callers discriminate by `code`, never by `instanceof` alone.
 */
export type QlrErrorCode =
  | "invalid_request"
  | "invalid_manifest"
  | "invalid_identity"
  | "illegal_transition"
  | "clock_regression"
  | "conflict"
  | "not_found"
  | "payload_too_large"
  | "limit_exceeded"
  | "schema_too_new"
  | "storage_corrupt"
  | "storage_locked"
  | "storage_unavailable"
  | "integrity"
  | "unauthorized"
  | "internal";

export interface QlrErrorDetail {
  readonly path: string;
  readonly message: string;
}

export class QlrError extends Error {
  readonly code: QlrErrorCode;
  readonly details: readonly QlrErrorDetail[];

  constructor(
    code: QlrErrorCode,
    message: string,
    options?: { details?: readonly QlrErrorDetail[]; cause?: unknown },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "QlrError";
    this.code = code;
    this.details = options?.details ?? [];
  }
}

export function isQlrError(value: unknown, code?: QlrErrorCode): value is QlrError {
  if (typeof value !== "object" || value === null) return false;
  const candidate = value as { name?: unknown; code?: unknown };
  if (candidate.name !== "QlrError" || typeof candidate.code !== "string") return false;
  return code === undefined || candidate.code === code;
}

/**
 * The string `code` an error carries (`ENOENT` from Node's file system, `SQLITE_BUSY` from
 * sql.js, a `QlrErrorCode`), or undefined. Structural, like `isQlrError`, so it works on errors
 * from another realm and on thrown non-errors.
 */
export function errorCode(error: unknown): string | undefined {
  return typeof error === "object" &&
    error !== null &&
    "code" in error &&
    typeof error.code === "string"
    ? error.code
    : undefined;
}

/** The message of a thrown value for a log line or a report: an error's message, anything else as text. */
export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
