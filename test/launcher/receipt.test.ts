import { access, chmod, readFile, rename, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { canonicalJson } from "../../src/canonical-json.ts";
import { hmacSha256Hex } from "../../src/digest.ts";
import { isQlrError } from "../../src/errors.ts";
import {
  loadOrCreateReceiptKey,
  PosixLauncher,
  type CompletionReceipt,
} from "../../runtimes/node/launcher/index.ts";
import { signReceipt, writeReceiptExclusive } from "../../runtimes/node/launcher/receipt.ts";
import { journalPath, stateLayout } from "../../runtimes/node/launcher/state-layout.ts";
import {
  useScratch,
  newAttemptId,
  newLauncher,
  shellSpec,
  waitFor,
  waitForReceipt,
} from "./support.ts";

const scratch = useScratch("receipt");

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}

/** Launches a task that exits with 7 and returns the launcher, the attempt and the receipt file's path. */
async function completedAttempt(): Promise<{
  launcher: PosixLauncher;
  stateDir: string;
  attemptId: string;
  receiptFile: string;
  receipt: CompletionReceipt;
  hmacKey: Uint8Array;
}> {
  const { launcher, stateDir, hmacKey } = await newLauncher(scratch);
  const spec = shellSpec("exit 7");
  await launcher.launch(spec);
  const reading = await waitForReceipt(launcher, spec.attemptId);
  if (reading.status !== "valid")
    throw new Error(`expected a valid receipt, got ${reading.reason}`);
  return {
    launcher,
    stateDir,
    hmacKey,
    attemptId: spec.attemptId,
    receiptFile: join(stateDir, "receipts", `${spec.attemptId}.json`),
    receipt: reading.receipt,
  };
}

async function rewriteReceipt(
  receiptFile: string,
  edit: (receipt: Record<string, unknown>) => void,
): Promise<void> {
  const receipt = JSON.parse(await readFile(receiptFile, "utf8")) as Record<string, unknown>;
  edit(receipt);
  // The file is owner read/write; a tamperer with the same uid can rewrite it, which is why the MAC exists.
  await writeFile(receiptFile, JSON.stringify(receipt));
}

