/// <reference lib="dom" />
import type { QlrClient } from "../../../http/client.ts";
import type { Overview } from "../../../../src/overview.ts";
import { h, s, type Child } from "../../shared/dom.ts";
import { formatDuration, formatRelative, formatTime } from "../../shared/format.ts";
import { statusBadge, withStatusTone } from "../../shared/status.ts";
import { runHref } from "../router.ts";
import { messageBox } from "../page.ts";
import { state, type BuiltView, type ViewHandlers } from "../state.ts";

/**
 * `#/` and `#/overview`: runs per hour by status and workflow durations over the last 24 hours
 * as charts drawn here in SVG (no library, no CDN), the failures of the last 24 hours with
 * links, what runs now and the next schedule fires. One bounded request: `GET /overview`.
 */

const HOURS = 24;
const HOUR_MS = 3_600_000;
const CHART_WIDTH = 720;
const CHART_HEIGHT = 180;
const PAD = { left: 44, right: 8, top: 8, bottom: 22 };
const STATUS_ORDER = ["succeeded", "failed", "timed_out", "lost", "cancelled"] as const;
/**
 * Line colours for workflows, told apart by the legend's names too (never by colour alone); the
 * legend's swatches take the same colours from dashboard.css (`.swatch.series-N`), since the
 * page's content security policy allows no inline style.
 */
const SERIES_COLOURS = ["#2563eb", "#b45309", "#7c3aed", "#0f766e", "#be123c", "#4d7c0f"];

function hourLabel(ms: number): string {
  return new Date(ms).toISOString().slice(11, 13);
}

function axes(
  hours: readonly number[],
  maxValue: number,
  format: (value: number) => string,
): Child[] {
  const plotHeight = CHART_HEIGHT - PAD.top - PAD.bottom;
  const step = (CHART_WIDTH - PAD.left - PAD.right) / hours.length;
  return [
    s("line", {
      x1: PAD.left,
      y1: CHART_HEIGHT - PAD.bottom,
      x2: CHART_WIDTH - PAD.right,
      y2: CHART_HEIGHT - PAD.bottom,
      class: "axis",
    }),
    s(
      "text",
      { x: PAD.left - 4, y: PAD.top + 10, "text-anchor": "end", class: "tick" },
      format(maxValue),
    ),
    s(
      "text",
      { x: PAD.left - 4, y: PAD.top + plotHeight, "text-anchor": "end", class: "tick" },
      format(0),
    ),
    ...hours.flatMap((hour, index) =>
      index % 3 === 0
        ? [
            s(
              "text",
              {
                x: PAD.left + step * index + step / 2,
                y: CHART_HEIGHT - 6,
                "text-anchor": "middle",
                class: "tick",
              },
              hourLabel(hour),
            ),
          ]
        : [],
    ),
  ];
}

/** Stacked bars: ended runs per hour, one segment per status. */
function runsChart(overview: Overview, hours: readonly number[]): Child {
  const perHour = new Map<number, Map<string, number>>();
  for (const row of overview.runsPerHour)
    perHour.set(
      row.hourStartMs,
      (perHour.get(row.hourStartMs) ?? new Map<string, number>()).set(row.status, row.count),
    );
  const totals = hours.map((hour) =>
    [...(perHour.get(hour)?.values() ?? [])].reduce((sum, count) => sum + count, 0),
  );
  const maxTotal = Math.max(1, ...totals);
  const plotHeight = CHART_HEIGHT - PAD.top - PAD.bottom;
  const step = (CHART_WIDTH - PAD.left - PAD.right) / hours.length;
  const bars = hours.flatMap((hour, index) => {
    let y = CHART_HEIGHT - PAD.bottom;
    return STATUS_ORDER.flatMap((status) => {
      const count = perHour.get(hour)?.get(status) ?? 0;
      if (count === 0) return [];
      const height = (count / maxTotal) * plotHeight;
      y -= height;
      return [
        withStatusTone(
          s(
            "rect",
            {
              x: PAD.left + step * index + 1,
              y,
              width: Math.max(1, step - 2),
              height,
              class: "bar",
              "data-status": status,
              "data-count": count,
            },
            s("title", {}, `${hourLabel(hour)}:00 ${count} ${status}`),
          ),
          status,
        ),
      ];
    });
  });
  const total = totals.reduce((sum, count) => sum + count, 0);
  return h(
    "figure",
    { class: "chart", id: "runs-chart", "data-total": String(total) },
    s(
      "svg",
      {
        viewBox: `0 0 ${CHART_WIDTH} ${CHART_HEIGHT}`,
        role: "img",
        "aria-label": `Ended runs per hour over the last ${HOURS} hours: ${total} in all`,
      },
      ...axes(hours, maxTotal, String),
      ...bars,
    ),
    h(
      "figcaption",
      { class: "legend" },
      STATUS_ORDER.map((status) => h("span", {}, statusBadge(status))),
    ),
  );
}

