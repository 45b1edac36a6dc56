/**
 * How the resident supervisor starts a task: one interface, two ways.
 *
 * - `NativeTaskStarter` asks `qlr-spawner` (spawner.c), a tiny C process the supervisor starts
 *   once, to clone(CLONE_VM|CLONE_VFORK) and exec each task. Node forks the whole supervisor
 *   for every child_process.spawn (libuv has no vfork path on Linux), and on a paravirtualised
 *   guest that fork and the copy-on-write faults after it cost ≈ 7 ms of CPU per task.
 * - `NodeTaskStarter` is `child_process.spawn`: the fallback when there is no spawner binary
 *   (no C compiler at build time), it is not safe to run, or it cannot be started.
 *
 * Both give the same process: its own session and group, stdin from /dev/null, stdout and
 * stderr to pipes the supervisor reads, cwd, then the task user's groups, gid and uid, then an
 * exec with PATH looked up in the task's environment. A spawn error is the error Node gives
 * (`spawn <file> <CODE>`), so a receipt says the same thing on both paths.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, constants as fsConstants, openSync, readdirSync, statSync } from "node:fs";
import { Socket } from "node:net";
import { constants as osConstants } from "node:os";
import type { Readable } from "node:stream";
import { readProcStatSync } from "./proc.ts";

export interface TaskStartRequest {
  readonly command: string;
  readonly args: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  readonly cwd: string;
  /** Both ids or neither: the task user. */
  readonly uid: number | null;
  readonly gid: number | null;
}

export interface TaskExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

export interface StartedTask {
  readonly pid: number;
  /** The task's /proc start time, read before it could be reaped; null when unreadable. */
  readonly startTicks: string | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  /** Settles once the task's leader has exited and been reaped. */
  readonly exit: Promise<TaskExit>;
}

export type TaskStartResult =
  | { readonly kind: "started"; readonly task: StartedTask }
  | { readonly kind: "failed"; readonly error: unknown };

export interface TaskStarter {
  readonly name: "native" | "node";
  start(request: TaskStartRequest): Promise<TaskStartResult>;
}

/** Today's path: one fork of the supervisor per task. */
export class NodeTaskStarter implements TaskStarter {
  readonly name = "node";

  async start(request: TaskStartRequest): Promise<TaskStartResult> {
    let child: ChildProcess;
    try {
      // detached: the child calls setsid() before exec, so it leads a new session and process
      // group whose id is its pid; that group is what a stop signals. With a task user the
      // child changes into cwd, then drops supplementary groups, sets the gid, then the uid,
      // all before exec.
      const identity =
        request.uid === null || request.gid === null ? {} : { uid: request.uid, gid: request.gid };
      child = spawn(request.command, request.args, {
        detached: true,
        stdio: ["ignore", "pipe", "pipe"],
        env: { ...request.env },
        cwd: request.cwd,
        ...identity,
      });
    } catch (error) {
      return { kind: "failed", error };
    }
    const spawnFailure = new Promise<unknown>((resolve) => child.once("error", resolve));
    const pid = child.pid;
    // ENOENT, EACCES, a missing cwd: Node reports them through "error" on the next tick.
    if (pid === undefined) return { kind: "failed", error: await spawnFailure };
    // Read synchronously, before the event loop runs again and could reap a task that exits at
    // once: the /proc entry (a zombie at worst) still carries the start time.
    const stat = readProcStatSync(pid);
    const exit = new Promise<TaskExit>((resolve) =>
      child.once("exit", (code, signal) => resolve({ code, signal })),
    );
    return {
      kind: "started",
      task: {
        pid,
        startTicks: stat.kind === "present" ? stat.stat.startTicks : null,
        stdout: child.stdout,
        stderr: child.stderr,
        exit,
      },
    };
  }
}

