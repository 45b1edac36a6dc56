import { LineCounter, parseDocument } from "yaml";
import { parseJsonText } from "../canonical-json.ts";
import { QlrError } from "../errors.ts";
import {
  compareNames,
  findWorkflowProblems,
  type WorkflowProblem,
  type WorkflowStepInput,
} from "./dag.ts";
import { isOversizeManifest, MANIFEST_LIMITS } from "./limits.ts";
import { resolveRunInput, type InputDeclaration, type InputValue } from "../run-inputs.ts";
import {
  formatIssuePath,
  issuesFromZod,
  ManifestSchema,
  SHELL_PATH,
  type ManifestDocument,
} from "./schema.ts";
import type {
  Manifest,
  ManifestFormat,
  ManifestIssue,
  ManifestParseResult,
  NotifierSpec,
  ScheduleSpec,
  TaskSpec,
  WorkflowSpec,
} from "./types.ts";

/**
 * Aliases a YAML manifest may expand. Anchors are handy for shared env blocks; a cap stops a
 * "billion laughs" document from expanding a small text into a huge value.
 */
const MAX_YAML_ALIAS_COUNT = 100;

type Decoded =
  | { readonly ok: true; readonly value: unknown; readonly issues: ManifestIssue[] }
  | { readonly ok: false; readonly issues: ManifestIssue[] };

/**
 * Parses and validates a manifest text. The size is checked first, so an oversize body costs
 * no parser work; then syntax, then the schema, then the cross checks (task references,
 * workflow DAGs, schedule targets). Every problem found is reported with its path.
 */
export function parseManifest(text: string, format: ManifestFormat): ManifestParseResult {
  if (isOversizeManifest(text)) {
    return {
      ok: false,
      issues: [
        {
          path: "$",
          message: `the manifest is larger than ${MANIFEST_LIMITS.maxManifestBytes} bytes (${MANIFEST_LIMITS.maxManifestBytes / 1024} KiB)`,
        },
      ],
    };
  }
  const decoded = decode(text, format);
  if (!decoded.ok) return { ok: false, issues: sortIssues(decoded.issues) };
  const result = validateManifest(decoded.value);
  if (decoded.issues.length === 0) return result;
  return {
    ok: false,
    issues: sortIssues([...decoded.issues, ...(result.ok ? [] : result.issues)]),
  };
}

/** Validates an already-decoded manifest (an HTTP JSON body, for example) and normalizes it. */
export function validateManifest(value: unknown): ManifestParseResult {
  const issues = reservedKeyIssues(value);
  const parsed = ManifestSchema.safeParse(value);
  if (!parsed.success) issues.push(...issuesFromZod(parsed.error));
  issues.push(...crossReferenceIssues(value));
  if (!parsed.success || issues.length > 0) return { ok: false, issues: sortIssues(issues) };
  const manifest = normalize(parsed.data);
  const inputIssues = scheduleInputIssues(manifest);
  if (inputIssues.length > 0) return { ok: false, issues: sortIssues(inputIssues) };
  return { ok: true, manifest };
}

/**
 * A schedule's `input:` is resolved against its workflow's declarations once, here: a schedule
 * whose runs would all be refused (a missing required input, a wrong type) is a manifest error,
 * not a failure at every fire. The stored spec keeps the resolved input, defaults filled in.
 */
function scheduleInputIssues(manifest: Manifest): ManifestIssue[] {
  const issues: ManifestIssue[] = [];
  for (const schedule of manifest.schedules) {
    const workflow =
      schedule.target.kind === "workflow"
        ? manifest.workflows.find((candidate) => candidate.name === schedule.target.name)
        : undefined;
    try {
      const resolved = resolveRunInput(schedule.input ?? {}, workflow?.inputs ?? null, "input");
      if (schedule.input !== undefined || Object.keys(resolved).length > 0)
        schedule.input = resolved;
    } catch (error) {
      const details = error instanceof QlrError ? error.details : [];
      for (const detail of details)
        issues.push({
          path: formatIssuePath(["schedules", schedule.name, ...detail.path.split(".")]),
          message: detail.message,
        });
    }
  }
  return issues;
}

/** The error an API answers with for a rejected manifest; `details` holds every issue. */
export function manifestError(issues: readonly ManifestIssue[]): QlrError {
  const first = issues[0];
  const summary =
    first === undefined ? "invalid manifest" : `invalid manifest: ${first.path}: ${first.message}`;
  const more =
    issues.length > 1
      ? ` (and ${issues.length - 1} more problem${issues.length > 2 ? "s" : ""})`
      : "";
  return new QlrError("invalid_manifest", summary + more, { details: issues });
}

