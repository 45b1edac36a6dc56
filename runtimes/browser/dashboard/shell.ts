/// <reference lib="dom" />
import { isUnauthorized } from "../../http/client.ts";
import { h, type Child } from "../shared/dom.ts";
import { main } from "./page.ts";
import { describe, LIVE_KEY, pageClient, state, TOKEN_KEY, type Loop } from "./state.ts";

/**
 * The connection bar (live refresh, forget the token) and the token form. What they change is
 * re-drawn through the loop they are given: they do not import it.
 */

const conn = document.getElementById("conn") as HTMLElement;

export function renderConnection(loop: Loop): void {
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
    renderConnection(loop);
    loop.schedulePoll();
    if (state.live) void loop.refresh(false);
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
      { type: "button", id: "forget-token", onclick: () => forgetToken(loop) },
      "Forget token",
    ),
  );
}

export function forgetToken(loop: Loop): void {
  localStorage.removeItem(TOKEN_KEY);
  state.api = null;
  state.packagesCache = null;
  renderConnection(loop);
  renderTokenForm(loop, "needed");
}

export function renderTokenForm(
  loop: Loop,
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
    void tryToken(loop, input.value.trim());
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

export async function tryToken(loop: Loop, candidate: string): Promise<void> {
  if (candidate.length === 0) return;
  const probe = pageClient(candidate);
  try {
    await probe.packages();
  } catch (error) {
    if (isUnauthorized(error)) renderTokenForm(loop, "wrong");
    else renderTokenForm(loop, "unreachable", describe(error));
    return;
  }
  localStorage.setItem(TOKEN_KEY, candidate);
  state.api = probe;
  renderConnection(loop);
  await loop.refresh(true);
}
