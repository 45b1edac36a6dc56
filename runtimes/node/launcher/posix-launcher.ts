import { readdir, rm, stat, unlink } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { digestOf, timingSafeEqualText } from "../../../src/digest.ts";
import { assertPortableId, isPortableId } from "../../../src/identity.ts";
import { QlrError, errorMessage, errorCode } from "../../../src/errors.ts";
import { fsyncDirectory } from "../../../storage/node/fsync-directory.ts";
import { ensureDurableDirectories, readSmallFile } from "./durable-file.ts";
import { readJournalRecord, writeJournalRecord, type JournalRecord } from "./journal.ts";
import { bootIdOnce, DEFAULT_PROC_ROOT, isExitedState, readProcStatSync } from "./proc.ts";
import {
  checkReceiptText,
  readReceiptKey,
  RECEIPT_MAX_BYTES,
  signReceipt,
  SPAWN_ERROR_MAX_LENGTH,
  writeReceiptExclusive,
  type StopReason,
} from "./receipt.ts";
import {
  attemptDirectories,
  attemptFilesBesideJournal,
  attemptLogPath,
  attemptWorkPath,
  journalPath,
  JOURNAL_SUFFIX,
  receiptPath,
  stateLayout,
  type LogStream,
  type StateLayout,
} from "./state-layout.ts";
import {
  invalidSpec,
  minimalBaseEnv,
  SpawnFailedError,
  supervisorSpecOf,
  validateLaunchSpec,
  type LaunchSpec,
} from "./launch-spec.ts";
import type {
  Inspection,
  JournalListing,
  LaunchEvidence,
  ProcessHandle,
  ReceiptReading,
  StopResult,
  Supervision,
} from "./launch-evidence.ts";
import { checkedStopReason, ProcessStopper } from "./process-stop.ts";
import { sweepTemporaryFiles, type TemporarySweep } from "./temporary-files.ts";
import { readSpawnRecord } from "./spawn-record.ts";
import { SupervisorClient } from "./supervisor-client.ts";
import { SUPERVISOR_FEATURE_CREATE_CWD } from "./supervisor-protocol.ts";
import { createWorkDir } from "./work-dir.ts";
import { resolveTaskUser, type TaskAccount } from "./task-user.ts";
import {
  placeTaskFiles,
  reclaimTaskFiles,
  removeTaskFiles,
  userTaskFilesDir,
  userTaskFilesRoot,
} from "./user-task-files.ts";

export interface PosixLauncherOptions {
  readonly stateDir: string;
  /** Must equal the key in `<stateDir>/receipt.key` (see `loadOrCreateReceiptKey`). */
  readonly hmacKey: Uint8Array;
  readonly nowMs: () => number;
  /** The bundled supervisor; defaults to supervisor.mjs beside the running bundle. */
  readonly supervisorPath?: string;
  /** Time between SIGTERM and SIGKILL in a stop; default 5000. */
  readonly graceMs?: number;
  /** Where /proc is mounted; tests point it elsewhere to exercise the unverifiable path. */
  readonly procRoot?: string;
  /**
   * Told when the supervisor reports a task's receipt durable. A hint to look now, never
   * evidence: the receipt stays the record.
   */
  readonly onSupervisorExit?: (attemptId: string) => void;
  /** Crash tests: called once the journal record is durable, before the supervisor is asked to spawn. */
  readonly afterJournal?: (attemptId: string) => void | Promise<void>;
  /** Crash tests: called once a stop's durable intent is written, before any signal or request. */
  readonly afterStopIntent?: (attemptId: string) => void | Promise<void>;
  /** Crash tests: called once a stop's SIGTERM reached the task's group, before its grace runs out. */
  readonly afterStopTerm?: (attemptId: string) => void | Promise<void>;
  /**
   * Where the task files of `user:` tasks live (see user-task-files.ts); default
   * `userTaskFilesRoot(stateDir)`, in the system's temporary folder.
   */
  readonly userTaskFilesRoot?: string;
  /**
   * A supervisor this launcher starts trades CPU for memory (the edge profile; see
   * `supervisorNodeFlags`). A supervisor already running keeps the flags it started with.
   */
  readonly lowMemory?: boolean;
}