function decode(text: string, format: ManifestFormat): Decoded {
  switch (format) {
    case "yaml":
      return decodeYaml(text);
    case "json":
      return decodeJson(text);
    default:
      throw new QlrError(
        "invalid_request",
        `unsupported manifest format ${JSON.stringify(format satisfies never)}`,
      );
  }
}

function decodeYaml(text: string): Decoded {
  const lineCounter = new LineCounter();
  const at = (offset: number) => {
    const { line, col } = lineCounter.linePos(offset);
    return `line ${line}, column ${col}`;
  };
  try {
    // The YAML 1.2 core schema has no custom or language-specific tags; an unknown tag is a
    // warning in the library and an error here, as is any merge key, duplicate key or second document.
    const document = parseDocument(text, {
      version: "1.2",
      schema: "core",
      merge: false,
      uniqueKeys: true,
      strict: true,
      stringKeys: true,
      prettyErrors: false,
      lineCounter,
    });
    const problems = [...document.errors, ...document.warnings].sort((a, b) => a.pos[0] - b.pos[0]);
    if (problems.length > 0) {
      return {
        ok: false,
        issues: problems.map((problem) => ({
          path: "$",
          message: `YAML: ${problem.message} at ${at(problem.pos[0])}`,
        })),
      };
    }
    return {
      ok: true,
      value: document.toJS({ maxAliasCount: MAX_YAML_ALIAS_COUNT }) as unknown,
      issues: [],
    };
  } catch (error) {
    // toJS throws for an unresolved alias or too many aliases; a pathological nesting depth can
    // exhaust the parser's stack. Either way the text is not a usable manifest.
    return {
      ok: false,
      issues: [
        { path: "$", message: `YAML: ${error instanceof Error ? error.message : String(error)}` },
      ],
    };
  }
}

function decodeJson(text: string): Decoded {
  const body = text.startsWith("\uFEFF") ? text.slice(1) : text;
  const parsed = parseJsonText(body);
  if (!parsed.ok)
    return {
      ok: false,
      issues: [{ path: "$", message: `JSON: ${withLineAndColumn(parsed.message, body)}` }],
    };
  return { ok: true, value: parsed.value, issues: duplicateJsonKeyIssues(body) };
}

/** The engine's message with a line and column added when it gives only a position. */
function withLineAndColumn(message: string, text: string): string {
  const position = /at position (\d+)/.exec(message);
  if (position === null || /line \d+ column \d+/.test(message)) return message;
  const offset = Number(position[1]);
  const before = text.slice(0, offset);
  const line = before.split("\n").length;
  const column = offset - before.lastIndexOf("\n");
  return `${message} (line ${line}, column ${column})`;
}

interface JsonFrame {
  readonly kind: "object" | "array";
  readonly parent: JsonFrame | null;
  /** This container's key or index in its parent; null for the document itself. */
  readonly segment: string | number | null;
  readonly keys: Set<string>;
  key: string;
  index: number;
}

/**
 * JSON.parse keeps the last of two equal keys and drops the others without a word; YAML
 * rejects them. This scan over text JSON.parse already accepted finds them, so two tasks with
 * one name are an error in both formats. Parents are linked, not copied, so deep nesting stays
 * linear.
 */
function duplicateJsonKeyIssues(text: string): ManifestIssue[] {
  const issues: ManifestIssue[] = [];
  let top = null as JsonFrame | null;
  let expectingKey = false;
  const open = (kind: JsonFrame["kind"]): JsonFrame => ({
    kind,
    parent: top,
    segment: top === null ? null : top.kind === "object" ? top.key : top.index,
    keys: new Set(),
    key: "",
    index: 0,
  });
  let index = 0;
  while (index < text.length) {
    const char = text[index];
    if (char === "{" || char === "[") {
      top = open(char === "{" ? "object" : "array");
      expectingKey = char === "{";
      index += 1;
    } else if (char === "}" || char === "]") {
      top = top?.parent ?? null;
      expectingKey = false;
      index += 1;
    } else if (char === ",") {
      if (top?.kind === "object") expectingKey = true;
      else if (top !== null) top.index += 1;
      index += 1;
    } else if (char === '"') {
      const end = endOfJsonString(text, index);
      if (expectingKey && top?.kind === "object") {
        const key = JSON.parse(text.slice(index, end)) as string;
        if (top.keys.has(key)) {
          issues.push({
            path: formatIssuePath([...framePath(top), key]),
            message: "duplicate key: JSON would keep only the last one",
          });
        }
        top.keys.add(key);
        top.key = key;
        expectingKey = false;
      }
      index = end;
    } else {
      index += 1;
    }
  }
  return issues;
}

