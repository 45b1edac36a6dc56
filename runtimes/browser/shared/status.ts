/// <reference lib="dom" />
import { h } from "./dom.ts";

/**
 * Status words (exactly those of the API) with a tone for colour and a glyph, so a status is
 * never told by colour alone: the badge always carries the word itself.
 */
export type Tone = "waiting" | "active" | "ok" | "bad" | "warn" | "stopped" | "lost" | "skipped";

/** Each tone with the statuses it colours and their glyphs. */
const GLYPHS_BY_TONE: Readonly<Record<Tone, Readonly<Record<string, string>>>> = {
  waiting: { queued: "○", pending: "○", ready: "◔" },
  active: { claimed: "◔", starting: "◑", dispatching: "◑", running: "▶" },
  ok: { succeeded: "✓" },
  bad: { failed: "✗" },
  warn: { timed_out: "◷" },
  stopped: { cancelled: "⊘" },
  lost: { lost: "?" },
  skipped: { skipped: "↷" },
};

const INFO = new Map<string, { readonly glyph: string; readonly tone: Tone }>(
  (Object.keys(GLYPHS_BY_TONE) as Tone[]).flatMap((tone) =>
    Object.entries(GLYPHS_BY_TONE[tone]).map(
      ([status, glyph]) => [status, { glyph, tone }] as const,
    ),
  ),
);

export function statusInfo(status: string): { glyph: string; tone: Tone } {
  return INFO.get(status) ?? { glyph: "•", tone: "waiting" };
}

/** A badge: glyph (hidden from screen readers) and the exact status word. */
export function statusBadge(status: string, extraClass = ""): HTMLSpanElement {
  const info = statusInfo(status);
  return h(
    "span",
    {
      class: `badge tone-${info.tone}${extraClass === "" ? "" : ` ${extraClass}`}`,
      "data-status": status,
    },
    h("span", { class: "glyph", "aria-hidden": "true" }, info.glyph),
    " ",
    status,
  );
}
