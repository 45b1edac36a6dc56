/// <reference lib="dom" />
import { isUnauthorized } from "../../http/client.ts";
import { h, replaceKeepingFocus } from "../shared/dom.ts";
import { viewHandlers } from "./actions.ts";
import { main, markNav, messageBox, stamp } from "./page.ts";
import { renderConnection, renderTokenForm } from "./shell.ts";
import { describe, POLL_MS, state, TOKEN_KEY, type BuiltView, type Loop } from "./state.ts";
import { overviewView } from "./views/overview.ts";
import { packagesView } from "./views/packages.ts";
import { runView } from "./views/run.ts";
import { runsView } from "./views/runs.ts";

/**
 * The refresh loop: build the current view, re-draw it only when its signature changed, poll
 * again. It is the one place that wires the page: it hands itself (`loop`) to the connection
 * bar and the token form, and the actions bound to it (`handlers`) to the views, so calls run
 * down from here and nothing below imports this file.
 */

export const loop: Loop = { refresh, schedulePoll };
const handlers = viewHandlers(loop);

export async function refresh(routeChanged: boolean): Promise<void> {
  if (state.api === null) return;
  const client = state.api;
  if (routeChanged) {
    state.viewSerial += 1;
    state.lastSignature = "";
    markNav();
  }
  const serial = state.viewSerial;
  let built: BuiltView;
  try {
    built =
      state.route.view === "overview"
        ? await overviewView(client, serial, handlers)
        : state.route.view === "runs"
          ? await runsView(client, state.route, serial, handlers)
          : state.route.view === "run"
            ? await runView(client, state.route, serial, handlers)
            : await packagesView(client, serial, handlers);
  } catch (error) {
    if (isUnauthorized(error)) {
      localStorage.removeItem(TOKEN_KEY);
      state.api = null;
      renderConnection(loop);
      renderTokenForm(loop, "rejected");
      return;
    }
    if (serial !== state.viewSerial) return;
    state.connectionProblem = describe(error);
    state.lastSignature = "";
    const existing = main.querySelector("#connection-problem");
    if (routeChanged || main.querySelector(".view-title") === null)
      replaceKeepingFocus(
        main,
        h("h1", { class: "view-title", tabindex: "-1" }, "Dashboard"),
        messageBox(handlers.dismissMessage),
      );
    else if (existing === null)
      main
        .querySelector(".view-title")
        ?.after(
          h(
            "div",
            { class: "alert", role: "alert", id: "connection-problem" },
            `Could not refresh: ${state.connectionProblem}. Retrying every ${POLL_MS / 1000} s.`,
          ),
        );
    else
      existing.textContent = `Could not refresh: ${state.connectionProblem}. Retrying every ${POLL_MS / 1000} s.`;
    return;
  } finally {
    schedulePoll();
  }
  if (built === null || serial !== state.viewSerial || state.api !== client) return;
  if (state.connectionProblem !== null) {
    state.connectionProblem = null;
    state.lastSignature = "";
  }
  stamp();
  if (built.signature === state.lastSignature) return;
  state.lastSignature = built.signature;
  replaceKeepingFocus(main, built.render());
  // Focus follows navigation inside the page; the first view of a fresh load leaves it alone.
  if (routeChanged && state.navigated) {
    const title = main.querySelector<HTMLElement>(".view-title");
    title?.focus({ preventScroll: true });
    if (state.route.view === "run" && state.route.step !== null)
      document.getElementById("log-section")?.scrollIntoView({ block: "nearest" });
  }
}

export function schedulePoll(): void {
  if (state.pollTimer !== null) clearTimeout(state.pollTimer);
  state.pollTimer = null;
  if (!state.live || state.api === null) return;
  state.pollTimer = setTimeout(() => {
    state.pollTimer = null;
    if (document.hidden) return schedulePoll();
    void refresh(false);
  }, POLL_MS);
}
