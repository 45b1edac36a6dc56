/// <reference lib="dom" />
import { TERMINAL_RUN_STATUSES, RUN_STATUSES } from "../../../../src/model.ts";
import type { QlrClient } from "../../../http/client.ts";
import type { RunView } from "../../../http/contract.ts";
import { card, dataTable, h, type Child } from "../../shared/dom.ts";
import { formatDuration, formatTime } from "../../shared/format.ts";
import { statusBadge } from "../../shared/status.ts";
import { runHref, type Route } from "../router.ts";
import { messageBox } from "../page.ts";
import {
  loadInfo,
  loadPackages,
  RUNS_PAGE,
  state,
  type BuiltView,
  type ViewHandlers,
} from "../state.ts";
import { retentionNote, startButtons } from "./parts.ts";

/** `#/runs`: start buttons and the runs, newest first, filtered by status and paged by cursor. */

/** The table says which filter it shows (`data-filter`), so a reader never mistakes the previous list for the new one. */
export function runsTable(
  runs: readonly RunView[],
  nowMs: number,
  statusFilter: string | null,
): Child {
  const filter = statusFilter ?? "";
  if (runs.length === 0)
    return h("p", { class: "empty", id: "runs-empty", "data-filter": filter }, "No runs match.");
  return dataTable(
    { id: "runs-table", "data-filter": filter },
    [
      "Run",
      "Status",
      { label: "Kind", class: "hide-narrow" },
      "Created",
      { label: "Duration", class: "hide-narrow" },
    ],
    h(
      "tbody",
      {},
      runs.map((run) =>
        h(
          "tr",
          { "data-run": run.id, "data-status": run.status },
          h(
            "td",
            {},
            h(
              "a",
              { href: runHref(run.id), class: "run-target", "data-key": `run-${run.id}` },
              `${run.package}/${run.target}`,
            ),
            h("span", { class: "run-id" }, run.id),
          ),
          h("td", {}, statusBadge(run.status)),
          h(
            "td",
            { class: "hide-narrow" },
            run.kind === "workflow" ? "workflow" : "task",
            run.scheduleName === null
              ? null
              : h("span", { class: "muted small" }, ` · schedule ${run.scheduleName}`),
          ),
          h("td", { class: "num" }, formatTime(run.createdAtMs)),
          h(
            "td",
            { class: "num hide-narrow" },
            formatDuration((run.finishedAtMs ?? nowMs) - run.createdAtMs),
            run.finishedAtMs === null ? h("span", { class: "muted small" }, " so far") : null,
          ),
        ),
      ),
    ),
    h("caption", { class: "visually-hidden" }, "Runs, newest first"),
  );
}

export async function runsView(
  client: QlrClient,
  view: Extract<Route, { view: "runs" }>,
  serial: number,
  handlers: ViewHandlers,
): Promise<BuiltView> {
  const [page, packages, info] = await Promise.all([
    client.listRuns({ status: view.status, limit: RUNS_PAGE }),
    loadPackages(client, false),
    loadInfo(client),
  ]);
  if (serial !== state.viewSerial) return null;
  const more =
    state.extraRuns !== null && state.extraRuns.status === view.status ? state.extraRuns : null;
  const seen = new Set(page.runs.map((run) => run.id));
  const runs = [...page.runs, ...(more?.runs.filter((run) => !seen.has(run.id)) ?? [])];
  const nextCursor = more === null ? page.nextCursor : more.nextCursor;
  const nowMs = Date.now();
  const anyLive = runs.some((run) => !TERMINAL_RUN_STATUSES.has(run.status));
  const signature = JSON.stringify({
    runs,
    nextCursor,
    view,
    packages: packages.map((detail) => [
      detail.package,
      detail.workflows.map((w) => w.name),
      detail.tasks.map((t) => t.name),
    ]),
    message: state.message,
    tick: anyLive ? nowMs : 0,
  });
  const select = h(
    "select",
    { id: "status-filter", "data-key": "status-filter" },
    h("option", { value: "" }, "All statuses"),
    RUN_STATUSES.map((status) =>
      h("option", { value: status, ...(status === view.status ? { selected: true } : {}) }, status),
    ),
  );
  select.addEventListener("change", () => {
    state.extraRuns = null;
    location.hash =
      select.value === "" ? "#/runs" : `#/runs?status=${encodeURIComponent(select.value)}`;
  });
  return {
    signature,
    render: () => [
      h("h1", { class: "view-title", tabindex: "-1" }, "Runs"),
      messageBox(handlers.dismissMessage),
      card("Start a run", "start-title", startButtons(packages, true, handlers)),
      h(
        "section",
        { class: "card", "aria-labelledby": "runs-title" },
        h(
          "div",
          { class: "card-head" },
          h(
            "h2",
            { id: "runs-title" },
            view.status === null ? "Recent runs" : `Runs ${view.status}`,
          ),
          h("span", { class: "spacer" }),
          h("div", { class: "filters" }, h("label", { for: "status-filter" }, "Status"), select),
        ),
        runsTable(runs, nowMs, view.status),
        retentionNote(info),
        nextCursor === null
          ? null
          : h(
              "p",
              { class: "button-row" },
              h(
                "button",
                {
                  type: "button",
                  id: "load-more",
                  "data-key": "load-more",
                  onclick: () => void handlers.loadMore(client, view.status, nextCursor),
                },
                "Load older runs",
              ),
            ),
      ),
    ],
  };
}
