/// <reference lib="dom" />
import { isUnauthorized } from "../../http/client.ts";
import { h, type Child } from "../shared/dom.ts";
import { refresh, schedulePoll } from "./refresh.ts";
import { describe, LIVE_KEY, pageClient, POLL_MS, setMessage, state, TOKEN_KEY } from "./state.ts";

/** The page around the views: the connection bar, the navigation, messages and the token form. */

export const main = document.getElementById("main") as HTMLElement;
const conn = document.getElementById("conn") as HTMLElement;

export function messageBox(): Child {
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

export function dismiss(): void {
  setMessage(null);
  void refresh(false);
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

export function renderConnection(): void {
  if (state.api === null) {
    conn.replaceChildren();
    state.updatedText = null;
    return;
  }
  const liveBox = h("input", {
    type: "checkbox",
    id: "live-toggle",
    ...(state.live ? { checked: true } : {}),
  });
  liveBox.addEventListener("change", () => {
    state.live = liveBox.checked;
    localStorage.setItem(LIVE_KEY, state.live ? "on" : "off");
    renderConnection();
    schedulePoll();
    if (state.live) void refresh(false);
  });
  state.updatedText = h("span", { class: "live", id: "updated" }, "connecting…");
  conn.replaceChildren(
    h(
      "span",
      {},
      h("span", { class: `dot${state.live ? "" : " paused"}`, "aria-hidden": "true" }),
      state.updatedText,
    ),
    h("label", { class: "check", for: "live-toggle" }, liveBox, "Live refresh (2 s)"),
    h(
      "button",
      { type: "button", id: "forget-token", onclick: () => forgetToken() },
      "Forget token",
    ),
  );
}

export function stamp(): void {
  if (state.updatedText !== null)
    state.updatedText.textContent = `Connected · updated ${new Date().toISOString().slice(11, 19)}Z`;
}

export function forgetToken(): void {
  localStorage.removeItem(TOKEN_KEY);
  state.api = null;
  state.packagesCache = null;
  renderConnection();
  renderTokenForm("needed");
}

export function renderTokenForm(
  reason: "needed" | "wrong" | "rejected" | "unreachable",
  detail = "",
): void {
  if (state.pollTimer !== null) clearTimeout(state.pollTimer);
  state.pollTimer = null;
  state.lastSignature = "";
  const input = h("input", {
    type: "password",
    id: "token-input",
    name: "token",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
    "aria-describedby": "token-help",
  });
  const form = h(
    "form",
    { class: "token-form", id: "token-form", "aria-label": "Connect with the API token" },
    h("div", { class: "field" }, h("label", { for: "token-input" }, "API token"), input),
    h("button", { type: "submit", class: "primary", id: "token-submit" }, "Connect"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    void tryToken(input.value.trim());
  });
  const problem: Record<typeof reason, Child> = {
    needed: null,
    wrong: h(
      "div",
      { class: "alert", role: "alert", id: "token-problem" },
      "Wrong token: the runtime rejected it (401). Check the token file and try again.",
    ),
    rejected: h(
      "div",
      { class: "alert", role: "alert", id: "token-problem" },
      "The stored token was rejected (wrong, or the runtime's token changed). Enter the current one.",
    ),
    unreachable: h(
      "div",
      { class: "alert", role: "alert", id: "token-problem" },
      `Cannot reach the runtime: ${detail}`,
    ),
  };
  main.replaceChildren(
    h(
      "section",
      { class: "card token-card", "aria-labelledby": "token-title", "data-state": reason },
      h(
        "h1",
        { class: "view-title", id: "token-title", tabindex: "-1" },
        reason === "needed"
          ? "Token needed"
          : reason === "unreachable"
            ? "Runtime unreachable"
            : "Wrong token",
      ),
      h(
        "p",
        {},
        "Every API call of this runtime needs its bearer token. The dashboard asks for it once and keeps it in this browser (localStorage) until you choose Forget token.",
      ),
      problem[reason],
      form,
      h(
        "p",
        { class: "muted small", id: "token-help" },
        "`qlr serve` prints the token once when it creates it and keeps it in ",
        h("code", {}, "<state-dir>/token"),
        " (by default ",
        h("code", {}, ".qlr/token"),
        ").",
      ),
    ),
  );
  input.focus();
}

export async function tryToken(candidate: string): Promise<void> {
  if (candidate.length === 0) return;
  const probe = pageClient(candidate);
  try {
    await probe.packages();
  } catch (error) {
    if (isUnauthorized(error)) renderTokenForm("wrong");
    else renderTokenForm("unreachable", describe(error));
    return;
  }
  localStorage.setItem(TOKEN_KEY, candidate);
  state.api = probe;
  renderConnection();
  await refresh(true);
}
