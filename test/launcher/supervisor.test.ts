import { spawn } from "node:child_process";
import { readdir, readFile, stat } from "node:fs/promises";
import { connect, createServer } from "node:net";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { isQlrError } from "../../src/errors.ts";
import { createFileExclusiveDurable } from "../../runtimes/node/launcher/durable-file.ts";
import { journalText } from "../../runtimes/node/launcher/journal.ts";
import { minimalBaseEnv, readBootId, readProcStat } from "../../runtimes/node/launcher/index.ts";
import { SupervisorClient } from "../../runtimes/node/launcher/supervisor-client.ts";
import {
  SUPERVISOR_FEATURE_CREATE_CWD,
  supervisorSocketName,
  type SupervisorSpec,
} from "../../runtimes/node/launcher/supervisor-protocol.ts";
import {
  attemptWorkPath,
  journalPath,
  stateLayout,
} from "../../runtimes/node/launcher/state-layout.ts";
import {
  isGoneOrZombie,
  useScratch,
  newAttemptId,
  newLauncher,
  shellSpec,
  skipUnlessRoot,
  supervisorOfTask,
  waitFor,
  waitForReceipt,
} from "./support.ts";
import {
  notedSupervisorFlags,
  writeFeaturelessSupervisor,
  writeNotingSupervisor,
} from "../support/noting-supervisor.ts";

const scratch = useScratch("supervisor");

async function journalAttempt(
  stateDir: string,
  attemptId: string,
  startedAtMs: number,
): Promise<void> {
  const layout = stateLayout(stateDir);
  const bootId = (await readBootId()) ?? "unknown";
  await createFileExclusiveDurable(
    journalPath(layout, attemptId),
    layout.tmpDir,
    journalText({
      version: 1,
      attemptId,
      startedAtMs,
      bootId,
      argvDigest: `sha256:${"0".repeat(64)}`,
      cwd: null,
      logMaxBytes: 1024,
    }),
  );
}

function touchSpec(attemptId: string, marker: string): SupervisorSpec {
  return {
    attemptId,
    argv: ["touch", marker],
    env: minimalBaseEnv(),
    cwd: "/",
    logMaxBytes: 1024,
    uid: null,
    gid: null,
    timeoutMs: null,
    graceMs: 100,
  };
}

/** A client of the state dir's supervisor that proves itself with `hmacKey`. */
function supervisorClient(stateDir: string, hmacKey: Uint8Array): SupervisorClient {
  return new SupervisorClient({
    stateDir,
    hmacKey,
    supervisorPath: scratch.supervisorPath,
    supervisorEnv: minimalBaseEnv(),
  });
}

/** Runs the supervisor by hand and returns its start-up line and exit code. */
async function runSupervisor(
  stateDir: string,
): Promise<{ report: string; exitCode: number | null }> {
  const child = spawn(process.execPath, [scratch.supervisorPath, stateDir], {
    stdio: ["ignore", "ignore", "ignore", "pipe"],
  });
  let report = "";
  child.stdio[3]?.on("data", (chunk: Buffer) => (report += chunk.toString("utf8")));
  const exitCode = await new Promise<number | null>((resolve) =>
    child.once("exit", (code) => resolve(code)),
  );
  return { report, exitCode };
}

