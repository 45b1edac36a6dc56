/// <reference lib="dom" />
/**
 * The simulation page: runs `simulate()` of the core in the page on sql.js or PGlite, with
 * the simulated executor, one seed at a time. Three ways through a case: Run (as fast as it
 * goes), Animate (a delay per logged action) and Step (one logged action per press); the
 * pauses live in simulate()'s `onAction` hook, which the simulation awaits, so stepping does
 * not change what happens. The page reads the store between actions through the raw driver
 * (never the lossy wrapper, whose armed state belongs to the simulation) to draw the runs.
 */
import {
  simulate,
  type SimulationLogEntry,
  type SimulationResult,
} from "../../../src/sim/simulation.ts";
import { errorMessage } from "../../../src/errors.ts";
import { lossyDriver } from "../../../storage/lossy-driver.ts";
import { openSqlStore, SqlStore } from "../../../storage/sql-store.ts";
import { layoutDag, renderDag } from "../shared/dag.ts";
import { card, dataTable, h, type Child } from "../shared/dom.ts";
import { formatDuration } from "../shared/format.ts";
import { statusBadge } from "../shared/status.ts";
import {
  actionKind,
  DEFAULT_SETTINGS,
  faultTally,
  logDigest,
  MAX_ACTIONS,
  MAX_SEED,
  readRuns,
  runTally,
  settingsFromHash,
  settingsToHash,
  SIM_START_MS,
  simulationOptions,
  spawnDigest,
  STORE_OPENED_AT_MS,
  type SimRunView,
  type SimSettings,
} from "./engine.ts";
import { openDriver } from "./stores.ts";

type Mode = "run" | "animate" | "step";
type PageState = "idle" | "opening" | "running" | "paused" | "done" | "stopped" | "error";

class Aborted extends Error {
  constructor() {
    super("stopped");
    this.name = "Aborted";
  }
}

interface Session {
  mode: Mode;
  aborted: boolean;
  release: (() => void) | null;
}

let session: Session | null = null;

// ---------------------------------------------------------------- controls

const seedInput = h("input", {
  type: "number",
  id: "seed",
  name: "seed",
  min: 0,
  max: MAX_SEED,
  step: 1,
  required: true,
  inputmode: "numeric",
});
const actionsInput = h("input", {
  type: "number",
  id: "actions",
  name: "actions",
  min: 1,
  max: MAX_ACTIONS,
  step: 1,
  required: true,
});
const storeSqljs = h("input", { type: "radio", name: "store", id: "store-sqljs", value: "sqljs" });
const storePglite = h("input", {
  type: "radio",
  name: "store",
  id: "store-pglite",
  value: "pglite",
});
const lostInput = h("input", { type: "checkbox", id: "lost", name: "lost" });
const failInput = h("input", {
  type: "number",
  id: "fail",
  name: "fail",
  min: 0,
  max: 1,
  step: 0.01,
  placeholder: "default 0.15",
  "aria-describedby": "faults-help",
});
const spawnFailInput = h("input", {
  type: "number",
  id: "spawnfail",
  name: "spawnfail",
  min: 0,
  max: 1,
  step: 0.01,
  placeholder: "default 0.02",
  "aria-describedby": "faults-help",
});
const delayInput = h("input", {
  type: "range",
  id: "delay",
  name: "delay",
  min: 0,
  max: 1000,
  step: 10,
});
const delayOutput = h("output", { for: "delay", id: "delay-out" });
const shareInput = h("input", {
  type: "text",
  id: "share",
  readonly: true,
  "aria-label": "Link to this case",
});

const button = (id: string, label: string, extra: string, onClick: () => void): HTMLButtonElement =>
  h("button", { type: "button", id, class: extra, onclick: onClick }, label);
const runButton = button("run", "Run", "primary", () => void start("run"));
const animateButton = button("animate", "Animate", "", () => void start("animate"));
const stepThroughButton = button("step-through", "Step through", "", () => void start("step"));
const randomButton = button("random-seed", "Random seed", "", () => {
  seedInput.value = String(Math.floor(Math.random() * 1_000_000));
  syncHash();
});
const pauseButton = button("pause", "Pause", "", () => setMode("step", false));
const stepButton = button("step", "Step", "primary", () => setMode("step", true));
const resumeButton = button("resume", "Animate", "", () => setMode("animate", true));
const finishButton = button("finish", "Finish", "", () => setMode("run", true));
const stopButton = button("stop", "Stop", "danger", () => {
  if (session === null) return;
  session.aborted = true;
  session.release?.();
});
const copyButton = button("copy-link", "Copy link", "", () => void copyLink());