/** Lines: average duration per workflow per hour. */
function durationChart(overview: Overview, hours: readonly number[]): Child {
  const workflows = [
    ...new Set(overview.durations.map((row) => `${row.package}/${row.workflow}`)),
  ].sort();
  if (workflows.length === 0)
    return h(
      "p",
      { class: "empty", id: "duration-chart" },
      "No workflow run ended in this window.",
    );
  const maxMs = Math.max(1, ...overview.durations.map((row) => row.avgDurationMs));
  const plotHeight = CHART_HEIGHT - PAD.top - PAD.bottom;
  const step = (CHART_WIDTH - PAD.left - PAD.right) / hours.length;
  const lines = workflows.map((name, index) => {
    const points = overview.durations
      .filter((row) => `${row.package}/${row.workflow}` === name)
      .map((row) => ({
        x: PAD.left + step * Math.round((row.hourStartMs - (hours[0] ?? 0)) / HOUR_MS) + step / 2,
        y: CHART_HEIGHT - PAD.bottom - (row.avgDurationMs / maxMs) * plotHeight,
        row,
      }));
    const colour = SERIES_COLOURS[index % SERIES_COLOURS.length] ?? "#2563eb";
    return s(
      "g",
      { class: "series", "data-workflow": name },
      s("polyline", {
        points: points.map((point) => `${point.x.toFixed(1)},${point.y.toFixed(1)}`).join(" "),
        fill: "none",
        stroke: colour,
        "stroke-width": 2,
      }),
      ...points.map((point) =>
        s(
          "circle",
          { cx: point.x, cy: point.y, r: 3, fill: colour },
          s(
            "title",
            {},
            `${name} ${hourLabel(point.row.hourStartMs)}:00: ${point.row.runs} runs, average ${formatDuration(point.row.avgDurationMs)}, longest ${formatDuration(point.row.maxDurationMs)}`,
          ),
        ),
      ),
    );
  });
  return h(
    "figure",
    { class: "chart", id: "duration-chart" },
    s(
      "svg",
      {
        viewBox: `0 0 ${CHART_WIDTH} ${CHART_HEIGHT}`,
        role: "img",
        "aria-label": `Average duration per workflow and hour, ${workflows.length} workflows`,
      },
      ...axes(hours, maxMs, (value) => formatDuration(value)),
      ...lines,
    ),
    h(
      "figcaption",
      { class: "legend" },
      workflows.map((name, index) =>
        h(
          "span",
          { class: "series-name" },
          h("span", {
            class: `swatch series-${index % SERIES_COLOURS.length}`,
            "aria-hidden": "true",
          }),
          name,
        ),
      ),
    ),
  );
}

function runList(id: string, runs: Overview["active"], empty: string, nowMs: number): Child {
  if (runs.length === 0) return h("p", { class: "empty", id }, empty);
  return h(
    "ul",
    { class: "run-list", id },
    runs.map((run) =>
      h(
        "li",
        {},
        statusBadge(run.status),
        " ",
        h("a", { href: runHref(run.id) }, `${run.package}/${run.target}`),
        " ",
        h(
          "span",
          { class: "muted small" },
          run.finishedAtMs === null
            ? `started ${formatRelative(run.createdAtMs, nowMs)}`
            : `ended ${formatRelative(run.finishedAtMs, nowMs)}`,
        ),
      ),
    ),
  );
}

export async function overviewView(
  client: QlrClient,
  serial: number,
  handlers: ViewHandlers,
): Promise<BuiltView> {
  const { overview } = await client.overview(HOURS);
  if (serial !== state.viewSerial) return null;
  const hours = Array.from(
    { length: overview.hours },
    (_, index) => overview.sinceMs + index * HOUR_MS,
  );
  const nowMs = overview.nowMs;
  const signature = JSON.stringify({
    overview: { ...overview, nowMs: Math.floor(nowMs / 10_000) },
    message: state.message,
  });
  return {
    signature,
    render: () => [
      h("h1", { class: "view-title", tabindex: "-1" }, "Overview"),
      messageBox(handlers.dismissMessage),
      h(
        "section",
        { class: "card", "aria-labelledby": "runs-chart-title" },
        h("h2", { id: "runs-chart-title" }, `Runs per hour, last ${HOURS} hours`),
        runsChart(overview, hours),
      ),
      h(
        "section",
        { class: "card", "aria-labelledby": "duration-chart-title" },
        h("h2", { id: "duration-chart-title" }, "Workflow duration per hour (average)"),
        durationChart(overview, hours),
      ),
      h(
        "section",
        { class: "card", "aria-labelledby": "failures-title" },
        h("h2", { id: "failures-title" }, "Failures, last 24 hours"),
        runList("failures", overview.recentFailures, "No failures in the last 24 hours.", nowMs),
      ),
      h(
        "section",
        { class: "card", "aria-labelledby": "active-title" },
        h("h2", { id: "active-title" }, `Running now (${overview.activeCount})`),
        runList("active", overview.active, "Nothing is running.", nowMs),
      ),
      h(
        "section",
        { class: "card", "aria-labelledby": "fires-title" },
        h("h2", { id: "fires-title" }, "Next schedule fires"),
        overview.nextFires.length === 0
          ? h("p", { class: "empty", id: "fires" }, "No schedule is due to fire.")
          : h(
              "ul",
              { class: "run-list", id: "fires" },
              overview.nextFires.map((fire) =>
                h(
                  "li",
                  {},
                  `${fire.package}/${fire.name}`,
                  " ",
                  h(
                    "span",
                    { class: "muted small" },
                    `${formatTime(fire.nextFireAtMs)} (${formatRelative(fire.nextFireAtMs, nowMs)})`,
                  ),
                ),
              ),
            ),
      ),
    ],
  };
}