describe("the resident supervisor", () => {
  it("supervises every task of a state directory in one process; a second one answers busy and leaves", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    const handles = [];
    for (let index = 0; index < 3; index += 1)
      handles.push(await launcher.launch(shellSpec("sleep 0.3")));
    const parents = new Set<number>();
    for (const handle of handles) {
      const reading = await readProcStat(handle.pid);
      if (reading.kind === "present") parents.add(reading.stat.parentPid);
    }
    expect(parents.size).toBe(1);
    expect(await runSupervisor(stateDir)).toEqual({ report: '{"kind":"busy"}\n', exitCode: 0 });
    for (const handle of handles)
      expect((await waitForReceipt(launcher, handle.attemptId)).status).toBe("valid");
    // Nothing left to supervise and nobody connected: it leaves by itself.
    launcher.close();
    const [supervisorPid] = parents;
    if (supervisorPid !== undefined)
      await waitFor("the idle supervisor to exit", () => isGoneOrZombie(supervisorPid));
  });

  it("refuses to start a task that has no journal record", async () => {
    const { launcher, stateDir, hmacKey } = await newLauncher(scratch, { supervisorUp: true });
    const client = supervisorClient(stateDir, hmacKey);
    const attemptId = newAttemptId();
    const marker = join(stateDir, "ran");
    const reply = await client.request({ op: "launch", spec: touchSpec(attemptId, marker) });
    expect(reply).toMatchObject({
      kind: "rejected",
      reason: expect.stringContaining("no journal record") as unknown,
    });
    expect(await launcher.readReceipt(attemptId)).toEqual({ status: "none" });
    expect(await readdir(stateDir)).not.toContain("ran");
    client.close();
    launcher.close();
  });

  it("answers an unknown attempt's settle with never, and refuses to launch it from then on", async () => {
    const { launcher, stateDir, hmacKey } = await newLauncher(scratch, { supervisorUp: true });
    const attemptId = newAttemptId();
    await journalAttempt(stateDir, attemptId, 1234);
    // Journaled, no spawn record, and the live supervisor never heard of it.
    expect(await launcher.supervision(attemptId)).toBe("never_spawned");
    const client = supervisorClient(stateDir, hmacKey);
    const marker = join(stateDir, "ran");
    const reply = await client.request({ op: "launch", spec: touchSpec(attemptId, marker) });
    expect(reply).toMatchObject({ kind: "rejected" });
    expect(await readdir(stateDir)).not.toContain("ran");
    expect(await launcher.readReceipt(attemptId)).toEqual({ status: "none" });
    client.close();
    launcher.close();
  });

  it("a supervisor that hangs up during the handshake, as an idle one leaving does, is replaced: the launch runs", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    // The state directory's name answers once and hangs up, then is let go: what a runtime
    // meets when it connects in the instant an idle supervisor exits.
    const leaving = createServer((socket) => {
      socket.destroy();
      leaving.close();
    });
    await new Promise<void>((resolve, reject) => {
      leaving.once("error", reject);
      leaving.listen({ path: supervisorSocketName(stateDir) }, resolve);
    });
    const hungUp = new Promise<void>((resolve) => leaving.once("close", resolve));
    const handle = await launcher.launch(shellSpec("exit 0"));
    await hungUp;
    const receipt = await waitForReceipt(launcher, handle.attemptId);
    expect(
      receipt.status === "valid" ? [receipt.receipt.exitCode, receipt.receipt.spawnError] : receipt,
    ).toEqual([0, null]);
    launcher.close();
  });

  it("talks only to a holder of the receipt key, both ways", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    const warmUp = newAttemptId();
    await launcher.launch({
      attemptId: warmUp,
      argv: ["sleep", "0.5"],
      env: {},
      cwd: null,
      logMaxBytes: 1024,
    });
    // A client with another key: the supervisor hangs up after the wrong proof.
    const stranger = supervisorClient(stateDir, new Uint8Array(32).fill(7));
    await expect(stranger.request({ op: "settle", attemptId: warmUp })).rejects.toSatisfy(
      (error: unknown) => isQlrError(error, "integrity"),
    );
    // A raw connection that skips the handshake gets nothing but the challenge.
    const received = await new Promise<string>((resolve) => {
      let text = "";
      const socket = connect({ path: supervisorSocketName(stateDir) });
      socket.on("data", (chunk: Buffer) => {
        text += chunk.toString("utf8");
        if (text.includes("\n"))
          socket.write(`${JSON.stringify({ op: "settle", attemptId: warmUp })}\n`);
      });
      socket.on("error", () => undefined);
      socket.on("close", () => resolve(text));
    });
    expect(received).toMatch(/^\{"kind":"challenge","nonce":"[0-9a-f]{32}"\}\n$/);
    expect((await waitForReceipt(launcher, warmUp)).status).toBe("valid");
    expect(await readFile(join(stateDir, "spawns", `${warmUp}.json`), "utf8")).toContain(
      '"supervisorPid"',
    );
    launcher.close();
  });
});

