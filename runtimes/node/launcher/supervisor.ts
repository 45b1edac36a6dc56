/**
 * The resident supervisor: ONE small Node process per state directory, bundled into a single
 * supervisor.mjs. The launcher starts it detached (its own session and process group) the first
 * time it needs it, and every later runtime on the same state directory finds it again on its
 * abstract socket (supervisor-protocol.ts), so a SIGKILL of the runtime or a signal to the
 * runtime's group does not reach it. It spawns each task in a session and process group of the
 * task's own, waits for it, keeps its capped logs, writes its receipt, and stops it by durable
 * intent or at its deadline by itself, even while no runtime is up. Per running task it holds
 * a child handle, two pipes and two log descriptors: a few KiB, not a process.
 *
 * Usage: node supervisor.mjs <stateDir>; one start-up line on fd 3 (ready, busy or failed).
 * It exits once it has no task, no pending receipt and no client for LIMITS.idleExitMs.
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { createServer, type Socket } from "node:net";
import type { Readable } from "node:stream";
import { errorCode } from "../../../src/errors.ts";
import { readJournalRecord } from "./journal.ts";
import { readBootId, readProcStatSync } from "./proc.ts";
import type { TaskExit, TaskStarter } from "./task-starter.ts";
import { readReceiptKey, SPAWN_ERROR_MAX_LENGTH } from "./receipt.ts";
import { writeSpawnRecord } from "./spawn-record.ts";
import {
  attemptLogPath,
  attemptWorkPath,
  stateLayout,
  stopIntentPath,
  type StateLayout,
} from "./state-layout.ts";
import { recordStopIntent } from "./stop-intent.ts";
import {
  challengeProof,
  parseClientMessage,
  proofMatches,
  SUPERVISOR_FEATURES,
  SUPERVISOR_MESSAGE_MAX_BYTES,
  SUPERVISOR_STARTUP_FD,
  supervisorSocketName,
  type SupervisorMessage,
  type SupervisorSpec,
} from "./supervisor-protocol.ts";
import { CappedLog } from "./capped-log.ts";
import { describeError, noteStateDir, noteSupervisorFailure } from "./supervisor-notes.ts";
import { taskFilesOf, type TaskFiles } from "./supervisor-output.ts";
import { writeReceiptUntilItLands } from "./supervisor-receipt.ts";
import { createWorkDir } from "./work-dir.ts";
import {
  chooseTaskStarter,
  closeInheritableDescriptors,
  sendStartupReport,
} from "./supervisor-startup.ts";

/** The supervisor's waits and bounds. */
const LIMITS = {
  /**
   * After the task's leader exits, output still in the pipes is drained for at most this long.
   * A process that escaped the task's group (its own setsid) can hold a pipe open forever; the
   * receipt must not wait on it.
   */
  pipeDrainMaxMs: 2000,
  /** With nothing to supervise and nobody connected, the supervisor leaves after this long. */
  idleExitMs: 3000,
  /** How often running tasks are checked against their stop intents and deadlines. */
  enforceIntervalMs: 250,
  /**
   * While a runtime is connected, it stops tasks itself (identity-checked) and the supervisor
   * only steps in this long after the runtime should have finished: a backstop, not a second
   * stopper racing the first.
   */
  backstopMarginMs: 1000,
  maxClients: 64,
  handshakeTimeoutMs: 10_000,
} as const;

interface Task {
  readonly attemptId: string;
  readonly pid: number;
  /** The task's /proc start time, null when it could not be read at the spawn. */
  readonly startTicks: string | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  /** Settles once the leader has exited and been reaped. */
  readonly exit: Promise<TaskExit>;
  readonly startedAtMs: number;
  readonly deadlineAtMs: number | null;
  readonly graceMs: number;
  /** The supervisor was told to stop it now (the runtime wrote the intent and asked). */
  stopAsked: boolean;
  /** When the supervisor first saw a reason to stop it (intent file, request or deadline). */
  stopNoticedAtMs: number | null;
  termSentAtMs: number | null;
  killSent: boolean;
  exited: boolean;
  /** The timeout intent the supervisor writes at a deadline; the receipt waits for it. */
  deadlineIntent: Promise<void> | null;
  readonly taskFiles: TaskFiles | null;
}

