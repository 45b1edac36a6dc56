export {
  DEFAULT_GRACE_MS,
  DEFAULT_SUPERVISOR_PATH,
  PosixLauncher,
  SUPERVISOR_FILE_NAME,
  type PosixLauncherOptions,
} from "./posix-launcher.ts";
export {
  DEFAULT_LOG_MAX_BYTES,
  isSpawnFailedError,
  LOG_MAX_BYTES_LIMIT,
  minimalBaseEnv,
  SpawnFailedError,
  type LaunchSpec,
} from "./launch-spec.ts";
export type {
  Inspection,
  JournalListing,
  LaunchEvidence,
  ProcessHandle,
  ReceiptReading,
  StopResult,
  Supervision,
} from "./launch-evidence.ts";
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
