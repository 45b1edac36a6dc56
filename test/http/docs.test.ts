/**
 * docs/API.md must not drift from the app: every `curl` command on that page is parsed and
 * sent to the app (sql.js store) and must succeed, and every route section names a route the
 * app serves. `$QLR_TOKEN` is the test token; `$RUN_ID` is a finished workflow run of the demo
 * package, applied from examples/demo/package.yaml as the page does.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { findAttemptScope } from "../../src/attempt-scope.ts";
import { applyRecovery } from "../../src/recovery.ts";
import {
  SQLJS_MEMORY_FACTORY,
  TOKEN,
  harnessForBlock,
  errorOf,
  type ApplyView,
  type RunView,
  type Harness,
} from "./support.ts";

const root = join(import.meta.dirname, "..", "..");
const page = readFileSync(join(root, "docs", "API.md"), "utf8");

interface CurlCommand {
  readonly source: string;
  readonly method: string;
  readonly url: URL;
  readonly headers: Record<string, string>;
  readonly body: string | undefined;
}

/** Splits one shell command line into words: single quotes literal, double quotes with $VAR expansion. */
function shellWords(line: string, variables: Record<string, string>): string[] {
  const words: string[] = [];
  let word: string | null = null;
  const expand = (text: string): string =>
    text.replace(/\$([A-Z_]+)/g, (_match, name: string) => variables[name] ?? `$${name}`);
  for (let index = 0; index < line.length; index += 1) {
    const char = line[index] ?? "";
    if (char === "'") {
      const end = line.indexOf("'", index + 1);
      word = (word ?? "") + line.slice(index + 1, end);
      index = end;
    } else if (char === '"') {
      const end = line.indexOf('"', index + 1);
      word = (word ?? "") + expand(line.slice(index + 1, end));
      index = end;
    } else if (/\s/.test(char)) {
      if (word !== null) words.push(word);
      word = null;
    } else if (char === "$") {
      const name = /^\$([A-Z_]+)/.exec(line.slice(index))?.[1] ?? "";
      word = (word ?? "") + (variables[name] ?? `$${name}`);
      index += name.length;
    } else {
      word = (word ?? "") + char;
    }
  }
  if (word !== null) words.push(word);
  return words;
}

/** The `curl` command lines of the page's sh blocks, continuation lines joined, in page order. */
function curlLines(markdown: string): string[] {
  const blocks = [...markdown.matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1] ?? "");
  return blocks.flatMap((block) =>
    block
      .replace(/\\\n\s*/g, " ")
      .split("\n")
      .filter((text) => text.trimStart().startsWith("curl "))
      .map((text) => text.trim()),
  );
}

function parseCurl(line: string, variables: Record<string, string>): CurlCommand {
  const words = shellWords(line, variables);
  let method: string | undefined;
  let url: URL | undefined;
  let body: string | undefined;
  const headers: Record<string, string> = {};
  for (let index = 1; index < words.length; index += 1) {
    const word = words[index] ?? "";
    const next = (): string => words[(index += 1)] ?? "";
    if (word === "-sS" || word === "-s" || word === "-S" || word === "-i") continue;
    else if (word === "-X") method = next();
    else if (word === "-H") {
      const header = next();
      const colon = header.indexOf(":");
      headers[header.slice(0, colon).trim().toLowerCase()] = header.slice(colon + 1).trim();
    } else if (word === "-d" || word === "--data-binary") {
      const data = next();
      body = data.startsWith("@") ? readFileSync(join(root, data.slice(1)), "utf8") : data;
    } else if (word.startsWith("http://")) url = new URL(word);
    else
      throw new Error(`docs/API.md: curl option ${word} is not understood by this test: ${line}`);
  }
  if (url === undefined) throw new Error(`docs/API.md: curl without a URL: ${line}`);
  return {
    source: line,
    method: method ?? (body === undefined ? "GET" : "POST"),
    url,
    headers,
    body,
  };
}

/** The example attempt ids of the worker section, replaced by real ones as the test goes. */
const CLAIMED_EXAMPLE = "ora:8b95adb8378927ada17bb5e7f0c67c5f";
const LOST_EXAMPLE = "ora:1f0e2d3c4b5a69788796a5b4c3d2e1f0";
/** The example lease secrets of the same section, replaced by the ones the claims answered. */
const CLAIMED_SECRET_EXAMPLE = "ls_claimed-example-4f9c2b7a1e8d6035c9b4a7e2";
const LOST_SECRET_EXAMPLE = "ls_lost-example-0a1b2c3d4e5f60718293a4b5c6";
const REMOTE_PACKAGE =
  "package: remote\ntasks:\n  render: { run: [blender, -b, scene.blend], executor: remote_worker, pool: gpu, timeout: 10m }\n";