/**
 * A task without `cwd` runs in `work/<attemptId>/`. The supervisor makes it right before the
 * spawn when it announces `create-cwd` (the runtime's event loop then has a mkdir less per
 * launch); a resident supervisor of an older build announces nothing, and the launcher makes
 * the directory itself as it always did.
 */
describe("the attempt's own work dir", () => {
  async function pwdOfTask(
    supervisorPath: string,
    user?: string,
  ): Promise<{
    stateDir: string;
    attemptId: string;
    features: ReadonlySet<string>;
    stdout: string;
  }> {
    const { launcher, stateDir, hmacKey } = await newLauncher({ dir: scratch.dir, supervisorPath });
    const spec = shellSpec("pwd", user === undefined ? {} : { user });
    await launcher.launch(spec);
    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status === "valid" && reading.receipt.exitCode).toBe(0);
    const stdout = await readFile(launcher.logPath(spec.attemptId, "stdout"), "utf8");
    const client = new SupervisorClient({
      stateDir,
      hmacKey,
      supervisorPath,
      supervisorEnv: minimalBaseEnv(),
    });
    const features = await client.connected();
    client.close();
    launcher.close();
    return { stateDir, attemptId: spec.attemptId, features, stdout };
  }

  it("is made by a supervisor that announces it, and by the launcher when the supervisor does not", async () => {
    const current = await pwdOfTask(scratch.supervisorPath);
    expect([...current.features]).toContain(SUPERVISOR_FEATURE_CREATE_CWD);
    const older = await pwdOfTask(
      await writeFeaturelessSupervisor(
        join(scratch.dir, "featureless-supervisor.mjs"),
        scratch.supervisorPath,
      ),
    );
    expect([...older.features]).toEqual([]);
    for (const { stateDir, attemptId, stdout } of [current, older]) {
      const work = attemptWorkPath(stateLayout(stateDir), attemptId);
      expect(stdout).toBe(`${work}\n`);
      expect((await stat(work)).mode & 0o777).toBe(0o700);
    }
  });

  it("belongs to the task's user, whichever side made it", async (context) => {
    skipUnlessRoot(context, "`user:` needs the supervisor to run as root");
    const featureless = await writeFeaturelessSupervisor(
      join(scratch.dir, "featureless-supervisor-user.mjs"),
      scratch.supervisorPath,
    );
    for (const supervisorPath of [scratch.supervisorPath, featureless]) {
      const { stateDir, attemptId, stdout } = await pwdOfTask(supervisorPath, "65534:65534");
      const work = attemptWorkPath(stateLayout(stateDir), attemptId);
      expect(stdout).toBe(`${work}\n`);
      const made = await stat(work);
      expect([made.uid, made.gid, made.mode & 0o777]).toEqual([65534, 65534, 0o700]);
    }
  });

  it("is the only directory a launch may have the supervisor make: another path is refused, nothing runs", async () => {
    const { launcher, stateDir, hmacKey } = await newLauncher(scratch, { supervisorUp: true });
    const attemptId = newAttemptId();
    await journalAttempt(stateDir, attemptId, Date.now());
    const elsewhere = join(scratch.dir, `elsewhere-${attemptId.slice(4)}`);
    const marker = join(scratch.dir, `marker-${attemptId.slice(4)}`);
    const client = supervisorClient(stateDir, hmacKey);
    const reply = await client.request({
      op: "launch",
      spec: { ...touchSpec(attemptId, marker), cwd: elsewhere, createCwd: true },
    });
    expect(reply).toMatchObject({ kind: "rejected", attemptId });
    expect(reply.kind === "rejected" && reply.reason).toContain("not the attempt's work dir");
    await expect(stat(elsewhere)).rejects.toMatchObject({ code: "ENOENT" });
    await expect(stat(marker)).rejects.toMatchObject({ code: "ENOENT" });
    client.close();
    launcher.close();
  });
});

/**
 * The supervisor's Node flags: a capped heap always, and on a low-memory device (the edge
 * profile) no optimizing compiler (test/support/noting-supervisor.ts notes them).
 */