export const DEFAULT_GRACE_MS = 5000;
export const SUPERVISOR_FILE_NAME = "supervisor.mjs";
/** The supervisor bundle's default place: next to the runtime bundle (dist/supervisor.mjs). */
export const DEFAULT_SUPERVISOR_PATH = fileURLToPath(
  new URL(`./${SUPERVISOR_FILE_NAME}`, import.meta.url),
);

/** Journal start times this launcher wrote and still expects a receipt for (see `journaledStartedAtMs`). */
const REMEMBERED_JOURNALS_MAX = 4096;

async function unlinkIfPresent(path: string): Promise<void> {
  try {
    await unlink(path);
  } catch (error) {
    if (errorCode(error) !== "ENOENT") throw error;
  }
}

async function fsyncDirectoryIfPresent(directory: string): Promise<void> {
  try {
    await fsyncDirectory(directory);
  } catch (error) {
    if (errorCode(error) !== "ENOENT") throw error;
  }
}

/**
 * Runs one attempt of a task as a real OS process that survives a SIGKILL of the runtime. See
 * README.md beside this file for the process tree, the files and the durability order.
 */
export class PosixLauncher {
  private readonly layout: StateLayout;
  private readonly hmacKey: Uint8Array;
  private readonly nowMs: () => number;
  private readonly supervisorPath: string;
  private readonly graceMs: number;
  private readonly procRoot: string;
  private readonly bootId: () => Promise<string | null>;
  private readonly supervisor: SupervisorClient;
  private readonly afterJournal: ((attemptId: string) => void | Promise<void>) | undefined;
  private prepared: Promise<void> | null = null;
  private readonly stopper: ProcessStopper;
  /** Launches between their journal write and the supervisor's answer: never settled as never spawned. */
  private readonly launchesInFlight = new Set<string>();
  /**
   * The `startedAtMs` of the journal records this launcher wrote, until their receipt is read
   * valid: a receipt is checked against the journal, and the record is immutable once written
   * (created exclusively, never rewritten), so the value written is the value a read would
   * return; reading the file back per completion is saved. Bounded: the oldest are forgotten
   * first, and a forgotten one is read from its file as before.
   */
  private readonly journaledStartedAtMs = new Map<string, number>();
  /** The folder of `user:` tasks' needs and output files (see user-task-files.ts). */
  readonly userTaskFilesRoot: string;

  constructor(options: PosixLauncherOptions) {
    this.layout = stateLayout(options.stateDir);
    this.userTaskFilesRoot = options.userTaskFilesRoot ?? userTaskFilesRoot(options.stateDir);
    this.hmacKey = options.hmacKey;
    this.nowMs = options.nowMs;
    this.supervisorPath = options.supervisorPath ?? DEFAULT_SUPERVISOR_PATH;
    this.graceMs = options.graceMs ?? DEFAULT_GRACE_MS;
    this.procRoot = options.procRoot ?? DEFAULT_PROC_ROOT;
    this.bootId = bootIdOnce(this.procRoot);
    this.afterJournal = options.afterJournal;
    this.supervisor = new SupervisorClient({
      stateDir: options.stateDir,
      hmacKey: options.hmacKey,
      supervisorPath: this.supervisorPath,
      supervisorEnv: minimalBaseEnv(),
      lowMemory: options.lowMemory === true,
      ...(options.onSupervisorExit === undefined ? {} : { onExited: options.onSupervisorExit }),
    });
    if (!Number.isSafeInteger(this.graceMs) || this.graceMs < 0)
      throw new QlrError("invalid_request", "graceMs must be a non-negative integer");
    this.stopper = new ProcessStopper({
      layout: this.layout,
      nowMs: this.nowMs,
      graceMs: this.graceMs,
      inspect: (handle) => this.inspect(handle),
      prepare: () => this.prepare(),
      afterStopIntent: options.afterStopIntent,
      afterStopTerm: options.afterStopTerm,
    });
  }

