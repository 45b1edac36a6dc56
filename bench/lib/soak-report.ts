/**
 * bench/results/soak.json, soak.md and soak.svg: the long-life bench (bench/soak.ts). The SVG
 * is written by hand (no charting dependency): three panels over simulated days (database
 * MiB, state dir on disk MiB, RSS MiB), one line per retention variant, the day retention
 * caught up marked in each.
 */
import type { SoakDay } from "../soak.ts";

export interface SoakSimulatedResult {
  readonly label: string;
  readonly profile: string;
  readonly days: number;
  readonly schedules: number;
  readonly runsPerDay: number;
  readonly sampleEveryHours: number;
  readonly retention: {
    readonly horizon: string;
    readonly horizonDay: number;
    readonly maxRuns: number;
  };
  readonly ticks: number;
  readonly schedulesFired: number;
  readonly expectedFires: number;
  readonly missedFires: number;
  readonly skippedOverlaps: number;
  readonly stageErrors: number;
  readonly firstStageError: string | null;
  readonly wallS: number;
  readonly perDay: readonly SoakDay[];
  readonly flatness: Record<string, unknown>;
  readonly loadAverage1m?: { before: number; after: number };
}

export interface SoakServeResult {
  readonly schedules: number;
  readonly cron: string;
  readonly retention: string;
  readonly retentionRuns: number;
  readonly durationS: number;
  readonly sampleS: number;
  readonly runsAtEnd: Record<string, number> | null;
  readonly runsPurgedAtEnd: number | null;
  readonly runsStartedTotal: number | null;
  readonly secondHalf: {
    fromS: number;
    samples: number;
    rssSlopeMiBPerHour: number;
    vmHwmSlopeMiBPerHour: number;
    stateDirSlopeMiBPerHour: number;
    rssMinMiB: number;
    rssMaxMiB: number;
  };
  readonly rssMiB: { first: number | null; last: number | null; vmHwmLast: number | null };
  readonly stateDirMiB: { first: number | null; last: number | null; max: number };
  readonly load1m: { before: number; after: number; max: number };
  readonly loadAverage1m?: { before: number; after: number };
}

export interface SoakReport {
  readonly generatedAt: string;
  readonly scale: "quick" | "default";
  /** QLR_BENCH_SOAK_* settings over the scale's own, as given. */
  readonly overrides?: Record<string, string>;
  readonly machine: {
    cpuModel: string;
    cores: number;
    memoryGiB: number;
    kernel: string;
    dataFileSystem: string;
  };
  readonly node: string;
  readonly simulated: SoakSimulatedResult[];
  readonly serve: SoakServeResult | null;
  readonly failures: { label: string; error: string }[];
}

const fmt = (value: number | null | undefined, digits = 1): string =>
  value === null || value === undefined || !Number.isFinite(value) ? "–" : value.toFixed(digits);

function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const line = (cells: readonly string[]): string => `| ${cells.join(" | ")} |`;
  return [line(header), line(header.map(() => "---")), ...rows.map(line)].join("\n");
}

/** The simulated day by which retention has caught up: the horizon, or the day the count cap is reached. */
export function caughtUpDay(result: SoakSimulatedResult): number {
  return Math.min(result.retention.horizonDay, result.retention.maxRuns / result.runsPerDay);
}