const fieldset = h(
  "fieldset",
  { class: "settings", id: "settings" },
  h("legend", { class: "visually-hidden" }, "Case"),
  h(
    "div",
    { class: "field" },
    h("label", { for: "seed" }, "Seed"),
    h("div", { class: "inline" }, seedInput, randomButton),
  ),
  h(
    "div",
    { class: "field", role: "radiogroup", "aria-labelledby": "store-label" },
    h("span", { class: "label", id: "store-label" }, "Store"),
    h("label", { class: "check", for: "store-sqljs" }, storeSqljs, "sql.js (SQLite)"),
    h("label", { class: "check", for: "store-pglite" }, storePglite, "PGlite (PostgreSQL)"),
    h("span", { class: "hint" }, "PGlite loads about 15 MB and takes a few seconds to open."),
  ),
  h(
    "div",
    { class: "field" },
    h("label", { for: "actions" }, "Actions"),
    actionsInput,
    h("span", { class: "hint" }, "random actions before the drain (default 120)"),
  ),
  h(
    "details",
    { class: "faults", id: "fault-knobs" },
    h("summary", {}, "Fault knobs"),
    h(
      "p",
      { class: "hint", id: "faults-help" },
      "Crashes, clock steps and external kills are drawn from the seed; the tally below names each one. The executor's probabilities can be changed: the same random draws happen, only their outcomes move. Empty keeps the default, which the Node simulation uses.",
    ),
    h("label", { class: "check", for: "lost" }, lostInput, "Lost commit responses"),
    h("div", { class: "field" }, h("label", { for: "fail" }, "Process failure rate"), failInput),
    h(
      "div",
      { class: "field" },
      h("label", { for: "spawnfail" }, "Spawn failure rate"),
      spawnFailInput,
    ),
  ),
  h(
    "div",
    { class: "field" },
    h("label", { for: "delay" }, "Animation delay ", delayOutput),
    delayInput,
  ),
);

const form = h(
  "form",
  { id: "case-form", "aria-label": "Simulation case", novalidate: true },
  fieldset,
);
form.addEventListener("submit", (event) => {
  event.preventDefault();
  void start("run");
});
form.addEventListener("input", () => syncHash());
form.addEventListener("change", () => syncHash());

// ---------------------------------------------------------------- results

const stateLine = h(
  "p",
  { id: "sim-state", class: "state", role: "status", "data-state": "idle" },
  "Ready.",
);
const progressLine = h("p", { id: "sim-progress", class: "muted small" });
const resultList = h("dl", { class: "meta results", id: "results" });
const tallyPlaceholder = (): HTMLTableRowElement =>
  h("tr", {}, h("td", { colspan: 3, class: "empty" }, "Shown when the case ends."));
const tallyBody = h("tbody", {}, tallyPlaceholder());
const runsGrid = h(
  "div",
  { class: "runs-grid", id: "sim-runs-grid" },
  h("p", { class: "empty" }, "No runs yet."),
);
const timeline = h("ol", {
  class: "timeline",
  id: "timeline",
  "aria-label": "Logged actions, oldest first",
});
const hideTicks = h("input", { type: "checkbox", id: "hide-ticks" });
hideTicks.addEventListener("change", () =>
  timeline.classList.toggle("hide-ticks", hideTicks.checked),
);
const timelineCount = h("span", { class: "muted small", id: "timeline-count" }, "0 entries");
const timelineFrame = h(
  "div",
  {
    class: "timeline-frame",
    tabindex: "0",
    role: "region",
    "aria-label": "Event timeline (scrollable)",
  },
  timeline,
);

function setState(state: PageState, text: string): void {
  stateLine.dataset.state = state;
  stateLine.textContent = text;
}

function setMode(mode: Mode, release: boolean): void {
  if (session === null) return;
  session.mode = mode;
  if (release) session.release?.();
  updateButtons();
}

