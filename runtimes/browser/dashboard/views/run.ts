/// <reference lib="dom" />
import { TERMINAL_RUN_STATUSES } from "../../../../src/model.ts";
import { ApiError, type QlrClient } from "../../../http/client.ts";
import type { AttemptView, RunDetail } from "../../../http/contract.ts";
import { renderDag, type DagStep } from "../../shared/dag.ts";
import { card, dataTable, h } from "../../shared/dom.ts";
import { formatDuration, formatTime } from "../../shared/format.ts";
import { statusBadge } from "../../shared/status.ts";
import { runHref, stepHref, type Route } from "../router.ts";
import { messageBox } from "../page.ts";
import { loadLiveLog, renderLiveLog } from "../live-log.ts";
import { loadRunNotifications, renderRunNotifications } from "./run-notifications.ts";
import { state, type BuiltView, type ViewHandlers } from "../state.ts";

/** A JSON value on one line, cut to `width` characters ("—" for none): outputs and inputs in tables. */
export function briefJson(value: unknown, width = 80): string {
  if (value === null || value === undefined) return "—";
  const text = JSON.stringify(value);
  return text.length <= width ? text : `${text.slice(0, width - 1)}…`;
}

/** `#/runs/<id>[/steps/<name>]`: one run with its graph, steps, attempts and a step's log. */

export function attemptExit(attempt: AttemptView): string {
  if (attempt.exitCode !== null) return `exit ${attempt.exitCode}`;
  if (attempt.signal !== null) return attempt.signal;
  return "—";
}

export function dagSteps(detail: RunDetail): DagStep[] {
  if (detail.run.kind === "workflow")
    return detail.steps.map((step) => ({
      name: step.name,
      task: step.task,
      needs: step.needs,
      status: step.status,
      attemptCount: step.attemptCount,
    }));
  const last = detail.attempts.at(-1);
  return [
    {
      name: detail.run.target,
      task: detail.run.target,
      needs: [],
      status: last?.status ?? detail.run.status,
      attemptCount: detail.attempts.length,
    },
  ];
}

