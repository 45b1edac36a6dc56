/**
 * The dashboard against a REAL `qlr serve` (built by scripts/build.mjs, real processes, real
 * files), driven in Chromium: the token flow, starting a workflow from the page and watching
 * it succeed, cancelling a run whose step is a real `sleep 30` (the process must be gone, the
 * page says who cancelled), the page at phone width, why a step held by a task's
 * `concurrency: 1` waits, a run's alert going from pending to sent, and the overview of a few
 * hundred real runs of every outcome checked against the run list. The runtime, its
 * supervisors and every task process carry the scratch dir or a tag, so the cleanup ends
 * exactly what this file started, by pid.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LOG_TAIL_CHARS } from "../../runtimes/browser/shared/log-tail.ts";
import { waitFor } from "../support/wait.ts";
import {
  launchBrowser,
  pidsMarkedBy,
  procExists,
  REPO_ROOT,
  screenshot,
  type Browser,
} from "./support.ts";
import { serveArgs } from "../support/qlr-args.ts";
import { namedDiamond, stepLines } from "../support/workflow-shapes.ts";

const TAG = `qlr-browser-test-${randomBytes(6).toString("hex")}`;

function manifest(tag: string, gate: string): string {
  const env = `env: { QLR_BROWSER_TEST_TAG: ${tag} }`;
  return `package: reports
description: A nightly price report (dashboard test)
tasks:
  extract:
    run: ["sh", "-c", "echo extracting; sleep 0.3; echo 42 rows"]
    timeout: 30s
    ${env}
  prices:
    run: ["sh", "-c", "sleep 0.5; echo prices for 42 rows"]
    timeout: 30s
    ${env}
  rates:
    shell: 'sleep 0.5; echo "rates: EUR 1.08"'
    timeout: 30s
    ${env}
  publish:
    run: ["sh", "-c", "echo published report; echo 'one warning' >&2"]
    timeout: 30s
    ${env}
  blip:
    run: ["true"]
    timeout: 30s
    ${env}
  oops:
    run: ["sh", "-c", "exit 1"]
    timeout: 30s
    ${env}
  slowpoke:
    run: ["sleep", "30"]
    timeout: 1s
    ${env}
  wait-upstream:
    run: ["sleep", "30"]
    timeout: 120s
    ${env}
  ticker:
    shell: 'for i in 1 2 3; do echo "line $i"; done; echo warming up >&2; while [ ! -e "$GATE" ]; do sleep 0.1; done; for i in 4 5 6; do echo "line $i"; sleep 0.3; done'
    timeout: 120s
    env: { QLR_BROWSER_TEST_TAG: ${tag}, GATE: ${JSON.stringify(gate)} }
  flood:
    shell: 'i=0; while [ $i -lt 4000 ]; do echo "row $i of a long report, padded to about a hundred characters ........................"; i=$((i+1)); done'
    timeout: 120s
    ${env}
workflows:
  nightly-report:
    description: extract, then prices and rates in parallel, then publish
    steps:
${stepLines(namedDiamond({ extract: "extract", prices: "prices", rates: "rates", publish: "publish" }))}
  tiny:
    steps:
      one: { task: blip }
  ticking:
    steps:
      tick: { task: ticker }
  flooding:
    steps:
      flood: { task: flood }
  long-import:
    steps:
      prepare: { task: extract }
      wait: { task: wait-upstream, needs: [prepare] }
      publish: { task: publish, needs: [wait] }
schedules:
  nightly: { cron: "0 3 * * *", timezone: UTC, workflow: nightly-report, overlap: skip }
`;
}

interface AttemptJson {
  readonly stepRunId: string | null;
  readonly status: string;
  readonly pid: number | null;
  readonly stopReason: string | null;
}
interface RunJson {
  readonly run: {
    readonly id: string;
    readonly status: string;
    readonly cancelReason: string | null;
  };
  readonly steps: readonly {
    readonly id: string;
    readonly name: string;
    readonly status: string;
    readonly needs: readonly string[];
    readonly waiting?: string | null;
  }[];
  readonly attempts: readonly AttemptJson[];
}

let scratch = "";
let gatePath = "";
let stateDir = "";
let server: ChildProcess | null = null;
let serverOutput = "";
let baseUrl = "";
let token = "";
let browser: Browser | null = null;

async function api<T>(path: string, init: RequestInit = {}): Promise<T> {
  const response = await fetch(`${baseUrl}${path}`, {
    ...init,
    headers: { authorization: `Bearer ${token}`, ...(init.headers ?? {}) },
    signal: AbortSignal.timeout(10_000),
  });
  if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
  return (await response.json()) as T;
}

async function apiText(path: string): Promise<string> {
  const response = await fetch(`${baseUrl}${path}`, {
    headers: { authorization: `Bearer ${token}` },
    signal: AbortSignal.timeout(10_000),
  });
  if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
  return response.text();
}

async function applyYaml(text: string): Promise<void> {
  await api("/packages", {
    method: "POST",
    headers: { "content-type": "application/yaml" },
    body: text,
  });
}

function startThroughApi(body: Record<string, unknown>): Promise<{ run: { id: string } }> {
  return api<{ run: { id: string } }>("/runs", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

/**
 * A new page (at `viewport`, if given) that finds the token where the token form keeps it,
 * whichever test ran first, opened at `route` (`/#/runs/…`). `watch` sees the page before it
 * loads, to record its requests.
 */
