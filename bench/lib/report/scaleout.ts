/** Section 7b: group commit and scale-out on one PostgreSQL server (bench/scaleout.ts). */
import type { BenchReport } from "./bench-report.ts";
import { columnTable, fmt, int, load, ratio } from "./markdown.ts";
import { peerJobsPerSecond, type PeerResult } from "./peers.ts";

interface ScaleoutPhase {
  runs: number;
  completedRuns: number;
  units: number;
  finished: boolean;
  wallMs: number;
  perSecond: number;
  ticks: number;
  stageErrors: number;
  transactions: number;
  bodyRuns: number;
  failedTransactions: number;
  statements: number;
  statementsPerUnit: number;
  transactionsPerUnit: number;
  pagesCommitted: number;
  pagesItemByItem: number;
  meanPageSize: number;
}

interface ScaleoutResult {
  ordinaryRuns: number;
  workflowRuns: number;
  loadAverage1m?: { before: number; after: number };
  variants: {
    mode: string;
    coordinators: number;
    ordinary: ScaleoutPhase | null;
    workflow: ScaleoutPhase | null;
  }[];
}

/** Section 7b's text: its heading, what the ratios compare, and the table of every variant. */
function scaleoutSection(result: ScaleoutResult, peers: readonly PeerResult[]): string {
  const rows = result.variants.flatMap((variant) =>
    [
      {
        figure: "ordinary runs/s",
        phase: variant.ordinary,
        versus: peerJobsPerSecond(peers, "pg-boss", "tuned"),
      },
      {
        figure: "workflow steps/s",
        phase: variant.workflow,
        versus: peerJobsPerSecond(peers, "graphile-worker", "defaults"),
      },
    ].flatMap(({ phase, ...row }) => (phase === null ? [] : [{ ...row, phase, variant }])),
  );
  return [
    `## 7b. Group commit and scale-out: in-process coordinators on the same PostgreSQL server (${result.ordinaryRuns} ordinary runs, then ${result.workflowRuns} diamond runs; cluster profile, database clock, simulated executor on the wall clock)`,
    `Ratios: ordinary runs/s ÷ pg-boss tuned jobs/s, workflow steps/s ÷ graphile-worker defaults jobs/s (section 7, same run, same server). Retries: bodies run again by serializable retries / transactions that failed. Load 1m before→after: ${load(result.loadAverage1m)}.`,
    columnTable(
      [
        ["mode", ({ variant }) => variant.mode],
        ["coordinators", ({ variant }) => String(variant.coordinators)],
        ["figure", ({ figure }) => figure],
        [
          "per s",
          ({ phase }) =>
            `**${fmt(phase.perSecond, 1)}**${phase.finished ? "" : ` (capped: ${int(phase.completedRuns)}/${int(phase.runs)} runs)`}`,
        ],
        ["÷ peer", ({ phase, versus }) => ratio(phase.perSecond, versus)],
        ["transactions per unit", ({ phase }) => fmt(phase.transactionsPerUnit, 2)],
        ["statements per unit", ({ phase }) => fmt(phase.statementsPerUnit, 1)],
        [
          "retries / failed",
          ({ phase }) =>
            `${int(phase.bodyRuns - phase.transactions - phase.failedTransactions)} / ${int(phase.failedTransactions)}`,
        ],
        [
          "pages one commit / item by item",
          ({ phase }) =>
            `${int(phase.pagesCommitted)} / ${int(phase.pagesItemByItem)} (mean ${fmt(phase.meanPageSize, 1)})`,
        ],
        ["stage errors", ({ phase }) => int(phase.stageErrors)],
      ],
      rows,
    ),
  ].join("\n\n");
}

/** Section 7b, when the scale-out bench ran. */
export function renderScaleout(report: BenchReport, parts: string[]): void {
  const scaleout = (report.scaleout ?? null) as unknown as ScaleoutResult | null;
  if (scaleout !== null)
    parts.push(scaleoutSection(scaleout, report.peers as unknown as PeerResult[]));
}
