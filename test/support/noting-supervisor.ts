/**
 * Supervisor entries for tests: small scripts that run the real supervisor bundle in their own
 * process after changing one thing. `writeNotingSupervisor` notes the Node flags the process
 * started with (its process title hides its command line), in
 * `<stateDir>/supervisor-exec-argv.json`; `writeFeaturelessSupervisor` talks as a supervisor of
 * an older build that announced no features.
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

/**
 * Writes an entry that runs the real supervisor bundle as a resident supervisor of an older
 * build would talk: its `welcome` announces no features (the field is dropped from every
 * welcome line before the socket sends it), and a launch's `createCwd` never reaches it (the
 * field is dropped from what the socket receives), as a build that knew neither would behave.
 * Returns its path.
 */
export async function writeFeaturelessSupervisor(
  entryPath: string,
  supervisorPath: string,
): Promise<string> {
  await writeFile(
    entryPath,
    [
      'import { Socket } from "node:net";',
      "const { write, emit } = Socket.prototype;",
      "Socket.prototype.write = function (chunk, ...rest) {",
      '  if (typeof chunk === "string" && chunk.includes(\'"kind":"welcome"\'))',
      '    chunk = chunk.replace(/,"features":\\[[^\\]]*\\]/, "");',
      "  return write.call(this, chunk, ...rest);",
      "};",
      "Socket.prototype.emit = function (event, chunk, ...rest) {",
      '  if (event === "data" && typeof chunk === "string")',
      '    chunk = chunk.replaceAll(\',"createCwd":true\', "");',
      "  return emit.call(this, event, chunk, ...rest);",
      "};",
      `await import(${JSON.stringify(pathToFileURL(supervisorPath).href)});`,
    ].join("\n"),
  );
  return entryPath;
}
