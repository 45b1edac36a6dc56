/// <reference lib="dom" />
/**
 * The qlr dashboard: a dependency-free page over the public HTTP API. Routes live in the
 * hash (`#/runs?status=running`, `#/runs/<id>`, `#/runs/<id>/steps/<name>`, `#/packages`),
 * so every view is a link. The token is asked once and kept in localStorage; the current
 * view is polled every 2 s while live refresh is on and re-drawn only when its data changed,
 * keeping keyboard focus where it was.
 */
import { errorMessage } from "../../../src/errors.ts";
import { renderDag, type DagStep } from "../shared/dag.ts";
import { h, replaceKeepingFocus, type Child } from "../shared/dom.ts";
import { formatDuration, formatRelative, formatTime, shortDigest } from "../shared/format.ts";
import { statusBadge, TERMINAL_RUN_STATUSES } from "../shared/status.ts";
import { Api, ApiFailure, Unauthorized, type AttemptView, type PackageDetail, type RunDetail, type RunView, type RuntimeInfo } from "./api.ts";

const TOKEN_KEY = "qlr.dashboard.token";
const LIVE_KEY = "qlr.dashboard.live";
const POLL_MS = 2_000;
const RUN_STATUSES = ["queued", "dispatching", "running", "succeeded", "failed", "timed_out", "cancelled", "lost"] as const;
const SETTLED_STEP = new Set(["succeeded", "failed", "timed_out", "cancelled", "skipped"]);

type Route = { readonly view: "runs"; readonly status: string | null } | { readonly view: "run"; readonly id: string; readonly step: string | null } | { readonly view: "packages" };

