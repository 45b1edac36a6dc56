/**
 * The simulation page, run in Chromium, ends a seed in exactly the state the Node simulation
 * reaches for the same seed: same final state digest, same action log, same spawned attempts.
 * On sql.js, on PGlite (in the page, compared with Node on sql.js), with changed fault knobs,
 * and when the case is stepped through by hand.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  DEFAULT_SETTINGS,
  logDigest,
  settingsToHash,
  SIM_START_MS,
  spawnDigest,
  STORE_OPENED_AT_MS,
  type SimSettings,
} from "../../runtimes/browser/simulation/engine.ts";
import { simulate } from "../../src/sim/simulation.ts";
import { lossyDriver } from "../../storage/lossy-driver.ts";
import { openSqlStore } from "../../storage/sql-store.ts";
import { MIGRATIONS as SQLITE_MIGRATIONS } from "../../storage/sqlite/migrations.generated.ts";
import { loadSqlJs } from "../../storage/sqljs/node/load.ts";
import { openSqlJsMemoryDriver } from "../../storage/sqljs/memory-driver.ts";
import {
  launchBrowser,
  REPO_ROOT,
  screenshot,
  serveStatic,
  type Browser,
  type StaticServer,
} from "./support.ts";

interface Digests {
  readonly finalDigest: string;
  readonly logDigest: string;
  readonly spawnDigest: string;
}

/** The Node side, written out as test/sim runs a seed: a fresh sql.js store, the lossy driver. */
async function nodeDigests(settings: SimSettings): Promise<Digests> {
  const lossy = lossyDriver(openSqlJsMemoryDriver(await loadSqlJs()));
  const store = await openSqlStore(lossy.driver, SQLITE_MIGRATIONS, STORE_OPENED_AT_MS);
  const faults = {
    ...(settings.failureRate === null ? {} : { failureRate: settings.failureRate }),
    ...(settings.spawnFailureRate === null ? {} : { spawnFailureRate: settings.spawnFailureRate }),
  };
  const result = await simulate(store, {
    seed: settings.seed,
    startMs: SIM_START_MS,
    actions: settings.actions,
    ...(settings.lostCommits ? { lostCommitResponses: lossy } : {}),
    ...(Object.keys(faults).length > 0 ? { executorFaults: faults } : {}),
  });
  await lossy.driver.close();
  expect(result.drained).toBe(true);
  return {
    finalDigest: result.finalDigest,
    logDigest: logDigest(result.log),
    spawnDigest: spawnDigest(result),
  };
}

async function pageDigests(page: Page, timeoutMs: number): Promise<Digests> {
  await page
    .locator('#sim-state[data-state="done"], #sim-state[data-state="error"]')
    .waitFor({ timeout: timeoutMs });
  expect(
    await page.locator("#sim-state").getAttribute("data-state"),
    (await page.locator("#sim-state").textContent()) ?? "",
  ).toBe("done");
  return {
    finalDigest: (await page.locator("#final-digest").textContent())?.trim() ?? "",
    logDigest: (await page.locator("#log-digest").textContent())?.trim() ?? "",
    spawnDigest: (await page.locator("#spawn-digest").textContent())?.trim() ?? "",
  };
}

let out = "";
let server: StaticServer | null = null;
let browser: Browser | null = null;

beforeAll(async () => {
  // A private build: another test (or a person) may be rebuilding dist/ at the same time.
  out = await mkdtemp(join(tmpdir(), "qlr-browser-build-"));
  await promisify(execFile)(
    process.execPath,
    [join(REPO_ROOT, "scripts/build-browser.mjs"), "--out", out],
    { cwd: REPO_ROOT, timeout: 120_000 },
  );
  server = await serveStatic(join(out, "simulation"));
  browser = await launchBrowser();
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  if (out !== "") await rm(out, { recursive: true, force: true });
});

