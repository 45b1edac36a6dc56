/**
 * The security review's findings on the device runtime, each with real processes: secrets
 * stay off stdout and command lines, the state dir is owner-only, tasks run in a directory of
 * their own (optionally as another user) without the runtime's descriptors, and the log route
 * answers at most 1 MiB with its truncation marker.
 */
import { spawn, type StdioOptions } from "node:child_process";
import { existsSync } from "node:fs";
import {
  chmod,
  chown,
  mkdir,
  open,
  readdir,
  readFile,
  rm,
  stat,
  writeFile,
} from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { describe, expect, it, onTestFinished, type TestContext } from "vitest";
import { checkCoordinatorUrl } from "../../runtimes/node/cli-serve.ts";
import { userTaskFilesRoot } from "../../runtimes/node/launcher/user-task-files.ts";
import { RemoteWorker } from "../../runtimes/node/remote-worker.ts";
import { waitFor } from "../support/wait.ts";
import type { Scratch } from "../support/scratch.ts";
import { childEnv, servingUrl, watchChild } from "../support/serve-child.ts";
import { attemptsOf } from "../support/api-client.ts";
import type { RunDetail } from "../support/api-views.ts";
import { runCli } from "../support/cli-runner.ts";
import { useDeviceHarness } from "../support/device-harness.ts";
import { chain } from "../support/workflow-shapes.ts";

const device = useDeviceHarness();

const MIB = 1024 * 1024;

describe("tokens stay off stdout and command lines", { timeout: 60_000 }, () => {
  it("serve prints the token file's path, never the token", async () => {
    const dir = await device.scratch("token-print");
    const served = await device.serve(dir);
    expect(served.token.length).toBeGreaterThanOrEqual(16);
    expect(served.stdout).not.toContain(served.token);
    expect(served.stderr).not.toContain(served.token);
    expect(served.stdout).toContain(`token: created in ${join(dir.stateDir, "token")}`);
  });

  it("--token warns on stderr; --token-file must be owner-only; the state dir's token file too", async () => {
    const dir = await device.scratch("token-file");
    const served = await device.serve(dir);
    const common = ["--url", served.url, "--state-dir", dir.path("elsewhere")];

    const flagged = await runCli(device.bundle, ["runs", "--token", served.token, ...common]);
    expect(flagged.code).toBe(0);
    expect(flagged.stderr).toMatch(
      /warning: --token puts the token on the command line.*--token-file/,
    );

    const tokenFile = dir.path("admin.token");
    await writeFile(tokenFile, `${served.token}\n`, { mode: 0o600 });
    const fromFile = await runCli(device.bundle, ["runs", "--token-file", tokenFile, ...common]);
    expect(fromFile).toMatchObject({ code: 0, stderr: "" });

    await chmod(tokenFile, 0o644);
    const readable = await runCli(device.bundle, ["runs", "--token-file", tokenFile, ...common]);
    expect(readable.code).toBe(64);
    expect(readable.stderr).toContain(
      `--token-file ${tokenFile} has mode 644; others could read it`,
    );

    // The state dir's own token file is held to the same rule.
    await chmod(join(dir.stateDir, "token"), 0o640);
    const stored = await runCli(device.bundle, [
      "runs",
      "--url",
      served.url,
      "--state-dir",
      dir.stateDir,
    ]);
    expect(stored.code).toBe(64);
    expect(stored.stderr).toContain("has mode 640");
  });
});

describe("qlr worker and its coordinator URL", { timeout: 30_000 }, () => {
  it("plain http is refused unless the coordinator is on loopback or --insecure is given", () => {
    expect(() => checkCoordinatorUrl("http://coordinator.example:8787", false)).toThrow(
      /plain http.*--insecure/,
    );
    expect(() => checkCoordinatorUrl("http://10.0.0.5:8787", false)).toThrow(/plain http/);
    expect(() => checkCoordinatorUrl("ftp://coordinator.example", true)).toThrow(/http\(s\)/);
    expect(checkCoordinatorUrl("http://coordinator.example:8787", true)).toBe(
      "http://coordinator.example:8787",
    );
    for (const url of [
      "https://coordinator.example",
      "http://127.0.0.1:8787",
      "http://localhost:1",
      "http://[::1]:8787",
      "http://127.1.2.3",
    ])
      expect(checkCoordinatorUrl(url, false)).toBe(url);
  });

  it("the CLI exits 64 before sending anything", async () => {
    const dir = await device.scratch("worker-http");
    const result = await runCli(
      device.bundle,
      [
        "worker",
        "--coordinator",
        "http://coordinator.example:8787",
        "--pool",
        "p",
        "--state-dir",
        dir.stateDir,
      ],
      20_000,
    );
    expect(result.code).toBe(64);
    expect(result.stderr).toContain("the token would cross the network in clear");
  });
});