export async function runView(
  client: QlrClient,
  view: Extract<Route, { view: "run" }>,
  serial: number,
  handlers: ViewHandlers,
): Promise<BuiltView> {
  let detail: RunDetail;
  try {
    detail = await client.run(view.id);
  } catch (error) {
    if (error instanceof ApiError && (error.status === 404 || error.status === 400)) {
      return {
        signature: `missing:${view.id}`,
        render: () => [
          h("p", { class: "crumbs" }, h("a", { href: "#/runs" }, "← All runs")),
          h("h1", { class: "view-title", tabindex: "-1" }, "Run not found"),
          h("p", {}, `There is no run ${view.id}.`),
        ],
      };
    }
    throw error;
  }
  if (view.step !== null) await loadLiveLog(client, detail, view.step);
  const notifications = await loadRunNotifications(client, view.id);
  if (serial !== state.viewSerial) return null;
  const { run, steps, attempts } = detail;
  const terminal = TERMINAL_RUN_STATUSES.has(run.status);
  const nowMs = Date.now();
  const stepName = new Map(steps.map((step) => [step.id, step.name]));
  const signature = JSON.stringify({
    detail,
    notifications,
    log:
      view.step === null
        ? null
        : {
            key: state.logState?.key,
            version: state.logState?.version,
            note: state.logState?.note,
          },
    message: state.message,
    tick: terminal ? 0 : nowMs,
  });
  const cancel = h(
    "button",
    {
      type: "button",
      class: "danger",
      id: "cancel-run",
      "data-key": "cancel-run",
      ...(terminal || run.cancelRequestedAtMs !== null ? { disabled: true } : {}),
    },
    run.cancelRequestedAtMs !== null && !terminal ? "Cancelling…" : "Cancel run",
  );
  cancel.addEventListener("click", () => void handlers.cancelRun(run.id, cancel));
  const again = h(
    "button",
    {
      type: "button",
      id: "start-again",
      "data-key": "start-again",
      onclick: () =>
        void handlers.startRun(
          run.package,
          run.kind === "workflow" ? "workflow" : "task",
          run.target,
        ),
    },
    "Start again",
  );
  const selected = view.step;
  return {
    signature,
    render: () => [
      h("p", { class: "crumbs" }, h("a", { href: "#/runs" }, "← All runs")),
      h(
        "h1",
        { class: "view-title", tabindex: "-1", id: "run-title" },
        `${run.package}/${run.target}`,
        h("span", { id: "run-status" }, statusBadge(run.status, "large")),
      ),
      messageBox(handlers.dismissMessage),
      typeof detail.waiting === "string"
        ? h("p", { class: "muted", id: "run-waiting" }, detail.waiting)
        : null,
      h(
        "section",
        { class: "card", "aria-label": "Run" },
        h(
          "div",
          { class: "card-head" },
          h(
            "dl",
            { class: "meta" },
            h("dt", {}, "Run id"),
            h("dd", { class: "mono", id: "run-id" }, run.id),
            h("dt", {}, "Kind"),
            h(
              "dd",
              {},
              run.kind === "workflow" ? `workflow ${run.target}` : `task ${run.target}`,
              ` · package ${run.package} generation ${run.generation}`,
            ),
            h("dt", {}, "Created"),
            h("dd", { class: "num" }, formatTime(run.createdAtMs)),
            h("dt", {}, "Finished"),
            h(
              "dd",
              { class: "num" },
              run.finishedAtMs === null
                ? `not yet (${formatDuration(nowMs - run.createdAtMs)} so far)`
                : `${formatTime(run.finishedAtMs)} (took ${formatDuration(run.finishedAtMs - run.createdAtMs)})`,
            ),
            run.cancelRequestedAtMs === null
              ? null
              : [
                  h("dt", {}, "Cancel requested"),
                  h(
                    "dd",
                    { class: "num", id: "run-cancel" },
                    formatTime(run.cancelRequestedAtMs),
                    run.cancelReason === null
                      ? null
                      : h(
                          "span",
                          { id: "run-cancel-reason", "data-reason": run.cancelReason },
                          run.cancelReason === "shutdown"
                            ? " by the runtime shutting down"
                            : " by a user",
                        ),
                  ),
                ],
            run.scheduleName === null
              ? null
              : [h("dt", {}, "Schedule"), h("dd", {}, run.scheduleName)],
            run.idempotencyKey === null
              ? null
              : [h("dt", {}, "Idempotency key"), h("dd", { class: "mono" }, run.idempotencyKey)],
            Object.keys(run.input).length === 0
              ? null
              : [
                  h("dt", {}, "Input"),
                  h("dd", { class: "mono", id: "run-input" }, JSON.stringify(run.input)),
                ],
            run.rerunOf === null
              ? null
              : [
                  h("dt", {}, "Rerun of"),
                  h(
                    "dd",
                    { class: "mono" },
                    h("a", { href: runHref(run.rerunOf), id: "rerun-of" }, run.rerunOf),
                  ),
                ],
          ),
          h("span", { class: "spacer" }),
          h(
            "div",
            { class: "button-row" },
            cancel,
            again,
            terminal
              ? h(
                  "button",
                  {
                    type: "button",
                    id: "rerun",
                    "data-key": "rerun",
                    onclick: () => void handlers.rerunRun(run.id, false),
                  },
                  "Rerun",
                )
              : null,
            terminal && run.status !== "succeeded"
              ? h(
                  "button",
                  {
                    type: "button",
                    id: "rerun-failed",
                    "data-key": "rerun-failed",
                    onclick: () => void handlers.rerunRun(run.id, true),
                  },
                  "Rerun failed steps",
                )
              : null,
          ),
        ),
      ),
      h(
        "section",
        { class: "card", "aria-labelledby": "dag-title" },
        h(
          "h2",
          { class: "section-title", id: "dag-title" },
          run.kind === "workflow" ? "Workflow graph" : "Task",
        ),
        h(
          "div",
          { class: "dag-frame", id: "dag" },
          renderDag(dagSteps(detail), {
            label: `Steps of run ${run.id} and their dependencies; select a step to see its log`,
            href: (name) => stepHref(run.id, name),
            selected,
            minScale: 0.8,
          }),
        ),
        h(
          "p",
          { class: "muted small" },
          "Arrows point from a step to the steps that need it. Select a step to see its log.",
        ),
      ),
      run.kind === "workflow"
        ? card(
            "Steps",
            "steps-title",
            dataTable(
              { id: "steps-table" },
              [
                "Step",
                { label: "Task", class: "hide-narrow" },
                { label: "Needs", class: "hide-narrow" },
                "Status",
                "Attempts",
                { label: "Started", class: "hide-narrow" },
                "Finished",
                "Output",
                "Log",
              ],
              h(
                "tbody",
                {},
                steps.map((step) =>
                  h(
                    "tr",
                    { "data-step": step.name, "data-status": step.status },
                    h("th", { scope: "row" }, step.name),
                    h("td", { class: "hide-narrow" }, step.task),
                    h(
                      "td",
                      { class: "hide-narrow" },
                      step.needs.length === 0 ? "—" : step.needs.join(", "),
                    ),
                    h(
                      "td",
                      {},
                      statusBadge(step.status),
                      typeof step.waiting === "string"
                        ? h(
                            "div",
                            { class: "muted small", "data-waiting": step.name },
                            step.waiting,
                          )
                        : null,
                    ),
                    h("td", { class: "num" }, String(step.attemptCount)),
                    h("td", { class: "num hide-narrow" }, formatTime(step.startedAtMs)),
                    h("td", { class: "num" }, formatTime(step.finishedAtMs)),
                    h("td", { class: "mono", "data-output": step.name }, briefJson(step.output)),
                    h(
                      "td",
                      {},
                      h(
                        "a",
                        {
                          href: stepHref(run.id, step.name),
                          "data-key": `log-${step.name}`,
                          "aria-label": `Log of step ${step.name}`,
                          ...(selected === step.name ? { "aria-current": "true" } : {}),
                        },
                        "View log",
                      ),
                    ),
                  ),
                ),
              ),
            ),
          )
        : null,
      card(
        "Attempts",
        "attempts-title",
        attempts.length === 0
          ? h("p", { class: "empty" }, "No attempt yet.")
          : dataTable(
              { id: "attempts-table" },
              [
                "#",
                "Step",
                "Status",
                "Executor",
                "PID",
                "Started",
                "Finished",
                "Exit",
                "Stop reason",
                "Output",
                "Error",
              ],
              h(
                "tbody",
                {},
                attempts.map((attempt) =>
                  h(
                    "tr",
                    {
                      "data-attempt": attempt.id,
                      "data-pid": attempt.pid ?? "",
                      "data-status": attempt.status,
                    },
                    h("td", { class: "num" }, String(attempt.number)),
                    h(
                      "td",
                      {},
                      attempt.stepRunId === null
                        ? run.target
                        : (stepName.get(attempt.stepRunId) ?? "?"),
                    ),
                    h("td", {}, statusBadge(attempt.status)),
                    h("td", {}, attempt.executor),
                    h(
                      "td",
                      { class: "num mono" },
                      attempt.pid === null ? "—" : String(attempt.pid),
                    ),
                    h("td", { class: "num" }, formatTime(attempt.startedAtMs)),
                    h("td", { class: "num" }, formatTime(attempt.finishedAtMs)),
                    h("td", { class: "num mono" }, attemptExit(attempt)),
                    h("td", {}, attempt.stopReason ?? "—"),
                    h("td", { class: "mono" }, briefJson(attempt.output)),
                    h("td", { class: "error" }, attempt.error ?? ""),
                  ),
                ),
              ),
            ),
      ),
      renderRunNotifications(notifications),
      selected === null
        ? null
        : h(
            "section",
            { class: "card", "aria-labelledby": "log-title", id: "log-section" },
            h(
              "div",
              { class: "log-head" },
              h(
                "h2",
                { class: "section-title", id: "log-title" },
                `Log of ${run.kind === "workflow" ? "step" : "task"} ${selected}`,
              ),
              h("span", { class: "muted small" }, "latest attempt, stdout then stderr, live"),
              h("span", { class: "spacer" }),
              h(
                "button",
                {
                  type: "button",
                  id: "refresh-log",
                  "data-key": "refresh-log",
                  onclick: () => void handlers.reloadLog(),
                },
                "Reload log",
              ),
              h(
                "a",
                { href: runHref(run.id), class: "button", "data-key": "close-log" },
                "Close log",
              ),
            ),
            renderLiveLog(run.id, selected),
          ),
    ],
  };
}
