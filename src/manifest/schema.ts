import { z } from "zod";
import { Cron, CronPattern } from "croner";
import { PACKAGE_NAME_PATTERN, PORTABLE_ID_PATTERN, RESOURCE_NAME_PATTERN } from "../identity.ts";
import { formatDurationMs, tryParseDurationMs } from "./duration.ts";
import { utf8ByteLength } from "../utf8.ts";
import { MANIFEST_LIMITS } from "./limits.ts";
import type { ManifestIssue } from "./types.ts";
import { INPUT_KEY_PATTERN, inputValueProblem, MAX_INPUT_KEYS } from "../run-inputs.ts";

/**
 * The zod schemas of the manifest document (DESIGN.md §6). Every object is strict, so a typo
 * such as `timout:` is an error with its path instead of a silently ignored field. The output
 * has defaults filled and durations in milliseconds but keeps the document's shape (records);
 * `parse.ts` turns it into the sorted `Manifest` after the cross checks.
 */

export const ENV_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** The shell every `shell:` task runs through; POSIX guarantees it at this path. */
export const SHELL_PATH = "/bin/sh";

const RESOURCE_NAME_RULE = `must be 1 to ${MANIFEST_LIMITS.maxNameLength} characters of letters, digits, _ and -, starting with a letter or digit`;
const PACKAGE_NAME_RULE = `must be 1 to ${MANIFEST_LIMITS.maxNameLength} characters of a-z, 0-9 and -, starting with a letter or digit`;
/** A lone surrogate cannot be encoded as UTF-8, so it cannot reach a process argument or a file name. */
const LONE_SURROGATE = /\p{Cs}/u;
/** Only zone-name characters; rejects offsets such as "+05:00" that some ICU builds accept and others do not. */
const TIMEZONE_NAME_SHAPE = /^[A-Za-z][A-Za-z0-9_+-]*(?:\/[A-Za-z0-9_+-]+)*$/;
/**
 * The reference instant for the "does this cron expression ever fire" check. A fixed instant
 * keeps validation pure and repeatable; any date works because croner searches years ahead.
 */
const CRON_PROBE_START = "2000-01-01T00:00:00Z";

/** Says "is required" for a missing value and names the expected shape otherwise. */
function expecting(shape: string) {
  return (issue: { input?: unknown }) =>
    issue.input === undefined ? "is required" : `must be ${shape}`;
}