  /** The state directory the launcher keeps its files in (task files are kept beside them). */
  get stateDir(): string {
    return this.layout.stateDir;
  }

  logPath(attemptId: string, stream: LogStream): string {
    return attemptLogPath(this.layout, attemptId, stream);
  }

  /**
   * Journal (durable) → the resident supervisor's spawn record (durable) → spawn → handle. Every check that can fail without side effects runs before the journal is
   * written; once the journal exists, the attempt has "maybe started" and is never launched
   * again under the same id.
   */
  async launch(spec: LaunchSpec): Promise<ProcessHandle> {
    const attemptId = assertPortableId(spec.attemptId, "attemptId");
    validateLaunchSpec(spec);
    // A user that cannot be resolved or assumed is a spawn failure of this attempt (its step
    // fails with the reason), recorded after the journal like any other.
    const account =
      spec.user === undefined || spec.user === null ? null : await this.taskAccount(spec.user);
    const ownWorkDir = spec.cwd === null ? attemptWorkPath(this.layout, attemptId) : null;
    const taskFiles = spec.userTaskFiles ?? null;
    if (taskFiles !== null && taskFiles.dir !== userTaskFilesDir(this.userTaskFilesRoot, attemptId))
      throw invalidSpec(
        "userTaskFiles.dir",
        `must be ${userTaskFilesDir(this.userTaskFilesRoot, attemptId)}`,
      );
    const supervisorSpec = supervisorSpecOf(spec, {
      account,
      ownWorkDir,
      graceMs: this.graceMs,
    });
    await this.prepare();
    const bootId = await this.bootId();
    if (bootId === null)
      throw new QlrError(
        "storage_unavailable",
        `no boot id under ${this.procRoot}: the POSIX launcher needs Linux /proc to identify processes`,
      );
    if (this.launchesInFlight.has(attemptId))
      throw new QlrError("conflict", `attempt ${attemptId} is being launched already`);
    this.launchesInFlight.add(attemptId);
    try {
      const startedAtMs = this.nowMs();
      if (!Number.isSafeInteger(startedAtMs))
        throw new QlrError("invalid_request", "nowMs() must return an integer");
      const journal: JournalRecord = {
        version: 1,
        attemptId,
        startedAtMs,
        bootId,
        argvDigest: digestOf(spec.argv),
        cwd: spec.cwd,
        logMaxBytes: spec.logMaxBytes,
      };
      try {
        await writeJournalRecord(this.layout, journal);
        if (this.journaledStartedAtMs.size >= REMEMBERED_JOURNALS_MAX) {
          const oldest = this.journaledStartedAtMs.keys().next().value;
          if (oldest !== undefined) this.journaledStartedAtMs.delete(oldest);
        }
        this.journaledStartedAtMs.set(attemptId, startedAtMs);
      } catch (error) {
        if (errorCode(error) === "EEXIST")
          throw new QlrError(
            "conflict",
            `attempt ${attemptId} is already journaled; launching it again could run it twice`,
            { cause: error },
          );
        // Nothing was spawned and nothing will be: the journal is the barrier.
        throw new QlrError(
          "storage_unavailable",
          `the launcher cannot write the journal record of ${attemptId} (${errorCode(error) ?? errorMessage(error)}), so it does not start the task`,
          { cause: error },
        );
      }

      await this.afterJournal?.(attemptId);
      if (typeof account === "string")
        return await this.failWithoutSupervisor(attemptId, startedAtMs, account);
      if (taskFiles !== null && account !== null) {
        const unplaced = await placeTaskFiles(this.userTaskFilesRoot, taskFiles, account);
        if (unplaced !== null)
          return await this.failWithoutSupervisor(attemptId, startedAtMs, unplaced);
      }
      let features;
      try {
        features = await this.supervisor.connected();
      } catch (error) {
        // Nothing was asked of any supervisor, so nothing ran: a definite spawn failure.
        return await this.failWithoutSupervisor(
          attemptId,
          startedAtMs,
          `no supervisor: ${errorMessage(error)}`,
        );
      }
      // The supervisor makes the work dir right before the spawn (a mkdir less on this event
      // loop per launch); one of an older build that does not announce it gets it made here.
      const supervisorCreatesCwd =
        ownWorkDir !== null && features.has(SUPERVISOR_FEATURE_CREATE_CWD);
      const unprepared =
        ownWorkDir !== null && !supervisorCreatesCwd ? createWorkDir(ownWorkDir, account) : null;
      if (unprepared !== null)
        return await this.failWithoutSupervisor(attemptId, startedAtMs, unprepared);
      let reply;
      try {
        reply = await this.supervisor.request({
          op: "launch",
          spec: supervisorCreatesCwd ? { ...supervisorSpec, createCwd: true } : supervisorSpec,
        });
      } catch (error) {
        // The request may or may not have reached the supervisor: the attempt is unknown until
        // its spawn record, its receipt or the supervisor's settle answer says which.
        throw new QlrError("internal", `launch of ${attemptId}: ${errorMessage(error)}`, {
          cause: error,
        });
      }
      if (reply.kind === "spawn_failed") {
        const reading = await this.readReceipt(attemptId);
        if (reading.status !== "valid")
          throw new QlrError(
            "integrity",
            `attempt ${attemptId} failed to spawn (${reply.spawnError}) but its receipt is ${reading.status}`,
          );
        throw new SpawnFailedError(reading.receipt);
      }
      if (reply.kind === "rejected")
        throw new QlrError(
          "storage_unavailable",
          `the supervisor did not start ${attemptId}: ${reply.reason}`,
        );
      if (reply.kind !== "started")
        throw new QlrError(
          "internal",
          `the supervisor answered a launch of ${attemptId} with ${reply.kind}`,
        );
      if (reply.startTicks === null) {
        // The task runs but cannot be identified; it is never signalled by pid alone. Its
        // receipt still arrives when it ends, and the supervisor enforces its deadline.
        throw new QlrError(
          "storage_unavailable",
          `attempt ${attemptId} started as pid ${reply.pid} but its /proc start time was unreadable`,
        );
      }
      return {
        attemptId,
        pid: reply.pid,
        processStartTicks: reply.startTicks,
        bootId,
        startedAtMs,
      };
    } finally {
      this.launchesInFlight.delete(attemptId);
    }
  }

