/** Section 7: the peers on the same PostgreSQL server (bench/peers.ts), and our figures against them. */
import type { BenchReport } from "./bench-report.ts";
import { LOAD_COLUMN, bold, fmt, int, pushTable, ratio, type Column } from "./markdown.ts";

export interface PeerResult {
  system: string;
  mode: string;
  jobs: number;
  settings: Record<string, unknown>;
  enqueuePerSecond: number;
  processMs: number;
  capped: boolean;
  completed: number;
  jobsPerSecond: number;
  loadAverage1m?: { before: number; after: number };
}

/** A peer's jobs/s in one mode, from section 7. */
export const peerJobsPerSecond = (
  peers: readonly PeerResult[],
  system: string,
  mode: string,
): number | undefined =>
  peers.find((entry) => entry.system === system && entry.mode === mode)?.jobsPerSecond;

/** The peers and modes our figures are compared with, as `÷ <system> <mode>` columns. */
const PEER_BASELINES = [
  ["pg-boss", "defaults"],
  ["pg-boss", "tuned"],
  ["graphile-worker", "defaults"],
  ["graphile-worker", "tuned"],
] as const;

/** Section 7, and our figures against the peers when any ran. */
export function renderPeers(report: BenchReport, parts: string[]): void {
  const peers = report.peers as unknown as PeerResult[];
  pushTable(
    parts,
    "## 7. Peers on the same PostgreSQL server (fresh database each, no-op handlers)",
    [
      ["system", (result) => `${result.system} ${report.versions.packages[result.system] ?? ""}`],
      ["mode", (result) => result.mode],
      [
        "settings",
        (result) =>
          Object.entries(result.settings)
            .map(([key, value]) => `${key} ${String(value)}`)
            .join(", "),
      ],
      ["jobs", (result) => int(result.jobs)],
      ["enqueue jobs/s (bulk)", (result) => int(result.enqueuePerSecond)],
      ["completed", (result) => int(result.completed)],
      [
        "processing s",
        (result) => `${fmt(result.processMs / 1000, 1)}${result.capped ? " (capped)" : ""}`,
      ],
      ["**jobs/s**", (result) => bold(fmt(result.jobsPerSecond, 1))],
      LOAD_COLUMN,
    ],
    peers,
  );
  if (peers.length > 0) renderPeerRatios(report, peers, parts);
}

/** Our figures of section 3 against each peer of section 7, as factors. */
function renderPeerRatios(
  report: BenchReport,
  peers: readonly PeerResult[],
  parts: string[],
): void {
  const ours = report.throughput as unknown as {
    store: string;
    profile: string;
    workflow: { perSecond: number };
    ordinary: { perSecond: number } | null;
  }[];
  const pgCluster = ours.find((result) => result.store === "pg" && result.profile === "cluster");
  const fileEdge = ours.find(
    (result) => result.store === "sqljs-file" && result.profile === "edge",
  );
  const fileCluster = ours.find(
    (result) => result.store === "sqljs-file" && result.profile === "cluster",
  );
  const figures = (
    [
      [
        "qlr pg store, cluster, ordinary runs/s (simulated executor, in-process tick)",
        pgCluster?.ordinary?.perSecond,
      ],
      ["qlr pg store, cluster, workflow steps/s", pgCluster?.workflow.perSecond],
      [
        "qlr sql.js file store (durable), cluster, workflow steps/s",
        fileCluster?.workflow.perSecond,
      ],
      ["qlr sql.js file store (durable), edge, workflow steps/s", fileEdge?.workflow.perSecond],
      [
        "qlr sql.js file store (durable), cluster, ordinary runs/s",
        fileCluster?.ordinary?.perSecond,
      ],
    ] as const
  ).flatMap(([label, value]) => (value === undefined ? [] : [{ label, value }]));
  pushTable(
    parts,
    "Ours against them (ratio = ours / theirs; ours from section 3, same run, same server):",
    [
      ["qlr figure", (figure) => figure.label],
      ["per s", (figure) => fmt(figure.value, 1)],
      ...PEER_BASELINES.map(([system, mode]): Column<{ value: number }> => [
        `÷ ${system} ${mode}`,
        (figure) => ratio(figure.value, peerJobsPerSecond(peers, system, mode)),
      ]),
    ],
    figures,
  );
}
