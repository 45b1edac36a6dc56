/// <reference lib="dom" />
import { h, type Child } from "../shared/dom.ts";
import { POLL_MS, state } from "./state.ts";

/**
 * The fixed parts of the page that every view and the refresh loop draw on: the main landmark,
 * the navigation's current mark, the "updated" stamp and the message box. Nothing here calls
 * back up: the one control it draws (Dismiss) gets its handler from the caller.
 */

export const main = document.getElementById("main") as HTMLElement;

export function messageBox(dismiss: () => void): Child {
  return [
    state.connectionProblem === null
      ? null
      : h(
          "div",
          { class: "alert", role: "alert", id: "connection-problem" },
          `Could not refresh: ${state.connectionProblem}. Retrying every ${POLL_MS / 1000} s.`,
        ),
    state.message === null
      ? null
      : h(
          "div",
          {
            class: state.message.kind === "error" ? "alert" : "notice",
            role: state.message.kind === "error" ? "alert" : "status",
            id: "message",
          },
          state.message.text,
          " ",
          h(
            "button",
            { type: "button", class: "linkish", "data-key": "dismiss", onclick: () => dismiss() },
            "Dismiss",
          ),
        ),
  ];
}

export function markNav(): void {
  for (const [id, view] of [
    ["nav-overview", "overview"],
    ["nav-runs", "runs"],
    ["nav-packages", "packages"],
  ] as const) {
    const link = document.getElementById(id);
    const current = state.route.view === view || (view === "runs" && state.route.view === "run");
    if (current) link?.setAttribute("aria-current", "page");
    else link?.removeAttribute("aria-current");
  }
}

export function stamp(): void {
  if (state.updatedText !== null)
    state.updatedText.textContent = `Connected · updated ${new Date().toISOString().slice(11, 19)}Z`;
}