function endOfJsonString(text: string, start: number): number {
  let index = start + 1;
  while (index < text.length) {
    const char = text[index];
    if (char === "\\") index += 2;
    else if (char === '"') return index + 1;
    else index += 1;
  }
  return index;
}

function framePath(frame: JsonFrame): (string | number)[] {
  const segments: (string | number)[] = [];
  for (let at: JsonFrame | null = frame; at !== null && at.segment !== null; at = at.parent)
    segments.push(at.segment);
  return segments.reverse();
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const prototype = Object.getPrototypeOf(value) as unknown;
  return prototype === Object.prototype || prototype === null;
}

/**
 * A `__proto__` key is an own property after JSON.parse or YAML, but zod's records drop it
 * without an issue, so a task or env entry named `__proto__` would vanish silently. It is
 * rejected wherever it appears. The walk is iterative with linked paths: depth costs no stack.
 */
function reservedKeyIssues(document: unknown): ManifestIssue[] {
  interface Visit {
    readonly value: unknown;
    readonly parent: Visit | null;
    readonly segment: string | number | null;
  }
  const pathOf = (visit: Visit): (string | number)[] => {
    const segments: (string | number)[] = [];
    for (let at: Visit | null = visit; at !== null && at.segment !== null; at = at.parent)
      segments.push(at.segment);
    return segments.reverse();
  };
  const issues: ManifestIssue[] = [];
  const pending: Visit[] = [{ value: document, parent: null, segment: null }];
  for (let visit = pending.pop(); visit !== undefined; visit = pending.pop()) {
    const { value } = visit;
    if (Array.isArray(value)) {
      value.forEach((item: unknown, index) =>
        pending.push({ value: item, parent: visit, segment: index }),
      );
    } else if (isPlainObject(value)) {
      for (const [key, member] of Object.entries(value)) {
        if (key === "__proto__")
          issues.push({
            path: formatIssuePath([...pathOf(visit), key]),
            message: "the name __proto__ is reserved",
          });
        else pending.push({ value: member, parent: visit, segment: key });
      }
    }
  }
  return issues;
}

/** The names declared in a section: empty when it is absent, null when it is malformed (the schema reports that). */
function namesIn(section: unknown): ReadonlySet<string> | null {
  if (section === undefined) return new Set();
  return isPlainObject(section) ? new Set(Object.keys(section)) : null;
}

/**
 * References between sections, checked on the decoded value rather than the schema's output so
 * they are reported even when an unrelated field is wrong. Anything malformed is skipped here:
 * the schema already reports it, and guessing would add noise.
 */
function crossReferenceIssues(document: unknown): ManifestIssue[] {
  if (!isPlainObject(document)) return [];
  const issues: ManifestIssue[] = [];
  const taskNames = namesIn(document.tasks);
  const workflowNames = namesIn(document.workflows);

  if (isPlainObject(document.workflows)) {
    for (const [workflowName, workflow] of Object.entries(document.workflows)) {
      if (!isPlainObject(workflow) || !isPlainObject(workflow.steps)) continue;
      const steps = Object.entries(workflow.steps).map(([name, step]) => stepInput(name, step));
      for (const problem of findWorkflowProblems(steps, taskNames ?? undefined)) {
        issues.push({
          path: formatIssuePath(["workflows", workflowName, "steps", ...problemSegments(problem)]),
          message: problem.message,
        });
      }
    }
  }

  if (isPlainObject(document.schedules)) {
    for (const [scheduleName, schedule] of Object.entries(document.schedules)) {
      if (!isPlainObject(schedule)) continue;
      const targets = [
        ["workflow", workflowNames],
        ["task", taskNames],
      ] as const;
      for (const [field, known] of targets) {
        const target = schedule[field];
        if (typeof target === "string" && known !== null && !known.has(target))
          issues.push({
            path: formatIssuePath(["schedules", scheduleName, field]),
            message: `unknown ${field} ${JSON.stringify(target)}`,
          });
      }
    }
  }
  return issues;
}

/**
 * A step as far as it is well formed. Malformed `needs` count as none: dropping edges cannot
 * invent an unknown step or a cycle, and keeping indices exact requires an all-string list.
 */