function parseRoute(hash: string): Route | null {
  const path = hash.replace(/^#/, "");
  if (path === "" || path === "/") return { view: "runs", status: null };
  if (!path.startsWith("/")) return null;
  const [pathname = "", query = ""] = path.split("?", 2);
  let parts: string[];
  try {
    parts = pathname.split("/").filter((part) => part.length > 0).map(decodeURIComponent);
  } catch {
    return null;
  }
  if (parts[0] === "packages") return { view: "packages" };
  if (parts[0] === "runs" && parts[1] !== undefined) return { view: "run", id: parts[1], step: parts[2] === "steps" && parts[3] !== undefined ? parts[3] : null };
  if (parts[0] === "runs") {
    const status = new URLSearchParams(query).get("status");
    return { view: "runs", status: status !== null && (RUN_STATUSES as readonly string[]).includes(status) ? status : null };
  }
  return null;
}

const runHref = (id: string): string => `#/runs/${encodeURIComponent(id)}`;
const stepHref = (id: string, step: string): string => `#/runs/${encodeURIComponent(id)}/steps/${encodeURIComponent(step)}`;

interface Message {
  readonly kind: "error" | "info";
  readonly text: string;
}

interface LogState {
  readonly key: string;
  text: string | null;
  note: string | null;
  loadedStatus: string | null;
}

const main = document.getElementById("main") as HTMLElement;
const conn = document.getElementById("conn") as HTMLElement;

let api: Api | null = null;
let route: Route = parseRoute(location.hash) ?? { view: "runs", status: null };
let live = localStorage.getItem(LIVE_KEY) !== "off";
let message: Message | null = null;
let lastSignature = "";
let viewSerial = 0;
let pollTimer: ReturnType<typeof setTimeout> | null = null;
let updatedText: HTMLElement | null = null;
let packagesCache: PackageDetail[] | null = null;
/** `GET /info`, read once per page: the retention does not change while a runtime runs. */
let infoCache: RuntimeInfo | null = null;
let extraRuns: { status: string | null; runs: RunView[]; nextCursor: string | null } | null = null;
let logState: LogState | null = null;
let busy = false;
let navigated = false;
/** The last refresh failed (runtime down, network): shown until a refresh succeeds. */
let connectionProblem: string | null = null;

// ---------------------------------------------------------------- shell

function setMessage(next: Message | null): void {
  message = next;
  lastSignature = "";
}

function describe(error: unknown): string {
  if (error instanceof ApiFailure) return `${error.code}: ${error.message}`;
  return errorMessage(error);
}

function messageBox(): Child {
  return [
    connectionProblem === null ? null : h("div", { class: "alert", role: "alert", id: "connection-problem" }, `Could not refresh: ${connectionProblem}. Retrying every ${POLL_MS / 1000} s.`),
    message === null ? null : h("div", { class: message.kind === "error" ? "alert" : "notice", role: message.kind === "error" ? "alert" : "status", id: "message" }, message.text, " ", h("button", { type: "button", class: "linkish", "data-key": "dismiss", onclick: () => dismiss() }, "Dismiss")),
  ];
}

function dismiss(): void {
  setMessage(null);
  void refresh(false);
}

function markNav(): void {
  for (const [id, view] of [
    ["nav-runs", "runs"],
    ["nav-packages", "packages"],
  ] as const) {
    const link = document.getElementById(id);
    const current = route.view === view || (view === "runs" && route.view === "run");
    if (current) link?.setAttribute("aria-current", "page");
    else link?.removeAttribute("aria-current");
  }
}

function renderConnection(): void {
  if (api === null) {
    conn.replaceChildren();
    updatedText = null;
    return;
  }
  const liveBox = h("input", { type: "checkbox", id: "live-toggle", ...(live ? { checked: true } : {}) });
  liveBox.addEventListener("change", () => {
    live = liveBox.checked;
    localStorage.setItem(LIVE_KEY, live ? "on" : "off");
    renderConnection();
    schedulePoll();
    if (live) void refresh(false);
  });
  updatedText = h("span", { class: "live", id: "updated" }, "connecting…");
  conn.replaceChildren(
    h("span", {}, h("span", { class: `dot${live ? "" : " paused"}`, "aria-hidden": "true" }), updatedText),
    h("label", { class: "check", for: "live-toggle" }, liveBox, "Live refresh (2 s)"),
    h("button", { type: "button", id: "forget-token", onclick: () => forgetToken() }, "Forget token"),
  );
}

function stamp(): void {
  if (updatedText !== null) updatedText.textContent = `Connected · updated ${new Date().toISOString().slice(11, 19)}Z`;
}

function forgetToken(): void {
  localStorage.removeItem(TOKEN_KEY);
  api = null;
  packagesCache = null;
  renderConnection();
  renderTokenForm("needed");
}

// ---------------------------------------------------------------- token

function renderTokenForm(reason: "needed" | "wrong" | "rejected" | "unreachable", detail = ""): void {
  if (pollTimer !== null) clearTimeout(pollTimer);
  pollTimer = null;
  lastSignature = "";
  const input = h("input", { type: "password", id: "token-input", name: "token", autocomplete: "off", spellcheck: "false", required: true, "aria-describedby": "token-help" });
  const form = h(
    "form",
    { class: "token-form", id: "token-form", "aria-label": "Connect with the API token" },
    h("div", { class: "field" }, h("label", { for: "token-input" }, "API token"), input),
    h("button", { type: "submit", class: "primary", id: "token-submit" }, "Connect"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    void tryToken(input.value.trim());
  });
  const problem: Record<typeof reason, Child> = {
    needed: null,
    wrong: h("div", { class: "alert", role: "alert", id: "token-problem" }, "Wrong token: the runtime rejected it (401). Check the token file and try again."),
    rejected: h("div", { class: "alert", role: "alert", id: "token-problem" }, "The stored token was rejected (wrong, or the runtime's token changed). Enter the current one."),
    unreachable: h("div", { class: "alert", role: "alert", id: "token-problem" }, `Cannot reach the runtime: ${detail}`),
  };
  main.replaceChildren(
    h(
      "section",
      { class: "card token-card", "aria-labelledby": "token-title", "data-state": reason },
      h("h1", { class: "view-title", id: "token-title", tabindex: "-1" }, reason === "needed" ? "Token needed" : reason === "unreachable" ? "Runtime unreachable" : "Wrong token"),
      h("p", {}, "Every API call of this runtime needs its bearer token. The dashboard asks for it once and keeps it in this browser (localStorage) until you choose Forget token."),
      problem[reason],
      form,
      h("p", { class: "muted small", id: "token-help" }, "`qlr serve` prints the token once when it creates it and keeps it in ", h("code", {}, "<state-dir>/token"), " (by default ", h("code", {}, ".qlr/token"), ")."),
    ),
  );
  input.focus();
}

async function tryToken(candidate: string): Promise<void> {
  if (candidate.length === 0) return;
  const probe = new Api(candidate);
  try {
    await probe.packages();
  } catch (error) {
    if (error instanceof Unauthorized) renderTokenForm("wrong");
    else renderTokenForm("unreachable", describe(error));
    return;
  }
  localStorage.setItem(TOKEN_KEY, candidate);
  api = probe;
  renderConnection();
  await refresh(true);
}

// ---------------------------------------------------------------- data loading

/** The runtime's info; a runtime without `GET /info` (an older version) shows no retention note. */
async function loadInfo(client: Api): Promise<RuntimeInfo> {
  if (infoCache !== null) return infoCache;
  try {
    infoCache = await client.info();
  } catch (error) {
    if (error instanceof Unauthorized) throw error;
    infoCache = { profile: null, retention: null };
  }
  return infoCache;
}

/** Where the runs list ends: finished runs past the horizon are purged and answer 404. */
function retentionNote(info: RuntimeInfo): Child {
  if (info.retention === null) return null;
  const { horizonMs, maxRuns } = info.retention;
  return h(
    "p",
    { class: "muted small", id: "retention-note" },
    `Finished runs are kept for ${formatDuration(horizonMs)} and at most the newest ${maxRuns.toLocaleString("en")}; older ones are purged with their logs. An idempotency key answers the same run for as long.`,
  );
}

async function loadPackages(client: Api, force: boolean): Promise<PackageDetail[]> {
  if (packagesCache !== null && !force) return packagesCache;
  const { packages } = await client.packages();
  const details = await Promise.all(packages.map((head) => client.packageDetail(head.package)));
  packagesCache = details.sort((a, b) => a.package.package.localeCompare(b.package.package));
  return packagesCache;
}

async function startRun(packageName: string, kind: "workflow" | "task", name: string): Promise<void> {
  if (api === null || busy) return;
  busy = true;
  try {
    const { run } = await api.start(packageName, { kind, name });
    setMessage({ kind: "info", text: `Started ${packageName}/${name}: run ${run.id}.` });
    location.hash = runHref(run.id);
  } catch (error) {
    if (error instanceof Unauthorized) return renderTokenForm("rejected");
    setMessage({ kind: "error", text: `Could not start ${packageName}/${name}: ${describe(error)}` });
    await refresh(false);
  } finally {
    busy = false;
  }
}

async function cancelRun(id: string, button: HTMLButtonElement): Promise<void> {
  if (api === null) return;
  button.disabled = true;
  button.textContent = "Cancelling…";
  try {
    await api.cancel(id);
    setMessage({ kind: "info", text: `Cancel requested for run ${id}: its processes are being stopped.` });
  } catch (error) {
    if (error instanceof Unauthorized) return renderTokenForm("rejected");
    setMessage({ kind: "error", text: `Could not cancel: ${describe(error)}` });
  }
  await refresh(false);
}

// ---------------------------------------------------------------- views

function startButtons(details: readonly PackageDetail[], compact: boolean): Child {
  if (details.length === 0) return h("p", { class: "muted" }, "No package is applied yet. Apply one with ", h("code", {}, "qlr apply FILE"), " or ", h("code", {}, "qlr serve --apply FILE"), ".");
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
          h("button", { type: "button", class: "primary", "data-key": `start-${name}-w-${workflow.name}`, "data-start": `${name}/${workflow.name}`, "data-kind": "workflow", onclick: () => void startRun(name, "workflow", workflow.name) }, `Start ${workflow.name}`, compact ? null : h("span", { class: "kind" }, `${workflow.steps.length} steps`)),
        ),
        detail.tasks.map((task) => h("button", { type: "button", "data-key": `start-${name}-t-${task.name}`, "data-start": `${name}/${task.name}`, "data-kind": "task", onclick: () => void startRun(name, "task", task.name) }, `Run task ${task.name}`)),
      );
    }),
  );
}

