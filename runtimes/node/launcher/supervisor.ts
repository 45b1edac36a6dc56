/**
 * The supervisor: one small Node process per attempt, bundled into a single supervisor.mjs.
 * The launcher starts it detached (its own session and process group), so a SIGKILL of the
 * runtime or a signal to the runtime's group does not reach it. It starts the task in a
 * session and process group of the task's own, so a stop signals the task and everything the
 * task started, and never the supervisor, which stays to write the receipt.
 *
 * Usage: node supervisor.mjs <stateDir> <attemptId>, spec as JSON on stdin, one report line on
 * fd 3 (see supervisor-protocol.ts).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, closeSync, fsyncSync, openSync, readdirSync, readFileSync, readSync, writeSync } from "node:fs";
import { join } from "node:path";
import { isPortableId } from "../../../src/identity.ts";
import { errorMessage, errorCode } from "../../../src/errors.ts";
import { readJournalRecord } from "./journal.ts";
import { readProcStatSync } from "./proc.ts";
import { OUTPUT_ERROR_MAX_LENGTH, readReceiptKey, signReceipt, SPAWN_ERROR_MAX_LENGTH, writeReceiptExclusive } from "./receipt.ts";
import { NO_OUTPUT } from "../../../src/task-output.ts";
import { taskOutputPath } from "../task-env.ts";
import { readTaskOutput } from "../task-output.ts";
import { attemptLogPath, stateLayout, type StateLayout } from "./state-layout.ts";
import { readStopReason } from "./stop-intent.ts";
import { parseSupervisorSpec, SUPERVISOR_REPORT_FD, SUPERVISOR_SPEC_MAX_BYTES, type SupervisorReport, type SupervisorSpec } from "./supervisor-protocol.ts";

/**
 * After the task's leader exits, output still in the pipes is drained for at most this long.
 * A process that escaped the task's group (its own setsid) can hold a pipe open forever; the
 * receipt must not wait on it.
 */
const PIPE_DRAIN_MAX_MS = 2000;
const EXIT_CODE_NO_RECEIPT = 70;
const LOG_FILE_MODE = 0o600;

const sleepBuffer = new Int32Array(new SharedArrayBuffer(4));

/** Waits without the event loop: the synchronous handover below must not interleave with anything. */
function pauseMs(milliseconds: number): void {
  Atomics.wait(sleepBuffer, 0, 0, milliseconds);
}

/**
 * Reads the whole spec from stdin synchronously, up to the size cap. stdin is left blocking as
 * long as process.stdin is never touched; EAGAIN is retried anyway in case it is not.
 */
function readSpecText(): { ok: true; text: string } | { ok: false; reason: string } {
  const chunks: Buffer[] = [];
  let total = 0;
  const buffer = Buffer.alloc(64 * 1024);
  // Bounded by SUPERVISOR_SPEC_MAX_BYTES: the loop ends at end of file or past the cap.
  for (;;) {
    let bytesRead: number;
    try {
      bytesRead = readSync(0, buffer, 0, buffer.length, null);
    } catch (error) {
      if (errorCode(error) === "EAGAIN") {
        pauseMs(5);
        continue;
      }
      return { ok: false, reason: `reading the launch spec failed: ${errorCode(error) ?? String(error)}` };
    }
    if (bytesRead === 0) break;
    total += bytesRead;
    if (total > SUPERVISOR_SPEC_MAX_BYTES) return { ok: false, reason: `the launch spec exceeds ${SUPERVISOR_SPEC_MAX_BYTES} bytes` };
    chunks.push(Buffer.from(buffer.subarray(0, bytesRead)));
  }
  return { ok: true, text: Buffer.concat(chunks).toString("utf8") };
}

/**
 * Sends the one report line and closes fd 3. The runtime may already be dead (EPIPE; Node
 * ignores SIGPIPE), which is fine: the receipt, not the report, is the durable outcome.
 */
