/// <reference lib="dom" />
import { errorMessage } from "../../../src/errors.ts";
import type { RunStatus } from "../../../src/model.ts";
import { ApiError, isUnauthorized, QlrClient } from "../../http/client.ts";
import type { Child } from "../shared/dom.ts";
import type { LogTail } from "../shared/log-tail.ts";
import type { PackageDetailView, RunView, RuntimeInfo } from "../../http/contract.ts";
import { parseRoute, type Route } from "./router.ts";

/**
 * The dashboard's state: one object the views read and the actions change. The token is kept
 * in localStorage; the current view is polled every 2 s while live refresh is on and re-drawn
 * only when its data (its signature) changed.
 */

export const TOKEN_KEY = "qlr.dashboard.token";
export const LIVE_KEY = "qlr.dashboard.live";
export const POLL_MS = 2_000;
/** Runs per page of the runs list. */
export const RUNS_PAGE = 50;

export interface Message {
  readonly kind: "error" | "info";
  readonly text: string;
}

/** The live log of one step's latest attempt (live-log.ts). */
export interface LogState {
  /** `runId/step`. */
  readonly key: string;
  readonly attemptId: string | null;
  readonly stdout: LogTail;
  readonly stderr: LogTail;
  note: string | null;
  /** Bumped on every change: the view's signature, instead of the text itself. */
  version: number;
}

/** What one view answers: a signature of its data and how to draw it; null when another view took over. */
export type BuiltView = { readonly signature: string; readonly render: () => Child[] } | null;

/**
 * The refresh loop (refresh.ts) as the page's controls see it. It is handed down as an
 * argument, so the connection bar, the token form and the actions re-draw the view without
 * importing the loop that draws them.
 */
export interface Loop {
  readonly refresh: (routeChanged: boolean) => Promise<void>;
  readonly schedulePoll: () => void;
}

/**
 * What a view's buttons do: the actions (actions.ts) bound to the loop, handed to every view
 * by refresh.ts, so a view draws its controls without importing what they do.
 */
export interface ViewHandlers {
  readonly startRun: (
    packageName: string,
    kind: "workflow" | "task",
    name: string,
  ) => Promise<void>;
  readonly rerunRun: (id: string, fromFailed: boolean) => Promise<void>;
  readonly cancelRun: (id: string, button: HTMLButtonElement) => Promise<void>;
  readonly loadMore: (client: QlrClient, status: RunStatus | null, cursor: string) => Promise<void>;
  readonly reloadLog: () => void;
  readonly dismissMessage: () => void;
}

export interface DashboardState {
  api: QlrClient | null;
  route: Route;
  live: boolean;
  message: Message | null;
  lastSignature: string;
  viewSerial: number;
  pollTimer: ReturnType<typeof setTimeout> | null;
  updatedText: HTMLElement | null;
  packagesCache: PackageDetailView[] | null;
  /** `GET /info`, read once per page: the retention does not change while a runtime runs. */
  infoCache: RuntimeInfo | null;
  extraRuns: { status: RunStatus | null; runs: RunView[]; nextCursor: string | null } | null;
  logState: LogState | null;
  busy: boolean;
  navigated: boolean;
  /** The last refresh failed (runtime down, network): shown until a refresh succeeds. */
  connectionProblem: string | null;
}

export const state: DashboardState = {
  api: null,
  route: parseRoute(location.hash) ?? { view: "runs", status: null },
  live: localStorage.getItem(LIVE_KEY) !== "off",
  message: null,
  lastSignature: "",
  viewSerial: 0,
  pollTimer: null,
  updatedText: null,
  packagesCache: null,
  infoCache: null,
  extraRuns: null,
  logState: null,
  busy: false,
  navigated: false,
  connectionProblem: null,
};

export function setMessage(next: Message | null): void {
  state.message = next;
  state.lastSignature = "";
}

export function describe(error: unknown): string {
  if (error instanceof ApiError) return `${error.code}: ${error.message}`;
  return errorMessage(error);
}

/** A client of the runtime serving this page: paths relative to it, so it also works behind a proxy under a prefix. */
export function pageClient(token: string): QlrClient {
  return new QlrClient({ baseUrl: "", token, cache: "no-store" });
}

/** The runtime's info; a runtime without `GET /info` (an older version) shows no retention note. */
export async function loadInfo(client: QlrClient): Promise<RuntimeInfo> {
  if (state.infoCache !== null) return state.infoCache;
  try {
    state.infoCache = await client.info();
  } catch (error) {
    if (isUnauthorized(error)) throw error;
    state.infoCache = { profile: null, retention: null };
  }
  return state.infoCache;
}

export async function loadPackages(
  client: QlrClient,
  force: boolean,
): Promise<PackageDetailView[]> {
  if (state.packagesCache !== null && !force) return state.packagesCache;
  const { packages } = await client.packages();
  const details = await Promise.all(packages.map((head) => client.packageDetail(head.package)));
  state.packagesCache = details.sort((a, b) => a.package.package.localeCompare(b.package.package));
  return state.packagesCache;
}