  /** Closes the connection to the supervisor (which lives on for its tasks). */
  close(): void {
    this.supervisor.close();
  }

  /** See `LaunchEvidence`. */
  async launchEvidence(attemptId: string): Promise<LaunchEvidence> {
    assertPortableId(attemptId, "attemptId");
    try {
      if ((await readJournalRecord(this.layout, attemptId)) === null) return "not_journaled";
    } catch {
      return "journal_invalid";
    }
    return this.supervision(attemptId);
  }

  /**
   * The handle of a task its live supervisor spawned, for a runtime that never persisted it:
   * the supervisor names the task's pid and start ticks, the journal its boot and start time,
   * exactly what `launch` would have returned. Null when no live supervisor holds the task (not
   * spawned yet, already receipted, or its identity was unreadable at the spawn). Ask only for
   * an attempt whose `launchEvidence` is `live`: the supervisor refuses an id it does not know.
   */
  async recoverHandle(attemptId: string): Promise<ProcessHandle | null> {
    assertPortableId(attemptId, "attemptId");
    if (this.launchesInFlight.has(attemptId)) return null;
    try {
      const journal = await readJournalRecord(this.layout, attemptId);
      if (journal === null) return null;
      const reply = await this.supervisor.requestIfAlive({ op: "settle", attemptId });
      if (
        reply === null ||
        reply.kind !== "settled" ||
        reply.state !== "spawned" ||
        typeof reply.pid !== "number" ||
        typeof reply.startTicks !== "string"
      )
        return null;
      return {
        attemptId,
        pid: reply.pid,
        processStartTicks: reply.startTicks,
        bootId: journal.bootId,
        startedAtMs: journal.startedAtMs,
      };
    } catch {
      return null;
    }
  }