describe("the log route", { timeout: 60_000 }, () => {
  it("answers at most 1 MiB for stdout and stderr together and keeps both truncation markers", async () => {
    // 1.5 MiB to each stream: each file is capped at 1 MiB on disk plus the supervisor's marker.
    const chatty = {
      shell: "head -c 1572864 /dev/zero | tr '\\0' o; head -c 1572864 /dev/zero | tr '\\0' e >&2",
      timeout: "30s",
    };
    const { served } = await device.deploy("log-cap", {
      packageName: "logcap",
      tasks: () => ({ chatty }),
      workflows: { pipeline: chain({ a: "chatty" }) },
    });
    const run = await served.api.startWorkflow("logcap", "pipeline");
    const detail = await served.api.waitTerminal(run.id);
    expect(detail.run.status).toBe("succeeded");
    const response = await fetch(`${served.url}/runs/${run.id}/steps/a/log`, {
      headers: { authorization: `Bearer ${served.token}` },
    });
    expect(response.status).toBe(200);
    const body = Buffer.from(await response.arrayBuffer());
    expect(body.length).toBeLessThanOrEqual(MIB);
    expect(body.length).toBeGreaterThan(MIB - 4096);
    const answer = body.toString("utf8");
    const [stdoutPart, stderrPart] = answer.split("--- stderr ---\n");
    expect(stdoutPart).toMatch(
      /^o+\n\[qlr: log truncated at \d+ of \d+ bytes for this answer\]\n$/,
    );
    expect(stderrPart).toMatch(
      /^e+\n\[qlr: log truncated at \d+ of \d+ bytes for this answer\]\n$/,
    );
  });
});

/** Skips a test that only root can run, saying why and as whom it ran. */
function skipUnlessRoot(context: TestContext, why: string): void {
  const uid = process.getuid?.() ?? -1;
  if (uid === 0) return;
  console.log("skipped: %s, and this test runs as uid %d", why, uid);
  context.skip();
}
const NOBODY_UID = 65534;

/** Runs one single-step workflow `p/w` of `task` on a fresh runtime and answers the step's log and detail. */
async function runOneStep(
  dir: Scratch,
  packageName: string,
  taskSpec: Record<string, unknown>,
): Promise<{ log: string; detail: RunDetail; stateDir: string }> {
  const { text } = await dir.manifest(packageName, { t: taskSpec }, { w: chain({ a: "t" }) });
  const served = await device.serve(dir);
  await served.api.apply(text);
  const run = await served.api.startWorkflow(packageName, "w");
  const detail = await served.api.waitTerminal(run.id);
  const log = await served.api.call<string>("GET", `/runs/${run.id}/steps/a/log`);
  return {
    log: typeof log.body === "string" ? log.body : JSON.stringify(log.body),
    detail,
    stateDir: served.stateDir,
  };
}