describe("readReceipt", () => {
  it("returns none before the receipt exists", async () => {
    const { launcher } = await newLauncher(scratch);
    expect(await launcher.readReceipt(newAttemptId())).toEqual({ status: "none" });
  });

  it("rejects a receipt whose exitCode was edited", async () => {
    const { launcher, attemptId, receiptFile } = await completedAttempt();
    await rewriteReceipt(receiptFile, (receipt) => (receipt.exitCode = 0));
    const reading = await launcher.readReceipt(attemptId);
    expect(reading).toMatchObject({ status: "invalid" });
    expect(reading.status === "invalid" && reading.reason).toContain("MAC");
  });

  it("rejects a receipt with a bad MAC", async () => {
    const { launcher, attemptId, receiptFile } = await completedAttempt();
    await rewriteReceipt(receiptFile, (receipt) => (receipt.mac = "0".repeat(64)));
    expect(await launcher.readReceipt(attemptId)).toMatchObject({ status: "invalid" });
  });

  it("rejects a receipt signed with another key", async () => {
    const { launcher, attemptId, receiptFile, receipt } = await completedAttempt();
    const forged = signReceipt(new Uint8Array(32).fill(9), { ...receipt, exitCode: 0 });
    await writeFile(receiptFile, JSON.stringify(forged));
    expect(await launcher.readReceipt(attemptId)).toMatchObject({ status: "invalid" });
  });

  it("rejects a valid receipt copied under another attempt's name", async () => {
    const { launcher, stateDir, receiptFile } = await completedAttempt();
    const otherAttemptId = newAttemptId();
    await rename(receiptFile, join(stateDir, "receipts", `${otherAttemptId}.json`));
    const reading = await launcher.readReceipt(otherAttemptId);
    expect(reading).toMatchObject({ status: "invalid" });
    expect(reading.status === "invalid" && reading.reason).toContain("names attempt");
  });

  it("rejects a correctly signed receipt whose startedAtMs differs from the journal", async () => {
    const { launcher, attemptId, receiptFile, receipt, hmacKey } = await completedAttempt();
    const shifted = signReceipt(hmacKey, { ...receipt, startedAtMs: receipt.startedAtMs + 1 });
    await writeFile(receiptFile, JSON.stringify(shifted));
    const reading = await launcher.readReceipt(attemptId);
    expect(reading.status === "invalid" && reading.reason).toContain("journal");
  });

  it("checks a receipt against the start time it journaled itself, from memory, until that receipt reads valid", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    const spec = shellSpec("exit 0");
    await launcher.launch(spec);
    const receiptFile = join(stateDir, "receipts", `${spec.attemptId}.json`);
    await waitFor("the receipt file", async () => ((await exists(receiptFile)) ? true : null));
    // The journal file is unreadable from now on: only the launcher's own memory of what it
    // wrote can vouch for the receipt's start time.
    await writeFile(journalPath(stateLayout(stateDir), spec.attemptId), "not json");
    expect(await waitForReceipt(launcher, spec.attemptId)).toMatchObject({ status: "valid" });
    // Remembered only until then; another launcher never had it: both read the file.
    const again = await launcher.readReceipt(spec.attemptId);
    expect(again.status === "invalid" && again.reason).toContain("journal");
    const { launcher: other } = await newLauncher(scratch, { stateDir });
    const fresh = await other.readReceipt(spec.attemptId);
    expect(fresh.status === "invalid" && fresh.reason).toContain("journal");
  });

  it("rejects extra fields, unparseable text and a symbolic link", async () => {
    const { launcher, stateDir, attemptId, receiptFile } = await completedAttempt();
    const original = await readFile(receiptFile, "utf8");
    await rewriteReceipt(receiptFile, (receipt) => (receipt.note = "extra"));
    expect(await launcher.readReceipt(attemptId)).toMatchObject({ status: "invalid" });
    await writeFile(receiptFile, original.slice(0, 20));
    expect(await launcher.readReceipt(attemptId)).toMatchObject({ status: "invalid" });

    const elsewhere = join(stateDir, "elsewhere.json");
    await writeFile(elsewhere, original);
    const linkedAttemptId = newAttemptId();
    await symlink(elsewhere, join(stateDir, "receipts", `${linkedAttemptId}.json`));
    expect(await launcher.readReceipt(linkedAttemptId)).toMatchObject({ status: "invalid" });
  });

  it("refuses attempt ids that are not portable", async () => {
    const { launcher } = await newLauncher(scratch);
    await expect(launcher.readReceipt("../receipt.key")).rejects.toSatisfy((error: unknown) =>
      isQlrError(error, "invalid_identity"),
    );
  });
});

describe("writeReceiptExclusive", () => {
  it("never overwrites: a second write fails with EEXIST and the original stays", async () => {
    const { launcher, stateDir, attemptId, receiptFile, receipt, hmacKey } =
      await completedAttempt();
    const before = await readFile(receiptFile, "utf8");
    const second = signReceipt(hmacKey, { ...receipt, exitCode: 0 });
    const failure = await writeReceiptExclusive(stateLayout(stateDir), second).then(
      () => null,
      (error: unknown) => error,
    );
    expect(isQlrError(failure, "conflict")).toBe(true);
    expect((failure as Error).cause).toMatchObject({ code: "EEXIST" });
    expect(await readFile(receiptFile, "utf8")).toBe(before);
    expect(await launcher.readReceipt(attemptId)).toEqual({ status: "valid", receipt });
  });
});

