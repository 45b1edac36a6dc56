/**
 * A supervisor entry that notes the Node flags its process started with, then runs the real
 * supervisor bundle in that same process: what a test needs to see the flags a launcher gives
 * the supervisor (its process title hides its command line). The note is
 * `<stateDir>/supervisor-exec-argv.json`.
 */
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const NOTE_FILE = "supervisor-exec-argv.json";

/** Writes the noting entry at `entryPath` and returns its path. */
export async function writeNotingSupervisor(
  entryPath: string,
  supervisorPath: string,
): Promise<string> {
  await writeFile(
    entryPath,
    [
      'import { writeFileSync } from "node:fs";',
      'import { join } from "node:path";',
      `writeFileSync(join(process.argv[2], ${JSON.stringify(NOTE_FILE)}), JSON.stringify(process.execArgv));`,
      `await import(${JSON.stringify(pathToFileURL(supervisorPath).href)});`,
    ].join("\n"),
  );
  return entryPath;
}

/** The flags the state directory's supervisor started with (it must have started). */
export async function notedSupervisorFlags(stateDir: string): Promise<string[]> {
  return JSON.parse(await readFile(join(stateDir, NOTE_FILE), "utf8")) as string[];
}
