/**
 * Upper bounds on everything a manifest can declare. A manifest is user input that becomes
 * stored rows, process arguments and cadence work, so each bound keeps one of those small
 * enough for the 128 MiB device profile. Byte limits are UTF-8 bytes (see `utf8ByteLength`).
 */
import { utf8ByteLength } from "../utf8.ts";

const KIB = 1024;
const SECOND_MS = 1000;
const HOUR_MS = 60 * 60 * SECOND_MS;
const DAY_MS = 24 * HOUR_MS;

/** Every bound by name; the schema checks them and quotes them in its messages. */
export const MANIFEST_LIMITS = {
  /** The whole manifest text; checked before parsing so a huge body costs no parser work. */
  maxManifestBytes: 256 * KIB,

  /** Every task becomes a runtime task definition row per generation; 256 keeps reconciliation one short transaction. */
  maxTasksPerPackage: 256,
  /** Every workflow becomes a digest-addressed plan per generation; 64 bounds plan materialization on apply. */
  maxWorkflowsPerPackage: 64,
  /** Every step becomes a step run per workflow run; 128 keeps the frontier of one run within a few budget pages. */
  maxStepsPerWorkflow: 128,
  /** Every schedule is evaluated by the cadence; 64 keeps the schedule stage of one tick bounded. */
  maxSchedulesPerPackage: 64,
  /** The fan-in of one step; 64 is far above real pipelines and bounds the frontier's readiness check. */
  maxNeedsPerStep: 64,

  /** Arguments per command; far above real commands and well under every OS's argument count limit. */
  maxArgvItems: 256,
  /** All arguments together; 32 KiB fits under the smallest common ARG_MAX once the environment is added. */
  maxArgvBytes: 32 * KIB,
  /** An inline shell script; longer scripts belong in a file the task runs. */
  maxShellBytes: 16 * KIB,
  /** Environment variables per task; the task's env is stored in every execution revision. */
  maxEnvEntries: 64,
  /** All `NAME=value` pairs together; with `maxArgvBytes` this stays under a 64 KiB ARG_MAX. */
  maxEnvBytes: 16 * KIB,
  /** A working directory path; PATH_MAX on Linux is 4096 bytes including the terminating NUL. */
  maxCwdBytes: 4095,

  /** Task, workflow, step and schedule names; mirrors the `{0,31}` bound of RESOURCE_NAME_PATTERN. */
  maxNameLength: 32,
  /** The package description, shown in listings and the dashboard. */
  maxPackageDescriptionLength: 1024,
  /** A workflow description, shown beside its DAG in the dashboard. */
  maxWorkflowDescriptionLength: 512,
  /** A cron expression; the longest sensible six-field expression with lists is far shorter. */
  maxCronLength: 256,
  /** An IANA time zone name; the longest in the tz database is about 30 characters. */
  maxTimezoneLength: 64,

  /**
   * A task's `concurrency:` (its live attempts across all runs of the package). A thousand is far
   * above what one host runs at once and keeps the limit a small integer in every digest.
   */
  maxTaskConcurrency: 1000,

  /** The shortest timeout; below it process start-up alone would time tasks out. */
  minTimeoutMs: 100,
  /** The longest timeout; a week covers batch jobs while a forgotten process still ends. */
  maxTimeoutMs: 7 * DAY_MS,
  /** The timeout of a task that declares none; an hour ends runaway commands on a device. */
  defaultTimeoutMs: HOUR_MS,
  /** Retries per run; more than 10 hides a broken task instead of reporting it. */
  maxRetry: 10,
  /** The pause before a retry; a day is the longest wait that still reads as a retry, not a schedule. */
  maxBackoffMs: DAY_MS,

  /** Notifiers on one task, workflow or schedule. */
  maxNotifiers: 4,
  /** A webhook URL's length. */
  maxWebhookUrlLength: 2048,
  /** A webhook secret's length range (an HMAC key). */
  minWebhookSecretLength: 16,
  maxWebhookSecretLength: 256,
} as const;

/**
 * Whether a manifest text is over `maxManifestBytes`. Every UTF-16 code unit is at least one
 * UTF-8 byte, so a long string is oversize without counting.
 */
export function isOversizeManifest(text: string): boolean {
  return (
    text.length > MANIFEST_LIMITS.maxManifestBytes ||
    utf8ByteLength(text) > MANIFEST_LIMITS.maxManifestBytes
  );
}
