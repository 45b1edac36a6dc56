import { join } from "node:path";
import { assertPortableId } from "../../../src/identity.ts";

/**
 * Where each per-attempt file lives under the launcher's state directory. Every name built
 * from an attempt id goes through `assertPortableId`, so no id can leave its directory; the
 * portable pattern allows ':' (as in `wta:<hex>`), which is an ordinary file name character on
 * Linux.
 */
export interface StateLayout {
  readonly stateDir: string;
  readonly journalDir: string;
  readonly receiptsDir: string;
  readonly logsDir: string;
  readonly stopsDir: string;
  /**
   * Spawn records (`spawns/<attemptId>.json`): written durably by the supervisor right before
   * it spawns a task, so an attempt with a journal but no spawn record, and no supervisor that
   * could still write one, provably never started.
   */
  readonly spawnsDir: string;
  /** Temporary files live apart from the journal and receipts so a listing never meets them. */
  readonly tmpDir: string;
  /**
   * Per-attempt working directories (`work/<attemptId>/`) of tasks that declare no `cwd`: a
   * task never starts in the runtime's directory or the state dir itself, so a relative path
   * in a task cannot reach the key, the token or the database by accident.
   */
  readonly workDir: string;
  readonly receiptKeyPath: string;
}

export function stateLayout(stateDir: string): StateLayout {
  return {
    stateDir,
    journalDir: join(stateDir, "journal"),
    receiptsDir: join(stateDir, "receipts"),
    logsDir: join(stateDir, "logs"),
    stopsDir: join(stateDir, "stops"),
    spawnsDir: join(stateDir, "spawns"),
    tmpDir: join(stateDir, "tmp"),
    workDir: join(stateDir, "work"),
    receiptKeyPath: join(stateDir, "receipt.key"),
  };
}

/** Every directory the launcher and the supervisor write attempt files into. */
export function attemptDirectories(layout: StateLayout): string[] {
  return [
    layout.journalDir,
    layout.receiptsDir,
    layout.logsDir,
    layout.stopsDir,
    layout.spawnsDir,
    layout.tmpDir,
    layout.workDir,
  ];
}

export const JOURNAL_SUFFIX = ".json";

export function journalPath(layout: StateLayout, attemptId: string): string {
  return join(layout.journalDir, `${assertPortableId(attemptId, "attemptId")}${JOURNAL_SUFFIX}`);
}

export function receiptPath(layout: StateLayout, attemptId: string): string {
  return join(layout.receiptsDir, `${assertPortableId(attemptId, "attemptId")}.json`);
}

export function stopIntentPath(layout: StateLayout, attemptId: string): string {
  return join(layout.stopsDir, `${assertPortableId(attemptId, "attemptId")}.json`);
}

export function spawnRecordPath(layout: StateLayout, attemptId: string): string {
  return join(layout.spawnsDir, `${assertPortableId(attemptId, "attemptId")}.json`);
}

export function attemptWorkPath(layout: StateLayout, attemptId: string): string {
  return join(layout.workDir, assertPortableId(attemptId, "attemptId"));
}

export type LogStream = "stdout" | "stderr";

export function attemptLogPath(layout: StateLayout, attemptId: string, stream: LogStream): string {
  return join(layout.logsDir, `${assertPortableId(attemptId, "attemptId")}.${stream}.log`);
}

/**
 * Every file the launcher and the supervisor may keep for one attempt except its journal
 * record: logs (both streams and the supervisor's own), the stop intent, the spawn record and
 * the receipt.
 */
export function attemptFilesBesideJournal(layout: StateLayout, attemptId: string): string[] {
  const id = assertPortableId(attemptId, "attemptId");
  return [
    attemptLogPath(layout, id, "stdout"),
    attemptLogPath(layout, id, "stderr"),
    join(layout.logsDir, `${id}.supervisor.log`),
    stopIntentPath(layout, id),
    spawnRecordPath(layout, id),
    receiptPath(layout, id),
    // The task's output and needs files (runtimes/node/task-env.ts names them the same way).
    join(layout.stateDir, "outputs", `${id}.output.json`),
    join(layout.stateDir, "outputs", `${id}.needs.json`),
  ];
}