describe("tasks run in a directory of their own", { timeout: 60_000 }, () => {
  it("a task without cwd starts in <state>/work/<attemptId>, never in the state dir or its parent; a declared cwd is kept", async () => {
    const dir = await device.scratch("task-cwd");
    const { log, detail } = await runOneStep(dir, "cwd", { shell: "pwd; ls -a", timeout: "10s" });
    expect(detail.run.status).toBe("succeeded");
    const attemptId = attemptsOf(detail, "a")[0]?.id ?? "";
    expect(log).toBe(`${join(dir.stateDir, "work", attemptId)}\n.\n..\n`);
    expect((await stat(join(dir.stateDir, "work", attemptId))).mode & 0o777).toBe(0o700);

    const declared = await device.scratch("task-cwd-declared");
    const chosen = declared.path("chosen");
    await mkdir(chosen);
    const second = await runOneStep(declared, "cwd", {
      shell: "pwd",
      cwd: chosen,
      timeout: "10s",
    });
    expect(second.log).toBe(`${chosen}\n`);
  });

  it("user: runs the task under another uid and gid, which can read neither the receipt key nor the state dir", async (context) => {
    skipUnlessRoot(context, "`user:` needs the runtime to run as root");
    const dir = await device.scratch("task-user");
    await chmod(dir.root, 0o755);
    const script = [
      "id -u; id -g",
      "pwd",
      `if cat '${join(dir.stateDir, "receipt.key")}' 2>/dev/null; then echo KEY-READABLE; else echo key-refused; fi`,
      `if ls '${dir.stateDir}' >/dev/null 2>&1; then echo STATE-LISTABLE; else echo state-refused; fi`,
      "if cat ../../receipt.key 2>/dev/null; then echo KEY-READABLE-RELATIVE; else echo relative-refused; fi",
      "echo written > own-file && cat own-file",
    ].join("\n");
    // The folder of the state dir's user: tasks is in the temporary folder, not the scratch.
    onTestFinished(() => rm(userTaskFilesRoot(dir.stateDir), { recursive: true, force: true }));
    const { log, detail, stateDir } = await runOneStep(dir, "user", {
      shell: script,
      user: "nobody",
      timeout: "10s",
    });
    expect(detail.run.status, log).toBe("succeeded");
    const attemptId = attemptsOf(detail, "a")[0]?.id ?? "";
    const work = join(stateDir, "work", attemptId);
    expect(log).toBe(
      `${NOBODY_UID}\n${NOBODY_UID === 65534 ? "65534" : ""}\n${work}\nkey-refused\nstate-refused\nrelative-refused\nwritten\n`,
    );
    expect((await stat(work)).uid).toBe(NOBODY_UID);
    expect((await stat(join(stateDir, "receipt.key"))).mode & 0o777).toBe(0o600);
    expect((await stat(stateDir)).mode & 0o777).toBe(0o700);
  });

  it("user: on a runtime that cannot switch users is a spawn failure that names the reason", async () => {
    const dir = await device.scratch("task-user-unknown");
    const { detail } = await runOneStep(dir, "user", {
      shell: "echo never",
      user: "no-such-user-qlr",
      timeout: "10s",
    });
    expect(detail.run.status).toBe("failed");
    expect(attemptsOf(detail, "a")[0]?.error).toMatch(
      /task user "no-such-user-qlr" is not in \/etc\/passwd/,
    );
  });
});

describe("descriptors the runtime inherited never reach a task", { timeout: 60_000 }, () => {
  it("a task started by a runtime holding an inheritable fd 40 sees only 0, 1 and 2", async () => {
    const dir = await device.scratch("task-fds");
    const { text } = await dir.manifest(
      "fds",
      { t: { shell: "ls /proc/$$/fd", timeout: "10s" } },
      { w: chain({ a: "t" }) },
    );
    const leaked = await open(dir.path("leaked-file"), "w");
    // stdio entries 3–39 are absent: the runtime's Node start-up marks only the low, contiguous
    // descriptors close-on-exec, so fd 40 stays inheritable, as one from a service manager would.
    const stdio: StdioOptions = [
      "ignore",
      "pipe",
      "pipe",
      ...Array.from({ length: 37 }, () => "ignore" as const),
      leaked.fd,
    ];
    const child = spawn(
      process.execPath,
      [device.bundle.qlr, "serve", "--state-dir", dir.stateDir, "--port", "0"],
      { env: childEnv(), stdio },
    );
    try {
      const url = await servingUrl(child, watchChild(child), "qlr serve", 30_000);
      const runtimeFds = await readdir(`/proc/${child.pid}/fd`);
      expect(runtimeFds).toContain("40");
      const token = (await readFile(join(dir.stateDir, "token"), "utf8")).trim();
      const api = new (await import("../support/api-client.ts")).Api(url, token);
      await api.apply(text);
      const run = await api.startWorkflow("fds", "w");
      const detail = await api.waitTerminal(run.id);
      expect(detail.run.status).toBe("succeeded");
      const log = await api.call<string>("GET", `/runs/${run.id}/steps/a/log`);
      expect(
        String(log.body)
          .split("\n")
          .filter((line) => line.length > 0),
      ).toEqual(["0", "1", "2"]);
    } finally {
      child.kill("SIGKILL");
      await leaked.close();
    }
  });
});

