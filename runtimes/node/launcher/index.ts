export {
  DEFAULT_GRACE_MS,
  DEFAULT_LOG_MAX_BYTES,
  DEFAULT_SUPERVISOR_PATH,
  isSpawnFailedError,
  LOG_MAX_BYTES_LIMIT,
  minimalBaseEnv,
  PosixLauncher,
  SpawnFailedError,
  SUPERVISOR_FILE_NAME,
  type Inspection,
  type JournalListing,
  type LaunchEvidence,
  type LaunchSpec,
  type PosixLauncherOptions,
  type ProcessHandle,
  type ReceiptReading,
  type StopResult,
  type Supervision,
} from "./posix-launcher.ts";
export { type JournalRecord } from "./journal.ts";
export {
  loadOrCreateReceiptKey,
  STOP_REASONS,
  type CompletionReceipt,
  type StopReason,
} from "./receipt.ts";
export {
  isAlive,
  listProcessGroupMembers,
  parseProcStat,
  readBootId,
  readProcStat,
  type ProcStat,
} from "./proc.ts";
export { type LogStream } from "./state-layout.ts";
