/**
 * The needs and output folder of a task run as another user (launcher/user-task-files.ts):
 * the output is read only if the task's user made it as a regular file with one name, a link
 * the task planted never makes the runtime read or delete what it points to, and a folder
 * another user squatted fails the launch with a spawn error naming it. The root-only parts
 * skip with the reason when the tests do not run as root.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import {
  chmod,
  chown,
  link,
  mkdir,
  mkdtemp,
  readFile,
  rm,
  stat,
  symlink,
  writeFile,
} from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it, onTestFinished } from "vitest";
import { isSpawnFailedError, PosixLauncher } from "../../runtimes/node/launcher/index.ts";
import { readTaskOutput } from "../../runtimes/node/launcher/task-output.ts";
import { userTaskEnvironment } from "../../runtimes/node/task-env.ts";
import {
  placeTaskFiles,
  removeTaskFiles,
  userTaskFilesDir,
  userTaskFilesRoot,
  type UserTaskFiles,
} from "../../runtimes/node/launcher/user-task-files.ts";
import { newLauncher, shellSpec, skipUnlessRoot, useScratch, waitForReceipt } from "./support.ts";

const scratch = useScratch("user-task-files");
const NOBODY_UID = 65534;
const ownUid = process.getuid?.() ?? -1;

/** The launch of `script` as nobody with its task files folder, as the local executor makes it. */
function nobodySpec(launcher: PosixLauncher, script: string) {
  const spec = shellSpec(script, { user: `${NOBODY_UID}:${NOBODY_UID}` });
  const files: UserTaskFiles = {
    dir: userTaskFilesDir(launcher.userTaskFilesRoot, spec.attemptId),
    needsText: '{"a":{"rows":3}}\n',
  };
  onTestFinished(() => rm(launcher.userTaskFilesRoot, { recursive: true, force: true }));
  return {
    ...spec,
    env: {
      QLR_OUTPUT: join(files.dir, "output.json"),
      QLR_NEEDS: join(files.dir, "needs.json"),
    },
    userTaskFiles: files,
  };
}