describe("the supervisor's Node flags", () => {
  async function execArgvOfSupervisor(lowMemory: boolean): Promise<string[]> {
    const entryPath = await writeNotingSupervisor(
      join(scratch.dir, `noting-supervisor-${String(lowMemory)}.mjs`),
      scratch.supervisorPath,
    );
    const { launcher, stateDir } = await newLauncher(
      { dir: scratch.dir, supervisorPath: entryPath },
      { lowMemory },
    );
    const attemptId = newAttemptId();
    await launcher.launch(shellSpec("true", { attemptId, argv: ["true"] }));
    expect((await waitForReceipt(launcher, attemptId)).status).toBe("valid");
    launcher.close();
    return notedSupervisorFlags(stateDir);
  }

  it("starts with a capped heap, and without the optimizing compiler only when memory counts most", async () => {
    expect(await execArgvOfSupervisor(true)).toEqual([
      "--max-old-space-size=32",
      "--max-semi-space-size=1",
      "--no-opt",
    ]);
    expect(await execArgvOfSupervisor(false)).toEqual([
      "--max-old-space-size=32",
      "--max-semi-space-size=1",
    ]);
  });
});

/**
 * "Not running" is trusted evidence only once the supervisor that writes the receipt is gone
 * too; while it lives, a receipt may still be coming, and recovery must not call the attempt lost.
 */
describe("supervisor liveness as part of the not-running evidence", () => {
  it("sees the supervisor of a spawned task as live, and as gone once it is killed", async () => {
    const { launcher } = await newLauncher(scratch);
    const attemptId = newAttemptId();
    const handle = await launcher.launch(shellSpec("sleep 30", { attemptId }));
    expect(await launcher.supervision(attemptId)).toBe("live");
    expect(await launcher.launchEvidence(attemptId)).toBe("live");
    // A runtime that never persisted the handle gets exactly the same one back.
    expect(await launcher.recoverHandle(attemptId)).toEqual(handle);
    const { supervisorPid } = await supervisorOfTask(handle.pid);
    process.kill(supervisorPid, "SIGKILL");
    await waitFor("the supervisor to count as gone", async () =>
      (await launcher.supervision(attemptId)) === "gone" ? true : null,
    );
    expect(await launcher.launchEvidence(attemptId)).toBe("gone");
    expect(await launcher.recoverHandle(attemptId)).toBeNull();
    process.kill(-handle.pid, "SIGKILL");
    launcher.close();
  });

  it("answers for a running task within the turn that asks: the boot id is read once, /proc inline", async () => {
    // Execution control asks this of every running attempt without a receipt, in every cycle;
    // each turn it gave away let the runtime serve other requests before the cycle went on.
    const { launcher } = await newLauncher(scratch);
    const attemptId = newAttemptId();
    const handle = await launcher.launch(shellSpec("sleep 30", { attemptId }));
    let turned = false;
    setImmediate(() => (turned = true));
    expect(await launcher.supervision(attemptId)).toBe("live");
    expect(await launcher.inspect(handle)).toEqual({ state: "running" });
    expect(turned).toBe(false);
    process.kill(-handle.pid, "SIGKILL");
    await waitForReceipt(launcher, attemptId);
    launcher.close();
  });

  it("proves never-spawned for a journaled attempt the live supervisor does not know, and refuses it from then on", async () => {
    const { launcher } = await newLauncher(scratch);
    const warmUp = newAttemptId();
    await launcher.launch(shellSpec("sleep 0.2", { attemptId: warmUp }));
    const unknown = newAttemptId();
    // No journal: never spawned by the first barrier alone.
    expect(await launcher.supervision(unknown)).toBe("never_spawned");
    expect(await launcher.launchEvidence(unknown)).toBe("not_journaled");
    expect(await launcher.recoverHandle(unknown)).toBeNull();
    const receipt = await waitForReceipt(launcher, warmUp);
    expect(receipt.status).toBe("valid");
    expect(await launcher.supervision(warmUp)).toBe("live");
    // Receipted: the supervisor no longer names a process for it.
    expect(await launcher.recoverHandle(warmUp)).toBeNull();
    launcher.close();
  });
});