function sendReport(report: SupervisorReport): void {
  const bytes = Buffer.from(`${JSON.stringify(report)}\n`, "utf8");
  let offset = 0;
  let attempts = 0;
  try {
    while (offset < bytes.length && attempts < 1000) {
      attempts += 1;
      try {
        offset += writeSync(SUPERVISOR_REPORT_FD, bytes, offset);
      } catch (error) {
        if (errorCode(error) !== "EAGAIN") break;
        pauseMs(5);
      }
    }
  } finally {
    try {
      closeSync(SUPERVISOR_REPORT_FD);
    } catch {
      // The descriptor was never open (the supervisor started by hand): nothing to close.
    }
  }
}

/** A log file that keeps at most `maxBytes` of the stream, then one marker line, then nothing. */
class CappedLog {
  private writtenBytes = 0;
  private truncated = false;
  private endsWithNewline = true;

  constructor(
    private readonly fd: number,
    private readonly maxBytes: number,
  ) {}

  write(chunk: Buffer): void {
    // Past the cap the chunk is dropped, but the caller keeps reading so the task never blocks
    // on a full pipe.
    if (this.truncated) return;
    const roomBytes = this.maxBytes - this.writtenBytes;
    if (chunk.length <= roomBytes) {
      this.writeAll(chunk);
      return;
    }
    if (roomBytes > 0) this.writeAll(chunk.subarray(0, roomBytes));
    this.writeAll(Buffer.from(`${this.endsWithNewline ? "" : "\n"}[qlr: log truncated at ${this.maxBytes} bytes]\n`, "utf8"), false);
    this.truncated = true;
  }

  private writeAll(bytes: Buffer, counts = true): void {
    if (bytes.length === 0) return;
    let offset = 0;
    while (offset < bytes.length) offset += writeSync(this.fd, bytes, offset);
    if (counts) this.writtenBytes += bytes.length;
    this.endsWithNewline = bytes[bytes.length - 1] === 0x0a;
  }

  /** The logs are made durable before the receipt, so a receipt implies its logs are complete. */
  close(): void {
    try {
      fsyncSync(this.fd);
    } finally {
      closeSync(this.fd);
    }
  }
}

function openLog(layout: StateLayout, attemptId: string, stream: "stdout" | "stderr"): { ok: true; fd: number } | { ok: false; reason: string } {
  try {
    return { ok: true, fd: openSync(attemptLogPath(layout, attemptId, stream), "wx", LOG_FILE_MODE) };
  } catch (error) {
    return { ok: false, reason: `cannot create the ${stream} log: ${errorCode(error) ?? String(error)}` };
  }
}

function describeError(error: unknown): string {
  const text = errorMessage(error);
  return text.slice(0, SPAWN_ERROR_MAX_LENGTH);
}

/** O_CLOEXEC as /proc/<pid>/fdinfo shows it (octal `flags:`), on every Linux architecture Node runs on. */
const O_CLOEXEC_FLAG = 0o2000000;

/**
 * Closes every descriptor above 2 that would survive exec. Node opens all of its own with
 * close-on-exec, and at start-up marks the low inherited ones too, but a descriptor the
 * runtime inherited above a gap (fd 40 from a service manager, a shell's `exec 9>file`, a
 * leaked socket) stays inheritable and would reach the task, which could then read or write
 * whatever it names. Only descriptors without close-on-exec are closed, so none of Node's own
 * is touched.
 */
function closeInheritableDescriptors(procSelf = "/proc/self"): void {
  let entries: string[];
  try {
    entries = readdirSync(`${procSelf}/fd`);
  } catch {
    return;
  }
  for (const entry of entries) {
    const fd = Number(entry);
    // The report channel is still needed; Node marked it close-on-exec at start-up (it is the
    // lowest inherited descriptor above stdio), so it never reaches the task either.
    if (!Number.isInteger(fd) || fd <= 2 || fd === SUPERVISOR_REPORT_FD) continue;
    let flags: number;
    try {
      const match = /^flags:\s+([0-7]+)$/m.exec(readFileSync(`${procSelf}/fdinfo/${fd}`, "utf8"));
      if (match?.[1] === undefined) continue;
      flags = Number.parseInt(match[1], 8);
    } catch {
      // Gone since the listing (the directory handle of readdirSync itself).
      continue;
    }
    if ((flags & O_CLOEXEC_FLAG) !== 0) continue;
    try {
      closeSync(fd);
    } catch {
      // Already closed.
    }
  }
}

