import { canonicalJson, type JsonValue } from "./canonical-json.ts";
import { QlrError, type QlrErrorDetail } from "./errors.ts";
import { utf8ByteLength } from "./utf8.ts";

/**
 * Run inputs: a small map of named scalar values given when a run starts (`qlr start --input`,
 * `"input"` on `POST /runs`, `input:` on a schedule), checked against the workflow's optional
 * `inputs:` declaration, stored with the run and handed to every step as environment variables.
 * The resolved input (declared defaults filled in) is part of what a run is: it never changes
 * after creation, a rerun keeps it, and an idempotency key names one input only.
 */

export type InputType = "string" | "number" | "boolean";
export type InputValue = string | number | boolean;
export type RunInput = Readonly<Record<string, InputValue>>;

export interface InputDeclaration {
  readonly name: string;
  readonly type: InputType;
  readonly required: boolean;
  /** Filled in when the run does not give the input; null: no default. */
  readonly default: InputValue | null;
}

/** Keys: environment-variable safe (`QLR_INPUT_<key>`), case kept, so no two keys share a variable. */
export const INPUT_KEY_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
/** Each key becomes one environment variable: 64 stays far under every OS's environment limit. */
export const MAX_INPUT_KEYS = 64;
/** The canonical JSON of a whole input: stored on every run row and copied into every step's environment. */
export const MAX_INPUT_BYTES = 8 * 1024;
export const INPUT_TYPES: readonly InputType[] = ["string", "number", "boolean"];

/** A lone surrogate cannot be encoded as UTF-8, so it cannot reach a process environment. */
const LONE_SURROGATE = /\p{Cs}/u;
const DECIMAL_NUMBER = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$/;

function isPlainRecord(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const prototype = Object.getPrototypeOf(value) as unknown;
  return prototype === Object.prototype || prototype === null;
}

/** Why `value` is not an acceptable input value, or null. */
export function inputValueProblem(value: unknown): string | null {
  if (typeof value === "boolean") return null;
  if (typeof value === "number") return Number.isFinite(value) ? null : "must be a finite number";
  if (typeof value === "string") {
    if (value.includes("\u0000")) return "must not contain a NUL character";
    if (LONE_SURROGATE.test(value)) return "must be valid Unicode (it holds a lone surrogate)";
    return null;
  }
  return "must be a string, a number or a boolean";
}

/**
 * A value as the declared type. Text is accepted for a number or a boolean when it spells one
 * exactly (`42`, `-1.5`, `true`, `false`): the command line has only text.
 */
function asDeclared(value: InputValue, type: InputType): InputValue | null {
  switch (type) {
    case "string":
      return typeof value === "string" ? value : null;
    case "number":
      if (typeof value === "number") return value;
      return typeof value === "string" &&
        DECIMAL_NUMBER.test(value) &&
        Number.isFinite(Number(value))
        ? Number(value)
        : null;
    case "boolean":
      if (typeof value === "boolean") return value;
      return value === "true" ? true : value === "false" ? false : null;
  }
}

function invalid(message: string, details: QlrErrorDetail[]): QlrError {
  return new QlrError("invalid_request", message, { details });
}

/**
 * Checks a run's raw input against its declarations and returns the resolved input: keys
 * sorted, declared types applied, defaults filled in. `declarations` null: nothing is declared
 * (an ordinary run, a workflow without `inputs:`) and any well-formed key is accepted as given.
 * Every problem is reported at once (`details`, path `input.<key>`); nothing is partially kept.
 */
export function resolveRunInput(
  raw: unknown,
  declarations: readonly InputDeclaration[] | null,
  path = "input",
): RunInput {
  const given = raw === undefined || raw === null ? {} : raw;
  if (!isPlainRecord(given))
    throw invalid(`${path} must be an object of key to value`, [
      { path, message: "must be an object" },
    ]);
  const details: QlrErrorDetail[] = [];
  const keys = Object.keys(given);
  if (keys.length > MAX_INPUT_KEYS)
    details.push({ path, message: `must have at most ${MAX_INPUT_KEYS} keys, got ${keys.length}` });
  const declared =
    declarations === null
      ? null
      : new Map(declarations.map((declaration) => [declaration.name, declaration]));
  const resolved: Record<string, InputValue> = {};
  for (const key of keys) {
    const value = given[key];
    if (!INPUT_KEY_PATTERN.test(key)) {
      details.push({
        path: `${path}.${key}`,
        message: `the key must match ${INPUT_KEY_PATTERN.source}`,
      });
      continue;
    }
    const problem = inputValueProblem(value);
    if (problem !== null) {
      details.push({ path: `${path}.${key}`, message: problem });
      continue;
    }
    const scalar = value as InputValue;
    if (declared === null) {
      resolved[key] = scalar;
      continue;
    }
    const declaration = declared.get(key);
    if (declaration === undefined) {
      details.push({
        path: `${path}.${key}`,
        message: `is not a declared input (declared: ${[...declared.keys()].join(", ") || "none"})`,
      });
      continue;
    }
    const typed = asDeclared(scalar, declaration.type);
    if (typed === null)
      details.push({ path: `${path}.${key}`, message: `must be a ${declaration.type}` });
    else resolved[key] = typed;
  }
  for (const declaration of declarations ?? []) {
    if (Object.hasOwn(given, declaration.name)) continue;
    if (declaration.default !== null) resolved[declaration.name] = declaration.default;
    else if (declaration.required)
      details.push({ path: `${path}.${declaration.name}`, message: "is required" });
  }
  if (details.length === 0) {
    const bytes = utf8ByteLength(canonicalJson(resolved));
    if (bytes > MAX_INPUT_BYTES)
      details.push({
        path,
        message: `must be at most ${MAX_INPUT_BYTES} bytes as canonical JSON, got ${bytes}`,
      });
  }
  if (details.length > 0) {
    const first = details[0];
    const more =
      details.length > 1
        ? ` (and ${details.length - 1} more problem${details.length > 2 ? "s" : ""})`
        : "";
    throw invalid(
      `invalid run input: ${first?.path ?? path}: ${first?.message ?? "invalid"}${more}`,
      details,
    );
  }
  return Object.fromEntries(
    Object.keys(resolved)
      .sort()
      .map((key) => [key, resolved[key] as InputValue]),
  );
}

/** Whether two resolved inputs are the same input (the idempotency key's question). */
export function sameInput(a: RunInput, b: RunInput): boolean {
  return canonicalJson(a) === canonicalJson(b);
}

/** The text a step sees for one input value: strings as they are, numbers and booleans as JSON. */
export function inputValueText(value: InputValue): string {
  return typeof value === "string" ? value : JSON.stringify(value);
}

/** Re-exported for callers that store inputs as JSON. */
export type { JsonValue };