export function renderSoakMarkdown(report: SoakReport, svgName = "soak.svg"): string {
  const parts: string[] = [];
  parts.push(`# qlr long-life soak (${scaleLabel(report)})`);
  parts.push(
    `Generated ${report.generatedAt}. ${report.machine.cpuModel}, ${report.machine.cores} cores, Node ${report.node}; state dir on ${report.machine.dataFileSystem}. Chart: [${svgName}](${svgName}).`,
  );
  for (const result of report.simulated) {
    parts.push(`## In process: ${result.label}`);
    parts.push(
      `${result.schedules} schedules every 5 minutes (${result.runsPerDay} runs a day), ${result.days} simulated days, ${result.profile} budgets, sql.js file store, simulated executor (1–5 s tasks). Retention ${result.retention.horizon}, at most ${result.retention.maxRuns} runs: caught up at day ${fmt(caughtUpDay(result), 2)}. ` +
        `${result.schedulesFired} fires of ${result.expectedFires} slots (missed ${result.missedFires}, skipped for overlap ${result.skippedOverlaps}), ${result.ticks} cycles, ${result.stageErrors} stage errors, ${fmt(result.wallS, 0)} s wall, load ${fmt(result.loadAverage1m?.before, 2)} → ${fmt(result.loadAverage1m?.after, 2)}.`,
    );
    parts.push(
      table(
        [
          "day",
          "runs kept",
          "purged so far",
          "database MiB",
          "free list MiB",
          "snapshot MiB",
          "journal MiB",
          "state dir MiB",
          "RSS MiB",
          "VmHWM MiB",
          "heap used MiB",
          "ArrayBuffers MiB",
          "wasm MiB",
          "purge range ms",
          "wall s",
          "load",
        ],
        result.perDay.map((day) => [
          fmt(day.day, 2),
          String(day.runsRetained),
          String(day.runsPurged),
          fmt(day.databaseMiB, 2),
          fmt(day.freelistMiB, 2),
          fmt(day.snapshotMiB, 2),
          fmt(day.journalMiB, 2),
          fmt(day.stateDirMiB, 2),
          fmt(day.rssMiB),
          fmt(day.vmHwmMiB),
          fmt(day.heapUsedMiB),
          fmt(day.arrayBuffersMiB),
          fmt(day.wasmMiB),
          fmt(day.purgeRangeMs, 2),
          fmt(day.wallS, 0),
          fmt(day.load1m, 1),
        ]),
      ),
    );
    parts.push(`After retention caught up: \`${JSON.stringify(result.flatness)}\``);
  }
  const serve = report.serve;
  if (serve !== null) {
    parts.push("## Real process: `qlr serve --profile edge`");
    parts.push(
      `${serve.schedules} schedules \`${serve.cron}\` running \`true\`, \`--retention ${serve.retention} --retention-runs ${serve.retentionRuns}\`, ${fmt(serve.durationS, 0)} s, sampled every ${fmt(serve.sampleS, 0)} s; load ${fmt(serve.load1m.before, 2)} → ${fmt(serve.load1m.after, 2)} (max ${fmt(serve.load1m.max, 2)}). ` +
        `Runs started ${serve.runsStartedTotal ?? "–"}, purged ${serve.runsPurgedAtEnd ?? "–"}, kept at the end ${serve.runsAtEnd === null ? "–" : JSON.stringify(serve.runsAtEnd)}.`,
    );
    parts.push(
      table(
        ["figure", "value"],
        [
          [
            "RSS first → last, MiB",
            `${fmt(serve.rssMiB.first)} → ${fmt(serve.rssMiB.last)} (VmHWM ${fmt(serve.rssMiB.vmHwmLast)})`,
          ],
          [
            `RSS slope over the second half (from ${fmt(serve.secondHalf.fromS, 0)} s, ${serve.secondHalf.samples} samples), MiB/h`,
            fmt(serve.secondHalf.rssSlopeMiBPerHour, 2),
          ],
          [
            "RSS min–max over the second half, MiB",
            `${fmt(serve.secondHalf.rssMinMiB)}–${fmt(serve.secondHalf.rssMaxMiB)}`,
          ],
          [
            "VmHWM slope over the second half, MiB/h",
            fmt(serve.secondHalf.vmHwmSlopeMiBPerHour, 2),
          ],
          [
            "state dir on disk first → last (max), MiB",
            `${fmt(serve.stateDirMiB.first, 2)} → ${fmt(serve.stateDirMiB.last, 2)} (${fmt(serve.stateDirMiB.max, 2)})`,
          ],
          [
            "state dir slope over the second half, MiB/h",
            fmt(serve.secondHalf.stateDirSlopeMiBPerHour, 2),
          ],
        ],
      ),
    );
  }
  if (report.failures.length > 0)
    parts.push(
      `## Failures\n\n${report.failures.map((failure) => `- ${failure.label}: ${failure.error.split("\n")[0] ?? ""}`).join("\n")}`,
    );
  return `${parts.join("\n\n")}\n`;
}

function scaleLabel(report: SoakReport): string {
  const overrides = Object.entries(report.overrides ?? {});
  return overrides.length === 0
    ? `${report.scale} scale`
    : `${report.scale} scale with ${overrides.map(([name, value]) => `${name.replace("QLR_BENCH_SOAK_", "").toLowerCase()}=${value}`).join(", ")}`;
}

/** The chart's geometry in SVG pixels: its width, each panel's height, the margins and the gap between panels. */
const CHART_PX = { width: 900, panelHeight: 210, left: 70, right: 20, top: 76, gap: 50 } as const;
const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
const escapeXml = (text: string): string =>
  text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

/** Round step for axis ticks: 1, 2 or 5 × a power of ten, about `count` ticks over `span`. */
function niceStep(span: number, count: number): number {
  const raw = span / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  const scaled = raw / power;
  return (scaled <= 1 ? 1 : scaled <= 2 ? 2 : scaled <= 5 ? 5 : 10) * power;
}