/** The spawner's executable name, beside supervisor.mjs. */
export const SPAWNER_FILE_NAME = "qlr-spawner";
/** The spawner gives up on a task count above this (far above what a device runs at once). */
export const SPAWNER_MAX_TASKS = 65_536;
const SPAWNER_READY_TIMEOUT_MS = 5000;
/** A reply line longer than this is not one the spawner writes: the stream is corrupt. */
const SPAWNER_REPLY_MAX_BYTES = 4096;
const OP_SPAWN = 1;
const OP_RELEASE = 2;
const FLAG_CWD = 1;
const FLAG_IDS = 2;
const SPAWN_FIXED_BYTES = 1 + 4 * 6;
const MAX_ID = 4_294_967_295;

const SIGNAL_NAMES = new Map<number, NodeJS.Signals>(
  Object.entries(osConstants.signals).map(
    ([name, number]) => [number, name as NodeJS.Signals] as const,
  ),
);

/**
 * Why the spawner at `path` may not be run, or null when it may. It runs every task, as root on
 * a machine whose runtime is root: a file another user could replace would be a privilege
 * escalation, so it must be a regular executable file owned by this user or root and not
 * writable by group or others.
 */
export function spawnerUnsafeReason(path: string): string | null {
  let stat;
  try {
    stat = statSync(path);
  } catch (error) {
    return `${path} cannot be read: ${(error as NodeJS.ErrnoException).code ?? String(error)}`;
  }
  if (!stat.isFile()) return `${path} is not a regular file`;
  if ((stat.mode & 0o100) === 0) return `${path} is not executable`;
  const ownUid = process.getuid?.() ?? -1;
  if (stat.uid !== ownUid && stat.uid !== 0)
    return `${path} is owned by uid ${stat.uid}, neither this user nor root`;
  if ((stat.mode & 0o022) !== 0) return `${path} is writable by group or others`;
  return null;
}

/** The error Node's spawn gives for the same failure: `spawn <file> <CODE>`, with code and syscall. */
function spawnError(command: string, code: string): NodeJS.ErrnoException {
  const error: NodeJS.ErrnoException = new Error(`spawn ${command} ${code}`);
  error.code = code;
  error.syscall = `spawn ${command}`;
  error.path = command;
  return error;
}

function procFdReadable(pid: number): number | string {
  try {
    readdirSync(`/proc/${pid}/fd`);
    return pid;
  } catch (error) {
    return `the spawner's /proc/${pid}/fd cannot be read: ${(error as NodeJS.ErrnoException).code ?? String(error)}`;
  }
}

function hasNul(text: string): boolean {
  return text.includes("\0");
}

interface PendingSpawn {
  readonly command: string;
  readonly resolve: (result: TaskStartResult) => void;
}

/**
 * The supervisor's side of qlr-spawner: frames spawn requests on its stdin, reads replies on its
 * stdout, and opens each task's pipes through /proc/<spawnerPid>/fd/<n>. If the spawner dies,
 * the exit statuses of its tasks are lost, so `onDeath` runs: the supervisor then leaves like a
 * supervisor that died, and the runtime's recovery rules settle the attempts.
 */
export class NativeTaskStarter implements TaskStarter {
  readonly name = "native";
  private nextRequestId = 1;
  private readonly pending = new Map<number, PendingSpawn>();
  private readonly exits = new Map<number, (exit: TaskExit) => void>();
  private replyText = "";
  private dead = false;

  private constructor(
    private readonly child: ChildProcess,
    private readonly spawnerPid: number,
    private readonly maxFrameBytes: number,
    private readonly onDeath: (reason: string) => void,
  ) {}