function isObjectLike(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Text that may reach a process (argv, env, cwd): no NUL, which would truncate it, and valid Unicode. */
function processText(shape: string) {
  return z.string({ error: expecting(shape) }).superRefine((text, ctx) => {
    if (text.includes("\u0000"))
      ctx.addIssue({ code: "custom", message: "must not contain a NUL character" });
    if (LONE_SURROGATE.test(text))
      ctx.addIssue({
        code: "custom",
        message: "must be valid Unicode (it holds a lone surrogate)",
      });
  });
}

function durationMs(minMs: number, maxMs: number) {
  return z
    .union([z.number(), z.string()], {
      error: expecting("whole milliseconds (a number) or a duration string such as 30s"),
    })
    .transform((value, ctx) => {
      const parsed = tryParseDurationMs(value);
      if (!parsed.ok) {
        ctx.addIssue({ code: "custom", message: parsed.reason });
        return z.NEVER;
      }
      if (parsed.ms < minMs || parsed.ms > maxMs) {
        ctx.addIssue({
          code: "custom",
          message: `must be between ${formatDurationMs(minMs)} and ${formatDurationMs(maxMs)}, got ${formatDurationMs(parsed.ms)}`,
        });
        return z.NEVER;
      }
      return parsed.ms;
    });
}

/** A record keyed by resource names, with a bound on its size (and a floor for steps). */
function namedRecord<Value extends z.ZodType>(
  value: Value,
  noun: string,
  bounds: { min: number; max: number },
) {
  const keys = z.string().regex(RESOURCE_NAME_PATTERN, `the name ${RESOURCE_NAME_RULE}`);
  return z
    .record(keys, value, { error: expecting(`a mapping of name to ${noun}`) })
    .superRefine((record, ctx) => {
      const count = Object.keys(record).length;
      if (count < bounds.min)
        ctx.addIssue({ code: "custom", message: `must declare at least ${bounds.min} ${noun}` });
      if (count > bounds.max)
        ctx.addIssue({
          code: "custom",
          message: `must declare at most ${bounds.max} ${noun}s, got ${count}`,
        });
    });
}

export const ArgvSchema = z
  .array(processText("a string"), {
    error: expecting("an argv array of strings, such as [echo, hello]"),
  })
  .min(1, "must name the program to run")
  .max(MANIFEST_LIMITS.maxArgvItems, `must have at most ${MANIFEST_LIMITS.maxArgvItems} items`)
  .superRefine((argv, ctx) => {
    // Later arguments may be empty (`printf ""` is meaningful); only the program name may not.
    if (argv[0] === "")
      ctx.addIssue({ code: "custom", path: [0], message: "the program must not be empty" });
    // Each argument costs its bytes plus the NUL terminator, as the kernel counts it against ARG_MAX.
    const bytes = argv.reduce((sum, argument) => sum + utf8ByteLength(argument) + 1, 0);
    if (bytes > MANIFEST_LIMITS.maxArgvBytes)
      ctx.addIssue({
        code: "custom",
        message: `must total at most ${MANIFEST_LIMITS.maxArgvBytes} bytes, got ${bytes}`,
      });
  });

export const ShellScriptSchema = processText("a shell script (a string)").superRefine(
  (script, ctx) => {
    if (script.trim() === "") ctx.addIssue({ code: "custom", message: "must not be blank" });
    const bytes = utf8ByteLength(script);
    if (bytes > MANIFEST_LIMITS.maxShellBytes)
      ctx.addIssue({
        code: "custom",
        message: `must be at most ${MANIFEST_LIMITS.maxShellBytes} bytes, got ${bytes}`,
      });
  },
);

export const EnvSchema = z
  .record(
    z.string().regex(ENV_NAME_PATTERN, `the variable name must match ${ENV_NAME_PATTERN.source}`),
    processText("a string (quote numbers and booleans in YAML)"),
    { error: expecting("a mapping of NAME: value") },
  )
  .superRefine((env, ctx) => {
    const entries = Object.entries(env);
    if (entries.length > MANIFEST_LIMITS.maxEnvEntries)
      ctx.addIssue({
        code: "custom",
        message: `must have at most ${MANIFEST_LIMITS.maxEnvEntries} variables, got ${entries.length}`,
      });
    // Counted as the process sees it: NAME=value and a NUL terminator per variable.
    const bytes = entries.reduce(
      (sum, [name, value]) => sum + utf8ByteLength(name) + utf8ByteLength(value) + 2,
      0,
    );
    if (bytes > MANIFEST_LIMITS.maxEnvBytes)
      ctx.addIssue({
        code: "custom",
        message: `must total at most ${MANIFEST_LIMITS.maxEnvBytes} bytes, got ${bytes}`,
      });
  });

const CwdSchema = processText("a directory path (a string)").superRefine((cwd, ctx) => {
  if (cwd === "")
    ctx.addIssue({
      code: "custom",
      message: "must not be empty (leave cwd out to run in a fresh directory per attempt)",
    });
  const bytes = utf8ByteLength(cwd);
  if (bytes > MANIFEST_LIMITS.maxCwdBytes)
    ctx.addIssue({
      code: "custom",
      message: `must be at most ${MANIFEST_LIMITS.maxCwdBytes} bytes, got ${bytes}`,
    });
});

/** A user name (POSIX portable), a numeric uid, or `uid:gid`. */
export const TASK_USER_PATTERN = /^(?:[a-z_][a-z0-9_-]{0,31}|[0-9]{1,10}(?::[0-9]{1,10})?)$/;

const UserSchema = z
  .string({ error: expecting("a user name, a uid or uid:gid") })
  .regex(
    TASK_USER_PATTERN,
    "must be a user name (lower-case letters, digits, _ and -), a numeric uid, or uid:gid",
  );

const PoolSchema = z
  .string({ error: expecting("a pool name") })
  .regex(
    PORTABLE_ID_PATTERN,
    "must be a portable name: 1 to 36 characters of letters, digits, . _ : -, starting with a letter or digit",
  );

const RetrySchema = z.strictObject(
  {
    max: z
      .number({ error: expecting("a whole number") })
      .int("must be a whole number")
      .min(0, "must not be negative")
      .max(MANIFEST_LIMITS.maxRetry, `must be at most ${MANIFEST_LIMITS.maxRetry}`)
      .default(0),
    backoff: durationMs(0, MANIFEST_LIMITS.maxBackoffMs).default(0),
    idempotent: z.boolean({ error: expecting("true or false") }).default(false),
  },
  { error: expecting("a mapping such as { max: 2, backoff: 5s }") },
);

const always = () => true;

const WebhookUrlSchema = z
  .string({ error: expecting("an http(s) URL") })
  .max(
    MANIFEST_LIMITS.maxWebhookUrlLength,
    `must be at most ${MANIFEST_LIMITS.maxWebhookUrlLength} characters`,
  )
  .superRefine((text, ctx) => {
    let url: URL;
    try {
      url = new URL(text);
    } catch {
      ctx.addIssue({ code: "custom", message: "must be an absolute http(s) URL" });
      return;
    }
    if (url.protocol !== "http:" && url.protocol !== "https:")
      ctx.addIssue({ code: "custom", message: `must be an http(s) URL, got ${url.protocol}` });
    if (url.username !== "" || url.password !== "")
      ctx.addIssue({
        code: "custom",
        message: "must not carry a user or password: use secret for the signature",
      });
  });

/** One notifier: `{ webhook: URL, secret? }` or `{ command: [argv] }`. */
const NotifierSchema = z
  .strictObject(
    {
      webhook: WebhookUrlSchema.optional(),
      secret: z
        .string({ error: expecting("a string") })
        .min(
          MANIFEST_LIMITS.minWebhookSecretLength,
          `must be at least ${MANIFEST_LIMITS.minWebhookSecretLength} characters`,
        )
        .max(
          MANIFEST_LIMITS.maxWebhookSecretLength,
          `must be at most ${MANIFEST_LIMITS.maxWebhookSecretLength} characters`,
        )
        .optional(),
      command: ArgvSchema.optional(),
    },
    {
      error: expecting(
        "a mapping such as { webhook: https://example.com/hook } or { command: [notify-send, failed] }",
      ),
    },
  )
  .superRefine(
    (notifier, ctx) => {
      if (!isObjectLike(notifier)) return;
      checkExactlyOne(ctx, notifier, ["webhook", "command"], {
        both: "a notifier is either a webhook or a command, not both",
        neither: "is required: the URL to call (or give command: instead)",
      });
      if (notifier.secret !== undefined && notifier.webhook === undefined)
        fieldIssue(ctx, "secret", "applies only to a webhook");
    },
    { when: always },
  );

/**
 * `notify:` is one notifier or a list of them; a single one is read as a list of one, so its
 * problems are reported at `notify[0]`.
 */
export const NotifySchema = z
  .preprocess(
    (value) => (isObjectLike(value) ? [value] : value),
    z
      .array(NotifierSchema, {
        error: expecting("a notifier ({ webhook: URL } or { command: [argv] }) or a list of them"),
      })
      .min(1, "must list at least one notifier")
      .max(
        MANIFEST_LIMITS.maxNotifiers,
        `must list at most ${MANIFEST_LIMITS.maxNotifiers} notifiers`,
      ),
  )
  .optional();

/** An issue on one field of the object a rule that spans fields checks. */
function fieldIssue(ctx: z.RefinementCtx, field: string, message: string): void {
  ctx.addIssue({ code: "custom", path: [field], message });
}

/**
 * Rules that span fields. They run even when a field failed (`when`), so one pass reports
 * every problem; the value may then hold unparsed input, hence the defensive checks.
 */
function checkTaskChoices(task: unknown, ctx: z.RefinementCtx): void {
  if (!isObjectLike(task)) return;
  const hasRun = task.run !== undefined;
  const hasShell = task.shell !== undefined;
  if (hasRun && hasShell) fieldIssue(ctx, "shell", "a task has either run or shell, not both");
  if (!hasRun && !hasShell)
    fieldIssue(ctx, "run", "is required: an argv array (or give shell: a script instead)");
  if (task.executor === "remote_worker") {
    if (task.pool === undefined)
      fieldIssue(ctx, "pool", "is required when executor is remote_worker");
    if (task.cwd !== undefined)
      fieldIssue(
        ctx,
        "cwd",
        "applies only to local_process: a remote worker chooses its own directory",
      );
    if (task.user !== undefined)
      fieldIssue(
        ctx,
        "user",
        "applies only to local_process: a remote worker runs tasks as its own user",
      );
  }
  if (task.executor === "local_process" && task.pool !== undefined) {
    fieldIssue(ctx, "pool", "is allowed only when executor is remote_worker");
  }
}

function checkScheduleTarget(schedule: unknown, ctx: z.RefinementCtx): void {
  if (!isObjectLike(schedule)) return;
  checkExactlyOne(ctx, schedule, ["workflow", "task"], {
    both: "a schedule starts either a workflow or a task, not both",
    neither: "is required: the workflow to start (or give task: instead)",
  });
}

/**
 * Two fields of which exactly one is given: both is reported at the second field, neither at
 * the first (the one a reader most likely meant).
 */
function checkExactlyOne(
  ctx: z.RefinementCtx,
  value: Record<string, unknown>,
  [first, second]: readonly [string, string],
  messages: { readonly both: string; readonly neither: string },
): void {
  const hasFirst = value[first] !== undefined;
  const hasSecond = value[second] !== undefined;
  if (hasFirst && hasSecond) fieldIssue(ctx, second, messages.both);
  if (!hasFirst && !hasSecond) fieldIssue(ctx, first, messages.neither);
}

export const TaskSchema = z
  .strictObject(
    {
      run: ArgvSchema.optional(),
      shell: ShellScriptSchema.optional(),
      timeout: durationMs(MANIFEST_LIMITS.minTimeoutMs, MANIFEST_LIMITS.maxTimeoutMs).default(
        MANIFEST_LIMITS.defaultTimeoutMs,
      ),
      env: EnvSchema.default(() => ({})),
      cwd: CwdSchema.optional(),
      user: UserSchema.optional(),
      executor: z
        .enum(["local_process", "remote_worker"], {
          error: expecting("local_process or remote_worker"),
        })
        .default("local_process"),
      pool: PoolSchema.optional(),
      retry: RetrySchema.default(() => ({ max: 0, backoff: 0, idempotent: false })),
      concurrency: z
        .number({
          error: expecting(`a whole number from 1 to ${MANIFEST_LIMITS.maxTaskConcurrency}`),
        })
        .int("must be a whole number")
        .min(1, "must be at least 1")
        .max(
          MANIFEST_LIMITS.maxTaskConcurrency,
          `must be at most ${MANIFEST_LIMITS.maxTaskConcurrency}`,
        )
        .optional(),
      notify: NotifySchema,
    },
    { error: expecting("a mapping with run (an argv array) or shell (a script)") },
  )
  .superRefine(checkTaskChoices, { when: always });

export const StepSchema = z.strictObject(
  {
    task: z.string({ error: expecting("the name of a task") }),
    needs: z
      .array(z.string({ error: expecting("a step name") }), {
        error: expecting("a list of step names"),
      })
      .max(
        MANIFEST_LIMITS.maxNeedsPerStep,
        `must list at most ${MANIFEST_LIMITS.maxNeedsPerStep} steps`,
      )
      .default(() => []),
  },
  { error: expecting("a mapping such as { task: hello, needs: [a] }") },
);

/** A declared input's value (a default, or a schedule's input): a string, a number or a boolean. */
const InputValueSchema = z.unknown().superRefine((value, ctx) => {
  const problem = inputValueProblem(value);
  if (problem !== null) ctx.addIssue({ code: "custom", message: problem });
});

function checkInputDeclaration(declaration: unknown, ctx: z.RefinementCtx): void {
  if (!isObjectLike(declaration) || declaration.default === undefined) return;
  const type = declaration.type;
  const value = declaration.default;
  if ((type === "string" || type === "number" || type === "boolean") && typeof value !== type) {
    fieldIssue(ctx, "default", `must be a ${type}, as the input's type says`);
  }
  if (declaration.required === true)
    fieldIssue(
      ctx,
      "required",
      "an input with a default is never missing: give either required: true or a default",
    );
}

export const InputDeclarationSchema = z
  .strictObject(
    {
      type: z.enum(["string", "number", "boolean"], {
        error: expecting("string, number or boolean"),
      }),
      required: z.boolean({ error: expecting("true or false") }).default(false),
      default: InputValueSchema.optional(),
    },
    { error: expecting("a mapping such as { type: string, required: true }") },
  )
  .superRefine(checkInputDeclaration, { when: always });

function inputRecord<Value extends z.ZodType>(value: Value, noun: string) {
  const keys = z
    .string()
    .regex(INPUT_KEY_PATTERN, `the input name must match ${INPUT_KEY_PATTERN.source}`);
  return z
    .record(keys, value, { error: expecting(`a mapping of input name to ${noun}`) })
    .superRefine((record, ctx) => {
      const count = Object.keys(record).length;
      if (count > MAX_INPUT_KEYS)
        ctx.addIssue({
          code: "custom",
          message: `must have at most ${MAX_INPUT_KEYS} inputs, got ${count}`,
        });
    });
}

/** A free-text description, shown beside what it describes; absent: none. */
function descriptionText(maxLength: number) {
  return z
    .string({ error: expecting("a string") })
    .max(maxLength, `must be at most ${maxLength} characters`)
    .optional();
}

export const WorkflowSchema = z.strictObject(
  {
    inputs: inputRecord(InputDeclarationSchema, "declaration").optional(),
    description: descriptionText(MANIFEST_LIMITS.maxWorkflowDescriptionLength),
    steps: namedRecord(StepSchema, "step", { min: 1, max: MANIFEST_LIMITS.maxStepsPerWorkflow }),
    notify: NotifySchema,
  },
  { error: expecting("a mapping with steps") },
);

/** Why a cron expression is unusable, or null. Five fields, or six with seconds first. */
export function cronProblem(expression: string): string | null {
  try {
    // CronPattern only parses; unlike Cron it never reads a pattern with ":" as a one-off date.
    new CronPattern(expression, undefined, { mode: "5-or-6-parts" });
  } catch (error) {
    const reason =
      error instanceof Error ? error.message.replace(/^CronPattern:\s*/, "") : String(error);
    return `is not a valid cron expression: ${reason}`;
  }
  // A job without a callback schedules no timer; nextRun from a fixed instant is a pure search.
  const probe = new Cron(expression, { mode: "5-or-6-parts", timezone: "UTC", paused: true });
  if (probe.nextRun(CRON_PROBE_START) === null)
    return "never fires: no date matches it (for example the 30th of February)";
  return null;
}

/** Whether this runtime's time zone database knows `timeZone`; decided by Intl, the source croner uses too. */
export function isKnownTimeZone(timeZone: string): boolean {
  try {
    new Intl.DateTimeFormat(undefined, { timeZone });
    return true;
  } catch {
    return false;
  }
}

const CronSchema = z
  .string({ error: expecting('a cron expression such as "0 3 * * *"') })
  .max(MANIFEST_LIMITS.maxCronLength, `must be at most ${MANIFEST_LIMITS.maxCronLength} characters`)
  .superRefine((expression, ctx) => {
    const problem = cronProblem(expression);
    if (problem !== null) ctx.addIssue({ code: "custom", message: problem });
  });

const TimezoneSchema = z
  .string({ error: expecting("an IANA time zone name such as UTC or Europe/Berlin") })
  .superRefine((timeZone, ctx) => {
    if (
      timeZone.length > MANIFEST_LIMITS.maxTimezoneLength ||
      !TIMEZONE_NAME_SHAPE.test(timeZone)
    ) {
      ctx.addIssue({
        code: "custom",
        message: "must be an IANA time zone name such as UTC or Europe/Berlin",
      });
    } else if (!isKnownTimeZone(timeZone)) {
      ctx.addIssue({
        code: "custom",
        message: `is not a known IANA time zone: ${JSON.stringify(timeZone)}`,
      });
    }
  });

export const ScheduleSchema = z
  .strictObject(
    {
      cron: CronSchema,
      timezone: TimezoneSchema.default("UTC"),
      workflow: z.string({ error: expecting("the name of a workflow") }).optional(),
      task: z.string({ error: expecting("the name of a task") }).optional(),
      overlap: z.enum(["skip", "allow"], { error: expecting("skip or allow") }).default("skip"),
      missed: z
        .enum(["skip", "fire_once"], { error: expecting("skip or fire_once") })
        .default("skip"),
      enabled: z.boolean({ error: expecting("true or false") }).default(true),
      notify: NotifySchema,
      input: inputRecord(InputValueSchema, "value").optional(),
    },
    { error: expecting('a mapping such as { cron: "0 3 * * *", workflow: pipeline }') },
  )
  .superRefine(checkScheduleTarget, { when: always });

export const ManifestSchema = z.strictObject(
  {
    package: z
      .string({ error: expecting("a package name") })
      .regex(PACKAGE_NAME_PATTERN, `the package name ${PACKAGE_NAME_RULE}`),
    description: descriptionText(MANIFEST_LIMITS.maxPackageDescriptionLength),
    tasks: namedRecord(TaskSchema, "task", {
      min: 0,
      max: MANIFEST_LIMITS.maxTasksPerPackage,
    }).default(() => ({})),
    workflows: namedRecord(WorkflowSchema, "workflow", {
      min: 0,
      max: MANIFEST_LIMITS.maxWorkflowsPerPackage,
    }).default(() => ({})),
    schedules: namedRecord(ScheduleSchema, "schedule", {
      min: 0,
      max: MANIFEST_LIMITS.maxSchedulesPerPackage,
    }).default(() => ({})),
  },
  {
    error: expecting(
      "a mapping (the manifest document) with package, tasks, workflows and schedules",
    ),
  },
);

/** The manifest as written (before defaults). */
export type ManifestInput = z.input<typeof ManifestSchema>;
/** The manifest document after the schema: defaults filled, durations in ms, still keyed by name. */
export type ManifestDocument = z.output<typeof ManifestSchema>;

/** A path segment that can be written after a dot; anything else is written as ["quoted"]. */
const PLAIN_SEGMENT = /^[A-Za-z0-9_-]+$/;

/**
 * The stable path format of every manifest issue: `tasks.hello.timeout`,
 * `workflows.pipeline.steps.b.needs[0]`, `tasks["a b"]`, and `$` for the document itself.
 */
export function formatIssuePath(segments: readonly PropertyKey[]): string {
  let path = "";
  for (const segment of segments) {
    if (typeof segment === "number") path += `[${segment}]`;
    else if (typeof segment === "string" && PLAIN_SEGMENT.test(segment))
      path += path === "" ? segment : `.${segment}`;
    else path += `[${JSON.stringify(String(segment))}]`;
  }
  return path === "" ? "$" : path;
}

/** One manifest issue per problem zod found; an unknown-keys issue becomes one issue per key. */
export function issuesFromZod(error: z.ZodError): ManifestIssue[] {
  const issues: ManifestIssue[] = [];
  for (const issue of error.issues) {
    if (issue.code === "unrecognized_keys") {
      for (const key of issue.keys)
        issues.push({ path: formatIssuePath([...issue.path, key]), message: "unknown field" });
    } else if (issue.code === "invalid_key") {
      // The outer message only says "Invalid key in record"; the inner one says which rule failed.
      const reason = issue.issues[0]?.message ?? "invalid name";
      issues.push({ path: formatIssuePath(issue.path), message: reason });
    } else {
      issues.push({ path: formatIssuePath(issue.path), message: issue.message });
    }
  }
  return issues;
}