describe("simulation page", () => {
  it("ends seed 75 on sql.js in the page exactly as in Node", async () => {
    // Seed 75: a seven-step workflow with ten edges and four coordinator crashes.
    const settings: SimSettings = { ...DEFAULT_SETTINGS, seed: 75, store: "sqljs" };
    const expected = await nodeDigests(settings);
    const page = await browser!.newPage({ width: 1280, height: 900 });
    // A link with a seed is a shared case: the page runs it on load.
    await page.goto(`${server!.url}/${settingsToHash(settings)}`);
    const actual = await pageDigests(page, 60_000);
    expect(actual).toEqual(expected);
    expect(await page.locator("#sim-runs-grid .run-card").count()).toBeGreaterThan(0);
    expect(await page.locator("#timeline li").count()).toBeGreaterThan(10);
    expect(await page.locator("#sim-drained").textContent()).toMatch(/^yes/);
    await page.locator("#hide-ticks").check();
    await page.locator(".timeline-frame").evaluate((frame) => frame.scrollTo(0, 0));
    await screenshot(page, "simulation-full");
    // The README's copy: the top of the page (case, result, the first runs' graphs).
    await page.setViewportSize({ width: 1280, height: 1500 });
    await page.evaluate(() => window.scrollTo(0, 0));
    await screenshot(page, "simulation", { docs: true, fullPage: false });
    await page.close();
    expect(browser!.errors).toEqual([]);
  }, 120_000);

  it("ends a seed with changed fault knobs and no lost commits as Node does", async () => {
    const settings: SimSettings = {
      ...DEFAULT_SETTINGS,
      seed: 7,
      store: "sqljs",
      lostCommits: false,
      failureRate: 0.4,
      spawnFailureRate: 0.1,
      actions: 150,
    };
    const expected = await nodeDigests(settings);
    const defaults = await nodeDigests({ ...settings, failureRate: null, spawnFailureRate: null });
    expect(expected.finalDigest).not.toBe(defaults.finalDigest);
    const page = await browser!.newPage();
    await page.goto(`${server!.url}/${settingsToHash(settings)}`);
    expect(await pageDigests(page, 60_000)).toEqual(expected);
    expect(await page.locator("#fail").inputValue()).toBe("0.4");
    await page.close();
    expect(browser!.errors).toEqual([]);
  }, 120_000);

  it("reaches the same state when the case is stepped through by hand", async () => {
    const settings: SimSettings = { ...DEFAULT_SETTINGS, seed: 1234, store: "sqljs" };
    const expected = await nodeDigests(settings);
    // At phone width: the page must stay usable there too.
    const page = await browser!.newPage({ width: 390, height: 844 });
    await page.goto(`${server!.url}/`);
    await page.locator("#seed").fill("1234");
    await page.locator("#step-through").click();
    await page.locator('#sim-state[data-state="paused"]').waitFor();
    expect(page.url()).toContain("seed=1234");
    for (let press = 0; press < 5; press += 1) {
      const before = await page.locator("#timeline li").count();
      await page.locator("#step").click();
      await page.waitForFunction(
        (count) => document.querySelectorAll("#timeline li").length > count,
        before,
      );
    }
    await page.locator('#sim-state[data-state="paused"]').waitFor();
    expect(await page.locator("#timeline li").count()).toBe(6);
    expect(
      await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1),
    ).toBe(true);
    await screenshot(page, "simulation-phone-paused");
    // Animate for a while, pause again, then finish at full speed: still the same end.
    await page.locator("#resume").click();
    await page.waitForFunction(() => document.querySelectorAll("#timeline li").length > 12);
    await page.locator("#pause").click();
    await page.locator('#sim-state[data-state="paused"]').waitFor();
    await page.locator("#finish").click();
    expect(await pageDigests(page, 60_000)).toEqual(expected);
    await page.close();
    expect(browser!.errors).toEqual([]);
  }, 120_000);

  it("ends seed 42 on PGlite in the page exactly as Node does on sql.js", async () => {
    const settings: SimSettings = { ...DEFAULT_SETTINGS, seed: 42, store: "pglite" };
    const expected = await nodeDigests({ ...settings, store: "sqljs" });
    const page = await browser!.newPage();
    await page.goto(`${server!.url}/${settingsToHash(settings)}`);
    expect(await pageDigests(page, 240_000)).toEqual(expected);
    expect(await page.locator("#sim-store").textContent()).toContain("PGlite");
    await screenshot(page, "simulation-pglite");
    await page.close();
    expect(browser!.errors).toEqual([]);
  }, 300_000);
});