function runsTable(runs: readonly RunView[], nowMs: number): Child {
  if (runs.length === 0) return h("p", { class: "empty" }, "No runs match.");
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { id: "runs-table" },
      h("caption", { class: "visually-hidden" }, "Runs, newest first"),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Run"), h("th", { scope: "col" }, "Status"), h("th", { scope: "col", class: "hide-narrow" }, "Kind"), h("th", { scope: "col" }, "Created"), h("th", { scope: "col", class: "hide-narrow" }, "Duration"))),
      h(
        "tbody",
        {},
        runs.map((run) =>
          h(
            "tr",
            { "data-run": run.id, "data-status": run.status },
            h("td", {}, h("a", { href: runHref(run.id), class: "run-target", "data-key": `run-${run.id}` }, `${run.package}/${run.target}`), h("span", { class: "run-id" }, run.id)),
            h("td", {}, statusBadge(run.status)),
            h("td", { class: "hide-narrow" }, run.kind === "workflow" ? "workflow" : "task", run.scheduleName === null ? null : h("span", { class: "muted small" }, ` · schedule ${run.scheduleName}`)),
            h("td", { class: "num" }, formatTime(run.createdAtMs)),
            h("td", { class: "num hide-narrow" }, formatDuration((run.finishedAtMs ?? nowMs) - run.createdAtMs), run.finishedAtMs === null ? h("span", { class: "muted small" }, " so far") : null),
          ),
        ),
      ),
    ),
  );
}