function updateButtons(): void {
  const active = session !== null;
  fieldset.disabled = active;
  for (const control of [runButton, animateButton, stepThroughButton]) control.hidden = active;
  for (const control of [pauseButton, stepButton, resumeButton, finishButton, stopButton])
    control.hidden = !active;
  if (session !== null) {
    pauseButton.hidden = session.mode === "step";
    resumeButton.hidden = session.mode === "animate";
  }
}

function readForm(): SimSettings | null {
  if (!form.checkValidity()) {
    form.reportValidity();
    return null;
  }
  const number = (input: HTMLInputElement): number | null =>
    input.value.trim() === "" ? null : Number(input.value);
  return {
    seed: Number(seedInput.value),
    store: storePglite.checked ? "pglite" : "sqljs",
    actions: Number(actionsInput.value),
    lostCommits: lostInput.checked,
    failureRate: number(failInput),
    spawnFailureRate: number(spawnFailInput),
    delayMs: Number(delayInput.value),
  };
}

function fillForm(settings: SimSettings): void {
  seedInput.value = String(settings.seed);
  actionsInput.value = String(settings.actions);
  storeSqljs.checked = settings.store === "sqljs";
  storePglite.checked = settings.store === "pglite";
  lostInput.checked = settings.lostCommits;
  failInput.value = settings.failureRate === null ? "" : String(settings.failureRate);
  spawnFailInput.value =
    settings.spawnFailureRate === null ? "" : String(settings.spawnFailureRate);
  delayInput.value = String(settings.delayMs);
  delayOutput.textContent = `${settings.delayMs} ms per action`;
  if (settings.failureRate !== null || settings.spawnFailureRate !== null || !settings.lostCommits)
    (document.getElementById("fault-knobs") as HTMLDetailsElement | null)?.setAttribute("open", "");
  shareInput.value = location.href;
}

function currentDelay(): number {
  return Number(delayInput.value);
}

function syncHash(): void {
  delayOutput.textContent = `${delayInput.value} ms per action`;
  if (!form.checkValidity()) return;
  const settings = readForm();
  if (settings === null) return;
  const hash = settingsToHash(settings);
  if (location.hash !== hash) history.replaceState(null, "", hash);
  shareInput.value = location.href;
}

async function copyLink(): Promise<void> {
  shareInput.value = location.href;
  try {
    await navigator.clipboard.writeText(location.href);
    copyButton.textContent = "Copied";
  } catch {
    shareInput.select();
    copyButton.textContent = "Select and copy";
  }
  setTimeout(() => {
    copyButton.textContent = "Copy link";
  }, 2_000);
}

// ---------------------------------------------------------------- rendering

function offset(atMs: number): string {
  return `+${((atMs - SIM_START_MS) / 1_000).toFixed(3)} s`;
}

function appendEntry(entry: SimulationLogEntry): void {
  const kind = actionKind(entry.action);
  timeline.append(
    h(
      "li",
      { class: `ev kind-${kind}`, "data-action": entry.action },
      h("span", { class: "ev-index" }, `#${entry.index}`),
      h("span", { class: "ev-time" }, offset(entry.atMs)),
      h(
        "span",
        { class: "ev-action" },
        kind === "fault" ? h("span", { "aria-hidden": "true" }, "⚡ ") : null,
        entry.action,
      ),
      h("span", { class: "ev-detail" }, entry.detail),
    ),
  );
  timelineCount.textContent = `${entry.index + 1} entries`;
}

function scrollTimeline(): void {
  timelineFrame.scrollTop = timelineFrame.scrollHeight;
}

function renderRuns(runs: readonly SimRunView[]): void {
  if (runs.length === 0) {
    runsGrid.replaceChildren(h("p", { class: "empty" }, "No runs yet."));
    return;
  }
  runsGrid.replaceChildren(
    ...runs.map((run) =>
      h(
        "article",
        // A graph of four layers or more gets a whole row, so its step names stay readable.
        {
          class: `run-card${layoutDag(run.steps).layers.length >= 4 ? " wide" : ""}`,
          "data-run": run.id,
          "data-status": run.status,
          "aria-label": `Run ${run.id}`,
        },
        h(
          "div",
          { class: "run-card-head" },
          h("span", { class: "run-name" }, run.id.replace(/^.*-(r\d+)$/, "$1")),
          h(
            "span",
            { class: "muted small" },
            `${run.kind === "workflow" ? "workflow" : "task"} ${run.target}`,
          ),
          h("span", { class: "spacer" }),
          statusBadge(run.status),
        ),
        h(
          "div",
          { class: "dag-frame" },
          renderDag(run.steps, { label: `Steps of ${run.id}`, minScale: 0.6 }),
        ),
      ),
    ),
  );
}