  /** See `Supervision`. */
  async supervision(attemptId: string): Promise<Supervision> {
    assertPortableId(attemptId, "attemptId");
    if (this.launchesInFlight.has(attemptId)) return "unknown";
    // Its supervisor holds the other end of our open connection and has not said it exited.
    if (this.supervisor.supervising(attemptId)) return "live";
    let record;
    try {
      record = await readSpawnRecord(this.layout, attemptId);
    } catch {
      return "unknown";
    }
    if (record !== null && "invalid" in record) return "unknown";
    if (record !== null) {
      const bootId = await this.bootId();
      if (bootId === null) return "unknown";
      if (bootId !== record.bootId) return "gone";
      const reading = readProcStatSync(record.supervisorPid, this.procRoot);
      if (reading.kind === "unreadable") return "unknown";
      if (
        reading.kind === "absent" ||
        reading.stat.startTicks !== record.supervisorStartTicks ||
        isExitedState(reading.stat.state)
      )
        return "gone";
      return "live";
    }
    try {
      const journal = await readJournalRecord(this.layout, attemptId);
      if (journal === null) return "never_spawned";
      const reply = await this.supervisor.requestIfAlive({ op: "settle", attemptId });
      // No supervisor of this state directory is alive: none can still write the spawn record.
      if (reply === null)
        return (await readSpawnRecord(this.layout, attemptId)) === null
          ? "never_spawned"
          : "unknown";
      if (reply.kind !== "settled") return "unknown";
      return reply.state === "never" ? "never_spawned" : "live";
    } catch {
      return "unknown";
    }
  }

  /**
   * A stop of an attempt whose handle the runtime does not hold (it crashed between the spawn
   * and persisting it): the intent is recorded durably and the supervisor, which knows the
   * exact process, signals it. False when no live supervisor knows the attempt.
   */
  async stopBySupervisor(
    attemptId: string,
    reason: StopReason,
  ): Promise<{ recordedReason: StopReason; known: boolean }> {
    assertPortableId(attemptId, "attemptId");
    const recordedReason = await this.stopper.recordIntent(attemptId, checkedStopReason(reason));
    const reply = await this.supervisor.requestIfAlive({ op: "stop", attemptId });
    return { recordedReason, known: reply !== null && reply.kind === "stopping" && reply.known };
  }

  private async taskAccount(user: string): Promise<TaskAccount | string> {
    const account = await resolveTaskUser(user);
    if (typeof account === "string") return account;
    const ownUid = process.getuid?.() ?? -1;
    if (ownUid !== 0 && account.uid !== ownUid)
      return `task user ${JSON.stringify(user)} (uid ${account.uid}) needs the runtime to run as root; it runs as uid ${ownUid}`;
    return account;
  }

  /** Directories, the key check and the supervisor bundle, once per launcher (retried after a failure). */
  private prepare(): Promise<void> {
    this.prepared ??= (async () => {
      const { stateDir, receiptKeyPath } = this.layout;
      await ensureDurableDirectories(stateDir, attemptDirectories(this.layout));
      const fileKey = await readReceiptKey(receiptKeyPath);
      // The supervisor signs with the file's key and this launcher verifies with its own, so
      // they must be the same key or every receipt would read as invalid.
      if (
        fileKey === null ||
        !timingSafeEqualText(
          Buffer.from(fileKey).toString("hex"),
          Buffer.from(this.hmacKey).toString("hex"),
        )
      ) {
        throw new QlrError(
          "integrity",
          `hmacKey is not the key in ${receiptKeyPath}; create both with loadOrCreateReceiptKey(stateDir)`,
        );
      }
      const supervisor = await stat(this.supervisorPath).catch(() => null);
      if (supervisor === null || !supervisor.isFile())
        throw new QlrError(
          "not_found",
          `supervisor bundle ${this.supervisorPath} is missing; build it with buildSupervisor()`,
        );
    })().catch((error: unknown) => {
      this.prepared = null;
      throw error;
    });
    return this.prepared;
  }