describe("reading the output of a task run as another user", () => {
  it("reads only a regular file with one name owned by the task's uid", async () => {
    const dir = await mkdtemp(join(scratch.dir, "owned-"));
    const file = join(dir, "output.json");
    await writeFile(file, '{"ok":1}\n');
    expect(await readTaskOutput(file, { ownerUid: ownUid })).toEqual({
      output: { ok: 1 },
      outputError: null,
    });
    // A file of another user, as a hard link to a root file would be.
    expect(await readTaskOutput(file, { ownerUid: ownUid + 1 })).toEqual({
      output: null,
      outputError: `the output file belongs to uid ${ownUid}, not to the task's uid ${ownUid + 1}`,
    });
    await link(file, join(dir, "second-name"));
    expect((await readTaskOutput(file, { ownerUid: ownUid })).outputError).toBe(
      "the output file has 2 names, not one",
    );
    const linked = join(dir, "linked.json");
    await symlink(join(dir, "second-name"), linked);
    expect((await readTaskOutput(linked, { ownerUid: ownUid })).outputError).toBe(
      "the output file is a symbolic link",
    );
    // A FIFO would block a plain open forever; it is refused at once.
    const fifo = join(dir, "fifo.json");
    execFileSync("mkfifo", [fifo]);
    expect((await readTaskOutput(fifo, { ownerUid: ownUid })).outputError).toBe(
      "the output file is not a regular file",
    );
    expect(await readTaskOutput(join(dir, "absent.json"), { ownerUid: ownUid })).toEqual({
      output: null,
      outputError: null,
    });
  });

  it("the environment of a task run as another user names its own folder and touches no file", () => {
    const root = join(scratch.dir, "never-made");
    const attemptId = "wta:0123456789abcdef0123456789abcdef";
    const { env, files } = userTaskEnvironment(
      root,
      {
        runId: "run-1",
        package: "p",
        generation: 2,
        step: "b",
        task: "t",
        attemptId,
        attemptNumber: 1,
        input: {},
        needs: { a: { rows: 3 } },
      },
      { QLR_OUTPUT: "/elsewhere", OWN: "kept" },
    );
    expect(files).toEqual({ dir: join(root, attemptId), needsText: '{"a":{"rows":3}}\n' });
    expect(env).toMatchObject({
      OWN: "kept",
      QLR_NEEDS: join(root, attemptId, "needs.json"),
      QLR_OUTPUT: join(root, attemptId, "output.json"),
      QLR_ATTEMPT_ID: attemptId,
    });
    expect(existsSync(root)).toBe(false);
  });

  it("places an attempt's folder only in a root that is the runtime's and cannot be replaced", async () => {
    const own = { uid: ownUid, gid: process.getgid?.() ?? -1 };
    const attemptId = "wta:00000000000000000000000000000001";
    const open = await mkdtemp(join(scratch.dir, "open-"));
    await chmod(open, 0o777);
    const inOpen = join(open, "files");
    expect(
      await placeTaskFiles(
        inOpen,
        { dir: userTaskFilesDir(inOpen, attemptId), needsText: "{}\n" },
        own,
      ),
    ).toBe(
      `the task files folder ${open} is writable by group or others and not sticky: the task files folder could be replaced`,
    );
    expect(existsSync(inOpen)).toBe(false);

    const parent = await mkdtemp(join(scratch.dir, "parent-"));
    const root = join(parent, "files");
    const files = { dir: userTaskFilesDir(root, attemptId), needsText: '{"a":1}\n' };
    expect(await placeTaskFiles(root, files, own)).toBeNull();
    expect((await stat(root)).mode & 0o7777).toBe(0o711);
    expect((await stat(files.dir)).mode & 0o777).toBe(0o700);
    expect(await readFile(join(files.dir, "needs.json"), "utf8")).toBe('{"a":1}\n');
    // Only a launch makes an attempt's folder, once.
    expect(await placeTaskFiles(root, files, own)).toBe(
      `the task files folder ${files.dir} could not be prepared: EEXIST`,
    );
    await removeTaskFiles(files.dir);
    expect(existsSync(files.dir)).toBe(false);
    await removeTaskFiles(files.dir);

    await chmod(root, 0o777);
    expect(await placeTaskFiles(root, files, own)).toBe(
      `the task files folder ${root} is writable by group or others (mode 777)`,
    );
    expect(existsSync(files.dir)).toBe(false);
  });

  it("a launch refuses task files without a task user, or in a folder not its own, before its journal", async () => {
    const { launcher } = await newLauncher(scratch);
    const spec = shellSpec("true");
    const files = {
      dir: userTaskFilesDir(launcher.userTaskFilesRoot, spec.attemptId),
      needsText: "{}\n",
    };
    await expect(launcher.launch({ ...spec, userTaskFiles: files })).rejects.toThrow(
      "launch spec userTaskFiles: is only for a task run as another user",
    );
    const elsewhere = { ...files, dir: join(scratch.dir, spec.attemptId) };
    await expect(
      launcher.launch({ ...spec, user: "65534", userTaskFiles: elsewhere }),
    ).rejects.toThrow(`launch spec userTaskFiles.dir: must be ${files.dir}`);
    expect(await launcher.readJournal(spec.attemptId)).toBeNull();
    launcher.close();
  });

  it("the folder's name is derived from the state dir, in the temporary folder", () => {
    expect(userTaskFilesRoot("/var/lib/qlr", "/tmp")).toBe(
      userTaskFilesRoot("/var/lib/qlr/", "/tmp"),
    );
    expect(userTaskFilesRoot("/var/lib/qlr", "/tmp")).toMatch(
      /^\/tmp\/qlr-task-files-[0-9a-f]{24}$/,
    );
    expect(userTaskFilesRoot("/var/lib/qlr", "/tmp")).not.toBe(
      userTaskFilesRoot("/var/lib/qlr2", "/tmp"),
    );
    expect(() => userTaskFilesDir("/tmp/x", "../escape")).toThrow();
  });
});

