import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { isQlrError } from "../../src/errors.ts";
import {
  isSpawnFailedError,
  loadOrCreateReceiptKey,
  PosixLauncher,
  type ProcessHandle,
} from "../../runtimes/node/launcher/index.ts";
import { useScratch, newAttemptId, newLauncher, shellSpec, waitForReceipt } from "./support.ts";

const scratch = useScratch("launch");

describe("launch", () => {
  it("runs the argv, writes both logs and a valid receipt with the exit code and the journal's startedAtMs", async () => {
    const { launcher } = await newLauncher(scratch);
    const spec = shellSpec("echo out; echo err >&2; exit 3");
    const handle = await launcher.launch(spec);
    expect(handle.attemptId).toBe(spec.attemptId);
    expect(handle.pid).toBeGreaterThan(0);
    expect(handle.processStartTicks).toMatch(/^[0-9]+$/);

    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status).toBe("valid");
    if (reading.status !== "valid") return;
    expect(reading.receipt).toMatchObject({
      attemptId: spec.attemptId,
      exitCode: 3,
      signal: null,
      stopReason: null,
      spawnError: null,
    });
    expect(reading.receipt.finishedAtMs).toBeGreaterThanOrEqual(reading.receipt.startedAtMs);

    const journal = await launcher.readJournal(spec.attemptId);
    expect(journal?.startedAtMs).toBe(handle.startedAtMs);
    expect(reading.receipt.startedAtMs).toBe(handle.startedAtMs);
    expect(journal?.bootId).toBe(handle.bootId);
    expect(journal?.argvDigest).toMatch(/^sha256:[0-9a-f]{64}$/);

    expect(await readFile(launcher.logPath(spec.attemptId, "stdout"), "utf8")).toBe("out\n");
    expect(await readFile(launcher.logPath(spec.attemptId, "stderr"), "utf8")).toBe("err\n");
  });

  it("creates a log only for a stream the task wrote to", async () => {
    const { launcher } = await newLauncher(scratch);
    const silent = shellSpec("exit 0");
    const talksOnStderr = shellSpec("echo only-err >&2");
    await launcher.launch(silent);
    await launcher.launch(talksOnStderr);
    for (const spec of [silent, talksOnStderr])
      expect((await waitForReceipt(launcher, spec.attemptId)).status).toBe("valid");
    expect(existsSync(launcher.logPath(silent.attemptId, "stdout"))).toBe(false);
    expect(existsSync(launcher.logPath(silent.attemptId, "stderr"))).toBe(false);
    expect(existsSync(launcher.logPath(talksOnStderr.attemptId, "stdout"))).toBe(false);
    expect(await readFile(launcher.logPath(talksOnStderr.attemptId, "stderr"), "utf8")).toBe(
      "only-err\n",
    );
  });

  it("has the journal on disk before the task runs (the task reads its own journal record)", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    const attemptId = newAttemptId();
    const journalFile = join(stateDir, "journal", `${attemptId}.json`);
    const handle = await launcher.launch(
      shellSpec('cat "$1"', { attemptId, argv: ["sh", "-c", 'cat "$1"', "sh", journalFile] }),
    );
    const reading = await waitForReceipt(launcher, attemptId);
    expect(reading.status === "valid" && reading.receipt.exitCode).toBe(0);
    const seenByTask = JSON.parse(
      await readFile(launcher.logPath(attemptId, "stdout"), "utf8"),
    ) as { startedAtMs: number; attemptId: string };
    expect(seenByTask).toMatchObject({ attemptId, startedAtMs: handle.startedAtMs });
  });

  it("gives the task only the base env plus its own variables, never the runtime's secrets", async () => {
    const { launcher } = await newLauncher(scratch);
    process.env.QLR_TEST_RUNTIME_SECRET = "must-not-leak";
    try {
      const spec = shellSpec("env", { env: { TASK_VARIABLE: "visible" } });
      await launcher.launch(spec);
      await waitForReceipt(launcher, spec.attemptId);
      const names = (await readFile(launcher.logPath(spec.attemptId, "stdout"), "utf8"))
        .split("\n")
        .filter((line) => line.includes("="))
        .map((line) => line.slice(0, line.indexOf("=")));
      expect(names).toContain("TASK_VARIABLE");
      expect(names).toContain("PATH");
      expect(names).not.toContain("QLR_TEST_RUNTIME_SECRET");
      // sh adds PWD (and may add SHLVL or _) itself; nothing else comes from the runtime.
      expect(
        names.filter(
          (name) =>
            !["TASK_VARIABLE", "PATH", "HOME", "LANG", "PWD", "SHLVL", "_", "OLDPWD"].includes(
              name,
            ),
        ),
      ).toEqual([]);
    } finally {
      delete process.env.QLR_TEST_RUNTIME_SECRET;
    }
  });

  it("runs in the given working directory", async () => {
    const { launcher } = await newLauncher(scratch);
    const spec = shellSpec("pwd", { cwd: scratch.dir });
    await launcher.launch(spec);
    await waitForReceipt(launcher, spec.attemptId);
    expect((await readFile(launcher.logPath(spec.attemptId, "stdout"), "utf8")).trim()).toBe(
      scratch.dir,
    );
  });

  it("refuses to launch an attempt id a second time", async () => {
    const { launcher } = await newLauncher(scratch);
    const spec = shellSpec("exit 0");
    await launcher.launch(spec);
    await expect(launcher.launch(spec)).rejects.toSatisfy((error: unknown) =>
      isQlrError(error, "conflict"),
    );
    expect((await waitForReceipt(launcher, spec.attemptId)).status).toBe("valid");
  });

  it("turns a spawn failure into a receipt with spawnError and no exit code, without hanging", async () => {
    const { launcher } = await newLauncher(scratch);
    const spec = shellSpec("", { argv: ["/nonexistent/bin"] });
    const failure = await launcher.launch(spec).then(
      () => null,
      (error: unknown) => error,
    );
    expect(isSpawnFailedError(failure)).toBe(true);
    const reading = await launcher.readReceipt(spec.attemptId);
    expect(reading.status).toBe("valid");
    if (reading.status !== "valid") return;
    expect(reading.receipt.exitCode).toBeNull();
    expect(reading.receipt.signal).toBeNull();
    expect(reading.receipt.spawnError).toContain("ENOENT");
    if (isSpawnFailedError(failure)) expect(failure.receipt).toEqual(reading.receipt);
  });

  it("reports a missing working directory as a spawn failure too", async () => {
    const { launcher } = await newLauncher(scratch);
    const spec = shellSpec("true", { cwd: join(scratch.dir, "no-such-directory") });
    await expect(launcher.launch(spec)).rejects.toSatisfy(isSpawnFailedError);
    const reading = await launcher.readReceipt(spec.attemptId);
    expect(reading.status === "valid" && reading.receipt.spawnError).toBeTruthy();
  });

  it("caps each log at logMaxBytes, marks the cut once and still drains the pipe to a normal exit", async () => {
    const { launcher } = await newLauncher(scratch);
    const capBytes = 10 * 1024;
    // 200 KiB in 1 KiB lines: far beyond the pipe buffer, so an undrained pipe would hang the task.
    const spec = shellSpec(
      "i=0; line=$(printf '%01023d' 0); while [ $i -lt 200 ]; do echo \"$line\"; i=$((i+1)); done",
      { logMaxBytes: capBytes },
    );
    await launcher.launch(spec);
    const reading = await waitForReceipt(launcher, spec.attemptId);
    expect(reading.status === "valid" && reading.receipt.exitCode).toBe(0);
    const log = await readFile(launcher.logPath(spec.attemptId, "stdout"), "utf8");
    const marker = `[qlr: log truncated at ${capBytes} bytes]\n`;
    expect(log.endsWith(marker)).toBe(true);
    expect(log.split(marker)).toHaveLength(2);
    // The cut falls on a line boundary here (10 × 1024), so no newline precedes the marker.
    expect(Buffer.byteLength(log)).toBe(capBytes + Buffer.byteLength(marker));
  });

  it("puts the truncation marker on its own line when the cut falls mid-line", async () => {
    const { launcher } = await newLauncher(scratch);
    const spec = shellSpec("printf 'abcdefghij'", { logMaxBytes: 4 });
    await launcher.launch(spec);
    await waitForReceipt(launcher, spec.attemptId);
    expect(await readFile(launcher.logPath(spec.attemptId, "stdout"), "utf8")).toBe(
      "abcd\n[qlr: log truncated at 4 bytes]\n",
    );
  });

  it("ends the attempt with a spawn-error receipt when no supervisor can start: nothing ran", async () => {
    const brokenSupervisor = join(scratch.dir, "broken-supervisor.mjs");
    await writeFile(brokenSupervisor, "process.exit(3);\n");
    const stateDir = await mkdtemp(join(scratch.dir, "state-"));
    const launcher = new PosixLauncher({
      stateDir,
      hmacKey: await loadOrCreateReceiptKey(stateDir),
      nowMs: () => Date.now(),
      supervisorPath: brokenSupervisor,
    });
    const spec = shellSpec("true");
    await expect(launcher.launch(spec)).rejects.toSatisfy(
      (error: unknown) =>
        isSpawnFailedError(error) &&
        /supervisor could not start/.test(error.receipt.spawnError ?? ""),
    );
    expect(await launcher.readJournal(spec.attemptId)).not.toBeNull();
    const reading = await launcher.readReceipt(spec.attemptId);
    expect(reading.status === "valid" && reading.receipt).toMatchObject({
      exitCode: null,
      spawnError: expect.stringContaining("exited before reporting") as unknown,
    });
  });

  it("refuses to start a task whose journal it cannot write: a clear error, nothing spawned", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    const warmUp = newAttemptId();
    await launcher.launch(shellSpec("true", { attemptId: warmUp }));
    await waitForReceipt(launcher, warmUp);
    // The journal's temporary file cannot be created (full-disk.test.ts has the real ENOSPC).
    await rm(join(stateDir, "tmp"), { recursive: true });
    await writeFile(join(stateDir, "tmp"), "not a directory\n");
    const marker = join(stateDir, "ran");
    const spec = shellSpec(`touch ${marker}`);
    await expect(launcher.launch(spec)).rejects.toSatisfy(
      (error: unknown) =>
        isQlrError(error, "storage_unavailable") &&
        /cannot write the journal record/.test((error as Error).message),
    );
    expect(await launcher.readJournal(spec.attemptId)).toBeNull();
    expect(existsSync(marker)).toBe(false);
    launcher.close();
  });

  it("rejects invalid specs before anything is written", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    for (const attemptId of ["../x", "a/b", "", ".hidden", "x".repeat(37), "a b", "a\\b", "a\0b"]) {
      await expect(launcher.launch(shellSpec("true", { attemptId }))).rejects.toSatisfy(
        (error: unknown) => isQlrError(error, "invalid_identity"),
      );
    }
    await expect(launcher.launch(shellSpec("true", { argv: [] }))).rejects.toSatisfy(
      (error: unknown) => isQlrError(error, "invalid_request"),
    );
    await expect(launcher.launch(shellSpec("true", { cwd: "relative/dir" }))).rejects.toSatisfy(
      (error: unknown) => isQlrError(error, "invalid_request"),
    );
    await expect(launcher.launch(shellSpec("true", { env: { "A=B": "x" } }))).rejects.toSatisfy(
      (error: unknown) => isQlrError(error, "invalid_request"),
    );
    await expect(launcher.launch(shellSpec("true", { logMaxBytes: 0 }))).rejects.toSatisfy(
      (error: unknown) => isQlrError(error, "invalid_request"),
    );
    // Only the receipt key exists: no journal, receipt, log or temporary file was created.
    expect((await readdir(stateDir)).sort()).toEqual(["receipt.key", "tmp"]);
    expect(await readdir(join(stateDir, "tmp"))).toEqual([]);
  });

  it("accepts UUIDv7 attempt ids as well as wta: ids", async () => {
    const { launcher } = await newLauncher(scratch);
    const spec = shellSpec("exit 0", { attemptId: "01890a5d-ac96-774b-bcce-b302099a8057" });
    const handle: ProcessHandle = await launcher.launch(spec);
    expect(handle.attemptId).toBe(spec.attemptId);
    expect((await waitForReceipt(launcher, spec.attemptId)).status).toBe("valid");
  });

  it("keeps per-attempt files owner-only", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    const spec = shellSpec("echo secret-output");
    await launcher.launch(spec);
    await waitForReceipt(launcher, spec.attemptId);
    for (const path of [
      launcher.logPath(spec.attemptId, "stdout"),
      join(stateDir, "receipts", `${spec.attemptId}.json`),
      join(stateDir, "journal", `${spec.attemptId}.json`),
      join(stateDir, "receipt.key"),
    ]) {
      expect(((await stat(path)).mode & 0o077).toString(8)).toBe("0");
    }
  });
});

describe("listJournal", () => {
  it("lists well-named journal files and reports every other name as rejected", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    const spec = shellSpec("exit 0");
    await launcher.launch(spec);
    await waitForReceipt(launcher, spec.attemptId);
    const journalDir = join(stateDir, "journal");
    await writeFile(join(journalDir, ".hidden.json"), "{}");
    await writeFile(join(journalDir, "a b.json"), "{}");
    await writeFile(join(journalDir, "..%2Fx.json"), "{}");
    await writeFile(join(journalDir, "notes.txt"), "");
    await mkdir(join(journalDir, "wta:directory.json"));
    const listing = await launcher.listJournal();
    expect(listing.valid).toEqual([spec.attemptId]);
    expect(listing.rejected.map((entry) => entry.name).sort()).toEqual(
      [".hidden.json", "..%2Fx.json", "a b.json", "notes.txt", "wta:directory.json"].sort(),
    );
    for (const entry of listing.rejected) expect(entry.reason.length).toBeGreaterThan(0);
  });

  it("is empty before the first launch", async () => {
    const { launcher } = await newLauncher(scratch);
    expect(await launcher.listJournal()).toEqual({ valid: [], rejected: [] });
  });
});
