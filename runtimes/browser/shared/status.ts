/// <reference lib="dom" />
import { h } from "./dom.ts";

/**
 * Status words (exactly those of the API) with a tone for colour and a glyph, so a status is
 * never told by colour alone: the badge always carries the word itself.
 */
export type Tone = "waiting" | "active" | "ok" | "bad" | "warn" | "stopped" | "lost" | "skipped";

const INFO: Record<string, { readonly glyph: string; readonly tone: Tone }> = {
  queued: { glyph: "○", tone: "waiting" },
  pending: { glyph: "○", tone: "waiting" },
  ready: { glyph: "◔", tone: "waiting" },
  claimed: { glyph: "◔", tone: "active" },
  starting: { glyph: "◑", tone: "active" },
  dispatching: { glyph: "◑", tone: "active" },
  running: { glyph: "▶", tone: "active" },
  succeeded: { glyph: "✓", tone: "ok" },
  failed: { glyph: "✗", tone: "bad" },
  timed_out: { glyph: "◷", tone: "warn" },
  cancelled: { glyph: "⊘", tone: "stopped" },
  lost: { glyph: "?", tone: "lost" },
  skipped: { glyph: "↷", tone: "skipped" },
};

export function statusInfo(status: string): { glyph: string; tone: Tone } {
  return INFO[status] ?? { glyph: "•", tone: "waiting" };
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