async function openWithToken(
  route: string,
  options: { viewport?: { width: number; height: number }; watch?: (page: Page) => void } = {},
): Promise<Page> {
  const page = await browser!.newPage(options.viewport);
  options.watch?.(page);
  await page.addInitScript((value) => localStorage.setItem("qlr.dashboard.token", value), token);
  await page.goto(`${baseUrl}${route}`);
  return page;
}

/** Closes the page; no page so far may have shown an error but the expected one. */
async function closeClean(page: Page): Promise<void> {
  await page.close();
  expect(unexpectedErrors()).toEqual([]);
}

/**
 * Starts a workflow of the reports package with its button on the run list (a new page, the
 * token already stored by an earlier test); returns the run's page, where the button leads.
 */
async function startFromRunList(workflow: string): Promise<{ page: Page; id: string }> {
  const page = await browser!.newPage();
  await page.goto(`${baseUrl}/#/runs`);
  await page.locator(`.start-groups button[data-start="reports/${workflow}"]`).click();
  await page.waitForURL(/#\/runs\/[^/]+$/);
  return { page, id: runIdOf(page) };
}

function runIdOf(page: Page): string {
  const match = /#\/runs\/([^/?]+)/.exec(page.url());
  if (match?.[1] === undefined) throw new Error(`not on a run page: ${page.url()}`);
  return decodeURIComponent(match[1]);
}

async function noHorizontalOverflow(page: Page): Promise<boolean> {
  return page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1);
}

beforeAll(async () => {
  await promisify(execFile)(process.execPath, [join(REPO_ROOT, "scripts/build.mjs")], {
    cwd: REPO_ROOT,
    timeout: 180_000,
  });
  scratch = await mkdtemp(join(tmpdir(), "qlr-dashboard-test-"));
  stateDir = join(scratch, "state");
  const manifestPath = join(scratch, "reports.yaml");
  gatePath = join(scratch, "ticker-gate");
  await writeFile(manifestPath, manifest(TAG, gatePath));
  // The token is the one the runtime generates into the state dir, whatever the caller's env says.
  const env = { ...process.env };
  for (const name of [
    "QLR_TOKEN",
    "QLR_PORT",
    "QLR_STATE_DIR",
    "QLR_STORE",
    "QLR_PROFILE",
    "QLR_DATABASE_URL",
    "QLR_HOST",
  ])
    delete env[name];
  server = spawn(
    process.execPath,
    [join(REPO_ROOT, "dist/qlr.mjs"), ...serveArgs(stateDir, manifestPath)],
    { cwd: scratch, stdio: ["ignore", "pipe", "pipe"], env },
  );
  server.stdout?.on("data", (chunk: Buffer) => (serverOutput += chunk.toString()));
  server.stderr?.on("data", (chunk: Buffer) => (serverOutput += chunk.toString()));
  try {
    baseUrl = await waitFor(
      '"qlr serving" on stdout',
      () => {
        if (server?.exitCode !== null) throw new Error(`qlr serve exited with ${server?.exitCode}`);
        return /qlr serving (http:\/\/127\.0\.0\.1:\d+)/.exec(serverOutput)?.[1];
      },
      30_000,
      100,
    );
  } catch (error) {
    throw new Error(
      `${error instanceof Error ? error.message : String(error)}; its output:\n${serverOutput}`,
      { cause: error },
    );
  }
  token = (await readFile(join(stateDir, "token"), "utf8")).trim();
  browser = await launchBrowser();
}, 240_000);

afterAll(async () => {
  await browser?.close();
  if (server !== null && server.exitCode === null && server.signalCode === null) {
    const exited = new Promise<void>((resolveExit) => server?.once("exit", () => resolveExit()));
    server.kill("SIGTERM");
    await Promise.race([exited, sleep(30_000)]);
  }
  // Whatever is left (the runtime after a hang, supervisors, task processes) is ours by marker.
  if (stateDir !== "") {
    for (const pid of [...(await pidsMarkedBy(stateDir)), ...(await pidsMarkedBy(TAG))]) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
  }
  if (scratch !== "") await rm(scratch, { recursive: true, force: true });
}, 60_000);