function signalGroup(processGroupId: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-processGroupId, signal);
  } catch {
    // ESRCH: the group is already empty.
  }
}

class ResidentSupervisor {
  private readonly tasks = new Map<string, Task>();
  /** Launch requests being handled (journal read, spawn record write) and not yet answered. */
  private readonly accepted = new Set<string>();
  /** Attempts answered `never` to a settle: refused from then on, so that answer stays true. */
  private readonly refused = new Set<string>();
  private readonly clients = new Set<Socket>();
  /** Connections still in their handshake: a runtime is arriving, so this is not idle. */
  private readonly arriving = new Set<Socket>();
  private pendingReceipts = 0;
  private enforceTimer: NodeJS.Timeout | null = null;
  private idleTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly layout: StateLayout,
    private readonly key: Uint8Array,
    private readonly identity: { pid: number; startTicks: string; bootId: string },
    private readonly starter: TaskStarter,
  ) {}

  /**
   * The spawner is the parent of every task it started: with it gone, their exit statuses are
   * lost, so no receipt could ever be written for them. The supervisor then leaves at once,
   * exactly like a supervisor that died (a note beside each attempt's logs says why), and the
   * runtime's recovery rules settle those attempts; deadlines are still enforced by the runtime.
   */
  spawnerDied(reason: string): never {
    const message = `the task spawner died (${reason}); the supervisor left so recovery settles this attempt`;
    for (const attemptId of [...this.tasks.keys(), ...this.accepted])
      noteSupervisorFailure(this.layout, attemptId, message);
    noteStateDir(this.layout, message);
    process.exit(70);
  }

  private broadcast(message: SupervisorMessage): void {
    for (const client of this.clients) send(client, message);
  }

  /** Leaves once nothing is supervised, nothing is pending and nobody is connected for LIMITS.idleExitMs. */
  checkIdle(): void {
    const idle =
      this.tasks.size === 0 &&
      this.accepted.size === 0 &&
      this.pendingReceipts === 0 &&
      this.clients.size === 0 &&
      this.arriving.size === 0;
    if (!idle) {
      if (this.idleTimer !== null) clearTimeout(this.idleTimer);
      this.idleTimer = null;
      return;
    }
    this.idleTimer ??= setTimeout(() => {
      this.idleTimer = null;
      if (
        this.tasks.size === 0 &&
        this.accepted.size === 0 &&
        this.pendingReceipts === 0 &&
        this.clients.size === 0 &&
        this.arriving.size === 0
      )
        process.exit(0);
    }, LIMITS.idleExitMs);
  }

  attach(socket: Socket): void {
    if (this.clients.size + this.arriving.size >= LIMITS.maxClients) {
      socket.destroy();
      return;
    }
    const nonce = randomBytes(16).toString("hex");
    let authenticated = false;
    let buffered = "";
    const handshakeTimer = setTimeout(() => socket.destroy(), LIMITS.handshakeTimeoutMs);
    this.arriving.add(socket);
    this.checkIdle();
    socket.setEncoding("utf8");
    socket.on("error", () => undefined);
    socket.on("close", () => {
      clearTimeout(handshakeTimer);
      this.arriving.delete(socket);
      this.clients.delete(socket);
      this.checkIdle();
    });
    socket.on("data", (text: string) => {
      buffered += text;
      if (buffered.length > SUPERVISOR_MESSAGE_MAX_BYTES * 2) {
        socket.destroy();
        return;
      }
      for (let newline = buffered.indexOf("\n"); newline >= 0; newline = buffered.indexOf("\n")) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        const message = parseClientMessage(line);
        if (typeof message === "string") {
          socket.destroy();
          return;
        }
        if (!authenticated) {
          // Only a holder of the receipt key may talk to the supervisor; the proof answers
          // this connection's own challenge, so it cannot be replayed on another.
          if (message.op !== "hello" || !proofMatches(this.key, "client", nonce, message.proof)) {
            socket.destroy();
            return;
          }
          authenticated = true;
          clearTimeout(handshakeTimer);
          this.arriving.delete(socket);
          this.clients.add(socket);
          this.checkIdle();
          send(socket, {
            kind: "welcome",
            proof: challengeProof(this.key, "supervisor", message.nonce),
            pid: process.pid,
            features: SUPERVISOR_FEATURES,
          });
          continue;
        }
        if (message.op === "launch") void this.launch(socket, message.spec);
        else if (message.op === "stop") this.stopRequested(socket, message.attemptId);
        else if (message.op === "settle") this.settle(socket, message.attemptId);
      }
    });
    send(socket, { kind: "challenge", nonce });
  }

  private settle(socket: Socket, attemptId: string): void {
    const task = this.tasks.get(attemptId);
    if (task !== undefined || this.accepted.has(attemptId)) {
      // A live task's identity goes with the answer: a runtime that died before persisting
      // the handle takes it from here instead of waiting handle-less for the receipt.
      const live = task !== undefined && !task.exited;
      send(socket, {
        kind: "settled",
        attemptId,
        state: "spawned",
        pid: live ? task.pid : null,
        startTicks: live ? task.startTicks : null,
      });
      return;
    }
    // Unknown here: it never reached this supervisor whole, and from now on it never will.
    this.refused.add(attemptId);
    send(socket, { kind: "settled", attemptId, state: "never" });
  }

  private stopRequested(socket: Socket, attemptId: string): void {
    const task = this.tasks.get(attemptId);
    if (task !== undefined && !task.exited) {
      task.stopAsked = true;
      this.enforce();
    }
    send(socket, { kind: "stopping", attemptId, known: task !== undefined });
  }

  private async launch(socket: Socket, spec: SupervisorSpec): Promise<void> {
    const { attemptId } = spec;
    if (this.tasks.has(attemptId) || this.accepted.has(attemptId) || this.refused.has(attemptId)) {
      send(socket, {
        kind: "rejected",
        attemptId,
        reason:
          "this attempt is already known to the supervisor (spawned, being spawned or settled as never spawned)",
      });
      return;
    }
    this.accepted.add(attemptId);
    try {
      const reply = await this.spawnTask(spec);
      send(socket, reply);
    } finally {
      this.accepted.delete(attemptId);
      this.checkIdle();
    }
  }

  /** Journal check → spawn record (durable) → spawn. Nothing is spawned without both records; the logs are created by the task's first output. */
  private async spawnTask(spec: SupervisorSpec): Promise<SupervisorMessage> {
    const { attemptId } = spec;
    // The only directory a launch may have created here is the attempt's own work dir.
    if (spec.createCwd === true && spec.cwd !== attemptWorkPath(this.layout, attemptId))
      return {
        kind: "rejected",
        attemptId,
        reason: `createCwd names ${spec.cwd}, not the attempt's work dir`,
      };
    let journal;
    try {
      journal = await readJournalRecord(this.layout, attemptId);
    } catch (error) {
      return { kind: "rejected", attemptId, reason: `journal unreadable: ${describeError(error)}` };
    }
    if (journal === null)
      return {
        kind: "rejected",
        attemptId,
        reason: "no journal record: a task that was not journaled is never started",
      };
    const { startedAtMs } = journal;

    const stdoutLog = new CappedLog(
      attemptLogPath(this.layout, attemptId, "stdout"),
      spec.logMaxBytes,
    );
    const stderrLog = new CappedLog(
      attemptLogPath(this.layout, attemptId, "stderr"),
      spec.logMaxBytes,
    );
    const closeLogs = (): void => {
      stdoutLog.close();
      stderrLog.close();
    };
    try {
      await writeSpawnRecord(this.layout, {
        attemptId,
        supervisorPid: this.identity.pid,
        supervisorStartTicks: this.identity.startTicks,
        bootId: this.identity.bootId,
      });
    } catch (error) {
      // No spawn record, no spawn: with a full disk the attempt provably never started (the
      // runtime's settle question gets `never`), which is better than a task nobody can prove.
      this.refused.add(attemptId);
      return {
        kind: "rejected",
        attemptId,
        reason: `the spawn record could not be written: ${describeError(error)}`,
      };
    }

    const unprepared =
      spec.createCwd === true
        ? createWorkDir(
            spec.cwd,
            spec.uid === null || spec.gid === null ? null : { uid: spec.uid, gid: spec.gid },
          )
        : null;
    if (unprepared !== null)
      return this.failSpawn(
        attemptId,
        startedAtMs,
        stderrLog,
        closeLogs,
        new Error(unprepared),
        taskFilesOf(spec),
      );
    const [command, ...args] = spec.argv;
    const result = await this.starter.start({
      command: command ?? "",
      args,
      env: spec.env,
      cwd: spec.cwd,
      uid: spec.uid,
      gid: spec.gid,
    });
    if (result.kind === "failed")
      return this.failSpawn(
        attemptId,
        startedAtMs,
        stderrLog,
        closeLogs,
        result.error,
        taskFilesOf(spec),
      );
    const { pid, startTicks, stdout, stderr, exit } = result.task;
    const task: Task = {
      attemptId,
      pid,
      startTicks,
      stdout,
      stderr,
      exit,
      startedAtMs,
      deadlineAtMs: spec.timeoutMs === null ? null : startedAtMs + spec.timeoutMs,
      graceMs: spec.graceMs,
      stopAsked: false,
      stopNoticedAtMs: null,
      termSentAtMs: null,
      killSent: false,
      exited: false,
      deadlineIntent: null,
      taskFiles: taskFilesOf(spec),
    };
    this.tasks.set(attemptId, task);
    this.scheduleEnforcement();
    void this.superviseToReceipt(task, stdoutLog, stderrLog);
    return {
      kind: "started",
      attemptId,
      pid,
      startTicks: task.startTicks,
    };
  }

  private async superviseToReceipt(
    task: Task,
    stdoutLog: CappedLog,
    stderrLog: CappedLog,
  ): Promise<void> {
    const { pid, attemptId } = task;
    const streamsClosed = [
      { stream: task.stdout, log: stdoutLog },
      { stream: task.stderr, log: stderrLog },
    ].map(({ stream, log }, index) => {
      if (stream === null) {
        // The spawner's pipe could not be opened (out of descriptors): say so beside the logs.
        noteSupervisorFailure(
          this.layout,
          attemptId,
          `${index === 0 ? "stdout" : "stderr"} could not be read; its log is empty`,
        );
        return Promise.resolve();
      }
      // Reading continues past the cap (the log drops the bytes) so the task never blocks on
      // a full pipe.
      stream.on("data", (chunk: Buffer) => log.write(chunk));
      return new Promise<void>((resolve) => {
        stream.once("close", () => resolve());
        stream.once("error", () => resolve());
      });
    });
    const exit = await task.exit;
    const finishedAtMs = Date.now();
    task.exited = true;
    // The leader is gone; whatever it left running in its group (a background job holding the
    // pipes, a process it forgot) is ended now, so nothing of this attempt outlives its receipt
    // and a retry never runs beside it. The group id cannot name a new group while any member
    // is alive, and an empty group answers ESRCH.
    signalGroup(pid, "SIGKILL");
    let drainTimer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(streamsClosed),
      new Promise<void>((resolve) => (drainTimer = setTimeout(resolve, LIMITS.pipeDrainMaxMs))),
    ]);
    clearTimeout(drainTimer);
    task.stdout?.destroy();
    task.stderr?.destroy();
    await Promise.all([stdoutLog.closeDurably(), stderrLog.closeDurably()]);
    for (const [stream, log] of [
      ["stdout", stdoutLog],
      ["stderr", stderrLog],
    ] as const) {
      if (log.writeError !== null)
        noteSupervisorFailure(
          this.layout,
          attemptId,
          `${stream} log incomplete: ${log.writeError}`,
        );
    }
    this.pendingReceipts += 1;
    this.tasks.delete(attemptId);
    try {
      if (task.deadlineIntent !== null) await task.deadlineIntent;
      await writeReceiptUntilItLands(
        this.layout,
        this.key,
        attemptId,
        task.startedAtMs,
        { exitCode: exit.code, signal: exit.signal, spawnError: null, finishedAtMs },
        task.taskFiles,
      );
    } finally {
      this.pendingReceipts -= 1;
      this.broadcast({ kind: "exited", attemptId });
      this.checkIdle();
    }
  }

  private async failBeforeSpawn(
    attemptId: string,
    startedAtMs: number,
    spawnError: string,
    taskFiles: TaskFiles | null,
  ): Promise<SupervisorMessage> {
    this.pendingReceipts += 1;
    try {
      await writeReceiptUntilItLands(
        this.layout,
        this.key,
        attemptId,
        startedAtMs,
        {
          exitCode: null,
          signal: null,
          spawnError: spawnError.slice(0, SPAWN_ERROR_MAX_LENGTH),
          finishedAtMs: Date.now(),
        },
        taskFiles,
      );
    } finally {
      this.pendingReceipts -= 1;
    }
    return { kind: "spawn_failed", attemptId, spawnError };
  }

  private failSpawn(
    attemptId: string,
    startedAtMs: number,
    stderrLog: CappedLog,
    closeLogs: () => void,
    error: unknown,
    taskFiles: TaskFiles | null,
  ): Promise<SupervisorMessage> {
    const spawnError = describeError(error);
    stderrLog.write(Buffer.from(`[qlr: spawn failed: ${spawnError}]\n`, "utf8"));
    closeLogs();
    return this.failBeforeSpawn(attemptId, startedAtMs, spawnError, taskFiles);
  }

  private scheduleEnforcement(): void {
    this.enforceTimer ??= setInterval(() => this.enforce(), LIMITS.enforceIntervalMs);
  }

  /**
   * Stops by durable intent and at deadlines. A task with a stop intent on disk, a stop
   * request, or a passed deadline gets SIGTERM to its group, then SIGKILL after its grace.
   * The supervisor is the task's parent and has not reaped it (its exit event has not fired),
   * so the pid cannot name another process. While a runtime is connected and the reason is one
   * the runtime acts on itself (an intent file, a deadline), the supervisor waits out the
   * runtime's own grace first.
   */
  enforce(): void {
    const nowMs = Date.now();
    for (const task of this.tasks.values()) {
      if (task.exited) continue;
      const deadlinePassed = task.deadlineAtMs !== null && nowMs >= task.deadlineAtMs;
      if (
        task.stopNoticedAtMs === null &&
        (task.stopAsked ||
          deadlinePassed ||
          existsSync(stopIntentPath(this.layout, task.attemptId)))
      ) {
        task.stopNoticedAtMs = nowMs;
        // A deadline the supervisor enforces is recorded like the runtime's own: the receipt says timeout.
        // The signal goes at once, the intent's write is durable later: the receipt awaits it
        // (superviseToReceipt), or the task's exit could be recorded without its reason.
        if (deadlinePassed)
          task.deadlineIntent = recordStopIntent(
            this.layout,
            task.attemptId,
            "timeout",
            nowMs,
          ).then(
            () => undefined,
            () => undefined,
          );
      }
      if (task.stopNoticedAtMs === null) continue;
      const backstopMs =
        task.stopAsked || this.clients.size === 0 ? 0 : task.graceMs + LIMITS.backstopMarginMs;
      if (task.termSentAtMs === null && nowMs >= task.stopNoticedAtMs + backstopMs) {
        task.termSentAtMs = nowMs;
        signalGroup(task.pid, "SIGTERM");
      } else if (
        task.termSentAtMs !== null &&
        !task.killSent &&
        nowMs >= task.termSentAtMs + task.graceMs
      ) {
        task.killSent = true;
        signalGroup(task.pid, "SIGKILL");
      }
    }
    if (this.tasks.size === 0 && this.enforceTimer !== null) {
      clearInterval(this.enforceTimer);
      this.enforceTimer = null;
    }
  }

  /** A SIGTERM or SIGINT aimed at the supervisor (a service manager stopping its unit) is passed on to every task; the supervisor stays to write the receipts. */
  forward(signal: NodeJS.Signals): void {
    for (const task of this.tasks.values()) if (!task.exited) signalGroup(task.pid, signal);
  }
}