function progress(entry: SimulationLogEntry, mode: Mode): void {
  progressLine.textContent = `${entry.index + 1} log entries · virtual time ${offset(entry.atMs)} · ${mode === "run" ? "running" : mode === "animate" ? "animating" : "stepping"}`;
}

function resultRows(rows: readonly [string, Child, string?][]): void {
  resultList.replaceChildren(
    ...rows.flatMap(([label, value, id]) => [
      h("dt", {}, label),
      h("dd", id === undefined ? {} : { id }, value),
    ]),
  );
}

function renderResult(
  result: SimulationResult,
  runs: readonly SimRunView[],
  storeLabel: string,
  wallMs: number,
): void {
  const tally = runTally(runs);
  const digest = result.finalDigest;
  resultRows([
    ["Final state digest", h("code", { class: "digest" }, digest), "final-digest"],
    ["Log digest", h("code", { class: "digest" }, logDigest(result.log)), "log-digest"],
    ["Spawn digest", h("code", { class: "digest" }, spawnDigest(result)), "spawn-digest"],
    ["Package", h("code", {}, result.packageName)],
    [
      "Runs",
      `${tally.total}${tally.byStatus.length === 0 ? "" : ` — ${tally.byStatus.map(([status, count]) => `${count} ${status}`).join(", ")}`}`,
      "sim-runs",
    ],
    [
      "Settled",
      result.drained
        ? "yes: every run reached a terminal status"
        : "no: runs were still live when the drain gave up",
      "sim-drained",
    ],
    ["Virtual time", `${offset(result.endMs)} (${formatDuration(result.endMs - SIM_START_MS)})`],
    ["Store", storeLabel, "sim-store"],
    ["Wall time", formatDuration(wallMs)],
  ]);
  resultList.dataset.finalDigest = digest;
  tallyBody.replaceChildren(
    ...faultTally(result).map((row) =>
      h(
        "tr",
        { class: row.count > 0 ? "hit" : "" },
        h("th", { scope: "row" }, row.label),
        h("td", { class: "num" }, String(row.count)),
        h("td", { class: "muted small" }, row.note),
      ),
    ),
  );
}

// ---------------------------------------------------------------- the session

function wait(current: Session, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      current.release = null;
      resolve();
    }
    current.release = done;
  });
}

function pause(current: Session): Promise<void> {
  return new Promise((resolve) => {
    current.release = () => {
      current.release = null;
      resolve();
    };
  });
}

function modeOf(current: Session): Mode {
  return current.mode;
}

async function onAction(
  current: Session,
  reader: SqlStore,
  entry: SimulationLogEntry,
): Promise<void> {
  if (current.aborted) throw new Aborted();
  appendEntry(entry);
  progress(entry, current.mode);
  if (current.mode === "run") {
    // Let the page paint now and then; nothing else waits.
    if (entry.index % 40 === 0) await new Promise((resolve) => setTimeout(resolve, 0));
  } else {
    renderRuns(await readRuns(reader));
    scrollTimeline();
    if (current.mode === "animate") {
      setState("running", "Animating…");
      await wait(current, currentDelay());
    } else {
      setState(
        "paused",
        `Paused after #${entry.index} ${entry.action}. Press Step for the next action.`,
      );
      stepButton.focus({ preventScroll: true });
      await pause(current);
      // The buttons change the mode while the page waits here.
      const resumed: Mode = modeOf(current);
      if (!current.aborted)
        setState(
          "running",
          resumed === "run" ? "Running…" : resumed === "animate" ? "Animating…" : "Stepping…",
        );
    }
  }
  if (current.aborted) throw new Aborted();
}