describe("dashboard on qlr serve", () => {
  it("serves the page and its assets without the token, and nothing else", async () => {
    const page = await fetch(`${baseUrl}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toMatch(/^text\/html/);
    expect(page.headers.get("content-security-policy")).toContain("default-src 'none'");
    expect(await page.text()).toContain("assets/dashboard.js");
    const script = await fetch(`${baseUrl}/assets/dashboard.js`);
    expect(script.status).toBe(200);
    expect(script.headers.get("content-type")).toMatch(/^text\/javascript/);
    const style = await fetch(`${baseUrl}/assets/dashboard.css`);
    expect(style.headers.get("content-type")).toMatch(/^text\/css/);
    for (const path of [
      "/assets/nope.js",
      "/assets/..%2f..%2ftoken",
      "/assets/%2e%2e%2f%2e%2e%2fqlr.mjs",
      "/assets/index.html",
      "/assets/",
    ]) {
      const response = await fetch(`${baseUrl}${path}`);
      expect(response.status, path).toBe(404);
      expect(await response.text()).not.toContain(token);
    }
    // The API stays behind the token.
    expect((await fetch(`${baseUrl}/runs`)).status).toBe(401);
    expect((await fetch(`${baseUrl}/packages`)).status).toBe(401);
  });

  it("asks for the token, refuses a wrong one, and accepts the right one", async () => {
    const page = await browser!.newPage();
    await page.goto(`${baseUrl}/`);
    await expectText(page, "#token-title", "Token needed");
    await page.locator("#token-input").fill("qlr_this-is-not-the-token");
    await page.keyboard.press("Enter");
    await expectText(page, "#token-title", "Wrong token");
    await expect(page.locator("#token-problem").isVisible()).resolves.toBe(true);
    await page.locator("#token-input").fill(token);
    await page.locator("#token-submit").click();
    // The dashboard opens on the overview.
    await expectText(page, "h1.view-title", "Overview");
    await page.locator("#nav-runs").click();
    await expectText(page, "h1.view-title", "Runs");
    await page.locator('.start-groups button[data-start="reports/nightly-report"]').waitFor();
    expect(await page.evaluate(() => localStorage.getItem("qlr.dashboard.token"))).toBe(token);
    await page.close();
  });

  it("starts a workflow from the page and follows it to succeeded", async () => {
    const { page, id } = await startFromRunList("nightly-report");
    await page.locator('#run-status [data-status="succeeded"]').waitFor({ timeout: 60_000 });
    const nodes = page.locator("svg.dag .dag-node");
    expect(await nodes.count()).toBe(4);
    expect(
      await nodes.evaluateAll((elements) =>
        elements.map((element) => element.getAttribute("data-status")),
      ),
    ).toEqual(["succeeded", "succeeded", "succeeded", "succeeded"]);
    expect(
      (
        await page
          .locator("svg.dag .dag-edge")
          .evaluateAll((edges) =>
            edges.map(
              (edge) => `${edge.getAttribute("data-from")}>${edge.getAttribute("data-to")}`,
            ),
          )
      ).sort(),
    ).toEqual(["extract>prices", "extract>rates", "prices>publish", "rates>publish"]);
    // The page agrees with the API.
    const detail = await api<RunJson>(`/runs/${id}`);
    expect(detail.run.status).toBe("succeeded");
    expect(detail.steps.map((step) => step.status)).toEqual([
      "succeeded",
      "succeeded",
      "succeeded",
      "succeeded",
    ]);
    expect(await page.locator("#attempts-table tbody tr").count()).toBe(detail.attempts.length);
    // Keyboard: the DAG nodes are links; open the log of "publish" with Enter.
    await page.locator('svg.dag a[data-key="dag-publish"]').focus();
    await page.keyboard.press("Enter");
    await page.waitForURL(/\/steps\/publish$/);
    await expectText(page, "#log", "published report");
    expect(await page.locator("#log").textContent()).toContain("one warning");
    await page.locator("#main").evaluate((main) => main.scrollIntoView());
    await screenshot(page, "dashboard", { docs: true });
    await page.locator("#nav-packages").click();
    await page.locator('tr[data-schedule="nightly"]').waitFor();
    expect(await page.locator('tr[data-schedule="nightly"]').textContent()).toMatch(/03:00:00Z/);
    await screenshot(page, "dashboard-packages");
    await closeClean(page);
  }, 120_000);

  it("follows a step's log live by byte offset: new chunks appended, never re-read from 0, no log request once the attempt ended", async () => {
    const { run } = await startThroughApi({ package: "reports", workflow: "ticking" });
    const chunkReads: { stream: string; offset: number; attempt: string | null }[] = [];
    let detailReads = 0;
    let wholeReads = 0;
    const watch = (page: Page): void => {
      page.on("request", (request) => {
        const url = new URL(request.url());
        if (url.pathname === `/runs/${run.id}/steps/tick/log`) {
          const offset = url.searchParams.get("offset");
          // The whole-log answer (no offset) is not how the page follows a log.
          if (offset === null) wholeReads += 1;
          else
            chunkReads.push({
              stream: url.searchParams.get("stream") ?? "stdout",
              offset: Number(offset),
              attempt: url.searchParams.get("attempt"),
            });
        } else if (url.pathname === `/runs/${run.id}`) detailReads += 1;
      });
    };
    const page = await openWithToken(`/#/runs/${run.id}/steps/tick`, { watch });
    // Lines 1-3 are written, then the step waits for the gate: line 4 cannot exist yet.
    await expectText(page, "#log", "line 3");
    expect(await page.locator("#log").textContent()).not.toContain("line 4");
    expect(await page.locator("#log").getAttribute("data-finished")).toBe("false");
    await writeFile(gatePath, "");
    await page.locator('#log[data-finished="true"]').waitFor({ timeout: 60_000 });
    const whole = await apiText(`/runs/${run.id}/steps/tick/log`);
    expect(whole).toContain("line 6");
    expect(whole).toContain("warming up");
    expect(await page.locator("#log").textContent()).toBe(whole);
    // Each stream's offsets only move forward; the read after lines 1-3 starts where they ended.
    for (const stream of ["stdout", "stderr"]) {
      const offsets = chunkReads
        .filter((read) => read.stream === stream)
        .map((read) => read.offset);
      expect(offsets[0]).toBe(0);
      expect(offsets).toEqual([...offsets].sort((a, b) => a - b));
      expect(offsets.at(-1)).toBeGreaterThan(0);
    }
    const stdoutOffsets = chunkReads
      .filter((read) => read.stream === "stdout")
      .map((read) => read.offset);
    expect(stdoutOffsets).toContain(Buffer.byteLength("line 1\nline 2\nline 3\n"));
    expect(new Set(chunkReads.map((read) => read.attempt)).size).toBe(1);
    expect(chunkReads[0]?.attempt).not.toBeNull();
    expect(wholeReads).toBe(0);
    // The attempt ended: the page keeps refreshing the run, but asks for no more log.
    const readsWhenFinished = chunkReads.length;
    const detailsWhenFinished = detailReads;
    await waitFor(
      "two more refreshes of the run",
      () => detailReads >= detailsWhenFinished + 2,
      30_000,
    );
    expect(chunkReads.length).toBe(readsWhenFinished);
    await closeClean(page);
  }, 120_000);

  it("keeps a bounded tail of a long log and offers the whole log as a download", async () => {
    const { run } = await startThroughApi({ package: "reports", workflow: "flooding" });
    const page = await openWithToken(`/#/runs/${run.id}/steps/flood`);
    await page.locator('#log[data-finished="true"]').waitFor({ timeout: 60_000 });
    const whole = await apiText(`/runs/${run.id}/steps/flood`.concat("/log"));
    expect(whole.length).toBeGreaterThan(LOG_TAIL_CHARS);
    const shown = (await page.locator("#log").textContent()) ?? "";
    expect(shown.length).toBeLessThanOrEqual(LOG_TAIL_CHARS);
    expect(shown.length).toBeGreaterThan(LOG_TAIL_CHARS - 200);
    expect(whole.endsWith(shown)).toBe(true);
    expect(shown.startsWith("row ")).toBe(true);
    await expectText(page, "#log-trimmed", "Earlier output trimmed");
    const download = page.waitForEvent("download");
    await page.locator("#download-log").click();
    const file = await (await download).path();
    expect(await readFile(file, "utf8")).toBe(whole);
    await closeClean(page);
  }, 120_000);

  it("cancels a run whose step is a real sleep 30: the process is stopped and the page says cancelled", async () => {
    const { page, id } = await startFromRunList("long-import");
    const pid = await waitFor(
      "the sleep step's process",
      async () => {
        const detail = await api<RunJson>(`/runs/${id}`);
        const wait = detail.steps.find((step) => step.name === "wait");
        const attempt = detail.attempts.find(
          (candidate) => candidate.stepRunId === wait?.id && candidate.status === "running",
        );
        return attempt?.pid ?? null;
      },
      30_000,
    );
    expect(procExists(pid)).toBe(true);
    await page.locator('svg.dag .dag-node[data-step="wait"][data-status="running"]').waitFor();
    await page.locator(`#attempts-table tr[data-pid="${pid}"]`).waitFor();
    await page.locator("#cancel-run").click();
    await page.locator('#run-status [data-status="cancelled"]').waitFor({ timeout: 30_000 });
    await waitFor(`/proc/${pid} to be gone`, () => !procExists(pid), 20_000);
    const detail = await api<RunJson>(`/runs/${id}`);
    expect(detail.run.status).toBe("cancelled");
    const wait = detail.steps.find((step) => step.name === "wait");
    expect(wait?.status).toBe("cancelled");
    expect(detail.attempts.find((attempt) => attempt.pid === pid)?.stopReason).toBe("cancel");
    await page.locator('svg.dag .dag-node[data-step="wait"][data-status="cancelled"]').waitFor();
    expect(await page.locator("#cancel-run").isDisabled()).toBe(true);
    // Who cancelled it: the page shows the run view's reason.
    expect(detail.run.cancelReason).toBe("user");
    expect(await page.locator("#run-cancel-reason").getAttribute("data-reason")).toBe("user");
    expect(await page.locator("#run-cancel-reason").textContent()).toBe(" by a user");
    await screenshot(page, "dashboard-cancelled");
    await page.locator("#nav-runs").click();
    await page.locator(`#runs-table tr[data-run="${id}"][data-status="cancelled"]`).waitFor();
    await screenshot(page, "dashboard-runs");
    await closeClean(page);
  }, 120_000);

  it("is readable and usable at phone width", async () => {
    const page = await browser!.newPage({ width: 390, height: 844 });
    await page.goto(`${baseUrl}/#/runs`);
    await page.locator("#runs-table").waitFor();
    expect(await noHorizontalOverflow(page)).toBe(true);
    // The first Tab reaches the skip link; the status filter is a real select.
    await page.keyboard.press("Tab");
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("skip-link");
    await page.locator("#status-filter").selectOption("cancelled");
    await page.waitForURL(/status=cancelled/);
    // The URL changes before the filtered list arrives: wait for the table rendered for this filter.
    await page
      .locator('#runs-table[data-filter="cancelled"] tr[data-status="cancelled"]')
      .first()
      .waitFor();
    expect(await page.locator('#runs-table tbody tr:not([data-status="cancelled"])').count()).toBe(
      0,
    );
    await page.locator("#runs-table a.run-target").first().click();
    await page.locator("svg.dag").waitFor();
    expect(await noHorizontalOverflow(page)).toBe(true);
    await screenshot(page, "dashboard-phone");
    await closeClean(page);
  }, 60_000);

  it("says why a step waits: a task's concurrency: 1 holds the newer run's step, and the page shows the reason until it runs", async () => {
    const gate = join(scratch, "held-gate");
    await applyYaml(`package: held
tasks:
  hold:
    shell: 'n=0; while [ ! -e "$GATE" ]; do n=$((n+1)); if [ "$n" -gt 1200 ]; then exit 99; fi; sleep 0.1; done'
    timeout: 300s
    concurrency: 1
    env: { QLR_BROWSER_TEST_TAG: ${TAG}, GATE: ${JSON.stringify(gate)} }
workflows:
  one:
    steps:
      only: { task: hold }
`);
    const ids = [
      (await startThroughApi({ package: "held", workflow: "one" })).run.id,
      (await startThroughApi({ package: "held", workflow: "one" })).run.id,
    ].sort();
    // Runs are admitted oldest first: the older one holds the task's only slot.
    const [older = "", newer = ""] = ids;
    const reason = 'waiting: task "hold" at its concurrency limit (1 of 1 running)';
    await waitFor(
      "the older run's step to run and the newer one's to wait",
      async () => {
        const [first, second] = await Promise.all([
          api<RunJson>(`/runs/${older}`),
          api<RunJson>(`/runs/${newer}`),
        ]);
        return first.steps[0]?.status === "running" && second.steps[0]?.waiting === reason
          ? true
          : null;
      },
      60_000,
    );
    // The gate opens whatever happens, so no held run outlives this test.
    try {
      const page = await openWithToken(`/#/runs/${newer}`);
      await expectText(page, '#steps-table [data-waiting="only"]', reason);
      await page.goto(`${baseUrl}/#/runs/${older}`);
      await page.locator('#steps-table tr[data-step="only"][data-status="running"]').waitFor();
      expect(await page.locator("#steps-table [data-waiting]").count()).toBe(0);
      await page.goto(`${baseUrl}/#/runs/${newer}`);
      await expectText(page, '#steps-table [data-waiting="only"]', reason);
      await screenshot(page, "dashboard-waiting");
      await writeFile(gate, "");
      await page.locator('#run-status [data-status="succeeded"]').waitFor({ timeout: 60_000 });
      expect(await page.locator("#steps-table [data-waiting]").count()).toBe(0);
      await waitFor(
        "the older run to succeed",
        async () =>
          (await api<RunJson>(`/runs/${older}`)).run.status === "succeeded" ? true : null,
        60_000,
      );
      await page.close();
    } finally {
      await writeFile(gate, "");
    }
    expect(unexpectedErrors()).toEqual([]);
  }, 180_000);

  it("lists a failed run's alert on its page (event, notifier, state, attempts, last error) and follows it from pending to sent", async () => {
    // A webhook receiver that refuses the first two deliveries, then takes the alert.
    const answers = [503, 503];
    const received: number[] = [];
    const receiver = createServer((request, response) => {
      request.resume();
      request.on("end", () => {
        const status = answers.shift() ?? 200;
        received.push(status);
        response.writeHead(status).end();
      });
    });
    await new Promise<void>((resolveListen) => receiver.listen(0, "127.0.0.1", resolveListen));
    try {
      const address = receiver.address();
      const hookUrl = `http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}/hook`;
      await applyYaml(`package: alerting
tasks:
  alarm:
    run: ["sh", "-c", "echo the disk is full >&2; exit 4"]
    timeout: 30s
    env: { QLR_BROWSER_TEST_TAG: ${TAG} }
    notify:
      - webhook: ${hookUrl}
`);
      const { run } = await startThroughApi({ package: "alerting", task: "alarm" });
      const page = await openWithToken(`/#/runs/${run.id}`);
      await page.locator('#run-status [data-status="failed"]').waitFor({ timeout: 60_000 });
      // Refused once or twice: pending, with the receiver's answer as the last error.
      const pending = page
        .locator('#notifications-table tbody tr[data-state="pending"]')
        .filter({ hasText: "answered 503" });
      await pending.waitFor({ timeout: 30_000 });
      const pendingCells = await pending.locator("td").allTextContents();
      expect(pendingCells[0]).toBe("run.failed");
      expect(pendingCells[1]).toBe("—");
      expect(pendingCells[2]).toBe(hookUrl);
      expect(pendingCells[3]).toBe("pending");
      expect(Number(pendingCells[4])).toBeGreaterThanOrEqual(1);
      expect(pendingCells[5]).toMatch(/^next try /);
      expect(pendingCells[6]).toBe(`POST ${hookUrl} answered 503`);
      await screenshot(page, "dashboard-alert-pending");
      // The third delivery is taken: the row turns to delivered without a reload.
      const delivered = page.locator('#notifications-table tbody tr[data-state="delivered"]');
      await delivered.waitFor({ timeout: 90_000 });
      const deliveredCells = await delivered.locator("td").allTextContents();
      expect(deliveredCells.slice(0, 5)).toEqual(["run.failed", "—", hookUrl, "delivered", "3"]);
      expect(deliveredCells[5]).toMatch(/^sent /);
      expect(deliveredCells[6]).toBe("");
      expect(await page.locator("#notifications-table tbody tr").count()).toBe(1);
      expect(received).toEqual([503, 503, 200]);
      // The page agrees with the API.
      const { notifications } = await api<{
        notifications: { event: string; state: string; attempts: number }[];
      }>(`/notifications?run=${run.id}`);
      expect(notifications).toMatchObject([
        { event: "run.failed", state: "delivered", attempts: 3 },
      ]);
      await page.close();
    } finally {
      await new Promise<void>((resolveClose) => receiver.close(() => resolveClose()));
    }
    expect(unexpectedErrors()).toEqual([]);
  }, 180_000);

  it("opens on an overview of a few hundred runs of every outcome: the charts and lists agree with the store, at desktop and phone width", async () => {
    // History through the API, in batches of ten real runs: quick workflow runs that succeed,
    // task runs that fail, that time out (a 1 s timeout on a sleep 30), and that are cancelled
    // as soon as they are made.
    const started: string[] = [];
    for (let batch = 0; batch < 30; batch += 1) {
      const bodies = [
        ...Array.from({ length: 6 }, () => ({ package: "reports", workflow: "tiny" })),
        ...Array.from({ length: 2 }, () => ({ package: "reports", task: "oops" })),
        { package: "reports", task: "slowpoke" },
      ];
      const runs = await Promise.all(bodies.map((body) => startThroughApi(body)));
      const doomed = await startThroughApi({ package: "reports", task: "wait-upstream" });
      await api(`/runs/${doomed.run.id}/cancel`, { method: "POST" });
      started.push(...runs.map((answer) => answer.run.id), doomed.run.id);
    }
    expect(started.length).toBeGreaterThanOrEqual(300);
    await waitFor(
      "every history run to end",
      async () => {
        const { overview } = await api<{ overview: { active: { id: string }[] } }>(
          "/overview?hours=24",
        );
        return overview.active.every((run) => !started.includes(run.id)) ? true : null;
      },
      300_000,
      500,
    );
    // One run goes on while the page is looked at: it is what runs now.
    const { run: live } = await startThroughApi({ package: "reports", task: "wait-upstream" });
    await waitFor(
      "the live run to run",
      async () => ((await api<RunJson>(`/runs/${live.id}`)).run.status === "running" ? true : null),
      30_000,
    );

    // The store's truth, read through the run list (not the overview's aggregates).
    const ended = new Map<string, string[]>();
    for (const status of ["succeeded", "failed", "timed_out", "cancelled", "lost"])
      ended.set(status, await runIdsWithStatus(status));
    const running = [...(await runIdsWithStatus("running")), ...(await runIdsWithStatus("queued"))];
    expect(running).toEqual([live.id]);
    for (const status of ["succeeded", "failed", "timed_out", "cancelled"])
      expect(ended.get(status)?.length, status).toBeGreaterThanOrEqual(30);
    const endedTotal = [...ended.values()].reduce((sum, ids) => sum + ids.length, 0);
    expect(endedTotal).toBeGreaterThanOrEqual(300);
    const failures = new Set([
      ...(ended.get("failed") ?? []),
      ...(ended.get("timed_out") ?? []),
      ...(ended.get("lost") ?? []),
    ]);

    for (const viewport of [
      { width: 1280, height: 900 },
      { width: 390, height: 844 },
    ]) {
      const page = await openWithToken("/", { viewport });
      await expectText(page, "h1.view-title", "Overview");
      await page.locator(`#runs-chart[data-total="${endedTotal}"]`).waitFor({ timeout: 30_000 });
      // The bars of each status add up to the runs that ended with it.
      const bars = await page
        .locator("#runs-chart rect.bar")
        .evaluateAll((rects) =>
          rects.map((rect) => [rect.getAttribute("data-status"), rect.getAttribute("data-count")]),
        );
      const perStatus = new Map<string, number>();
      for (const [status, count] of bars)
        perStatus.set(status ?? "?", (perStatus.get(status ?? "?") ?? 0) + Number(count));
      expect(Object.fromEntries(perStatus)).toEqual(
        Object.fromEntries(
          [...ended]
            .filter(([, ids]) => ids.length > 0)
            .map(([status, ids]) => [status, ids.length]),
        ),
      );
      expect(
        await page.locator('#duration-chart g.series[data-workflow="reports/tiny"] circle').count(),
      ).toBeGreaterThan(0);
      // Failures of the last 24 hours: as many as the list holds, each a link to a failed run.
      const failureLinks = await page
        .locator("#failures a")
        .evaluateAll((links) => links.map((link) => link.getAttribute("href") ?? ""));
      expect(failureLinks).toHaveLength(Math.min(20, failures.size));
      const linked = failureLinks.map((href) => /^#\/runs\/([^/]+)$/.exec(href)?.[1] ?? href);
      expect(new Set(linked).size).toBe(linked.length);
      for (const id of linked) expect(failures.has(decodeURIComponent(id)), id).toBe(true);
      // Running now: the one live run, with a link.
      await expectText(page, "#active-title", "Running now (1)");
      expect(
        await page
          .locator("#active a")
          .evaluateAll((links) => links.map((link) => link.getAttribute("href"))),
      ).toEqual([`#/runs/${encodeURIComponent(live.id)}`]);
      expect(await noHorizontalOverflow(page)).toBe(true);
      await screenshot(page, `dashboard-overview-${viewport.width}`);
      // A failure links to its run.
      await page.locator("#failures a").first().click();
      await page.waitForURL(/#\/runs\//);
      expect(failures.has(runIdOf(page))).toBe(true);
      await page.close();
    }
    await api(`/runs/${live.id}/cancel`, { method: "POST" });
    expect(unexpectedErrors()).toEqual([]);
  }, 480_000);

  // Runs after the overview test on purpose: its few hundred runs give the run list an older page.
  it("every control reaches its action: reload log, rerun, dismiss, start again, load more, live refresh, forget token", async () => {
    const { run } = await startThroughApi({ package: "reports", workflow: "tiny" });
    await waitFor(
      "the tiny run to succeed",
      async () =>
        (await api<RunJson>(`/runs/${run.id}`)).run.status === "succeeded" ? true : null,
      60_000,
    );
    let logReads = 0;
    const page = await openWithToken(`/#/runs/${run.id}/steps/one`, {
      watch: (watched) =>
        watched.on("request", (request) => {
          if (new URL(request.url()).pathname === `/runs/${run.id}/steps/one/log`) logReads += 1;
        }),
    });
    // The attempt ended and its log was read to the end: only Reload log asks for it again.
    await page.locator('#log[data-finished="true"]').waitFor({ timeout: 30_000 });
    const readsBeforeReload = logReads;
    await page.locator("#refresh-log").click();
    await waitFor("a log read after Reload log", () => logReads > readsBeforeReload, 20_000);
    await page.locator('#log[data-finished="true"]').waitFor();

    await page.locator("#rerun").click();
    await page.waitForURL((url) => !url.hash.includes(encodeURIComponent(run.id)));
    const rerunId = runIdOf(page);
    // Each click below waits for the page of the run it means: the previous view stays until
    // the next one is drawn, and its buttons would act on the previous run.
    await expectText(page, "#run-id", rerunId);
    expect((await api<{ run: { rerunOf: string | null } }>(`/runs/${rerunId}`)).run.rerunOf).toBe(
      run.id,
    );
    await page.locator('#run-status [data-status="succeeded"]').waitFor({ timeout: 60_000 });
    await page.locator("#start-again").click();
    await page.waitForURL((url) => !url.hash.includes(encodeURIComponent(rerunId)));
    const againId = runIdOf(page);
    const again = await api<{ run: { target: string; rerunOf: string | null } }>(
      `/runs/${againId}`,
    );
    expect(again.run).toMatchObject({ target: "tiny", rerunOf: null });
    await expectText(page, "#run-id", againId);

    // A message that stays (no navigation follows a cancel request), then its Dismiss button.
    const { run: doomed } = await startThroughApi({ package: "reports", task: "wait-upstream" });
    await page.goto(`${baseUrl}/#/runs/${doomed.id}`);
    await expectText(page, "#run-id", doomed.id);
    await page.locator("#cancel-run:not([disabled])").click();
    await expectText(page, "#message", `Cancel requested for run ${doomed.id}`);
    await page.locator('#message [data-key="dismiss"]').click();
    await page.locator("#message").waitFor({ state: "detached" });
    await page.locator('#run-status [data-status="cancelled"]').waitFor({ timeout: 30_000 });

    await page.locator("#nav-runs").click();
    await page.locator("#load-more").click();
    await waitFor(
      "the older page of runs",
      async () => (await page.locator("#runs-table tbody tr").count()) > 50,
      20_000,
    );

    await page.locator("#live-toggle").uncheck();
    await page.locator("#conn .dot.paused").waitFor();
    expect(await page.evaluate(() => localStorage.getItem("qlr.dashboard.live"))).toBe("off");
    await page.locator("#live-toggle").check();
    await page.locator("#conn .dot:not(.paused)").waitFor();
    expect(await page.evaluate(() => localStorage.getItem("qlr.dashboard.live"))).toBe("on");

    await page.locator("#forget-token").click();
    await expectText(page, "#token-title", "Token needed");
    expect(await page.evaluate(() => localStorage.getItem("qlr.dashboard.token"))).toBeNull();
    await closeClean(page);
  }, 120_000);
});

/** The ids of every run with `status`, through the run list's keyset pages. */
async function runIdsWithStatus(status: string): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | null = null;
  for (let page = 0; page < 50; page += 1) {
    const answer: { runs: { id: string }[]; nextCursor: string | null } = await api(
      `/runs?status=${status}&limit=200${cursor === null ? "" : `&cursor=${cursor}`}`,
    );
    ids.push(...answer.runs.map((run) => run.id));
    cursor = answer.nextCursor;
    if (cursor === null) return ids;
  }
  throw new Error(`more than 50 pages of ${status} runs`);
}

/** Page errors, minus the browser's own note about the 401 the wrong-token test provokes. */
function unexpectedErrors(): string[] {
  return browser!.errors.filter(
    (error) => !/Failed to load resource: the server responded with a status of 401/.test(error),
  );
}

async function expectText(page: Page, selector: string, text: string): Promise<void> {
  await page.locator(selector).filter({ hasText: text }).first().waitFor();
}