async function runsView(client: Api, view: Extract<Route, { view: "runs" }>, serial: number): Promise<{ signature: string; render: () => Child[] } | null> {
  const [page, packages, info] = await Promise.all([client.listRuns(view.status, null), loadPackages(client, false), loadInfo(client)]);
  if (serial !== viewSerial) return null;
  const more = extraRuns !== null && extraRuns.status === view.status ? extraRuns : null;
  const seen = new Set(page.runs.map((run) => run.id));
  const runs = [...page.runs, ...(more?.runs.filter((run) => !seen.has(run.id)) ?? [])];
  const nextCursor = more === null ? page.nextCursor : more.nextCursor;
  const nowMs = Date.now();
  const anyLive = runs.some((run) => !TERMINAL_RUN_STATUSES.has(run.status));
  const signature = JSON.stringify({ runs, nextCursor, view, packages: packages.map((detail) => [detail.package, detail.workflows.map((w) => w.name), detail.tasks.map((t) => t.name)]), message, tick: anyLive ? nowMs : 0 });
  const select = h("select", { id: "status-filter", "data-key": "status-filter" }, h("option", { value: "" }, "All statuses"), RUN_STATUSES.map((status) => h("option", { value: status, ...(status === view.status ? { selected: true } : {}) }, status)));
  select.addEventListener("change", () => {
    extraRuns = null;
    location.hash = select.value === "" ? "#/runs" : `#/runs?status=${encodeURIComponent(select.value)}`;
  });
  return {
    signature,
    render: () => [
      h("h1", { class: "view-title", tabindex: "-1" }, "Runs"),
      messageBox(),
      h("section", { class: "card", "aria-labelledby": "start-title" }, h("h2", { class: "section-title", id: "start-title" }, "Start a run"), startButtons(packages, true)),
      h(
        "section",
        { class: "card", "aria-labelledby": "runs-title" },
        h(
          "div",
          { class: "card-head" },
          h("h2", { id: "runs-title" }, view.status === null ? "Recent runs" : `Runs ${view.status}`),
          h("span", { class: "spacer" }),
          h("div", { class: "filters" }, h("label", { for: "status-filter" }, "Status"), select),
        ),
        runsTable(runs, nowMs),
        retentionNote(info),
        nextCursor === null
          ? null
          : h("p", { class: "button-row" }, h("button", { type: "button", id: "load-more", "data-key": "load-more", onclick: () => void loadMore(client, view.status, nextCursor) }, "Load older runs")),
      ),
    ],
  };
}

async function loadMore(client: Api, status: string | null, cursor: string): Promise<void> {
  try {
    const page = await client.listRuns(status, cursor);
    const previous = extraRuns !== null && extraRuns.status === status ? extraRuns.runs : [];
    extraRuns = { status, runs: [...previous, ...page.runs], nextCursor: page.nextCursor };
  } catch (error) {
    setMessage({ kind: "error", text: `Could not load more runs: ${describe(error)}` });
  }
  await refresh(false);
}