  /**
   * Starts the spawner and waits for its `ready` line; the reason it could not be started
   * otherwise (the caller then uses Node's spawn).
   */
  static async launch(
    path: string,
    maxFrameBytes: number,
    onDeath: (reason: string) => void,
  ): Promise<NativeTaskStarter | string> {
    const unsafe = spawnerUnsafeReason(path);
    if (unsafe !== null) return unsafe;
    let child: ChildProcess;
    try {
      child = spawn(path, [String(maxFrameBytes), String(SPAWNER_MAX_TASKS)], {
        stdio: ["pipe", "pipe", "ignore"],
      });
    } catch (error) {
      return `the spawner could not be started: ${String(error)}`;
    }
    const { stdout, stdin } = child;
    if (stdout === null || stdin === null) return "the spawner has no pipes";
    const ready = await new Promise<number | string>((resolve) => {
      let text = "";
      const timer = setTimeout(
        () => resolve("the spawner did not report ready"),
        SPAWNER_READY_TIMEOUT_MS,
      );
      const finish = (value: number | string): void => {
        clearTimeout(timer);
        stdout.off("data", onData);
        resolve(value);
      };
      const onData = (chunk: Buffer): void => {
        text += chunk.toString("latin1");
        const newline = text.indexOf("\n");
        if (newline < 0) {
          if (text.length > SPAWNER_REPLY_MAX_BYTES) finish("the spawner's first line is garbled");
          return;
        }
        const match = /^ready ([0-9]+)$/.exec(text.slice(0, newline));
        if (
          match?.[1] === undefined ||
          Number(match[1]) !== child.pid ||
          newline + 1 !== text.length
        )
          finish("the spawner's first line is not `ready <its pid>`");
        else finish(Number(match[1]));
      };
      stdout.on("data", onData);
      child.once("error", (error) => finish(`the spawner could not be started: ${error.message}`));
      child.once("exit", (code, signal) =>
        finish(`the spawner exited at start (${signal ?? `code ${code}`})`),
      );
    });
    // The tasks' pipes are opened through /proc/<spawner>/fd: where that is closed to this
    // process (a hardened /proc), the spawner is of no use and Node's spawn must do.
    const usable = typeof ready === "string" ? ready : procFdReadable(ready);
    if (typeof usable === "string") {
      child.kill("SIGKILL");
      return usable;
    }
    const starter = new NativeTaskStarter(child, usable, maxFrameBytes, onDeath);
    starter.listen();
    return starter;
  }

  private listen(): void {
    const { stdout, stdin } = this.child;
    stdout?.on("data", (chunk: Buffer) => this.onReplies(chunk));
    stdout?.once("end", () => this.die("the spawner closed its replies"));
    stdin?.on("error", () => this.die("the spawner stopped reading requests"));
    this.child.once("exit", (code, signal) =>
      this.die(`the spawner exited (${signal ?? `code ${code}`})`),
    );
  }

  private die(reason: string): void {
    if (this.dead) return;
    this.dead = true;
    this.onDeath(reason);
  }

  start(request: TaskStartRequest): Promise<TaskStartResult> {
    const { command } = request;
    const strings = [
      request.cwd,
      command,
      ...request.args,
      ...Object.entries(request.env).map(([name, value]) => `${name}=${value}`),
    ];
    // What Node's spawn refuses before it forks, it refuses here with its own words: these
    // requests go to Node (which throws at once, without a fork).
    if (command === "" || strings.some(hasNul)) return new NodeTaskStarter().start(request);
    if (this.dead) return Promise.resolve({ kind: "failed", error: spawnError(command, "ECHILD") });
    const encoded = strings.map((text) => Buffer.from(`${text}\0`, "utf8"));
    const stringBytes = encoded.reduce((sum, bytes) => sum + bytes.length, 0);
    const bodyBytes = SPAWN_FIXED_BYTES + stringBytes;
    if (bodyBytes > this.maxFrameBytes)
      return Promise.resolve({ kind: "failed", error: spawnError(command, "E2BIG") });
    const ids = request.uid !== null && request.gid !== null;
    if (ids && (request.uid > MAX_ID || request.gid > MAX_ID))
      return Promise.resolve({ kind: "failed", error: spawnError(command, "EINVAL") });
    const id = this.nextRequestId;
    this.nextRequestId = this.nextRequestId >= MAX_ID ? 1 : this.nextRequestId + 1;
    const head = Buffer.alloc(4 + SPAWN_FIXED_BYTES);
    head.writeUInt32LE(bodyBytes, 0);
    head.writeUInt8(OP_SPAWN, 4);
    head.writeUInt32LE(id, 5);
    head.writeUInt32LE(FLAG_CWD | (ids ? FLAG_IDS : 0), 9);
    head.writeUInt32LE(ids ? request.uid : 0, 13);
    head.writeUInt32LE(ids ? request.gid : 0, 17);
    head.writeUInt32LE(1 + request.args.length, 21);
    head.writeUInt32LE(Object.keys(request.env).length, 25);
    return new Promise<TaskStartResult>((resolve) => {
      this.pending.set(id, { command, resolve });
      this.child.stdin?.write(Buffer.concat([head, ...encoded]));
    });
  }

