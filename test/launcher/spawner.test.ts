/**
 * The native task spawner (qlr-spawner) against the Node spawn fallback: the same processes,
 * the same receipts, the same failures; its own request bounds; and what its death does.
 */
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from "node:child_process";
import { existsSync } from "node:fs";
import { chmod, mkdir, readdir, readFile, readlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { readProcStat, type ProcessHandle } from "../../runtimes/node/launcher/index.ts";
import { attemptLogPath, stateLayout } from "../../runtimes/node/launcher/state-layout.ts";
import {
  isGoneOrZombie,
  killIfStillRunning,
  makeScratch,
  newLauncher,
  shellSpec,
  skipUnlessRoot,
  supervisorOfTask,
  useScratch,
  waitFor,
  waitForReceipt,
  type Scratch,
} from "./support.ts";

/** The build compiles the spawner with `cc`; without one, only the Node path can be tested. */
const HAS_C_COMPILER = spawnSync("cc", ["--version"]).status === 0;
// CI's machine has gcc: there a missing compiler is a broken machine, not a reason to skip.
if (!HAS_C_COMPILER && process.env.CI === "true")
  throw new Error("CI needs a C compiler (cc) to build and test the native spawner");
if (!HAS_C_COMPILER)
  console.log("skipped: the native spawner's tests, there is no C compiler (cc)");
const describeNative = describe.skipIf(!HAS_C_COMPILER);

const native = useScratch("spawner-native", { spawner: true });
const fallback = useScratch("spawner-node", { spawner: false });
const paths: ReadonlyArray<readonly [string, Scratch]> = [
  ...(HAS_C_COMPILER ? [["native spawner", native] as const] : []),
  ["Node spawn", fallback],
];

async function readLog(stateDir: string, attemptId: string, stream: "stdout" | "stderr") {
  const path = attemptLogPath(stateLayout(stateDir), attemptId, stream);
  return existsSync(path) ? readFile(path, "utf8") : "";
}

describeNative("the process tree", () => {
  it("with the spawner built, every task is its child and it is the supervisor's; without it, the supervisor's own", async () => {
    const { launcher } = await newLauncher(native);
    const handles: ProcessHandle[] = [];
    try {
      handles.push(await launcher.launch(shellSpec("sleep 30")));
      handles.push(await launcher.launch(shellSpec("sleep 30")));
      const [first, second] = await Promise.all(handles.map((h) => supervisorOfTask(h.pid)));
      expect(first?.spawnerPid).not.toBeNull();
      expect(second).toEqual(first);
      expect(await readFile(`/proc/${first?.supervisorPid}/cmdline`, "utf8")).toMatch(
        /^qlr-supervisor/,
      );
    } finally {
      await killIfStillRunning(launcher, handles);
      launcher.close();
    }

    const { launcher: nodeLauncher } = await newLauncher(fallback);
    const handle = await nodeLauncher.launch(shellSpec("sleep 30"));
    try {
      expect((await supervisorOfTask(handle.pid)).spawnerPid).toBeNull();
    } finally {
      await killIfStillRunning(nodeLauncher, [handle]);
      nodeLauncher.close();
    }
  });
});

describe.each(paths)("with %s", (_name, scratch) => {
  it("a task that exits at once still has its start ticks, and its output and exit code land", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    const spec = shellSpec("echo out; echo err >&2; exit 7");
    const handle = await launcher.launch(spec);
    expect(handle.processStartTicks).toMatch(/^[0-9]+$/);
    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status === "valid" && reading.receipt).toMatchObject({
      exitCode: 7,
      signal: null,
      spawnError: null,
    });
    expect(await readLog(stateDir, spec.attemptId, "stdout")).toBe("out\n");
    expect(await readLog(stateDir, spec.attemptId, "stderr")).toBe("err\n");
    const bare = shellSpec("", { argv: ["true"] });
    expect((await launcher.launch(bare)).processStartTicks).toMatch(/^[0-9]+$/);
    await waitForReceipt(launcher, bare.attemptId);
    launcher.close();
  });

  it("a task has exactly stdin, stdout and stderr open", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    // The shell's own descriptors, listed by another process (no pipe of a substitution).
    const spec = shellSpec("ls /proc/$$/fd; readlink /proc/$$/fd/0");
    await launcher.launch(spec);
    await waitForReceipt(launcher, spec.attemptId);
    expect(await readLog(stateDir, spec.attemptId, "stdout")).toBe("0\n1\n2\n/dev/null\n");
    launcher.close();
  });

  it("a task killed by a signal is recorded with the signal's name", async () => {
    const { launcher } = await newLauncher(scratch);
    const spec = shellSpec("kill -USR1 $$");
    await launcher.launch(spec);
    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status === "valid" && reading.receipt).toMatchObject({
      exitCode: null,
      signal: "SIGUSR1",
    });
    launcher.close();
  });

  it("argv and env near the bound reach the task whole; over it, a clear error and nothing written", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    // Below the kernel's 128 KiB per string, 880 KiB in all: under the 1 MiB spec bound.
    const argument = "a".repeat(120 * 1024);
    const value = "v".repeat(100 * 1024);
    const script = 'printf "%s %s %s %s\\n" "$#" "${#1}" "${#6}" "${#BIG_2}"';
    const spec = shellSpec(script, {
      argv: ["sh", "-c", script, "x", ...Array.from({ length: 6 }, () => argument)],
      env: { BIG_1: value, BIG_2: value },
    });
    await launcher.launch(spec);
    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status === "valid" && reading.receipt.exitCode).toBe(0);
    expect(await readLog(stateDir, spec.attemptId, "stdout")).toBe("6 122880 122880 102400\n");

    const over = shellSpec("true", { env: { BIG: "v".repeat(1024 * 1024) } });
    await expect(launcher.launch(over)).rejects.toThrow(/exceed/);
    expect((await launcher.readReceipt(over.attemptId)).status).toBe("none");
    launcher.close();
  });

  it("looks the program up in the PATH of the task's own environment", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    const bin = join(scratch.dir, "task-bin");
    await mkdir(bin, { recursive: true });
    await writeFile(join(bin, "qlr-test-program"), '#!/bin/sh\necho found "$1"\n', { mode: 0o755 });
    const spec = shellSpec("", {
      argv: ["qlr-test-program", "it"],
      env: { PATH: `/nonexistent:${bin}:/usr/bin:/bin` },
    });
    await launcher.launch(spec);
    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status === "valid" && reading.receipt.exitCode).toBe(0);
    expect(await readLog(stateDir, spec.attemptId, "stdout")).toBe("found it\n");
    launcher.close();
  });

  it("runs a task as its user: supplementary groups dropped, gid then uid set", async (context) => {
    skipUnlessRoot(context, "`user:` needs the supervisor to run as root");
    // The supervisor (started by this launch) inherits a supplementary group the task must not keep.
    const groupsBefore = process.getgroups?.() ?? [];
    process.setgroups?.([...groupsBefore, 4242]);
    const { launcher, stateDir } = await newLauncher(scratch);
    const spec = shellSpec("id -u; id -g; id -G", { user: "65534:65534" });
    try {
      await launcher.launch(spec);
    } finally {
      process.setgroups?.(groupsBefore);
    }
    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status === "valid" && reading.receipt.exitCode).toBe(0);
    expect(await readLog(stateDir, spec.attemptId, "stdout")).toBe("65534\n65534\n65534\n");
    launcher.close();
  });
});