function attemptExit(attempt: AttemptView): string {
  if (attempt.exitCode !== null) return `exit ${attempt.exitCode}`;
  if (attempt.signal !== null) return attempt.signal;
  return "—";
}

function dagSteps(detail: RunDetail): DagStep[] {
  if (detail.run.kind === "workflow") return detail.steps.map((step) => ({ name: step.name, task: step.task, needs: step.needs, status: step.status, attemptCount: step.attemptCount }));
  const last = detail.attempts.at(-1);
  return [{ name: detail.run.target, task: detail.run.target, needs: [], status: last?.status ?? detail.run.status, attemptCount: detail.attempts.length }];
}

async function loadLog(client: Api, detail: RunDetail, step: string): Promise<void> {
  const key = `${detail.run.id}/${step}`;
  const stepStatus = detail.run.kind === "workflow" ? (detail.steps.find((candidate) => candidate.name === step)?.status ?? "missing") : detail.run.status;
  // A settled step's log no longer changes: fetch it once more after it settled, then stop.
  if (logState !== null && logState.key === key && logState.loadedStatus !== null && SETTLED_STEP.has(logState.loadedStatus) && logState.loadedStatus === stepStatus) return;
  const next: LogState = { key, text: null, note: null, loadedStatus: stepStatus };
  try {
    next.text = await client.log(detail.run.id, step);
  } catch (error) {
    if (error instanceof Unauthorized) throw error;
    next.note = error instanceof ApiFailure && error.status === 404 ? "No log yet: the step has not started, or its process wrote nothing." : `Could not load the log: ${describe(error)}`;
  }
  logState = next;
}

