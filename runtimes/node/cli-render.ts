import type { NotificationView, RunDetail, RunView } from "../http/contract.ts";
import type { CommonConfig } from "./config.ts";

/**
 * What `qlr` prints for people: runs, steps, attempts and alerts as lines of text. Every
 * command prints through `print`, so `--json` gives the same value machine-readable instead.
 */

/** A time in ms as `YYYY-MM-DD HH:MM:SSZ`, or `-` when there is none. */
export function time(ms: number | null): string {
  return ms === null
    ? "-"
    : new Date(ms)
        .toISOString()
        .replace("T", " ")
        .replace(/\.\d+Z$/, "Z");
}

/** A command's answer on stdout: the value as JSON under `--json`, else the human text. */
export function print(config: CommonConfig, value: unknown, human: () => string): void {
  process.stdout.write(config.json ? `${JSON.stringify(value, null, 2)}\n` : `${human()}\n`);
}

/** A JSON value on one line, cut to `width` characters. */
function brief(value: unknown, width = 72): string {
  const text = JSON.stringify(value) ?? "null";
  return text.length <= width ? text : `${text.slice(0, width - 1)}…`;
}

/** Why a run was cancelled, for people; empty from a runtime too old to say. */
function cancelReasonText(reason: RunView["cancelReason"] | undefined): string {
  if (reason === "user") return " by a user";
  if (reason === "shutdown") return " by the runtime shutting down";
  return "";
}

export function renderDetail(detail: RunDetail): string {
  const lines = [
    `run ${detail.run.id}  ${detail.run.kind} ${detail.run.package}/${detail.run.target}  ${detail.run.status}`,
    `  created ${time(detail.run.createdAtMs)}  finished ${time(detail.run.finishedAtMs)}`,
  ];
  if (detail.run.input !== undefined && Object.keys(detail.run.input).length > 0)
    lines.push(`  input ${brief(detail.run.input, 200)}`);
  if (detail.run.rerunOf !== undefined && detail.run.rerunOf !== null)
    lines.push(`  rerun of ${detail.run.rerunOf}`);
  if (detail.run.cancelRequestedAtMs !== null)
    lines.push(
      `  cancel requested ${time(detail.run.cancelRequestedAtMs)}${cancelReasonText(detail.run.cancelReason)}`,
    );
  if (typeof detail.waiting === "string") lines.push(`  ${detail.waiting}`);
  for (const step of detail.steps) {
    const attempts = detail.attempts.filter((attempt) => attempt.stepRunId === step.id);
    const last = attempts.at(-1);
    lines.push(
      `  ${step.name.padEnd(16)} ${step.status.padEnd(10)} attempts ${step.attemptCount}${last === undefined ? "" : `  last ${last.status} pid ${last.pid ?? "-"} exit ${last.exitCode ?? last.signal ?? "-"}${last.error === null ? "" : `  (${last.error})`}`}`,
    );
    if (typeof step.waiting === "string") lines.push(`  ${"".padEnd(16)} ${step.waiting}`);
    if (step.output !== undefined && step.output !== null)
      lines.push(`  ${"".padEnd(16)} output ${brief(step.output)}`);
  }
  if (detail.run.kind === "ordinary") {
    for (const attempt of detail.attempts)
      lines.push(
        `  attempt ${attempt.number} ${attempt.status.padEnd(10)} pid ${attempt.pid ?? "-"} exit ${attempt.exitCode ?? attempt.signal ?? "-"}${attempt.error === null ? "" : `  (${attempt.error})`}`,
      );
  }
  return lines.join("\n");
}

/** `qlr runs`: one line per run, newest first as the runtime listed them. */
export function renderRuns(runs: readonly RunView[]): string {
  return runs.length === 0
    ? "no runs"
    : runs
        .map(
          (run) =>
            `${run.id}  ${run.status.padEnd(11)} ${run.kind.padEnd(8)} ${run.package}/${run.target}  ${time(run.createdAtMs)}`,
        )
        .join("\n");
}

/** Where an alert goes: the webhook's URL or the command line. */
function notificationTarget(entry: NotificationView): string {
  return entry.notifier.kind === "webhook" ? entry.notifier.url : entry.notifier.argv.join(" ");
}

/** How each listing words an alert's state; a time follows the delivered and pending words. */
interface NotificationStateWords {
  readonly delivered: string;
  readonly pending: string;
  readonly failed: string;
}

function notificationState(entry: NotificationView, words: NotificationStateWords): string {
  if (entry.state === "delivered") return `${words.delivered} ${time(entry.deliveredAtMs)}`;
  if (entry.state === "pending") return `${words.pending} ${time(entry.nextAttemptAtMs)}`;
  return words.failed;
}

export function renderNotification(entry: NotificationView): string {
  const target = notificationTarget(entry);
  const when = notificationState(entry, {
    delivered: "delivered",
    pending: "next try",
    failed: "gave up",
  });
  return `${entry.id}  ${entry.state.padEnd(9)} ${entry.event.padEnd(14)} run ${entry.runId}${entry.step === null ? "" : ` step ${entry.step}`}  ${target}  attempts ${entry.attempts}  ${when}${entry.lastError === null ? "" : `  (${entry.lastError})`}`;
}

/** A run's alerts under its steps: what was sent, what waits, what gave up and why. */
export function renderRunNotifications(entries: readonly NotificationView[]): string[] {
  if (entries.length === 0) return [];
  return [
    "  notifications",
    ...entries.map((entry) => {
      const target = notificationTarget(entry);
      const state = notificationState(entry, {
        delivered: "sent",
        pending: "pending, next try",
        failed: "failed",
      });
      const about = entry.step === null ? "" : ` step ${entry.step}`;
      return `    ${entry.event}${about}  ${target}  ${state}  attempts ${entry.attempts}${entry.lastError === null ? "" : `  last error: ${entry.lastError}`}`;
    }),
  ];
}