/** Best-effort note for failures that leave no receipt; an operator finds it next to the logs. */
function noteSupervisorFailure(layout: StateLayout, attemptId: string, message: string): void {
  try {
    appendFileSync(join(layout.logsDir, `${attemptId}.supervisor.log`), `[qlr supervisor] ${message}\n`, { mode: LOG_FILE_MODE });
  } catch {
    // The state directory itself is unusable; there is nowhere left to say it.
  }
}

function signalGroup(processGroupId: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-processGroupId, signal);
  } catch {
    // ESRCH: the group is already empty.
  }
}

async function main(): Promise<number> {
  const [stateDir, attemptId] = process.argv.slice(2);
  if (stateDir === undefined || !isPortableId(attemptId)) return EXIT_CODE_NO_RECEIPT;
  process.title = `qlr-supervisor ${attemptId}`;
  const layout = stateLayout(stateDir);

  // The task's group, once it exists and until its leader is reaped. Node delivers signals
  // and the child's exit on the same thread, so a forward can never reach a reaped (and
  // possibly recycled) pid.
  let taskGroup: number | null = null;
  // A SIGTERM or SIGINT aimed at the supervisor (an operator's kill, a service manager
  // stopping the cgroup) is passed on to the task instead of ending the supervisor, so the
  // receipt is still written. SIGHUP is ignored: the supervisor has no terminal.
  process.on("SIGTERM", () => {
    if (taskGroup !== null) signalGroup(taskGroup, "SIGTERM");
  });
  process.on("SIGINT", () => {
    if (taskGroup !== null) signalGroup(taskGroup, "SIGINT");
  });
  process.on("SIGHUP", () => undefined);

  const handover = readHandover(attemptId);
  // A torn spec (the runtime died during the handover) still ends in a receipt, signed with
  // the key at the state directory's default path, so the attempt ends with a spawn error
  // rather than silence.
  const key = await loadKey(handover.spec?.receiptKeyPath ?? layout.receiptKeyPath);
  if (typeof key === "string") {
    noteSupervisorFailure(layout, attemptId, key);
    return EXIT_CODE_NO_RECEIPT;
  }
  let journal;
  try {
    journal = await readJournalRecord(layout, attemptId);
  } catch (error) {
    noteSupervisorFailure(layout, attemptId, `journal unreadable: ${describeError(error)}`);
    return EXIT_CODE_NO_RECEIPT;
  }
  if (journal === null) {
    noteSupervisorFailure(layout, attemptId, "no journal record: a task that was not journaled is never started");
    return EXIT_CODE_NO_RECEIPT;
  }
  const { startedAtMs } = journal;

  const finish = async (outcome: { exitCode: number | null; signal: string | null; spawnError: string | null; finishedAtMs: number }): Promise<number> => {
    const stopReason = await readStopReason(layout, attemptId);
    // Read once, after the task's group is gone and before the receipt: the output is signed
    // with the exit code, so it is recorded exactly as the completion is.
    const { output, outputError } = outcome.spawnError === null ? await readTaskOutput(taskOutputPath(stateDir, attemptId)) : NO_OUTPUT;
    const receipt = signReceipt(key, { attemptId, startedAtMs, stopReason, ...outcome, output, outputError: outputError?.slice(0, OUTPUT_ERROR_MAX_LENGTH) ?? null });
    try {
      await writeReceiptExclusive(layout, receipt);
      return 0;
    } catch (error) {
      noteSupervisorFailure(layout, attemptId, `receipt not written: ${describeError(error)}`);
      return EXIT_CODE_NO_RECEIPT;
    }
  };
  const failBeforeSpawn = async (spawnError: string): Promise<number> => {
    const code = await finish({ exitCode: null, signal: null, spawnError: spawnError.slice(0, SPAWN_ERROR_MAX_LENGTH), finishedAtMs: Date.now() });
    sendReport({ kind: "spawn_failed", spawnError });
    return code;
  };

  const spec = handover.spec;
  if (spec === null) return failBeforeSpawn(handover.problem);
  const stdoutFile = openLog(layout, attemptId, "stdout");
  if (!stdoutFile.ok) return failBeforeSpawn(stdoutFile.reason);
  const stderrFile = openLog(layout, attemptId, "stderr");
  if (!stderrFile.ok) {
    closeSync(stdoutFile.fd);
    return failBeforeSpawn(stderrFile.reason);
  }
  const stdoutLog = new CappedLog(stdoutFile.fd, spec.logMaxBytes);
  const stderrLog = new CappedLog(stderrFile.fd, spec.logMaxBytes);
  const closeLogs = (): void => {
    stdoutLog.close();
    stderrLog.close();
  };
  const failSpawn = (error: unknown): Promise<number> => {
    const spawnError = describeError(error);
    stderrLog.write(Buffer.from(`[qlr: spawn failed: ${spawnError}]\n`, "utf8"));
    closeLogs();
    return failBeforeSpawn(spawnError);
  };

  const [command, ...args] = spec.argv;
  // Right before the spawn: nothing but the three pipes and /dev/null may reach the task.
  closeInheritableDescriptors();
  let child: ChildProcess;
  try {
    // detached: the child calls setsid() before exec, so it leads a new session and process
    // group whose id is its pid; that group is what a stop signals. With a task user the
    // child changes into cwd, then drops supplementary groups, sets the gid, then the uid,
    // all before exec.
    const identity = spec.uid === null || spec.gid === null ? {} : { uid: spec.uid, gid: spec.gid };
    child = spawn(command ?? "", args, { detached: true, stdio: ["ignore", "pipe", "pipe"], env: { ...spec.env }, cwd: spec.cwd, ...identity });
  } catch (error) {
    return failSpawn(error);
  }
  const spawnFailure = new Promise<unknown>((resolve) => child.once("error", resolve));
  const pid = child.pid;
  // ENOENT, EACCES, a missing cwd: Node reports them through "error" on the next tick.
  if (pid === undefined) return failSpawn(await spawnFailure);
  // Read synchronously, before the event loop runs again and could reap a task that exits at
  // once: the /proc entry (a zombie at worst) still carries the start time.
  const stat = readProcStatSync(pid);
  taskGroup = pid;
  sendReport({ kind: "started", pid, startTicks: stat.kind === "present" ? stat.stat.startTicks : null });

  const streamsClosed = [
    { stream: child.stdout, log: stdoutLog },
    { stream: child.stderr, log: stderrLog },
  ].map(({ stream, log }) => {
    if (stream === null) return Promise.resolve();
    // Reading continues past the cap (the log drops the bytes) so the task never blocks on a
    // full pipe.
    stream.on("data", (chunk: Buffer) => log.write(chunk));
    return new Promise<void>((resolve) => {
      stream.once("close", () => resolve());
      stream.once("error", () => resolve());
    });
  });

  const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal }));
  });
  const finishedAtMs = Date.now();
  taskGroup = null;
  // The leader is gone; whatever it left running in its group (a background job holding the
  // pipes, a process it forgot) is ended now, so nothing of this attempt outlives its receipt
  // and a retry never runs beside it. The group id cannot name a new group while any member
  // is alive, and an empty group answers ESRCH.
  signalGroup(pid, "SIGKILL");
  let drainTimer: NodeJS.Timeout | undefined;
  await Promise.race([Promise.all(streamsClosed), new Promise<void>((resolve) => (drainTimer = setTimeout(resolve, PIPE_DRAIN_MAX_MS)))]);
  clearTimeout(drainTimer);
  child.stdout?.destroy();
  child.stderr?.destroy();
  closeLogs();
  return finish({ exitCode: exit.code, signal: exit.signal, spawnError: null, finishedAtMs });
}

function readHandover(attemptId: string): { spec: SupervisorSpec; problem: null } | { spec: null; problem: string } {
  const specText = readSpecText();
  if (!specText.ok) return { spec: null, problem: specText.reason };
  const parsed = parseSupervisorSpec(specText.text, attemptId);
  return typeof parsed === "string" ? { spec: null, problem: parsed } : { spec: parsed, problem: null };
}

async function loadKey(keyPath: string): Promise<Uint8Array | string> {
  try {
    return (await readReceiptKey(keyPath)) ?? `receipt key ${keyPath} does not exist`;
  } catch (error) {
    return `receipt key unreadable: ${describeError(error)}`;
  }
}

main().then(
  (code) => process.exit(code),
  () => process.exit(EXIT_CODE_NO_RECEIPT),
);
