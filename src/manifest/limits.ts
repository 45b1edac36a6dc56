/**
 * Upper bounds on everything a manifest can declare. A manifest is user input that becomes
 * stored rows, process arguments and cadence work, so each bound keeps one of those small
 * enough for the 128 MiB device profile. Byte limits are UTF-8 bytes (see `utf8ByteLength`).
 */

const KIB = 1024;
const SECOND_MS = 1000;
const HOUR_MS = 60 * 60 * SECOND_MS;
const DAY_MS = 24 * HOUR_MS;

/** The whole manifest text; checked before parsing so a huge body costs no parser work. */
export const MAX_MANIFEST_BYTES = 256 * KIB;

/** Every task becomes a runtime task definition row per generation; 256 keeps reconciliation one short transaction. */
export const MAX_TASKS_PER_PACKAGE = 256;
/** Every workflow becomes a digest-addressed plan per generation; 64 bounds plan materialization on apply. */
export const MAX_WORKFLOWS_PER_PACKAGE = 64;
/** Every step becomes a step run per workflow run; 128 keeps the frontier of one run within a few budget pages. */
export const MAX_STEPS_PER_WORKFLOW = 128;
/** Every schedule is evaluated by the cadence; 64 keeps the schedule stage of one tick bounded. */
export const MAX_SCHEDULES_PER_PACKAGE = 64;
/** The fan-in of one step; 64 is far above real pipelines and bounds the frontier's readiness check. */
export const MAX_NEEDS_PER_STEP = 64;

/** Arguments per command; far above real commands and well under every OS's argument count limit. */
export const MAX_ARGV_ITEMS = 256;
/** All arguments together; 32 KiB fits under the smallest common ARG_MAX once the environment is added. */
export const MAX_ARGV_BYTES = 32 * KIB;
/** An inline shell script; longer scripts belong in a file the task runs. */
export const MAX_SHELL_BYTES = 16 * KIB;
/** Environment variables per task; the task's env is stored in every execution revision. */
export const MAX_ENV_ENTRIES = 64;
/** All `NAME=value` pairs together; with MAX_ARGV_BYTES this stays under a 64 KiB ARG_MAX. */
export const MAX_ENV_BYTES = 16 * KIB;
/** A working directory path; PATH_MAX on Linux is 4096 bytes including the terminating NUL. */
export const MAX_CWD_BYTES = 4095;

/** Task, workflow, step and schedule names; mirrors the `{0,31}` bound of RESOURCE_NAME_PATTERN. */
export const MAX_NAME_LENGTH = 32;
/** The package description, shown in listings and the dashboard. */
export const MAX_PACKAGE_DESCRIPTION_LENGTH = 1024;
/** A workflow description, shown beside its DAG in the dashboard. */
export const MAX_WORKFLOW_DESCRIPTION_LENGTH = 512;
/** A cron expression; the longest sensible six-field expression with lists is far shorter. */
export const MAX_CRON_LENGTH = 256;
/** An IANA time zone name; the longest in the tz database is about 30 characters. */
export const MAX_TIMEZONE_LENGTH = 64;

/**
 * A task's `concurrency:` (its live attempts across all runs of the package). A thousand is far
 * above what one host runs at once and keeps the limit a small integer in every digest.
 */
export const MAX_TASK_CONCURRENCY = 1000;

/** The shortest timeout; below it process start-up alone would time tasks out. */
export const MIN_TIMEOUT_MS = 100;
/** The longest timeout; a week covers batch jobs while a forgotten process still ends. */
export const MAX_TIMEOUT_MS = 7 * DAY_MS;
/** The timeout of a task that declares none; an hour ends runaway commands on a device. */
export const DEFAULT_TIMEOUT_MS = HOUR_MS;
/** Retries per run; more than 10 hides a broken task instead of reporting it. */
export const MAX_RETRY = 10;
/** The pause before a retry; a day is the longest wait that still reads as a retry, not a schedule. */
export const MAX_BACKOFF_MS = DAY_MS;

/**
 * The UTF-8 length of `text`, counted without allocating (unlike TextEncoder) so a size check
 * on a large body is cheap. A lone surrogate counts as the 3 bytes of U+FFFD, which is what an
 * encoder would write for it.
 */
/** Notifiers on one task, workflow or schedule. */
export const MAX_NOTIFIERS = 4;
/** A webhook URL's length. */
export const MAX_WEBHOOK_URL_LENGTH = 2048;
/** A webhook secret's length range (HMAC key). */
export const MIN_WEBHOOK_SECRET_LENGTH = 16;
export const MAX_WEBHOOK_SECRET_LENGTH = 256;

export function utf8ByteLength(text: string): number {
  let bytes = 0;
  for (let index = 0; index < text.length; index += 1) {
    const unit = text.charCodeAt(index);
    if (unit < 0x80) bytes += 1;
    else if (unit < 0x800) bytes += 2;
    else if (
      unit >= 0xd800 &&
      unit <= 0xdbff &&
      index + 1 < text.length &&
      isLowSurrogate(text.charCodeAt(index + 1))
    ) {
      bytes += 4;
      index += 1;
    } else bytes += 3;
  }
  return bytes;
}

function isLowSurrogate(unit: number): boolean {
  return unit >= 0xdc00 && unit <= 0xdfff;
}