  /** The supervisor was never asked, so nothing ran: the launcher writes the receipt itself and the journal never dangles. */
  private async failWithoutSupervisor(
    attemptId: string,
    startedAtMs: number,
    spawnError: string,
  ): Promise<never> {
    // A `user:` task's folder placed before the failure goes back to the runtime's user: what
    // never ran keeps nothing open to any task user.
    await reclaimTaskFiles(userTaskFilesDir(this.userTaskFilesRoot, attemptId)).catch(() => false);
    const receipt = signReceipt(this.hmacKey, {
      attemptId,
      startedAtMs,
      finishedAtMs: this.nowMs(),
      exitCode: null,
      signal: null,
      stopReason: null,
      spawnError: spawnError.slice(0, SPAWN_ERROR_MAX_LENGTH),
    });
    await writeReceiptExclusive(this.layout, receipt);
    throw new SpawnFailedError(receipt);
  }

  async readJournal(attemptId: string): Promise<JournalRecord | null> {
    return readJournalRecord(this.layout, attemptId);
  }

  /**
   * Lists the journal. A file whose name is not `<portable id>.json`, or that is not a regular
   * file, is reported as rejected and never turned into an attempt id.
   */
  async listJournal(): Promise<JournalListing> {
    let entries;
    try {
      entries = await readdir(this.layout.journalDir, { withFileTypes: true });
    } catch (error) {
      if (errorCode(error) === "ENOENT") return { valid: [], rejected: [] };
      throw error;
    }
    const valid: string[] = [];
    const rejected: { name: string; reason: string }[] = [];
    for (const entry of entries) {
      const stem = entry.name.endsWith(JOURNAL_SUFFIX)
        ? entry.name.slice(0, -JOURNAL_SUFFIX.length)
        : null;
      if (stem === null)
        rejected.push({ name: entry.name, reason: `name does not end in ${JOURNAL_SUFFIX}` });
      else if (!isPortableId(stem))
        rejected.push({ name: entry.name, reason: "name is not a portable identity" });
      else if (!entry.isFile()) rejected.push({ name: entry.name, reason: "not a regular file" });
      else valid.push(stem);
    }
    valid.sort();
    rejected.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return { valid, rejected };
  }

  /**
   * Removes the temporary files of durable creates whose writers died before they could remove
   * them (temporary-files.ts says which go). The runtime calls it once at start-up.
   */
  sweepTemporaryFiles(): Promise<TemporarySweep> {
    // File times are the wall clock's, whatever clock the launcher's records use.
    return sweepTemporaryFiles(this.layout.tmpDir, Date.now());
  }

  /**
   * Journal record ids in ascending order after `afterAttemptId`, at most `limit` (the orphan
   * sweep's page). Names that are not `<portable id>.json` are never returned.
   */
  async listJournalPage(afterAttemptId: string | null, limit: number): Promise<string[]> {
    const listing = await this.listJournal();
    const after = afterAttemptId ?? "";
    return listing.valid.filter((attemptId) => attemptId > after).slice(0, Math.max(0, limit));
  }

  /**
   * Deletes every file of these attempts (retention: their rows are already gone). Order, for
   * crash and power-loss safety: (1) logs, stop intents, receipts and the attempt's work
   * directory (whatever the task left in it) are removed; (2) their directories are fsynced, so
   * those removals are durable; (3) only then the journal records go. An interruption anywhere leaves the journal record, which the orphan sweep lists and
   * finishes; a file without its journal can never be left behind. A missing file is fine
   * (a task that never logged, a discard repeated after a crash).
   */
  async discard(
    attemptIds: readonly string[],
    beforeJournal?: () => void | Promise<void>,
  ): Promise<void> {
    const ids = attemptIds.map((attemptId) => assertPortableId(attemptId, "attemptId"));
    if (ids.length === 0) return;
    for (const attemptId of ids) {
      this.journaledStartedAtMs.delete(attemptId);
      for (const path of attemptFilesBesideJournal(this.layout, attemptId))
        await unlinkIfPresent(path);
      // Removes symbolic links a task left there, never what they point to.
      await rm(attemptWorkPath(this.layout, attemptId), { recursive: true, force: true });
      // A `user:` task's needs and output (taken back from the task's user first).
      await removeTaskFiles(userTaskFilesDir(this.userTaskFilesRoot, attemptId));
    }
    // Every directory but the journal's (it goes last) and tmp/ (nothing of an attempt stays in it).
    for (const directory of attemptDirectories(this.layout))
      if (directory !== this.layout.journalDir && directory !== this.layout.tmpDir)
        await fsyncDirectoryIfPresent(directory);
    await beforeJournal?.();
    for (const attemptId of ids) await unlinkIfPresent(journalPath(this.layout, attemptId));
    // Not fsynced: a journal record that a power loss brings back is an orphan the next
    // start-up's sweep removes again.
  }

