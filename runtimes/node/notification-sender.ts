import { spawn } from "node:child_process";
import { errorMessage } from "../../src/errors.ts";
import type {
  DeliveryOutcome,
  DeliveryRequest,
  NotificationSender,
} from "../../src/notifications.ts";
import { sendWebhook } from "../shared/webhook-sender.ts";

/** A command's exit is awaited this long before the attempt counts as failed. */
export const COMMAND_TIMEOUT_MS = 30_000;
/** Bytes of a command's stderr kept for the recorded error. */
const COMMAND_STDERR_BYTES = 400;

/**
 * Runs the notifier command with the alert's JSON on stdin and QLR_* variables naming it. No
 * shell; the command inherits the runtime's environment. Exit 0 is a delivery; anything else
 * (a non-zero exit, a signal, the timeout) is retried with backoff.
 */
export function sendCommand(
  request: Extract<DeliveryRequest, { kind: "command" }>,
  timeoutMs = COMMAND_TIMEOUT_MS,
): Promise<DeliveryOutcome> {
  return new Promise((resolveOutcome) => {
    const [program, ...args] = request.argv;
    const child = spawn(program ?? "", args, {
      env: { ...process.env, ...request.env },
      stdio: ["pipe", "ignore", "pipe"],
      timeout: timeoutMs,
      killSignal: "SIGKILL",
    });
    let stderr = "";
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk: string) => {
      if (stderr.length < COMMAND_STDERR_BYTES)
        stderr += chunk.slice(0, COMMAND_STDERR_BYTES - stderr.length);
    });
    // A command that exits without reading its stdin closes the pipe: that is not a failure.
    child.stdin.on("error", () => undefined);
    child.stdin.end(request.stdin);
    child.once("error", (error) =>
      resolveOutcome({
        ok: false,
        error: `${request.argv[0] ?? ""}: ${errorMessage(error)}`,
        retryable: true,
      }),
    );
    child.once("close", (code, signal) => {
      if (code === 0) resolveOutcome({ ok: true });
      else
        resolveOutcome({
          ok: false,
          error: `${request.argv[0] ?? ""} ${signal === null ? `exited ${code ?? "?"}` : `ended by ${signal}`}${stderr === "" ? "" : `: ${stderr.trim()}`}`,
          retryable: true,
        });
    });
  });
}

/** The device's sender: webhooks through fetch, commands as child processes. */
export const nodeNotificationSender: NotificationSender = {
  send(request) {
    return request.kind === "webhook" ? sendWebhook(request) : sendCommand(request);
  },
};