function stepInput(name: string, step: unknown): WorkflowStepInput {
  if (!isPlainObject(step)) return { name, needs: [] };
  const task = typeof step.task === "string" ? step.task : undefined;
  const needs =
    Array.isArray(step.needs) &&
    step.needs.every((need): need is string => typeof need === "string")
      ? step.needs
      : [];
  return { name, task, needs };
}

function problemSegments(problem: WorkflowProblem): (string | number)[] {
  switch (problem.kind) {
    case "unknown_task":
      return [problem.step, "task"];
    case "unknown_need":
    case "duplicate_need":
    case "self_need":
      return [problem.step, "needs", problem.index];
    case "cycle":
      return [problem.step, "needs"];
    case "duplicate_step":
      return [problem.step];
  }
}

/** Issues in path order, duplicates removed, so one document always yields one list. */
function sortIssues(issues: readonly ManifestIssue[]): ManifestIssue[] {
  const unique = new Map<string, ManifestIssue>();
  for (const issue of issues) unique.set(`${issue.path}\u0000${issue.message}`, issue);
  return [...unique.values()].sort(
    (a, b) => compareNames(a.path, b.path) || compareNames(a.message, b.message),
  );
}

function sortedEntries<Value>(record: Readonly<Record<string, Value>>): [string, Value][] {
  return Object.entries(record).sort(([a], [b]) => compareNames(a, b));
}

type NotifyDocument =
  | readonly {
      webhook?: string | undefined;
      secret?: string | undefined;
      command?: string[] | undefined;
    }[]
  | undefined;

/** `notify` in its normal form, present only when given, so every digest without one stays as it was. */
function normalizeNotify(notify: NotifyDocument): { notify?: NotifierSpec[] } {
  if (notify === undefined) return {};
  return {
    notify: notify.map((notifier): NotifierSpec =>
      notifier.command !== undefined
        ? { kind: "command", argv: [...notifier.command] }
        : { kind: "webhook", url: notifier.webhook ?? "", secret: notifier.secret ?? null },
    ),
  };
}

function normalize(document: ManifestDocument): Manifest {
  const tasks = sortedEntries(document.tasks).map(([name, task]): TaskSpec => {
    const argv = task.run === undefined ? [SHELL_PATH, "-c", task.shell ?? ""] : [...task.run];
    return {
      name,
      argv,
      shell: task.run === undefined,
      timeoutMs: task.timeout,
      env: Object.fromEntries(sortedEntries(task.env)),
      cwd: task.cwd ?? null,
      // Present only when given, so the digests of every task without one stay as they were.
      ...(task.user === undefined ? {} : { user: task.user }),
      executor: task.executor,
      pool: task.pool ?? null,
      retry: {
        max: task.retry.max,
        backoffMs: task.retry.backoff,
        idempotent: task.retry.idempotent,
      },
      ...(task.concurrency === undefined ? {} : { concurrency: task.concurrency }),
      ...normalizeNotify(task.notify),
    };
  });
  const workflows = sortedEntries(document.workflows).map(([name, workflow]): WorkflowSpec => ({
    name,
    description: workflow.description ?? null,
    // Present only when declared, so the digests of every workflow without inputs stay as they were.
    ...(workflow.inputs === undefined
      ? {}
      : {
          inputs: sortedEntries(workflow.inputs).map(
            ([inputName, declaration]): InputDeclaration => ({
              name: inputName,
              type: declaration.type,
              required: declaration.required,
              default: (declaration.default ?? null) as InputDeclaration["default"],
            }),
          ),
        }),
    steps: sortedEntries(workflow.steps).map(([stepName, step]) => ({
      name: stepName,
      task: step.task,
      needs: [...step.needs].sort(compareNames),
    })),
    ...normalizeNotify(workflow.notify),
  }));
  const schedules = sortedEntries(document.schedules).map(([name, schedule]): ScheduleSpec => ({
    name,
    cron: schedule.cron,
    timezone: schedule.timezone,
    target:
      schedule.workflow === undefined
        ? { kind: "task", name: schedule.task ?? "" }
        : { kind: "workflow", name: schedule.workflow },
    overlap: schedule.overlap,
    missed: schedule.missed,
    enabled: schedule.enabled,
    ...normalizeNotify(schedule.notify),
    ...(schedule.input === undefined
      ? {}
      : { input: schedule.input as Record<string, InputValue> }),
  }));
  return {
    package: document.package,
    description: document.description ?? null,
    tasks,
    workflows,
    schedules,
  };
}
