import { existsSync, lstatSync, mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { canonicalJson } from "../../src/canonical-json.ts";
import { errorCode } from "../../src/errors.ts";
import { assertPortableId } from "../../src/identity.ts";
import { inputValueText } from "../../src/run-inputs.ts";
import type { TaskContext } from "../../src/task-context.ts";
import {
  USER_TASK_NEEDS_FILE,
  USER_TASK_OUTPUT_FILE,
  userTaskFilesDir,
  type UserTaskFiles,
} from "./launcher/user-task-files.ts";

/**
 * The environment a task runs with, beyond its own declared `env`: who it is (run, step,
 * attempt, package, generation), the run's input, where to leave its output and where to read
 * the outputs of the steps it needs. The one place that builds it, for the local executor and
 * the remote worker alike; the launcher receives the result through its `env` parameter.
 *
 * | variable | value |
 * |---|---|
 * | `QLR_RUN_ID`, `QLR_PACKAGE`, `QLR_GENERATION` | the run |
 * | `QLR_STEP`, `QLR_TASK` | the step name (an ordinary run: the task name) and its task |
 * | `QLR_ATTEMPT_ID`, `QLR_ATTEMPT_NUMBER` | the attempt (numbers count per run, from 1) |
 * | `QLR_INPUT_<key>` | each input value: text as given, numbers and booleans as JSON |
 * | `QLR_INPUTS` | the whole input as canonical JSON (`{}` when none) |
 * | `QLR_OUTPUT` | the path to write the step's JSON output to (optional) |
 * | `QLR_NEEDS` | the path of a JSON file `{ "<step>": output or null }` of the needed steps |
 *
 * A step that needs nothing is pointed at one shared file holding `{}` (`noNeedsPath`), made
 * when missing, rather than a file of its own: on a busy device the needs file was one of the
 * few files created per launch, and creating a file costs far more than checking one exists.
 *
 * These names win over a declared `env` entry of the same name: a task cannot be told a wrong
 * run id by its own manifest.
 *
 * A task run as another user (`user:`) cannot reach the state dir, so its two files live in a
 * folder of its own outside it (`userTaskEnvironment`; launcher/user-task-files.ts says where
 * and why); the launcher writes its needs file there after the journal, once the folder is
 * known to be the runtime's, and gives the folder to the task's user.
 */

/** Per-attempt task files (`<stateDir>/outputs/<attemptId>.output.json`, `.needs.json`). */
export function taskFilesDir(stateDir: string): string {
  return join(stateDir, "outputs");
}

export function taskOutputPath(stateDir: string, attemptId: string): string {
  return join(taskFilesDir(stateDir), `${assertPortableId(attemptId, "attemptId")}.output.json`);
}

export function taskNeedsPath(stateDir: string, attemptId: string): string {
  return join(taskFilesDir(stateDir), `${assertPortableId(attemptId, "attemptId")}.needs.json`);
}

/** The needs file of every step that needs nothing: `{}`. Never an attempt's file: those end in `.needs.json` and `.output.json`. */
export function noNeedsPath(stateDir: string): string {
  return join(taskFilesDir(stateDir), "no-needs.json");
}

/** Writes `text` under a temporary name, then renames it into place: a task never reads half of it. */
function writeWhole(path: string, text: string): void {
  const temporary = `${path}.tmp-${process.pid}`;
  // The folder exists after the first launch of a state directory: it is made when missing,
  // not asked for on every launch.
  try {
    writeFileSync(temporary, text, { mode: 0o600 });
  } catch (error) {
    if (errorCode(error) !== "ENOENT") throw error;
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    writeFileSync(temporary, text, { mode: 0o600 });
  }
  renameSync(temporary, path);
}

/** The context variables alone (pure: tests and docs use it). */
export function contextEnvironment(
  context: TaskContext,
  paths: { readonly outputPath: string; readonly needsPath: string },
): Record<string, string> {
  const env: Record<string, string> = {
    QLR_RUN_ID: context.runId,
    QLR_PACKAGE: context.package,
    QLR_GENERATION: String(context.generation),
    QLR_STEP: context.step,
    QLR_TASK: context.task,
    QLR_ATTEMPT_ID: context.attemptId,
    QLR_ATTEMPT_NUMBER: String(context.attemptNumber),
    QLR_INPUTS: canonicalJson(context.input),
    QLR_OUTPUT: paths.outputPath,
    QLR_NEEDS: paths.needsPath,
  };
  for (const [key, value] of Object.entries(context.input))
    env[`QLR_INPUT_${key}`] = inputValueText(value);
  return env;
}

/**
 * Writes the attempt's needs file (temporary name, then rename: a task never reads half of
 * it), clears any output file left under its name, and returns the task's whole environment:
 * its declared env with the context variables over it. Called before the launch, so a task
 * that starts finds everything in place.
 */
export function prepareTaskEnvironment(
  stateDir: string,
  context: TaskContext,
  declaredEnv: Readonly<Record<string, string>>,
): Promise<Record<string, string>> {
  const outputPath = taskOutputPath(stateDir, context.attemptId);
  const needsNothing = Object.keys(context.needs).length === 0;
  const needsPath = needsNothing
    ? noNeedsPath(stateDir)
    : taskNeedsPath(stateDir, context.attemptId);
  try {
    // Synchronous on purpose: a small file in the page cache, no fsync (a needs file is made
    // again at each launch). Through the thread pool it was five round trips per launch. A new
    // attempt has no output file yet: the lstat finds that without `rmSync`'s walk and failure.
    if (lstatSync(outputPath, { throwIfNoEntry: false }) !== undefined)
      rmSync(outputPath, { force: true });
    if (!needsNothing) writeWhole(needsPath, `${canonicalJson(context.needs)}\n`);
    else if (!existsSync(needsPath)) writeWhole(needsPath, "{}\n");
  } catch (error) {
    return Promise.reject(error instanceof Error ? error : new Error(String(error)));
  }
  return Promise.resolve({
    ...declaredEnv,
    ...contextEnvironment(context, { outputPath, needsPath }),
  });
}

/**
 * The environment of a task run as another user, and the files the launcher places for it
 * (`LaunchSpec.userTaskFiles`): `QLR_NEEDS` and `QLR_OUTPUT` name `needs.json` and
 * `output.json` in the attempt's folder under `filesRoot` (the launcher's
 * `userTaskFilesRoot`). No file is touched here: the launcher does it after the journal, so a
 * folder it cannot use fails the attempt with a spawn error naming why.
 */
export function userTaskEnvironment(
  filesRoot: string,
  context: TaskContext,
  declaredEnv: Readonly<Record<string, string>>,
): { env: Record<string, string>; files: UserTaskFiles } {
  const dir = userTaskFilesDir(filesRoot, context.attemptId);
  const paths = {
    outputPath: join(dir, USER_TASK_OUTPUT_FILE),
    needsPath: join(dir, USER_TASK_NEEDS_FILE),
  };
  return {
    env: { ...declaredEnv, ...contextEnvironment(context, paths) },
    files: { dir, needsText: `${canonicalJson(context.needs)}\n` },
  };
}