/** Sockets corked until the end of this turn of the event loop (see `send`). */
const corkedSockets = new Set<Socket>();

/**
 * The answers and receipts of one turn (the launches of a dispatch page, the tasks that ended
 * together) leave in one write: the socket is corked at the first message of a turn and
 * uncorked right after it.
 */
function send(socket: Socket, message: SupervisorMessage): void {
  if (socket.destroyed) return;
  if (!corkedSockets.has(socket)) {
    corkedSockets.add(socket);
    socket.cork();
    process.nextTick(() => {
      corkedSockets.delete(socket);
      socket.uncork();
    });
  }
  socket.write(`${JSON.stringify(message)}\n`);
}

async function main(): Promise<void> {
  const stateDir = process.argv[2];
  if (stateDir === undefined || stateDir === "") {
    sendStartupReport({ kind: "failed", reason: "usage: supervisor.mjs <stateDir>" });
    process.exit(64);
  }
  process.title = "qlr-supervisor";
  closeInheritableDescriptors(SUPERVISOR_STARTUP_FD);
  const layout = stateLayout(stateDir);
  let key: Uint8Array | null;
  try {
    key = await readReceiptKey(layout.receiptKeyPath);
  } catch (error) {
    sendStartupReport({
      kind: "failed",
      reason: `receipt key unreadable: ${describeError(error)}`,
    });
    process.exit(70);
  }
  const bootId = await readBootId();
  const ownStat = readProcStatSync(process.pid);
  if (key === null || bootId === null || ownStat.kind !== "present") {
    sendStartupReport({
      kind: "failed",
      reason:
        key === null
          ? `receipt key ${layout.receiptKeyPath} does not exist`
          : "no /proc to identify processes",
    });
    process.exit(70);
  }
  let supervisor: ResidentSupervisor | null = null;
  const starter = await chooseTaskStarter(layout, (reason) => {
    if (supervisor !== null) supervisor.spawnerDied(reason);
    process.exit(70);
  });
  supervisor = new ResidentSupervisor(
    layout,
    key,
    { pid: process.pid, startTicks: ownStat.stat.startTicks, bootId },
    starter,
  );
  const started = supervisor;
  process.on("SIGTERM", () => started.forward("SIGTERM"));
  process.on("SIGINT", () => started.forward("SIGINT"));
  process.on("SIGHUP", () => undefined);
  const server = createServer((socket) => started.attach(socket));
  server.on("error", (error) => {
    // The abstract name is bound: another supervisor of this state directory is alive and is
    // the one to use. Binding is the lock, so there is never a second.
    sendStartupReport(
      errorCode(error) === "EADDRINUSE"
        ? { kind: "busy" }
        : { kind: "failed", reason: describeError(error) },
    );
    process.exit(errorCode(error) === "EADDRINUSE" ? 0 : 70);
  });
  server.listen({ path: supervisorSocketName(stateDir) }, () => {
    sendStartupReport({ kind: "ready", pid: process.pid });
    started.checkIdle();
  });
}

void main();