describe("the state dir is the runtime's own", { timeout: 60_000 }, () => {
  it("a state dir others could read is tightened to 0700; the store and token are owner-only", async () => {
    const dir = await device.scratch("state-mode");
    await mkdir(dir.stateDir, { mode: 0o755 });
    await chmod(dir.stateDir, 0o755);
    const served = await device.serve(dir);
    expect(served.stderr).toContain(`state dir ${dir.stateDir} had mode 755; tightened to 700`);
    expect((await stat(dir.stateDir)).mode & 0o777).toBe(0o700);
    expect((await stat(join(dir.stateDir, "token"))).mode & 0o777).toBe(0o600);
    expect((await stat(join(dir.stateDir, "receipt.key"))).mode & 0o777).toBe(0o600);
    // The embedded store: its directory and every file in it.
    const dbDir = join(dir.stateDir, "db");
    expect((await stat(dbDir)).mode & 0o777).toBe(0o700);
    for (const name of await readdir(dbDir))
      expect((await stat(join(dbDir, name))).mode & 0o777, name).toBe(0o600);
    for (const name of ["journal", "receipts", "logs", "stops", "tmp", "work"]) {
      if (existsSync(join(dir.stateDir, name)))
        expect((await stat(join(dir.stateDir, name))).mode & 0o777, name).toBe(0o700);
    }
  });

  it("a state dir that belongs to another user is refused with a clear error", async (context) => {
    skipUnlessRoot(context, "giving a directory to another user needs root");
    const dir = await device.scratch("state-owner");
    await mkdir(dir.stateDir, { mode: 0o700 });
    await chown(dir.stateDir, NOBODY_UID, NOBODY_UID);
    const result = await runCli(
      device.bundle,
      ["serve", "--state-dir", dir.stateDir, "--port", "0"],
      30_000,
    );
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain(`state dir ${dir.stateDir} belongs to uid ${NOBODY_UID}`);
    expect(await readdir(dir.stateDir)).toEqual([]);
  });
});

describe("qlr worker checks claimed attempt ids", { timeout: 30_000 }, () => {
  it("an attempt id that is not portable names no file and is never started", async () => {
    const dir = await device.scratch("worker-ids");
    const paths: string[] = [];
    let claims = 0;
    const bad = ["../../escape", "a/b", ".hidden", "x".repeat(40)].map((attemptId) => ({
      attemptId,
      leaseVersion: 1,
      leaseSecret: "secret-from-a-bad-coordinator",
      leaseExpiresAtMs: 0,
      runId: "r",
      stepRunId: null,
      taskRevision: "qltd:v1:1:x",
      execution: {
        executor: "remote_worker",
        pool: "p",
        argv: ["true"],
        env: {},
        timeoutMs: 1000,
        shell: false,
      },
    }));
    const server = createServer((request, response) => {
      paths.push(request.url ?? "");
      request.resume();
      request.on("end", () => {
        response.setHeader("content-type", "application/json");
        if (request.url === "/worker/claim") {
          claims += 1;
          response.end(JSON.stringify({ leases: claims === 1 ? bad : [] }));
          return;
        }
        response.statusCode = 404;
        response.end(JSON.stringify({ error: { code: "not_found", message: "no", details: [] } }));
      });
    });
    await new Promise<void>((resolveListen) => server.listen(0, "127.0.0.1", resolveListen));
    const logs: string[] = [];
    const worker = await RemoteWorker.create({
      coordinatorUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      token: "worker-token-for-the-test",
      pool: "p",
      capacity: 8,
      stateDir: dir.stateDir,
      pollIntervalMs: 20,
      log: (line) => logs.push(line),
    });
    try {
      worker.start();
      await waitFor("two claims", () => claims >= 2);
    } finally {
      await worker.stop();
      server.close();
    }
    expect(paths.filter((path) => path !== "/worker/claim")).toEqual([]);
    expect(await readdir(join(dir.stateDir, "leases"))).toEqual([]);
    expect(existsSync(dir.path("escape.json"))).toBe(false);
    expect(logs.filter((line) => line.includes("invalid attempt id"))).toHaveLength(bad.length);
  });
});
