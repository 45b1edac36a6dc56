import { QlrError } from "../errors.ts";

/**
 * Durations in a manifest are either whole milliseconds (a number) or a string of whole-number
 * components with units from largest to smallest, each at most once: `500ms`, `30s`, `5m`,
 * `2h`, `1d`, `1m30s`, `1d2h`. Decimals are rejected (write `1s500ms`, not `1.5s`) so every
 * duration is an exact integer of milliseconds and two spellings of one value are easy to see.
 */
export type DurationParseResult =
  { readonly ok: true; readonly ms: number } | { readonly ok: false; readonly reason: string };

const UNIT_MS = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1000, ms: 1 } as const;
type Unit = keyof typeof UNIT_MS;
/** Largest first: the order components must appear in. */
const UNIT_ORDER: readonly Unit[] = ["d", "h", "m", "s", "ms"];
/** `ms` is listed before `m` so the alternation never reads `5ms` as five minutes and a stray `s`. */
const COMPONENT_SOURCE = String.raw`(\d+)(ms|d|h|m|s)`;
/** Fifteen digits keep every component far inside Number.MAX_SAFE_INTEGER before multiplying. */
const MAX_COMPONENT_DIGITS = 15;
/** A duration string is short; bounding it keeps the scan trivially cheap on hostile input. */
const MAX_DURATION_TEXT_LENGTH = 64;

export function tryParseDurationMs(value: unknown): DurationParseResult {
  if (typeof value === "number") return fromNumber(value);
  if (typeof value === "string") return fromText(value);
  return {
    ok: false,
    reason: "must be whole milliseconds (a number) or a duration string such as 30s or 1m30s",
  };
}

/** Parses a duration or throws `invalid_request` naming what is wrong with it. */
export function parseDurationMs(value: number | string): number {
  const result = tryParseDurationMs(value);
  if (!result.ok)
    throw new QlrError(
      "invalid_request",
      `invalid duration ${JSON.stringify(value)}: ${result.reason}`,
    );
  return result.ms;
}

/** The shortest canonical spelling of a duration, e.g. 90_000 → "1m30s", 0 → "0ms"; used in messages. */
export function formatDurationMs(ms: number): string {
  if (!Number.isSafeInteger(ms) || ms < 0) return `${ms}ms`;
  if (ms === 0) return "0ms";
  let rest = ms;
  let text = "";
  for (const unit of UNIT_ORDER) {
    const count = Math.floor(rest / UNIT_MS[unit]);
    if (count > 0) text += `${count}${unit}`;
    rest -= count * UNIT_MS[unit];
  }
  return text;
}

function fromNumber(value: number): DurationParseResult {
  if (!Number.isFinite(value))
    return { ok: false, reason: "must be a finite number of milliseconds" };
  if (value < 0) return { ok: false, reason: "must not be negative" };
  if (!Number.isInteger(value))
    return { ok: false, reason: "must be whole milliseconds (no fractions of a millisecond)" };
  if (!Number.isSafeInteger(value)) return { ok: false, reason: "is too large" };
  return { ok: true, ms: value };
}

function fromText(text: string): DurationParseResult {
  if (text.length === 0) return { ok: false, reason: "must not be empty" };
  if (text.length > MAX_DURATION_TEXT_LENGTH)
    return { ok: false, reason: `must be at most ${MAX_DURATION_TEXT_LENGTH} characters` };
  if (text.startsWith("-")) return { ok: false, reason: "must not be negative" };
  if (text.includes("."))
    return { ok: false, reason: "must use whole numbers per unit (write 1s500ms, not 1.5s)" };
  if (/^\d+$/.test(text))
    return {
      ok: false,
      reason:
        "needs a unit (ms, s, m, h or d); a bare number of milliseconds must be a number, not a string",
    };
  let ms = 0;
  let previousUnitRank = -1;
  // A sticky expression per call: its lastIndex is the scan position, so it must not be shared.
  const component = new RegExp(COMPONENT_SOURCE, "y");
  while (component.lastIndex < text.length) {
    const match = component.exec(text);
    if (match === null)
      return {
        ok: false,
        reason: "must look like 500ms, 30s, 5m, 2h, 1d or a combination such as 1m30s",
      };
    const digits = match[1] ?? "";
    const unit = (match[2] ?? "") as Unit;
    const rank = UNIT_ORDER.indexOf(unit);
    if (rank <= previousUnitRank)
      return {
        ok: false,
        reason: "must list units from largest to smallest, each at most once (d, h, m, s, ms)",
      };
    if (digits.length > MAX_COMPONENT_DIGITS) return { ok: false, reason: "is too large" };
    previousUnitRank = rank;
    ms += Number(digits) * UNIT_MS[unit];
  }
  if (!Number.isSafeInteger(ms)) return { ok: false, reason: "is too large" };
  return { ok: true, ms };
}