  /**
   * Reads and authenticates the receipt: shape, MAC, attempt id against the file name, and
   * startedAtMs against the journal. Anything short of all four is "invalid", never accepted.
   */
  async readReceipt(attemptId: string): Promise<ReceiptReading> {
    // A task still running under the supervisor we are connected to has no receipt: no file
    // read per running task per cycle (SupervisorClient.supervising says why this is exact).
    if (this.supervisor.supervising(attemptId)) return { status: "none" };
    const path = receiptPath(this.layout, attemptId);
    const file = await readSmallFile(path, RECEIPT_MAX_BYTES);
    if (file === null) return { status: "none" };
    if (!file.ok) return { status: "invalid", reason: `receipt ${file.reason}` };
    const checked = checkReceiptText(this.hmacKey, file.text, attemptId);
    if (!checked.ok) return { status: "invalid", reason: checked.reason };
    let journaledAtMs = this.journaledStartedAtMs.get(attemptId);
    if (journaledAtMs === undefined) {
      let journal: JournalRecord | null;
      try {
        journal = await readJournalRecord(this.layout, attemptId);
      } catch (error) {
        return { status: "invalid", reason: `journal unusable: ${errorMessage(error)}` };
      }
      if (journal === null)
        return { status: "invalid", reason: "no journal record for this receipt" };
      journaledAtMs = journal.startedAtMs;
    }
    if (journaledAtMs !== checked.receipt.startedAtMs)
      return {
        status: "invalid",
        reason: `receipt startedAtMs ${checked.receipt.startedAtMs} differs from the journal's ${journaledAtMs}`,
      };
    this.journaledStartedAtMs.delete(attemptId);
    return { status: "valid", receipt: checked.receipt };
  }

  /**
   * Evidence rules (README.md, "inspect"): "not_running" only from a trusted source — the same
   * boot and a readable /proc without the pid (or with it as a zombie), or a different boot id,
   * since a reboot ends every process of the earlier boot.
   */
  async inspect(handle: ProcessHandle): Promise<Inspection> {
    if (
      !Number.isSafeInteger(handle.pid) ||
      handle.pid <= 0 ||
      !/^[0-9]+$/.test(handle.processStartTicks)
    )
      return { state: "unverifiable", reason: "the handle is malformed" };
    const bootId = await this.bootId();
    if (bootId === null)
      return { state: "unverifiable", reason: `no boot id under ${this.procRoot}` };
    if (bootId !== handle.bootId) return { state: "not_running" };
    const reading = readProcStatSync(handle.pid, this.procRoot);
    if (reading.kind === "unreadable") return { state: "unverifiable", reason: reading.reason };
    if (reading.kind === "absent") return { state: "not_running" };
    if (reading.stat.startTicks !== handle.processStartTicks) return { state: "changed_identity" };
    return isExitedState(reading.stat.state) ? { state: "not_running" } : { state: "running" };
  }

  /** See process-stop.ts: the reason recorded durably, then SIGTERM, the grace, SIGKILL. */
  stop(handle: ProcessHandle, reason: StopReason): Promise<StopResult> {
    return this.stopper.stop(handle, reason);
  }
}