export function renderSoakSvg(report: SoakReport): string {
  const panels: {
    title: string;
    value: (day: SoakDay) => number | null;
    dashed?: (day: SoakDay) => number | null;
    dashedLabel?: string;
  }[] = [
    { title: "Database (page_count × page_size), MiB", value: (day) => day.databaseMiB },
    { title: "State dir on disk (snapshot + journal), MiB", value: (day) => day.stateDirMiB },
    {
      title: "Process RSS, MiB (dashed: VmHWM)",
      value: (day) => day.rssMiB,
      dashed: (day) => day.vmHwmMiB,
      dashedLabel: "VmHWM",
    },
  ];
  const { width, panelHeight, left, right, top, gap } = CHART_PX;
  const height = top + panels.length * (panelHeight + gap) + 10;
  const results = report.simulated;
  const maxDay = Math.max(1, ...results.flatMap((result) => result.perDay.map((day) => day.day)));
  const x = (day: number): number => left + (day / maxDay) * (width - left - right);
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
  );
  out.push(`<rect width="${width}" height="${height}" fill="#fff"/>`);
  out.push(
    `<text x="${left}" y="22" font-size="15" font-weight="bold">${escapeXml(`qlr long-life soak: ${results[0]?.schedules ?? "?"} schedules every 5 min on the sql.js file store`)}</text>`,
  );
  out.push(
    `<text x="${left}" y="40" fill="#555">${escapeXml(`${scaleLabel(report)}; ${report.machine.cores} vCPU ${report.machine.cpuModel.split(" ").slice(0, 2).join(" ")}, Node ${report.node}`)}</text>`,
  );
  results.forEach((result, index) => {
    const colour = COLOURS[index % COLOURS.length] ?? "#000";
    const lx = left + index * 330;
    out.push(
      `<line x1="${lx}" y1="58" x2="${lx + 24}" y2="58" stroke="${colour}" stroke-width="2.5"/>`,
    );
    out.push(
      `<text x="${lx + 30}" y="62">${escapeXml(`${result.label} (caught up day ${fmt(caughtUpDay(result), 2)})`)}</text>`,
    );
  });
  panels.forEach((panel, panelIndex) => {
    const y0 = top + panelIndex * (panelHeight + gap) + 20;
    const y1 = y0 + panelHeight;
    const values = results
      .flatMap((result) =>
        result.perDay.flatMap((day) => [panel.value(day), panel.dashed?.(day) ?? null]),
      )
      .filter((value): value is number => value !== null && Number.isFinite(value));
    const maxValue = Math.max(1, ...values) * 1.1;
    const y = (value: number): number => y1 - (value / maxValue) * panelHeight;
    out.push(`<text x="${left}" y="${y0 - 6}" font-weight="bold">${escapeXml(panel.title)}</text>`);
    out.push(
      `<rect x="${left}" y="${y0}" width="${width - left - right}" height="${panelHeight}" fill="none" stroke="#999"/>`,
    );
    const yStep = niceStep(maxValue, 5);
    for (let tick = 0; tick <= maxValue; tick += yStep) {
      out.push(
        `<line x1="${left}" y1="${fmt(y(tick), 1)}" x2="${width - right}" y2="${fmt(y(tick), 1)}" stroke="#eee"/>`,
      );
      out.push(
        `<text x="${left - 6}" y="${fmt(y(tick) + 4, 1)}" text-anchor="end">${fmt(tick, yStep < 1 ? 1 : 0)}</text>`,
      );
    }
    const xStep = niceStep(maxDay, 10);
    for (let tick = 0; tick <= maxDay + 1e-9; tick += xStep)
      out.push(
        `<text x="${fmt(x(tick), 1)}" y="${y1 + 15}" text-anchor="middle">${fmt(tick, xStep < 1 ? 1 : 0)}</text>`,
      );
    if (panelIndex === panels.length - 1)
      out.push(
        `<text x="${(left + width - right) / 2}" y="${y1 + 32}" text-anchor="middle">simulated day</text>`,
      );
    results.forEach((result, index) => {
      const colour = COLOURS[index % COLOURS.length] ?? "#000";
      const mark = caughtUpDay(result);
      if (mark <= maxDay) {
        out.push(
          `<line x1="${fmt(x(mark), 1)}" y1="${y0}" x2="${fmt(x(mark), 1)}" y2="${y1}" stroke="${colour}" stroke-dasharray="2,3" opacity="0.7"/>`,
        );
        if (panelIndex === 0)
          out.push(
            `<text x="${fmt(x(mark) + 4, 1)}" y="${y1 - 8 - index * 14}" fill="${colour}">${escapeXml(result.retention.maxRuns / result.runsPerDay < result.retention.horizonDay ? `count cap ${result.retention.maxRuns} reached` : `horizon ${result.retention.horizon}`)}</text>`,
          );
      }
      const line = (pick: (day: SoakDay) => number | null, dashed: boolean): void => {
        const points = [...result.perDay]
          .filter((day) => pick(day) !== null)
          .map((day) => `${fmt(x(day.day), 1)},${fmt(y(pick(day) ?? 0), 1)}`);
        if (points.length === 0) return;
        out.push(
          `<polyline points="${points.join(" ")}" fill="none" stroke="${colour}" stroke-width="${dashed ? 1.5 : 2.5}"${dashed ? ' stroke-dasharray="6,4"' : ""}/>`,
        );
        if (!dashed)
          for (const point of points)
            out.push(
              `<circle cx="${point.split(",")[0]}" cy="${point.split(",")[1]}" r="2.5" fill="${colour}"/>`,
            );
      };
      line(panel.value, false);
      if (panel.dashed !== undefined) line(panel.dashed, true);
    });
  });
  out.push("</svg>");
  return `${out.join("\n")}\n`;
}