describeNative("which starter the supervisor uses", () => {
  /** A scratch supervisor with `prepare` done to the spawner beside it. */
  async function tasksParentWith(prepare: (spawnerPath: string) => Promise<void>) {
    const scratch = await makeScratch("spawner-refused", { spawner: true });
    try {
      await prepare(join(scratch.dir, "qlr-spawner"));
      const { launcher, stateDir } = await newLauncher(scratch);
      const handle = await launcher.launch(shellSpec("sleep 30"));
      try {
        const tree = await supervisorOfTask(handle.pid);
        const notePath = join(stateDir, "supervisor.log");
        return { tree, note: existsSync(notePath) ? await readFile(notePath, "utf8") : "" };
      } finally {
        await killIfStillRunning(launcher, [handle]);
        launcher.close();
      }
    } finally {
      await scratch.cleanup();
    }
  }

  it("refuses a spawner that group or others could replace, and one that does not start: Node's spawn, with a note", async () => {
    const writable = await tasksParentWith((path) => chmod(path, 0o775));
    expect(writable.tree.spawnerPid).toBeNull();
    expect(writable.note).toMatch(/using Node's spawn: .*writable by group or others/);

    const garbage = await tasksParentWith(async (path) => {
      await writeFile(path, "not a program\n");
      await chmod(path, 0o755);
    });
    expect(garbage.tree.spawnerPid).toBeNull();
    expect(garbage.note).toMatch(/using Node's spawn: the spawner/);

    const fine = await tasksParentWith(() => Promise.resolve());
    expect(fine.tree.spawnerPid).not.toBeNull();
    expect(fine.note).toBe("");
  });
});

describeNative("spawn failures", () => {
  /** The receipt and stderr log of one failing spec on one path, without what differs by attempt. */
  async function failureOn(scratch: Scratch, overrides: Parameters<typeof shellSpec>[1]) {
    const { launcher, stateDir } = await newLauncher(scratch);
    const spec = shellSpec("true", overrides);
    await launcher.launch(spec).catch(() => undefined);
    const reading = await waitForReceipt(launcher, spec.attemptId);
    launcher.close();
    if (reading.status !== "valid") throw new Error(`receipt ${reading.status}`);
    const { exitCode, signal, spawnError } = reading.receipt;
    return {
      exitCode,
      signal,
      spawnError,
      stderr: await readLog(stateDir, spec.attemptId, "stderr"),
    };
  }

  it("a missing program, a file that is not executable and a missing cwd give the same receipts on both paths", async () => {
    const notExecutable = join(native.dir, "not-executable.sh");
    await writeFile(notExecutable, "#!/bin/sh\necho never\n");
    await chmod(notExecutable, 0o644);
    const cases = [
      { argv: ["qlr-no-such-program-anywhere"] },
      { argv: [notExecutable] },
      { argv: [native.dir] },
      { argv: ["sh", "-c", "true"], cwd: join(native.dir, "no-such-directory") },
    ];
    for (const overrides of cases) {
      const nativeFailure = await failureOn(native, overrides);
      const nodeFailure = await failureOn(fallback, overrides);
      expect(nativeFailure).toEqual(nodeFailure);
      expect(nativeFailure.exitCode).toBeNull();
      expect(nativeFailure.spawnError).toMatch(/^spawn \S+ E[A-Z]+$/);
    }
  });
});

describeNative("the spawner dying", () => {
  it("SIGKILLed with a task running: the supervisor leaves with a note, and the attempt is settled by the recovery rules", async () => {
    const { launcher, stateDir } = await newLauncher(native);
    const spec = shellSpec("sleep 30");
    const handle = await launcher.launch(spec);
    try {
      const { supervisorPid, spawnerPid } = await supervisorOfTask(handle.pid);
      if (spawnerPid === null) throw new Error("the task was not started by the spawner");
      expect(await launcher.supervision(spec.attemptId)).toBe("live");
      process.kill(spawnerPid, "SIGKILL");
      await waitFor("the supervisor to leave", () => isGoneOrZombie(supervisorPid));
      // Exactly the state of a supervisor that died: gone, no receipt, the task's identity
      // still checkable, so recovery stops it by that identity and settles the attempt.
      await waitFor("the supervisor to count as gone", async () =>
        (await launcher.supervision(spec.attemptId)) === "gone" ? true : null,
      );
      expect(await launcher.launchEvidence(spec.attemptId)).toBe("gone");
      expect((await launcher.readReceipt(spec.attemptId)).status).toBe("none");
      expect((await launcher.inspect(handle)).state).toBe("running");
      const note = await readFile(join(stateDir, "supervisor.log"), "utf8");
      expect(note).toMatch(/task spawner died/);
      const supervisorNote = await readFile(
        join(stateLayout(stateDir).logsDir, `${spec.attemptId}.supervisor.log`),
        "utf8",
      );
      expect(supervisorNote).toMatch(/task spawner died/);
      const stop = await launcher.stop(handle, "cancel");
      expect(stop.finalInspection.state).not.toBe("running");
    } finally {
      await killIfStillRunning(launcher, [handle]);
      launcher.close();
    }
  });
});

/** Frames and replies of qlr-spawner itself, talked to directly. */
describeNative("qlr-spawner's request bounds", () => {
  function startSpawner(maxFrameBytes: number): {
    child: ChildProcessWithoutNullStreams;
    nextLine: () => Promise<string>;
  } {
    const child = spawn(join(native.dir, "qlr-spawner"), [String(maxFrameBytes), "4"]);
    let text = "";
    const waiters: Array<() => void> = [];
    child.stdout.on("data", (chunk: Buffer) => {
      text += chunk.toString("utf8");
      waiters.splice(0).forEach((wake) => wake());
    });
    child.stdout.on("end", () => waiters.splice(0).forEach((wake) => wake()));
    const nextLine = async (): Promise<string> => {
      for (;;) {
        const newline = text.indexOf("\n");
        if (newline >= 0) {
          const line = text.slice(0, newline);
          text = text.slice(newline + 1);
          return line;
        }
        if (child.stdout.readableEnded) return "<eof>";
        await new Promise<void>((resolve) => waiters.push(resolve));
      }
    };
    return { child, nextLine };
  }

  function spawnFrame(
    id: number,
    strings: readonly string[],
    counts: { argc: number; envc: number },
  ): Buffer {
    const body = Buffer.concat([
      Buffer.alloc(25),
      ...strings.map((text) => Buffer.from(`${text}\0`, "utf8")),
    ]);
    body.writeUInt8(1, 0);
    body.writeUInt32LE(id, 1);
    body.writeUInt32LE(0, 5);
    body.writeUInt32LE(counts.argc, 17);
    body.writeUInt32LE(counts.envc, 21);
    const head = Buffer.alloc(4);
    head.writeUInt32LE(body.length, 0);
    return Buffer.concat([head, body]);
  }

  it("answers malformed requests with a named error and keeps serving; an oversize frame ends it cleanly", async () => {
    const { child, nextLine } = startSpawner(4096);
    expect(await nextLine()).toBe(`ready ${child.pid}`);
    // A NUL inside a field: the strings no longer match the counts.
    child.stdin.write(spawnFrame(1, ["tr\0ue"], { argc: 1, envc: 0 }));
    expect(await nextLine()).toMatch(/^failed 1 EINVAL /);
    child.stdin.write(spawnFrame(2, ["true"], { argc: 0, envc: 0 }));
    expect(await nextLine()).toMatch(/^failed 2 EINVAL /);
    child.stdin.write(spawnFrame(3, ["true"], { argc: 1, envc: 70_000 }));
    expect(await nextLine()).toMatch(/^failed 3 EINVAL /);
    child.stdin.write(spawnFrame(4, ["true", "PATH=/usr/bin:/bin"], { argc: 1, envc: 1 }));
    const started = await nextLine();
    expect(started).toMatch(/^started 4 [0-9]+ [0-9]+ [0-9]+ [0-9]+$/);
    const pid = started.split(" ")[2];
    expect(await nextLine()).toBe(`exited ${pid} 0 0`);
    // Over the frame bound: the framing cannot be trusted past it, so it says so and leaves.
    child.stdin.write(spawnFrame(5, ["x".repeat(5000)], { argc: 1, envc: 0 }));
    expect(await nextLine()).toMatch(/^failed 0 E2BIG /);
    const exit = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    expect(exit).toBe(65);
  });

  it("closes what it inherited above stderr, so no task can get it", async () => {
    const child = spawn(join(native.dir, "qlr-spawner"), ["4096", "4"], {
      stdio: ["pipe", "pipe", "ignore", "pipe", "pipe"],
    });
    const ready = await new Promise<string>((resolve) =>
      child.stdout?.once("data", (chunk: Buffer) => resolve(chunk.toString("utf8"))),
    );
    expect(ready).toBe(`ready ${child.pid}\n`);
    const fds = await readdir(`/proc/${child.pid}/fd`);
    const targets = await Promise.all(fds.map((fd) => readlink(`/proc/${child.pid}/fd/${fd}`)));
    // Its own: requests, replies, stderr, /dev/null for the tasks' stdin, the signalfd.
    expect(targets.filter((target) => /^(pipe|socket):/.test(target))).toHaveLength(2);
    expect(fds.sort()).toEqual(["0", "1", "2", "3", "4"]);
    child.stdin?.end();
    await new Promise((resolve) => child.once("exit", resolve));
  });

  it("leaves at the end of its requests, and never outlives its parent", async () => {
    const { child, nextLine } = startSpawner(4096);
    expect(await nextLine()).toBe(`ready ${child.pid}`);
    child.stdin.end();
    expect(await new Promise((resolve) => child.once("exit", resolve))).toBe(0);
    const stat = child.pid === undefined ? null : await readProcStat(child.pid);
    expect(stat?.kind).not.toBe("present");
  });
});