describe("a task run as another user, with a root runtime", { timeout: 30_000 }, () => {
  it("reads its needs and leaves an output the receipt carries", async (context) => {
    skipUnlessRoot(context, "`user:` needs the supervisor to run as root");
    const { launcher } = await newLauncher(scratch);
    const spec = nobodySpec(
      launcher,
      `printf '{"uid":%s,"needs":%s}' "$(id -u)" "$(cat "$QLR_NEEDS")" > "$QLR_OUTPUT"`,
    );
    await launcher.launch(spec);
    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status === "valid" && reading.receipt).toMatchObject({
      exitCode: 0,
      output: { uid: NOBODY_UID, needs: { a: { rows: 3 } } },
      outputError: null,
    });
    // Taken back once the task ended: the runtime's, 0700.
    const folder = await stat(spec.userTaskFiles.dir);
    expect([folder.uid, folder.mode & 0o777]).toEqual([0, 0o700]);
    await launcher.discard([spec.attemptId]);
    expect(existsSync(spec.userTaskFiles.dir)).toBe(false);
    launcher.close();
  });

  it("a link planted at the output path or in the folder never makes the runtime read or delete its target", async (context) => {
    skipUnlessRoot(context, "`user:` needs the supervisor to run as root");
    const { launcher } = await newLauncher(scratch);
    // Root's own files the task user cannot read, but the runtime could if it followed a link.
    const secrets = await mkdtemp(join(tmpdir(), "qlr-user-files-secret-"));
    onTestFinished(() => rm(secrets, { recursive: true, force: true }));
    const secretFile = join(secrets, "secret.json");
    await writeFile(secretFile, '{"secret":"root only"}\n', { mode: 0o600 });
    const secretDir = join(secrets, "kept");
    await mkdir(secretDir);
    await writeFile(join(secretDir, "inside"), "keep me\n");
    const spec = nobodySpec(
      launcher,
      [
        `ln -s '${secretFile}' "$QLR_OUTPUT"`,
        `ln -s '${secretDir}' "$(dirname "$QLR_OUTPUT")/kept"`,
        `mkdir "$(dirname "$QLR_OUTPUT")/sub" && ln -s '${secretFile}' "$(dirname "$QLR_OUTPUT")/sub/file"`,
      ].join(" && "),
    );
    await launcher.launch(spec);
    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status === "valid" && reading.receipt).toMatchObject({
      exitCode: 0,
      output: null,
      outputError: "the output file is a symbolic link",
    });
    await launcher.discard([spec.attemptId]);
    expect(existsSync(spec.userTaskFiles.dir)).toBe(false);
    expect(await readFile(secretFile, "utf8")).toBe('{"secret":"root only"}\n');
    expect(await readFile(join(secretDir, "inside"), "utf8")).toBe("keep me\n");
    launcher.close();
  });

  it("a folder removed while its task ran makes the output unknown, never none", async (context) => {
    skipUnlessRoot(context, "`user:` needs the supervisor to run as root");
    const { launcher } = await newLauncher(scratch);
    // The task waits for its folder to go (as a private /tmp torn down under it would).
    const spec = nobodySpec(
      launcher,
      'while [ -d "$(dirname "$QLR_OUTPUT")" ]; do sleep 0.02; done; echo gone',
    );
    await launcher.launch(spec);
    await rm(spec.userTaskFiles.dir, { recursive: true, force: true });
    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status === "valid" && reading.receipt).toMatchObject({
      exitCode: 0,
      output: null,
      outputError: `the task files folder ${spec.userTaskFiles.dir} was removed while the task ran (a cleaned temporary folder, or a private /tmp torn down by a service restart), so its output is unknown`,
    });
    launcher.close();
  });

  it("a task files folder the task's user could not reach fails the launch with a spawn error naming why", async (context) => {
    skipUnlessRoot(context, "`user:` needs the supervisor to run as root");
    const { stateDir, hmacKey } = await newLauncher(scratch);
    // Inside the scratch folder, which is 0700: closed to nobody.
    const closed = await mkdtemp(join(scratch.dir, "closed-"));
    const launcher = new PosixLauncher({
      stateDir,
      hmacKey,
      nowMs: () => Date.now(),
      supervisorPath: scratch.supervisorPath,
      userTaskFilesRoot: join(closed, "files"),
    });
    const spec = nobodySpec(launcher, "echo never > ran");
    const failure = await launcher.launch(spec).then(
      () => null,
      (error: unknown) => error,
    );
    expect(isSpawnFailedError(failure) && failure.receipt.spawnError).toBe(
      `the task files folder ${closed} (mode 700) cannot be passed through by uid ${NOBODY_UID}`,
    );
    launcher.close();
  });

  it("a task files folder another user squatted fails the launch with a spawn error naming it", async (context) => {
    skipUnlessRoot(context, "giving a folder to another user needs root");
    const { stateDir, hmacKey } = await newLauncher(scratch);
    const squatted = await mkdtemp(join(tmpdir(), "qlr-user-files-squatted-"));
    onTestFinished(() => rm(squatted, { recursive: true, force: true }));
    await chown(squatted, NOBODY_UID, NOBODY_UID);
    const launcher = new PosixLauncher({
      stateDir,
      hmacKey,
      nowMs: () => Date.now(),
      supervisorPath: scratch.supervisorPath,
      userTaskFilesRoot: squatted,
    });
    const spec = nobodySpec(launcher, "echo never > ran");
    const failure = await launcher.launch(spec).then(
      () => null,
      (error: unknown) => error,
    );
    expect(isSpawnFailedError(failure) && failure.receipt.spawnError).toBe(
      `the task files folder ${squatted} belongs to uid ${NOBODY_UID}, not to the runtime's uid 0`,
    );
    expect(existsSync(spec.userTaskFiles.dir)).toBe(false);
    launcher.close();
  });
});
