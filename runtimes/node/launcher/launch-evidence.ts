import type { CompletionReceipt, StopReason } from "./receipt.ts";

/** What the launcher answers about an attempt: its handle, what is known of it, and its receipt. */

/**
 * The exact identity of a launched task: the pid of the task's own process (the leader of the
 * task's process group, the group every stop signals), its /proc start time and the boot id.
 * `startedAtMs` is the launcher's clock reading taken before the journal barrier and the spawn.
 */
export interface ProcessHandle {
  readonly attemptId: string;
  readonly pid: number;
  /** Field 22 of /proc/<pid>/stat, decimal text. */
  readonly processStartTicks: string;
  /** /proc/sys/kernel/random/boot_id at launch. */
  readonly bootId: string;
  readonly startedAtMs: number;
}

export type Inspection =
  | { readonly state: "running" }
  | { readonly state: "not_running" }
  | { readonly state: "changed_identity" }
  | { readonly state: "unverifiable"; readonly reason: string };

export type ReceiptReading =
  | { readonly status: "none" }
  | { readonly status: "valid"; readonly receipt: CompletionReceipt }
  | { readonly status: "invalid"; readonly reason: string };

export interface JournalListing {
  /** Attempt ids with a well-named journal file, sorted. */
  readonly valid: string[];
  readonly rejected: { readonly name: string; readonly reason: string }[];
}

export interface StopResult {
  readonly signalsSent: ("SIGTERM" | "SIGKILL")[];
  /** The inspection after the last wait; "running" means even SIGKILL did not end it in time (a process stuck in the kernel). */
  readonly finalInspection: Inspection;
  /** The reason on record: the first stop request for an attempt wins. */
  readonly recordedReason: StopReason;
}

/**
 * Whether the supervisor that owns an attempt can still write its receipt:
 * - `live`: the supervisor named in the spawn record is running (or is spawning it now);
 * - `gone`: that supervisor is dead, so no receipt is coming from it;
 * - `never_spawned`: no spawn record, and no supervisor exists that could still write one (or
 *   the live one answered that it never will): the task provably never started;
 * - `unknown`: nothing can be proven (an unreadable record, an unreachable supervisor, a
 *   launch of this launcher still in flight).
 */
export type Supervision = "live" | "gone" | "never_spawned" | "unknown";

/**
 * What the launcher's own records prove about an attempt whose runtime holds no process handle
 * for it (the runtime died, or a write failed, between the journal and persisting the handle):
 * - `not_journaled`: no journal record, so nothing was spawned and nothing will be;
 * - `journal_invalid`: the journal record cannot be read or trusted, so nothing is proven;
 * - otherwise the attempt's `Supervision`: `never_spawned` proves the task never started,
 *   `live` means the supervisor owns the process (stop it with `stopBySupervisor`, its receipt
 *   is coming), `gone` means no receipt is coming from that supervisor, `unknown` proves nothing.
 * The device's recovery and the remote worker read this one answer, so both runtimes judge the
 * same window alike.
 */
export type LaunchEvidence = "not_journaled" | "journal_invalid" | Supervision;