describe("receipt key", () => {
  it("is created once with mode 0600 and read back unchanged", async () => {
    const { stateDir, hmacKey } = await newLauncher(scratch);
    expect(hmacKey).toHaveLength(32);
    expect(await loadOrCreateReceiptKey(stateDir)).toEqual(hmacKey);
  });

  it("is refused when other users can read it", async () => {
    const { stateDir } = await newLauncher(scratch);
    await chmod(join(stateDir, "receipt.key"), 0o644);
    await expect(loadOrCreateReceiptKey(stateDir)).rejects.toSatisfy((error: unknown) =>
      isQlrError(error, "integrity"),
    );
  });

  it("must match the launcher's key, or launch refuses before journaling", async () => {
    const { stateDir } = await newLauncher(scratch);
    const launcher = new PosixLauncher({
      stateDir,
      hmacKey: new Uint8Array(32),
      nowMs: () => Date.now(),
      supervisorPath: scratch.supervisorPath,
    });
    const spec = shellSpec("true");
    await expect(launcher.launch(spec)).rejects.toSatisfy((error: unknown) =>
      isQlrError(error, "integrity"),
    );
    expect(await launcher.readJournal(spec.attemptId)).toBeNull();
  });
});

describe("receipt MAC", () => {
  const key = new Uint8Array(32).map((_, index) => (index * 37 + 11) & 0xff);

  it("is the portable HMAC of the canonical fields, so receipts of earlier builds still verify", () => {
    // A seeded walk over the fields' shapes: non-ASCII and astral text, NULs, signals, stops,
    // spawn errors, outputs present or not.
    let seed = 20_261_203;
    // The low bits of this generator cycle quickly, so only its high bits are used.
    const next = (): number => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed >>> 12;
    };
    const pick = (from: readonly string[]): string => from[next() % from.length] ?? "";
    let withOutput = 0;
    const texts = ["", "ok", "é", "日本語", "\u{1F600}x", "a\u0000b", "line\nbreak", '"quoted"'];
    for (let index = 0; index < 500; index += 1) {
      const startedAtMs = 1_700_000_000_000 + next();
      const fields = {
        attemptId: `wta:${next().toString(16).padStart(8, "0")}`,
        startedAtMs,
        finishedAtMs: startedAtMs + (next() % 100_000),
        exitCode: next() % 3 === 0 ? null : next() % 256,
        signal: next() % 4 === 0 ? "SIGKILL" : null,
        stopReason: (["cancel", "timeout", "shutdown", null] as const)[next() % 4] ?? null,
        spawnError: next() % 5 === 0 ? `spawn ${pick(texts)}` : null,
        output: next() % 2 === 0 ? { value: pick(texts), n: next() } : null,
        outputError: next() % 7 === 0 ? `refused ${pick(texts)}` : null,
      };
      const { attemptId, finishedAtMs, exitCode, signal, stopReason, spawnError } = fields;
      const covered =
        fields.output === null && fields.outputError === null
          ? { attemptId, startedAtMs, finishedAtMs, exitCode, signal, stopReason, spawnError }
          : {
              attemptId,
              startedAtMs,
              finishedAtMs,
              exitCode,
              signal,
              stopReason,
              spawnError,
              output: fields.output,
              outputError: fields.outputError,
            };
      expect(signReceipt(key, fields).mac).toBe(hmacSha256Hex(key, canonicalJson(covered)));
      if (fields.output !== null) withOutput += 1;
    }
    expect(withOutput).toBeGreaterThan(100);
  });

  it("matches a MAC written by an earlier build", () => {
    const receipt = signReceipt(key, {
      attemptId: "wta:0123456789abcdef",
      startedAtMs: 1_796_300_000_000,
      finishedAtMs: 1_796_300_000_250,
      exitCode: 0,
      signal: null,
      stopReason: null,
      spawnError: null,
      output: { greeting: "héllo" },
      outputError: null,
    });
    expect(receipt.mac).toBe("4f6aef6a15ef94f9d0ca78f9f1d2bd5a8a66e953a9f8ba0ad1a2bf6f615ea1b9");
  });
});
