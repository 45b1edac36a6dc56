import { isPortableId } from "../../../src/identity.ts";
import type { DurableFs } from "../../../storage/node/durable-fs.ts";
import { launcherDurableFs } from "./durable-file.ts";
import { createRecordFile, readRecordFile } from "./record-file.ts";
import { spawnRecordPath, type StateLayout } from "./state-layout.ts";

/**
 * The supervisor's second durable record of an attempt, written after the launcher's journal
 * and before the task is spawned. It names the supervisor process (pid, start ticks, boot id)
 * that owns the task, so "is the receipt still coming?" is a question about one exact
 * process, and its absence (with no supervisor left that could still write it) proves the
 * task never started.
 */
export interface SpawnRecord {
  readonly attemptId: string;
  readonly supervisorPid: number;
  readonly supervisorStartTicks: string;
  readonly bootId: string;
}

const SPAWN_RECORD_MAX_BYTES = 4096;

export async function writeSpawnRecord(
  layout: StateLayout,
  record: SpawnRecord,
  fs: DurableFs = launcherDurableFs,
): Promise<void> {
  await createRecordFile(
    spawnRecordPath(layout, record.attemptId),
    layout.tmpDir,
    record,
    SPAWN_RECORD_MAX_BYTES,
    fs,
  );
}

/** The record, null when there is none, or the reason it cannot be used. */
export async function readSpawnRecord(
  layout: StateLayout,
  attemptId: string,
  fs: DurableFs = launcherDurableFs,
): Promise<SpawnRecord | null | { invalid: string }> {
  const file = await readRecordFile(
    spawnRecordPath(layout, attemptId),
    SPAWN_RECORD_MAX_BYTES,
    attemptId,
    fs,
  );
  if (file === null) return null;
  if (!file.ok) return { invalid: `spawn record ${file.reason}` };
  const parsed = file.record;
  if (parsed.attemptId !== attemptId || !isPortableId(parsed.attemptId))
    return { invalid: "spawn record names another attempt" };
  if (
    !Number.isSafeInteger(parsed.supervisorPid) ||
    typeof parsed.supervisorStartTicks !== "string" ||
    !/^[0-9]+$/.test(parsed.supervisorStartTicks) ||
    typeof parsed.bootId !== "string"
  )
    return { invalid: "spawn record is malformed" };
  return {
    attemptId,
    supervisorPid: parsed.supervisorPid as number,
    supervisorStartTicks: parsed.supervisorStartTicks,
    bootId: parsed.bootId,
  };
}
