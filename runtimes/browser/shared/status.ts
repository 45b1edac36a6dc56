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

/**
 * Colours an element in a status's tone: the class `tone-<tone>`, and its --fg, --bg-t and
 * --line set to the tone's colours of base.css's palette (--<tone>-fg, --<tone>-bg,
 * --<tone>-line), which the badge, DAG and chart rules draw with. One mapping for every tone;
 * set through the CSSOM, which a style-src 'self' policy allows (a style attribute it would not).
 */
export function withStatusTone<E extends HTMLElement | SVGElement>(element: E, status: string): E {
  const { tone } = statusInfo(status);
  element.classList.add(`tone-${tone}`);
  element.style.setProperty("--fg", `var(--${tone}-fg)`);
  element.style.setProperty("--bg-t", `var(--${tone}-bg)`);
  element.style.setProperty("--line", `var(--${tone}-line)`);
  return element;
}

/** A badge: glyph (hidden from screen readers) and the exact status word. */
export function statusBadge(status: string, extraClass = ""): HTMLSpanElement {
  const info = statusInfo(status);
  const badge = h(
    "span",
    { class: `badge${extraClass === "" ? "" : ` ${extraClass}`}`, "data-status": status },
    h("span", { class: "glyph", "aria-hidden": "true" }, info.glyph),
    " ",
    status,
  );
  return withStatusTone(badge, status);
}