async function runView(client: Api, view: Extract<Route, { view: "run" }>, serial: number): Promise<{ signature: string; render: () => Child[] } | null> {
  let detail: RunDetail;
  try {
    detail = await client.run(view.id);
  } catch (error) {
    if (error instanceof ApiFailure && (error.status === 404 || error.status === 400)) {
      return { signature: `missing:${view.id}`, render: () => [h("p", { class: "crumbs" }, h("a", { href: "#/runs" }, "← All runs")), h("h1", { class: "view-title", tabindex: "-1" }, "Run not found"), h("p", {}, `There is no run ${view.id}.`)] };
    }
    throw error;
  }
  if (view.step !== null) await loadLog(client, detail, view.step);
  if (serial !== viewSerial) return null;
  const { run, steps, attempts } = detail;
  const terminal = TERMINAL_RUN_STATUSES.has(run.status);
  const nowMs = Date.now();
  const stepName = new Map(steps.map((step) => [step.id, step.name]));
  const signature = JSON.stringify({ detail, log: view.step === null ? null : logState, message, tick: terminal ? 0 : nowMs });
  const cancel = h("button", { type: "button", class: "danger", id: "cancel-run", "data-key": "cancel-run", ...(terminal || run.cancelRequestedAtMs !== null ? { disabled: true } : {}) }, run.cancelRequestedAtMs !== null && !terminal ? "Cancelling…" : "Cancel run");
  cancel.addEventListener("click", () => void cancelRun(run.id, cancel));
  const again = h("button", { type: "button", id: "start-again", "data-key": "start-again", onclick: () => void startRun(run.package, run.kind === "workflow" ? "workflow" : "task", run.target) }, "Start again");
  const selected = view.step;
  return {
    signature,
    render: () => [
      h("p", { class: "crumbs" }, h("a", { href: "#/runs" }, "← All runs")),
      h("h1", { class: "view-title", tabindex: "-1", id: "run-title" }, `${run.package}/${run.target}`, h("span", { id: "run-status" }, statusBadge(run.status, "large"))),
      messageBox(),
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
            h("dd", {}, run.kind === "workflow" ? `workflow ${run.target}` : `task ${run.target}`, ` · package ${run.package} generation ${run.generation}`),
            h("dt", {}, "Created"),
            h("dd", { class: "num" }, formatTime(run.createdAtMs)),
            h("dt", {}, "Finished"),
            h("dd", { class: "num" }, run.finishedAtMs === null ? `not yet (${formatDuration(nowMs - run.createdAtMs)} so far)` : `${formatTime(run.finishedAtMs)} (took ${formatDuration(run.finishedAtMs - run.createdAtMs)})`),
            run.cancelRequestedAtMs === null ? null : [h("dt", {}, "Cancel requested"), h("dd", { class: "num" }, formatTime(run.cancelRequestedAtMs))],
            run.scheduleName === null ? null : [h("dt", {}, "Schedule"), h("dd", {}, run.scheduleName)],
            run.idempotencyKey === null ? null : [h("dt", {}, "Idempotency key"), h("dd", { class: "mono" }, run.idempotencyKey)],
          ),
          h("span", { class: "spacer" }),
          h("div", { class: "button-row" }, cancel, again),
        ),
      ),
      h(
        "section",
        { class: "card", "aria-labelledby": "dag-title" },
        h("h2", { class: "section-title", id: "dag-title" }, run.kind === "workflow" ? "Workflow graph" : "Task"),
        h("div", { class: "dag-frame", id: "dag" }, renderDag(dagSteps(detail), { label: `Steps of run ${run.id} and their dependencies; select a step to see its log`, href: (name) => stepHref(run.id, name), selected, minScale: 0.8 })),
        h("p", { class: "muted small" }, "Arrows point from a step to the steps that need it. Select a step to see its log."),
      ),
      run.kind === "workflow"
        ? h(
            "section",
            { class: "card", "aria-labelledby": "steps-title" },
            h("h2", { class: "section-title", id: "steps-title" }, "Steps"),
            h(
              "div",
              { class: "table-wrap" },
              h(
                "table",
                { id: "steps-table" },
                h("thead", {}, h("tr", {}, ["Step", "Task", "Needs", "Status", "Attempts", "Started", "Finished", "Log"].map((label) => h("th", { scope: "col", class: label === "Task" || label === "Needs" || label === "Started" ? "hide-narrow" : "" }, label)))),
                h(
                  "tbody",
                  {},
                  steps.map((step) =>
                    h(
                      "tr",
                      { "data-step": step.name, "data-status": step.status },
                      h("th", { scope: "row" }, step.name),
                      h("td", { class: "hide-narrow" }, step.task),
                      h("td", { class: "hide-narrow" }, step.needs.length === 0 ? "—" : step.needs.join(", ")),
                      h("td", {}, statusBadge(step.status)),
                      h("td", { class: "num" }, String(step.attemptCount)),
                      h("td", { class: "num hide-narrow" }, formatTime(step.startedAtMs)),
                      h("td", { class: "num" }, formatTime(step.finishedAtMs)),
                      h("td", {}, h("a", { href: stepHref(run.id, step.name), "data-key": `log-${step.name}`, "aria-label": `Log of step ${step.name}`, ...(selected === step.name ? { "aria-current": "true" } : {}) }, "View log")),
                    ),
                  ),
                ),
              ),
            ),
          )
        : null,
      h(
        "section",
        { class: "card", "aria-labelledby": "attempts-title" },
        h("h2", { class: "section-title", id: "attempts-title" }, "Attempts"),
        attempts.length === 0
          ? h("p", { class: "empty" }, "No attempt yet.")
          : h(
              "div",
              { class: "table-wrap" },
              h(
                "table",
                { id: "attempts-table" },
                h("thead", {}, h("tr", {}, ["#", "Step", "Status", "Executor", "PID", "Started", "Finished", "Exit", "Stop reason", "Error"].map((label) => h("th", { scope: "col" }, label)))),
                h(
                  "tbody",
                  {},
                  attempts.map((attempt) =>
                    h(
                      "tr",
                      { "data-attempt": attempt.id, "data-pid": attempt.pid ?? "", "data-status": attempt.status },
                      h("td", { class: "num" }, String(attempt.number)),
                      h("td", {}, attempt.stepRunId === null ? run.target : (stepName.get(attempt.stepRunId) ?? "?")),
                      h("td", {}, statusBadge(attempt.status)),
                      h("td", {}, attempt.executor),
                      h("td", { class: "num mono" }, attempt.pid === null ? "—" : String(attempt.pid)),
                      h("td", { class: "num" }, formatTime(attempt.startedAtMs)),
                      h("td", { class: "num" }, formatTime(attempt.finishedAtMs)),
                      h("td", { class: "num mono" }, attemptExit(attempt)),
                      h("td", {}, attempt.stopReason ?? "—"),
                      h("td", { class: "error" }, attempt.error ?? ""),
                    ),
                  ),
                ),
              ),
            ),
      ),
      selected === null
        ? null
        : h(
            "section",
            { class: "card", "aria-labelledby": "log-title", id: "log-section" },
            h(
              "div",
              { class: "log-head" },
              h("h2", { class: "section-title", id: "log-title" }, `Log of ${run.kind === "workflow" ? "step" : "task"} ${selected}`),
              h("span", { class: "muted small" }, "latest attempt, stdout then stderr"),
              h("span", { class: "spacer" }),
              h("button", { type: "button", id: "refresh-log", "data-key": "refresh-log", onclick: () => void reloadLog() }, "Reload log"),
              h("a", { href: runHref(run.id), class: "button", "data-key": "close-log" }, "Close log"),
            ),
            logState?.text !== null && logState?.text !== undefined
              ? h("pre", { class: "log", id: "log", tabindex: "0", "aria-label": `Log of ${selected}` }, logState.text.length === 0 ? "(empty)" : logState.text)
              : h("p", { class: "empty", id: "log" }, logState?.note ?? "Loading…"),
          ),
    ],
  };
}

