import { errorMessage } from "../../src/errors.ts";
import { ApiError } from "../http/client.ts";
import { commonConfig, UsageError } from "./config.ts";
import { describeStartupError } from "./device.ts";
import { parseCommandLine, USAGE, type CommandHandler } from "./cli-options.ts";
import {
  applyCommand,
  cancelCommand,
  logsCommand,
  notificationsCommand,
  rerunCommand,
  resolveCommand,
  runsCommand,
  startCommand,
  statusCommand,
  tickCommand,
} from "./cli-commands.ts";
import { serveCommand, workerCommand } from "./cli-serve.ts";
import { useNodeSha256 } from "./native-sha256.ts";

/**
 * `qlr`: the device runtime (`serve`), a remote worker (`worker`) and a client of the HTTP API
 * (every other command), so the commands work the same against a router, a server or a Worker.
 * `main` parses the command line, hands it to the command's handler and turns what the handler
 * throws into the exit code and the message on stderr.
 */

/** Exit codes: 0 success, 1 a run that did not succeed, 2 an API error, 64 usage, 69 unreachable. */
const EXIT_USAGE = 64;
const EXIT_UNAVAILABLE = 69;

/** Every command by its name (a Map: a name like `constructor` is no command). */
const COMMANDS = new Map<string, CommandHandler>([
  ["serve", serveCommand],
  ["apply", applyCommand],
  ["start", startCommand],
  ["rerun", rerunCommand],
  ["cancel", cancelCommand],
  ["resolve", resolveCommand],
  ["runs", runsCommand],
  ["status", statusCommand],
  ["logs", logsCommand],
  ["notifications", notificationsCommand],
  ["tick", tickCommand],
  ["worker", workerCommand],
]);

export async function main(argv: readonly string[]): Promise<number> {
  useNodeSha256();
  let parsed;
  try {
    parsed = parseCommandLine(argv);
  } catch (error) {
    process.stderr.write(`${errorMessage(error)}\n\n${USAGE}`);
    return EXIT_USAGE;
  }
  const [command, ...args] = parsed.positionals;
  if (parsed.values.help === true || command === undefined || command === "help") {
    process.stdout.write(USAGE);
    return command === undefined && parsed.values.help !== true ? EXIT_USAGE : 0;
  }
  try {
    // The common options are checked before the command is looked up, for every command.
    const config = await commonConfig(parsed.values, process.env);
    const handler = COMMANDS.get(command);
    if (handler === undefined) throw new UsageError(`unknown command ${command}`);
    return await handler({ config, values: parsed.values, args });
  } catch (error) {
    return reportFailure(error);
  }
}

/** A command's failure on stderr, and its exit code. */
function reportFailure(error: unknown): number {
  if (error instanceof UsageError) {
    process.stderr.write(`${error.message}\n\n${USAGE}`);
    return EXIT_USAGE;
  }
  if (error instanceof ApiError) {
    process.stderr.write(
      `${error.code}: ${error.message}\n${error.details.map((detail) => `  ${detail.path}: ${detail.message}`).join("\n")}${error.details.length > 0 ? "\n" : ""}`,
    );
    return error.status === 0 ? EXIT_UNAVAILABLE : 2;
  }
  process.stderr.write(`${describeStartupError(error)}\n`);
  return 1;
}