describe("docs/API.md", () => {
  let h: Harness;
  let runId: string;

  harnessForBlock(SQLJS_MEMORY_FACTORY, async (opened) => {
    h = opened;
    const applied = await h.applyYaml(
      readFileSync(join(root, "examples", "demo", "package.yaml"), "utf8"),
    );
    expect(applied.json<ApplyView>()).toMatchObject({ package: "demo", changed: true });
    const run: RunView = await h.startRun({ package: "demo", workflow: "pipeline" });
    runId = run.id;
    expect((await h.runUntil(runId)).run.status).toBe("succeeded");
    // A remote task whose attempt waits, claimed, for the worker section's claim.
    expect((await h.applyYaml(REMOTE_PACKAGE)).status).toBe(201);
    await h.startRun({ package: "remote", task: "render" });
    await h.tick();
  });

  /** A remote attempt leased to worker-1 and started, for the `lost` example. */
  async function leasedAttempt(): Promise<{ attemptId: string; leaseSecret: string }> {
    await h.startRun({ package: "remote", task: "render" });
    await h.tick();
    const { leases } = await h.expectJson<{
      leases: { attemptId: string; leaseVersion: number; leaseSecret: string }[];
    }>(200, "POST", "/worker/claim", { json: { workerId: "worker-1", pool: "gpu", capacity: 1 } });
    const lease = leases[0];
    if (lease === undefined || lease.leaseVersion !== 1)
      throw new Error(`unexpected claim: ${JSON.stringify(leases)}`);
    await h.expectJson(200, "POST", "/worker/start", {
      json: {
        attemptId: lease.attemptId,
        workerId: "worker-1",
        leaseVersion: 1,
        leaseSecret: lease.leaseSecret,
        phase: "starting",
      },
    });
    return { attemptId: lease.attemptId, leaseSecret: lease.leaseSecret };
  }

  /** A demo run whose first step's attempt failed closed (as recovery leaves it), for the resolve example. */
  async function failedClosedAttempt(): Promise<string> {
    const run: RunView = await h.startRun({ package: "demo", workflow: "pipeline" });
    await h.tickUntil(async () =>
      (await h.runDetail(run.id)).attempts.some((attempt) => attempt.status === "running"),
    );
    const attempt = (await h.runDetail(run.id)).attempts.find((item) => item.status === "running");
    if (attempt === undefined) throw new Error(`run ${run.id} has no running attempt`);
    await h.store.transaction(async (tx) => {
      const nowMs = await tx.observe(h.clock.nowMs());
      const scope = await findAttemptScope(tx, attempt.id);
      const change =
        scope === null
          ? null
          : applyRecovery(
              scope,
              { kind: "fail_closed", reason: "no persisted process handle" },
              scope.definition.retry,
              nowMs,
            );
      if (change !== null) await tx.apply(change);
    });
    return attempt.id;
  }

  it("every curl command on the page succeeds against the app", async () => {
    const lines = curlLines(page);
    expect(lines.length).toBeGreaterThanOrEqual(20);
    const literals = new Map<string, string>();
    let attemptId = "";
    for (const line of lines) {
      if (line.includes("/resolve")) attemptId = await failedClosedAttempt();
      if (line.includes("/worker/lost")) {
        const leased = await leasedAttempt();
        literals.set(LOST_EXAMPLE, leased.attemptId);
        literals.set(LOST_SECRET_EXAMPLE, leased.leaseSecret);
      }
      let text = line;
      for (const [example, actual] of literals) text = text.split(example).join(actual);
      const command = parseCurl(text, { QLR_TOKEN: TOKEN, RUN_ID: runId, ATTEMPT_ID: attemptId });
      expect(command.url.origin, command.source).toBe("http://127.0.0.1:8787");
      const { authorization = null, ...headers } = command.headers;
      if (command.url.pathname !== "/healthz")
        expect(authorization, command.source).toBe(`Bearer ${TOKEN}`);
      const result = await h.call(command.method, `${command.url.pathname}${command.url.search}`, {
        authorization,
        headers,
        ...(command.body === undefined ? {} : { body: command.body }),
      });
      expect(result.status, `${command.source}\n→ ${result.text}`).toBeGreaterThanOrEqual(200);
      expect(result.status, `${command.source}\n→ ${result.text}`).toBeLessThan(300);
      if (command.url.pathname === "/worker/claim") {
        const claimed = result.json<{
          leases: { attemptId: string; leaseVersion: number; leaseSecret: string }[];
        }>().leases;
        expect(claimed.map((lease) => lease.leaseVersion)).toEqual([1]);
        literals.set(CLAIMED_EXAMPLE, claimed[0]?.attemptId ?? "");
        literals.set(CLAIMED_SECRET_EXAMPLE, claimed[0]?.leaseSecret ?? "");
      }
    }
    // The worker walk-through ends with the claimed run succeeded, the one lost with an unknown
    // outcome lost, and the one that provably never spawned back in the queue for a new attempt.
    const remoteRuns = (await h.runsOf("remote")).map((run) => run.status);
    expect(remoteRuns.sort()).toEqual(["lost", "queued", "succeeded"]);
  });

  it("every route heading names a route the app serves (worker routes excepted, as the page says)", async () => {
    const headings = [...page.matchAll(/^### `(GET|POST) ([^`?]+)[^`]*`/gm)].map(
      (match) => [match[1] ?? "", match[2] ?? ""] as const,
    );
    expect(headings.length).toBeGreaterThanOrEqual(13);
    for (const [method, template] of headings) {
      const path = template
        .replace(":id", runId)
        .replace(":name/log", "a/log")
        .replace(":name", "demo");
      const result = await h.call(method, path);
      if (result.status === 404)
        expect(errorOf(result).message, `${method} ${template}`).not.toMatch(/^no route/);
    }
  });

  it("every error code in the table is one the app answers with that status", () => {
    const rows = [...page.matchAll(/^\| `(\w+)` \| ([\d /]+) \|/gm)].map(
      (match) => [match[1] ?? "", (match[2] ?? "").trim()] as const,
    );
    expect(Object.fromEntries(rows)).toEqual({
      unauthorized: "401",
      invalid_request: "400",
      invalid_manifest: "400",
      not_found: "404",
      conflict: "409",
      too_many_waiters: "429",
      payload_too_large: "413",
      storage_unavailable: "503",
      internal: "500 / 503",
    });
  });
});
