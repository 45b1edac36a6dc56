/// <reference lib="dom" />
import type { QlrClient } from "../../../http/client.ts";
import { dataTable, h } from "../../shared/dom.ts";
import { formatDuration, formatRelative, formatTime, shortDigest } from "../../shared/format.ts";
import { messageBox } from "../page.ts";
import { loadPackages, state, type BuiltView, type ViewHandlers } from "../state.ts";
import { startButtons } from "./parts.ts";

/** `#/packages`: every applied package with its workflows, tasks, schedules and generations. */

export async function packagesView(
  client: QlrClient,
  serial: number,
  handlers: ViewHandlers,
): Promise<BuiltView> {
  const details = await loadPackages(client, true);
  if (serial !== state.viewSerial) return null;
  const nowMs = Date.now();
  const signature = JSON.stringify({
    details,
    message: state.message,
    minute: Math.floor(nowMs / 10_000),
  });
  return {
    signature,
    render: () => [
      h("h1", { class: "view-title", tabindex: "-1" }, "Packages"),
      messageBox(handlers.dismissMessage),
      details.length === 0
        ? h("section", { class: "card" }, startButtons(details, false, handlers))
        : null,
      details.map((detail) => {
        const name = detail.package.package;
        return h(
          "section",
          { class: "card", "aria-labelledby": `pkg-${name}`, "data-package": name },
          h(
            "div",
            { class: "card-head" },
            h("h2", { id: `pkg-${name}` }, name),
            h("span", { class: "badge" }, `generation ${detail.package.generation}`),
            h(
              "span",
              { class: "muted small" },
              `updated ${formatTime(detail.package.updatedAtMs)}`,
            ),
          ),
          h(
            "div",
            { class: "pkg-sections" },
            h(
              "div",
              {},
              h("h3", {}, "Workflows"),
              detail.workflows.length === 0
                ? h("p", { class: "muted" }, "None.")
                : h(
                    "ul",
                    { class: "workflow-list" },
                    detail.workflows.map((workflow) =>
                      h(
                        "li",
                        {},
                        h("span", { class: "wf-name" }, workflow.name),
                        h(
                          "span",
                          { class: "muted small" },
                          `${workflow.steps.length} step${workflow.steps.length === 1 ? "" : "s"}${workflow.description === null ? "" : ` · ${workflow.description}`}`,
                        ),
                        h("span", { class: "spacer" }),
                        h(
                          "button",
                          {
                            type: "button",
                            class: "primary",
                            "data-key": `pstart-${name}-w-${workflow.name}`,
                            "data-start": `${name}/${workflow.name}`,
                            onclick: () => void handlers.startRun(name, "workflow", workflow.name),
                          },
                          `Start ${workflow.name}`,
                        ),
                      ),
                    ),
                  ),
              h("h3", {}, "Tasks"),
              dataTable(
                {},
                ["Task", "Executor", "Timeout", h("span", { class: "visually-hidden" }, "Actions")],
                h(
                  "tbody",
                  {},
                  detail.tasks.map((task) =>
                    h(
                      "tr",
                      {},
                      h("th", { scope: "row" }, task.name),
                      h("td", {}, task.executor),
                      h("td", { class: "num" }, formatDuration(task.timeoutMs)),
                      h(
                        "td",
                        {},
                        h(
                          "button",
                          {
                            type: "button",
                            "data-key": `pstart-${name}-t-${task.name}`,
                            "data-start": `${name}/${task.name}`,
                            onclick: () => void handlers.startRun(name, "task", task.name),
                          },
                          `Run ${task.name}`,
                        ),
                      ),
                    ),
                  ),
                ),
              ),
            ),
            h(
              "div",
              {},
              h("h3", {}, "Schedules"),
              detail.schedules.length === 0
                ? h("p", { class: "muted" }, "None.")
                : dataTable(
                    { class: "schedules" },
                    ["Schedule", "Cron", "Starts", "Next fire", "Last fire", "Overlap"],
                    h(
                      "tbody",
                      {},
                      detail.schedules.map((schedule) =>
                        h(
                          "tr",
                          { "data-schedule": schedule.name },
                          h("th", { scope: "row" }, schedule.name),
                          h(
                            "td",
                            {},
                            h("code", {}, schedule.cron),
                            h("span", { class: "muted small" }, ` ${schedule.timezone}`),
                          ),
                          h("td", {}, `${schedule.target.kind} ${schedule.target.name}`),
                          h(
                            "td",
                            { class: "num" },
                            formatTime(schedule.nextFireAtMs),
                            h("br", {}),
                            h(
                              "span",
                              { class: "muted small" },
                              formatRelative(schedule.nextFireAtMs, nowMs),
                            ),
                          ),
                          h("td", { class: "num" }, formatTime(schedule.lastFireAtMs)),
                          h(
                            "td",
                            {},
                            schedule.overlap,
                            schedule.missedFires + schedule.skippedOverlaps > 0
                              ? h(
                                  "span",
                                  { class: "muted small" },
                                  ` · ${schedule.missedFires} missed, ${schedule.skippedOverlaps} skipped`,
                                )
                              : null,
                          ),
                        ),
                      ),
                    ),
                  ),
              h("h3", {}, "Generations"),
              dataTable(
                { class: "generations" },
                ["Generation", "Manifest digest", "Applied"],
                h(
                  "tbody",
                  {},
                  detail.generations.map((generation) =>
                    h(
                      "tr",
                      {},
                      h(
                        "td",
                        { class: "num" },
                        String(generation.generation),
                        generation.generation === detail.package.generation
                          ? h("span", { class: "muted small" }, " (current)")
                          : null,
                      ),
                      h(
                        "td",
                        { class: "mono", title: generation.manifestDigest },
                        shortDigest(generation.manifestDigest),
                      ),
                      h("td", { class: "num" }, formatTime(generation.createdAtMs)),
                    ),
                  ),
                ),
              ),
            ),
          ),
        );
      }),
    ],
  };
}
