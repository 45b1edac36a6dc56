/// <reference lib="dom" />
/**
 * The qlr dashboard: a dependency-free page over the public HTTP API through the one client
 * (runtimes/http/client.ts). The state (state.ts), the hash routes (router.ts), the fixed parts
 * of the page (page.ts), the views (views/), the actions (actions.ts), the connection bar and
 * token form (shell.ts) and the refresh loop (refresh.ts) each have their file, and each imports
 * only files below it: the loop hands itself and the actions down as arguments. This one wires
 * the page's events and starts it.
 */
import { main } from "./page.ts";
import { loop, refresh } from "./refresh.ts";
import { parseRoute } from "./router.ts";
import { renderConnection, renderTokenForm } from "./shell.ts";
import { pageClient, state, TOKEN_KEY } from "./state.ts";

window.addEventListener("hashchange", () => {
  const next = parseRoute(location.hash);
  if (next === null) return;
  state.navigated = true;
  const sameRun = state.route.view === "run" && next.view === "run" && state.route.id === next.id;
  state.route = next;
  if (!sameRun) state.logState = null;
  if (next.view !== "runs") state.extraRuns = null;
  if (!sameRun) state.message = null;
  void refresh(true);
});

document.addEventListener("visibilitychange", () => {
  if (!document.hidden && state.live) void refresh(false);
});

document.getElementById("skip-link")?.addEventListener("click", (event) => {
  event.preventDefault();
  main.focus();
});

const stored = localStorage.getItem(TOKEN_KEY);
if (stored === null || stored.length === 0) {
  renderTokenForm(loop, "needed");
} else {
  state.api = pageClient(stored);
  renderConnection(loop);
  void refresh(true);
}