async function start(mode: Mode): Promise<void> {
  if (session !== null) return;
  const settings = readForm();
  if (settings === null) return;
  history.replaceState(null, "", settingsToHash(settings));
  shareInput.value = location.href;
  const current: Session = { mode, aborted: false, release: null };
  session = current;
  updateButtons();
  timeline.replaceChildren();
  timelineCount.textContent = "0 entries";
  resultList.replaceChildren();
  delete resultList.dataset.finalDigest;
  tallyBody.replaceChildren(tallyPlaceholder());
  renderRuns([]);
  progressLine.textContent = "";
  setState(
    "opening",
    settings.store === "pglite"
      ? "Opening PGlite (PostgreSQL in WebAssembly; a few seconds)…"
      : "Opening sql.js…",
  );
  let close: (() => Promise<void>) | null = null;
  try {
    const opened = await openDriver(settings.store);
    close = () => opened.driver.close();
    const lossy = lossyDriver(opened.driver);
    const store = await openSqlStore(lossy.driver, opened.migrations, STORE_OPENED_AT_MS);
    // Reads for drawing go around the lossy wrapper: they must never consume an armed loss.
    const reader = new SqlStore(opened.driver);
    if (current.aborted) throw new Aborted();
    setState(
      "running",
      mode === "run" ? "Running…" : mode === "animate" ? "Animating…" : "Stepping…",
    );
    const began = performance.now();
    const result = await simulate(
      store,
      simulationOptions(settings, lossy, (entry) => onAction(current, reader, entry)),
    );
    const wallMs = performance.now() - began;
    const runs = await readRuns(reader);
    renderRuns(runs);
    renderResult(result, runs, opened.label, wallMs);
    progressLine.textContent = `${result.log.length} log entries · virtual time ${offset(result.endMs)}`;
    setState(
      "done",
      `Finished seed ${settings.seed} on ${settings.store === "pglite" ? "PGlite" : "sql.js"}: ${result.runs} runs, ${result.crashes} coordinator crash${result.crashes === 1 ? "" : "es"}, ${result.drained ? "all settled" : "NOT settled"}.`,
    );
  } catch (error) {
    if (error instanceof Aborted)
      setState("stopped", "Stopped. The next run starts again from a fresh store.");
    else setState("error", `The simulation failed: ${errorMessage(error)}`);
  } finally {
    session = null;
    updateButtons();
    scrollTimeline();
    if (close !== null) await close().catch(() => undefined);
  }
}

// ---------------------------------------------------------------- page

const app = document.getElementById("app") as HTMLElement;
app.replaceChildren(
  h(
    "div",
    { class: "layout" },
    card(
      "Case",
      "case-title",
      form,
      h(
        "div",
        { class: "button-row controls", id: "controls" },
        runButton,
        animateButton,
        stepThroughButton,
        pauseButton,
        stepButton,
        resumeButton,
        finishButton,
        stopButton,
      ),
      h(
        "div",
        { class: "share" },
        h("label", { for: "share" }, "Share this case"),
        h("div", { class: "inline" }, shareInput, copyButton),
      ),
    ),
    card(
      "Result",
      "result-title",
      stateLine,
      progressLine,
      resultList,
      h("h3", {}, "Faults this seed produced"),
      dataTable({ id: "fault-tally" }, ["Fault", "Count", "What it is"], tallyBody),
    ),
  ),
  card(
    "Runs",
    "runs-title",
    h(
      "p",
      { class: "muted small" },
      "Every run of the case with its steps; arrows point from a step to the steps that need it.",
    ),
    runsGrid,
  ),
  card(
    "Event timeline",
    "timeline-title",
    h(
      "div",
      { class: "timeline-head" },
      h("label", { class: "check", for: "hide-ticks" }, hideTicks, "Hide ticks"),
      timelineCount,
    ),
    timelineFrame,
  ),
);

document.getElementById("skip-link")?.addEventListener("click", (event) => {
  event.preventDefault();
  (document.getElementById("main") as HTMLElement).focus();
});

const initial = settingsFromHash(location.hash);
fillForm(initial.hasSeed ? initial.settings : DEFAULT_SETTINGS);
updateButtons();
window.addEventListener("hashchange", () => {
  if (session !== null) return;
  const next = settingsFromHash(location.hash);
  fillForm(next.settings);
  if (next.hasSeed) void start("run");
});
// A link with a seed is a shared case: run it straight away.
if (initial.hasSeed) void start("run");
