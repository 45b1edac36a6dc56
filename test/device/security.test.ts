/**
 * The security review's findings on the device runtime, each with real processes: secrets
 * stay off stdout and command lines, the state dir is owner-only, tasks run in a directory of
 * their own (optionally as another user) without the runtime's descriptors, and the log route
 * answers at most 1 MiB with its truncation marker.
 */
import { chmod, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { checkCoordinatorUrl } from "../../runtimes/node/cli.ts";
import { buildBundle, runCli, Scratch, startServe, stopAllServed, type Bundle } from "./support.ts";

let bundle: Bundle;
const scratches: Scratch[] = [];

async function scratch(name: string): Promise<Scratch> {
  const created = await Scratch.create(name);
  scratches.push(created);
  return created;
}

beforeAll(async () => {
  bundle = await buildBundle();
});

afterEach(async () => {
  stopAllServed();
  for (const item of scratches.splice(0)) await item.cleanup();
});

afterAll(async () => {
  await bundle.cleanup();
});

const MIB = 1024 * 1024;

describe("tokens stay off stdout and command lines", () => {
  it("serve prints the token file's path, never the token", { timeout: 60_000 }, async () => {
    const dir = await scratch("token-print");
    const served = await startServe(bundle, dir.stateDir);
    expect(served.token.length).toBeGreaterThanOrEqual(16);
    expect(served.stdout).not.toContain(served.token);
    expect(served.stderr).not.toContain(served.token);
    expect(served.stdout).toContain(`token: created in ${join(dir.stateDir, "token")}`);
  });

  it("--token warns on stderr; --token-file must be owner-only; the state dir's token file too", { timeout: 60_000 }, async () => {
    const dir = await scratch("token-file");
    const served = await startServe(bundle, dir.stateDir);
    const common = ["--url", served.url, "--state-dir", dir.path("elsewhere")];

    const flagged = await runCli(bundle, ["runs", "--token", served.token, ...common]);
    expect(flagged.code).toBe(0);
    expect(flagged.stderr).toMatch(/warning: --token puts the token on the command line.*--token-file/);

    const tokenFile = dir.path("admin.token");
    await writeFile(tokenFile, `${served.token}\n`, { mode: 0o600 });
    const fromFile = await runCli(bundle, ["runs", "--token-file", tokenFile, ...common]);
    expect(fromFile).toMatchObject({ code: 0, stderr: "" });

    await chmod(tokenFile, 0o644);
    const readable = await runCli(bundle, ["runs", "--token-file", tokenFile, ...common]);
    expect(readable.code).toBe(64);
    expect(readable.stderr).toContain(`--token-file ${tokenFile} has mode 644; others could read it`);

    // The state dir's own token file is held to the same rule.
    await chmod(join(dir.stateDir, "token"), 0o640);
    const stored = await runCli(bundle, ["runs", "--url", served.url, "--state-dir", dir.stateDir]);
    expect(stored.code).toBe(64);
    expect(stored.stderr).toContain("has mode 640");
  });
});

describe("qlr worker and its coordinator URL", () => {
  it("plain http is refused unless the coordinator is on loopback or --insecure is given", () => {
    expect(() => checkCoordinatorUrl("http://coordinator.example:8787", false)).toThrow(/plain http.*--insecure/);
    expect(() => checkCoordinatorUrl("http://10.0.0.5:8787", false)).toThrow(/plain http/);
    expect(() => checkCoordinatorUrl("ftp://coordinator.example", true)).toThrow(/http\(s\)/);
    expect(checkCoordinatorUrl("http://coordinator.example:8787", true)).toBe("http://coordinator.example:8787");
    for (const url of ["https://coordinator.example", "http://127.0.0.1:8787", "http://localhost:1", "http://[::1]:8787", "http://127.1.2.3"]) expect(checkCoordinatorUrl(url, false)).toBe(url);
  });

  it("the CLI exits 64 before sending anything", { timeout: 30_000 }, async () => {
    const dir = await scratch("worker-http");
    const result = await runCli(bundle, ["worker", "--coordinator", "http://coordinator.example:8787", "--pool", "p", "--state-dir", dir.stateDir], 20_000);
    expect(result.code).toBe(64);
    expect(result.stderr).toContain("the token would cross the network in clear");
  });
});

describe("the log route", () => {
  it("answers at most 1 MiB for stdout and stderr together and keeps both truncation markers", { timeout: 60_000 }, async () => {
    const dir = await scratch("log-cap");
    // 1.5 MiB to each stream: each file is capped at 1 MiB on disk plus the supervisor's marker.
    const chatty = { shell: "head -c 1572864 /dev/zero | tr '\\0' o; head -c 1572864 /dev/zero | tr '\\0' e >&2", timeout: "30s" };
    const { text } = await dir.manifest("logcap", { chatty }, { pipeline: { steps: { a: { task: "chatty" } } } });
    const served = await startServe(bundle, dir.stateDir);
    await served.api.apply(text);
    const run = await served.api.startWorkflow("logcap", "pipeline");
    const detail = await served.api.waitTerminal(run.id);
    expect(detail.run.status).toBe("succeeded");
    const response = await fetch(`${served.url}/runs/${run.id}/steps/a/log`, { headers: { authorization: `Bearer ${served.token}` } });
    expect(response.status).toBe(200);
    const body = Buffer.from(await response.arrayBuffer());
    expect(body.length).toBeLessThanOrEqual(MIB);
    expect(body.length).toBeGreaterThan(MIB - 4096);
    const answer = body.toString("utf8");
    const [stdoutPart, stderrPart] = answer.split("--- stderr ---\n");
    expect(stdoutPart).toMatch(/^o+\n\[qlr: log truncated at \d+ of \d+ bytes for this answer\]\n$/);
    expect(stderrPart).toMatch(/^e+\n\[qlr: log truncated at \d+ of \d+ bytes for this answer\]\n$/);
  });
});
