/// <reference lib="dom" />
import type { PackageDetailView, RuntimeInfo } from "../../../http/contract.ts";
import { h, type Child } from "../../shared/dom.ts";
import { formatDuration } from "../../shared/format.ts";
import type { ViewHandlers } from "../state.ts";

/** Pieces more than one view draws. */

export function retentionNote(info: RuntimeInfo): Child {
  if (info.retention === null) return null;
  const { horizonMs, maxRuns } = info.retention;
  return h(
    "p",
    { class: "muted small", id: "retention-note" },
    `Finished runs are kept for ${formatDuration(horizonMs)} and at most the newest ${maxRuns.toLocaleString("en")}; older ones are purged with their logs. An idempotency key answers the same run for as long.`,
  );
}

export function startButtons(
  details: readonly PackageDetailView[],
  compact: boolean,
  handlers: ViewHandlers,
): Child {
  if (details.length === 0)
    return h(
      "p",
      { class: "muted" },
      "No package is applied yet. Apply one with ",
      h("code", {}, "qlr apply FILE"),
      " or ",
      h("code", {}, "qlr serve --apply FILE"),
      ".",
    );
  return h(
    "div",
    { class: "start-groups" },
    details.map((detail) => {
      const name = detail.package.package;
      return h(
        "div",
        { class: "start-group", role: "group", "aria-label": `Start runs of package ${name}` },
        h("span", { class: "pkg" }, name),
        detail.workflows.map((workflow) =>
          h(
            "button",
            {
              type: "button",
              class: "primary",
              "data-key": `start-${name}-w-${workflow.name}`,
              "data-start": `${name}/${workflow.name}`,
              "data-kind": "workflow",
              onclick: () => void handlers.startRun(name, "workflow", workflow.name),
            },
            `Start ${workflow.name}`,
            compact ? null : h("span", { class: "kind" }, `${workflow.steps.length} steps`),
          ),
        ),
        detail.tasks.map((task) =>
          h(
            "button",
            {
              type: "button",
              "data-key": `start-${name}-t-${task.name}`,
              "data-start": `${name}/${task.name}`,
              "data-kind": "task",
              onclick: () => void handlers.startRun(name, "task", task.name),
            },
            `Run task ${task.name}`,
          ),
        ),
      );
    }),
  );
}