function reloadLog(): void {
  logState = null;
  void refresh(false);
}

async function packagesView(client: Api, serial: number): Promise<{ signature: string; render: () => Child[] } | null> {
  const details = await loadPackages(client, true);
  if (serial !== viewSerial) return null;
  const nowMs = Date.now();
  const signature = JSON.stringify({ details, message, minute: Math.floor(nowMs / 10_000) });
  return {
    signature,
    render: () => [
      h("h1", { class: "view-title", tabindex: "-1" }, "Packages"),
      messageBox(),
      details.length === 0 ? h("section", { class: "card" }, startButtons(details, false)) : null,
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
            h("span", { class: "muted small" }, `updated ${formatTime(detail.package.updatedAtMs)}`),
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
                        h("span", { class: "muted small" }, `${workflow.steps.length} step${workflow.steps.length === 1 ? "" : "s"}${workflow.description === null ? "" : ` · ${workflow.description}`}`),
                        h("span", { class: "spacer" }),
                        h("button", { type: "button", class: "primary", "data-key": `pstart-${name}-w-${workflow.name}`, "data-start": `${name}/${workflow.name}`, onclick: () => void startRun(name, "workflow", workflow.name) }, `Start ${workflow.name}`),
                      ),
                    ),
                  ),
              h("h3", {}, "Tasks"),
              h(
                "div",
                { class: "table-wrap" },
                h(
                  "table",
                  {},
                  h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Task"), h("th", { scope: "col" }, "Executor"), h("th", { scope: "col" }, "Timeout"), h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Actions")))),
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
                        h("td", {}, h("button", { type: "button", "data-key": `pstart-${name}-t-${task.name}`, "data-start": `${name}/${task.name}`, onclick: () => void startRun(name, "task", task.name) }, `Run ${task.name}`)),
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
                : h(
                    "div",
                    { class: "table-wrap" },
                    h(
                      "table",
                      { class: "schedules" },
                      h("thead", {}, h("tr", {}, ["Schedule", "Cron", "Starts", "Next fire", "Last fire", "Overlap"].map((label) => h("th", { scope: "col" }, label)))),
                      h(
                        "tbody",
                        {},
                        detail.schedules.map((schedule) =>
                          h(
                            "tr",
                            { "data-schedule": schedule.name },
                            h("th", { scope: "row" }, schedule.name),
                            h("td", {}, h("code", {}, schedule.cron), h("span", { class: "muted small" }, ` ${schedule.timezone}`)),
                            h("td", {}, `${schedule.target.kind} ${schedule.target.name}`),
                            h("td", { class: "num" }, formatTime(schedule.nextFireAtMs), h("br", {}), h("span", { class: "muted small" }, formatRelative(schedule.nextFireAtMs, nowMs))),
                            h("td", { class: "num" }, formatTime(schedule.lastFireAtMs)),
                            h("td", {}, schedule.overlap, schedule.missedFires + schedule.skippedOverlaps > 0 ? h("span", { class: "muted small" }, ` · ${schedule.missedFires} missed, ${schedule.skippedOverlaps} skipped`) : null),
                          ),
                        ),
                      ),
                    ),
                  ),
              h("h3", {}, "Generations"),
              h(
                "div",
                { class: "table-wrap" },
                h(
                  "table",
                  { class: "generations" },
                  h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Generation"), h("th", { scope: "col" }, "Manifest digest"), h("th", { scope: "col" }, "Applied"))),
                  h(
                    "tbody",
                    {},
                    detail.generations.map((generation) =>
                      h(
                        "tr",
                        {},
                        h("td", { class: "num" }, String(generation.generation), generation.generation === detail.package.generation ? h("span", { class: "muted small" }, " (current)") : null),
                        h("td", { class: "mono", title: generation.manifestDigest }, shortDigest(generation.manifestDigest)),
                        h("td", { class: "num" }, formatTime(generation.createdAtMs)),
                      ),
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

// ---------------------------------------------------------------- refresh loop

async function refresh(routeChanged: boolean): Promise<void> {
  if (api === null) return;
  const client = api;
  if (routeChanged) {
    viewSerial += 1;
    lastSignature = "";
    markNav();
  }
  const serial = viewSerial;
  let built: { signature: string; render: () => Child[] } | null;
  try {
    built = route.view === "runs" ? await runsView(client, route, serial) : route.view === "run" ? await runView(client, route, serial) : await packagesView(client, serial);
  } catch (error) {
    if (error instanceof Unauthorized) {
      localStorage.removeItem(TOKEN_KEY);
      api = null;
      renderConnection();
      renderTokenForm("rejected");
      return;
    }
    if (serial !== viewSerial) return;
    connectionProblem = describe(error);
    lastSignature = "";
    const existing = main.querySelector("#connection-problem");
    if (routeChanged || main.querySelector(".view-title") === null) replaceKeepingFocus(main, h("h1", { class: "view-title", tabindex: "-1" }, "Dashboard"), messageBox());
    else if (existing === null) main.querySelector(".view-title")?.after(h("div", { class: "alert", role: "alert", id: "connection-problem" }, `Could not refresh: ${connectionProblem}. Retrying every ${POLL_MS / 1000} s.`));
    else existing.textContent = `Could not refresh: ${connectionProblem}. Retrying every ${POLL_MS / 1000} s.`;
    return;
  } finally {
    schedulePoll();
  }
  if (built === null || serial !== viewSerial || api !== client) return;
  if (connectionProblem !== null) {
    connectionProblem = null;
    lastSignature = "";
  }
  stamp();
  if (built.signature === lastSignature) return;
  lastSignature = built.signature;
  replaceKeepingFocus(main, built.render());
  // Focus follows navigation inside the page; the first view of a fresh load leaves it alone.
  if (routeChanged && navigated) {
    const title = main.querySelector<HTMLElement>(".view-title");
    title?.focus({ preventScroll: true });
    if (route.view === "run" && route.step !== null) document.getElementById("log-section")?.scrollIntoView({ block: "nearest" });
  }
}

function schedulePoll(): void {
  if (pollTimer !== null) clearTimeout(pollTimer);
  pollTimer = null;
  if (!live || api === null) return;
  pollTimer = setTimeout(() => {
    pollTimer = null;
    if (document.hidden) return schedulePoll();
    void refresh(false);
  }, POLL_MS);
}

window.addEventListener("hashchange", () => {
  const next = parseRoute(location.hash);
  if (next === null) return;
  navigated = true;
  const sameRun = route.view === "run" && next.view === "run" && route.id === next.id;
  route = next;
  if (!sameRun) logState = null;
  if (next.view !== "runs") extraRuns = null;
  if (!sameRun) message = null;
  void refresh(true);
});

document.addEventListener("visibilitychange", () => {
  if (!document.hidden && live) void refresh(false);
});

document.getElementById("skip-link")?.addEventListener("click", (event) => {
  event.preventDefault();
  main.focus();
});

const stored = localStorage.getItem(TOKEN_KEY);
if (stored === null || stored.length === 0) {
  renderTokenForm("needed");
} else {
  api = new Api(stored);
  renderConnection();
  void refresh(true);
}