  private onReplies(chunk: Buffer): void {
    this.replyText += chunk.toString("latin1");
    for (
      let newline = this.replyText.indexOf("\n");
      newline >= 0;
      newline = this.replyText.indexOf("\n")
    ) {
      const line = this.replyText.slice(0, newline);
      this.replyText = this.replyText.slice(newline + 1);
      this.onReply(line);
    }
    if (this.replyText.length > SPAWNER_REPLY_MAX_BYTES) this.corrupt("an overlong reply");
  }

  /** A reply the spawner never writes means it cannot be trusted any more: it is ended, and the supervisor with it. */
  private corrupt(what: string): void {
    this.child.kill("SIGKILL");
    this.die(`the spawner sent ${what}`);
  }

  private onReply(line: string): void {
    const fields = line.split(" ");
    const kind = fields[0];
    if (kind === "exited" && fields.length === 4) {
      const pid = Number(fields[1]);
      const code = Number(fields[2]);
      const signalNumber = Number(fields[3]);
      const resolve = this.exits.get(pid);
      if (resolve === undefined) return this.corrupt(`an exit of an unknown pid ${pid}`);
      this.exits.delete(pid);
      resolve({
        code: code >= 0 ? code : null,
        signal: code >= 0 ? null : (SIGNAL_NAMES.get(signalNumber) ?? null),
      });
      return;
    }
    if (kind === "started" && fields.length === 6) {
      const [, idText, pidText, ticks, stdoutText, stderrText] = fields;
      const pending = this.pending.get(Number(idText));
      const pid = Number(pidText);
      if (pending === undefined || !Number.isSafeInteger(pid) || pid <= 0)
        return this.corrupt("a start of an unknown request");
      this.pending.delete(Number(idText));
      // Registered before anything else runs: its exit may be the very next line.
      const exit = new Promise<TaskExit>((resolve) => this.exits.set(pid, resolve));
      const stdout = this.openPipe(Number(stdoutText));
      const stderr = this.openPipe(Number(stderrText));
      this.sendRelease(Number(idText));
      pending.resolve({
        kind: "started",
        task: {
          pid,
          startTicks: ticks !== undefined && /^[0-9]+$/.test(ticks) ? ticks : null,
          stdout,
          stderr,
          exit,
        },
      });
      return;
    }
    if (kind === "failed" && fields.length >= 3) {
      const id = Number(fields[1]);
      const pending = this.pending.get(id);
      if (pending === undefined) return this.corrupt(`a failure of an unknown request: ${line}`);
      this.pending.delete(id);
      pending.resolve({ kind: "failed", error: spawnError(pending.command, fields[2] ?? "EIO") });
      return;
    }
    this.corrupt("an unknown reply");
  }

  /**
   * The task's pipe, opened through the spawner's descriptor: a new reader of the same pipe. A
   * net.Socket reads it on the event loop (an fs stream would block a thread-pool thread).
   */
  private openPipe(spawnerFd: number): Readable | null {
    let fd: number;
    try {
      fd = openSync(
        `/proc/${this.spawnerPid}/fd/${spawnerFd}`,
        fsConstants.O_RDONLY | fsConstants.O_NONBLOCK,
      );
    } catch {
      return null;
    }
    try {
      return new Socket({ fd, readable: true, writable: false });
    } catch {
      closeSync(fd);
      return null;
    }
  }

  private sendRelease(id: number): void {
    const frame = Buffer.alloc(4 + 5);
    frame.writeUInt32LE(5, 0);
    frame.writeUInt8(OP_RELEASE, 4);
    frame.writeUInt32LE(id, 5);
    this.child.stdin?.write(frame);
  }
}
