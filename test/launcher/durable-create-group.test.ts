/**
 * Group commit of the launcher's exclusive durable creates (journal records, spawn records,
 * receipts, stop intents): creates that overlap share their fsyncs, yet each file keeps the
 * single create's order (written and fsynced → linked → its directory fsynced → acknowledged)
 * and a taken name refuses that file alone. Records of one directory created together share one
 * file under each record's name, and each reader finds its own line. Runs on the real file
 * system through a `DurableFs` that logs every call.
 */
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { errorCode } from "../../src/errors.ts";
import { createFileExclusiveDurable } from "../../runtimes/node/launcher/durable-file.ts";
import {
  createRecordFile,
  readRecordFile,
  recordOf,
} from "../../runtimes/node/launcher/record-file.ts";
import { readJournalRecord } from "../../runtimes/node/launcher/journal.ts";
import {
  checkReceiptText,
  signReceipt,
  writeReceiptExclusive,
} from "../../runtimes/node/launcher/receipt.ts";
import { journalPath, stateLayout } from "../../runtimes/node/launcher/state-layout.ts";
import { nodeDurableFs, type DurableFs } from "../../storage/node/durable-fs.ts";
import { fsyncDirectory } from "../../storage/node/fsync-directory.ts";

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "qlr-create-group-"));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** node:fs with every mutating call and every acknowledgement appended to `calls`. */
function loggingFs(calls: string[]): DurableFs {
  const paths = new Map<number, string>();
  const name = (path: string): string =>
    path.slice(dir.length + 1).replace(/\.[0-9]+\..*\.tmp$/, ".tmp");
  return {
    ...nodeDurableFs,
    open(path, mode, fileMode) {
      const handle = nodeDurableFs.open(path, mode, fileMode);
      paths.set(handle, path);
      calls.push(`open ${name(path)}`);
      return handle;
    },
    fsync(handle) {
      calls.push(`fsync ${name(paths.get(handle) ?? "?")}`);
      nodeDurableFs.fsync(handle);
    },
    link(existing, to) {
      calls.push(`link ${name(to)}`);
      nodeDurableFs.link(existing, to);
    },
    fsyncDirectory(path) {
      calls.push(`fsyncDirectory ${name(path)}`);
      nodeDurableFs.fsyncDirectory(path);
    },
  };
}

describe("grouped exclusive durable creates", () => {
  it("share one directory fsync, keep each file's order, and refuse only a taken name", async () => {
    const calls: string[] = [];
    const fs = loggingFs(calls);
    const { mkdir, writeFile } = await import("node:fs/promises");
    await mkdir(join(dir, "tmp"));
    await mkdir(join(dir, "receipts"));
    await writeFile(join(dir, "receipts", "taken.json"), "first\n");
    const names = ["a", "b", "c", "taken", "d", "e"];
    const outcomes = await Promise.allSettled(
      names.map(async (stem) => {
        await createFileExclusiveDurable(
          join(dir, "receipts", `${stem}.json`),
          join(dir, "tmp"),
          `${stem} body\n`,
          fs,
        );
        calls.push(`acknowledged ${stem}`);
      }),
    );

    outcomes.forEach((outcome, index) => {
      if (names[index] === "taken") {
        expect(outcome.status).toBe("rejected");
        expect(errorCode((outcome as PromiseRejectedResult).reason)).toBe("EEXIST");
      } else expect(outcome.status).toBe("fulfilled");
    });
    // The taken name was never replaced; every other file holds its whole content.
    expect(await readFile(join(dir, "receipts", "taken.json"), "utf8")).toBe("first\n");
    for (const stem of names.filter((stem) => stem !== "taken"))
      expect(await readFile(join(dir, "receipts", `${stem}.json`), "utf8")).toBe(`${stem} body\n`);
    // No temporary file is left behind, not even the refused one's.
    expect(await readdir(join(dir, "tmp"))).toEqual([]);

    // One group: one directory fsync for six creates.
    expect(calls.filter((call) => call.startsWith("fsyncDirectory"))).toEqual([
      "fsyncDirectory receipts",
    ]);
    const directorySyncAt = calls.indexOf("fsyncDirectory receipts");
    for (const stem of names.filter((stem) => stem !== "taken")) {
      const linkAt = calls.indexOf(`link receipts/${stem}.json`);
      // Its data was synced before the link (the temporary file's fsync) …
      expect(
        calls.slice(0, linkAt).filter((call) => call === "fsync tmp/" + `${stem}.json.tmp`),
      ).toHaveLength(1);
      // … the link precedes the directory fsync, which precedes the acknowledgement.
      expect(linkAt).toBeLessThan(directorySyncAt);
      expect(calls.indexOf(`acknowledged ${stem}`)).toBeGreaterThan(directorySyncAt);
    }
  });
});

describe("records created together share one file", () => {
  const record = (attemptId: string, extra = ""): Record<string, unknown> => ({
    attemptId,
    note: `${attemptId}${extra}`,
  });

  it("one temporary file, written and fsynced once, linked under every record's name", async () => {
    const calls: string[] = [];
    const fs = loggingFs(calls);
    const { mkdir } = await import("node:fs/promises");
    await mkdir(join(dir, "tmp"));
    await mkdir(join(dir, "spawns"));
    const ids = ["a-1", "a-2", "a-3"];
    await Promise.all(
      ids.map((id) =>
        createRecordFile(join(dir, "spawns", `${id}.json`), join(dir, "tmp"), record(id), 4096, fs),
      ),
    );
    expect(calls.filter((call) => call.startsWith("open"))).toHaveLength(1);
    expect(calls.filter((call) => call.startsWith("fsync tmp/"))).toHaveLength(1);
    expect(calls.filter((call) => call.startsWith("link"))).toHaveLength(3);
    const inodes = await Promise.all(
      ids.map(async (id) => (await stat(join(dir, "spawns", `${id}.json`))).ino),
    );
    expect(new Set(inodes).size).toBe(1);
    expect((await stat(join(dir, "spawns", "a-1.json"))).nlink).toBe(3);
    for (const id of ids)
      expect(await readRecordFile(join(dir, "spawns", `${id}.json`), 4096, id, fs)).toEqual({
        ok: true,
        record: record(id),
      });
    expect(await readdir(join(dir, "tmp"))).toEqual([]);
  });

  it("keeps each shared file within its reader's limit, and never mixes directories", async () => {
    const { mkdir } = await import("node:fs/promises");
    await mkdir(join(dir, "tmp"));
    await mkdir(join(dir, "journal"));
    await mkdir(join(dir, "stops"));
    // Each line is 33 bytes: two fit in 70, a third does not.
    const ids = ["b-1", "b-2", "b-3", "b-4", "b-5"];
    await Promise.all([
      ...ids.map((id) =>
        createRecordFile(join(dir, "journal", `${id}.json`), join(dir, "tmp"), record(id), 70),
      ),
      createRecordFile(join(dir, "stops", "b-1.json"), join(dir, "tmp"), record("b-1"), 100),
    ]);
    const journalInodes = await Promise.all(
      ids.map(async (id) => (await stat(join(dir, "journal", `${id}.json`))).ino),
    );
    expect(new Set(journalInodes).size).toBe(3);
    for (const id of ids) {
      const text = await readFile(join(dir, "journal", `${id}.json`), "utf8");
      expect(Buffer.byteLength(text)).toBeLessThanOrEqual(70);
      expect(await readRecordFile(join(dir, "journal", `${id}.json`), 70, id)).toEqual({
        ok: true,
        record: record(id),
      });
    }
    expect((await stat(join(dir, "stops", "b-1.json"))).nlink).toBe(1);
    expect(await readFile(join(dir, "stops", "b-1.json"), "utf8")).toBe(
      `${JSON.stringify(record("b-1"))}\n`,
    );
  });

  it("a taken name refuses that record alone; its neighbours are written and read", async () => {
    const { mkdir } = await import("node:fs/promises");
    await mkdir(join(dir, "tmp"));
    await mkdir(join(dir, "receipts"));
    await writeFile(join(dir, "receipts", "c-2.json"), "first\n");
    const ids = ["c-1", "c-2", "c-3"];
    const outcomes = await Promise.allSettled(
      ids.map((id) =>
        createRecordFile(join(dir, "receipts", `${id}.json`), join(dir, "tmp"), record(id), 4096),
      ),
    );
    expect(outcomes.map((outcome) => outcome.status)).toEqual([
      "fulfilled",
      "rejected",
      "fulfilled",
    ]);
    expect(errorCode((outcomes[1] as PromiseRejectedResult).reason)).toBe("EEXIST");
    expect(await readFile(join(dir, "receipts", "c-2.json"), "utf8")).toBe("first\n");
    for (const id of ["c-1", "c-3"])
      expect(await readRecordFile(join(dir, "receipts", `${id}.json`), 4096, id)).toEqual({
        ok: true,
        record: record(id),
      });
    expect(await readdir(join(dir, "tmp"))).toEqual([]);
  });

  it("a reader takes only its own attempt's line, and refuses a shared file without it", () => {
    const line = (id: string): string => JSON.stringify(record(id));
    const shared = `${line("d-1")}\n${line("d-2")}\n`;
    expect(recordOf(shared, "d-2")).toEqual({ ok: true, record: record("d-2") });
    expect(recordOf(shared, "d-3")).toEqual({
      ok: false,
      reason: "holds 2 records, none of attempt d-3",
    });
    expect(recordOf(`${line("d-1")}\n${line("d-1")}\n`, "d-1")).toEqual({
      ok: false,
      reason: "holds two records of attempt d-1",
    });
    expect(recordOf(`${line("d-1")}\n{"attemptId":"d-2"\n`, "d-1")).toEqual({
      ok: false,
      reason: "has a line 2 that is not valid JSON",
    });
    expect(recordOf(`${line("d-1")}\n[1]\n`, "d-1")).toEqual({
      ok: false,
      reason: "has a line 2 that is not a JSON object",
    });
    // One line is the file's record whichever attempt it names: its reader says which.
    expect(recordOf(`${line("d-1")}\n`, "d-9")).toEqual({ ok: true, record: record("d-1") });
    expect(recordOf(`{"attemptId":"d-1"`, "d-1")).toEqual({
      ok: false,
      reason: "is not valid JSON",
    });
  });

  it("receipts and journals in shared files verify per attempt; a journal reader names a shared file without its attempt", async () => {
    const layout = stateLayout(dir);
    const { mkdir } = await import("node:fs/promises");
    for (const folder of [layout.tmpDir, layout.receiptsDir, layout.journalDir])
      await mkdir(folder);
    const key = Uint8Array.from({ length: 32 }, (_, index) => index + 1);
    const receiptOf = (attemptId: string, exitCode: number) =>
      signReceipt(key, {
        attemptId,
        startedAtMs: 1_000,
        finishedAtMs: 2_000,
        exitCode,
        signal: null,
        stopReason: null,
        spawnError: null,
      });
    await Promise.all([
      writeReceiptExclusive(layout, receiptOf("e-1", 0)),
      writeReceiptExclusive(layout, receiptOf("e-2", 3)),
    ]);
    const text = await readFile(join(layout.receiptsDir, "e-2.json"), "utf8");
    expect(text.split("\n")).toHaveLength(3);
    const first = checkReceiptText(key, text, "e-1");
    const second = checkReceiptText(key, text, "e-2");
    expect(first.ok && first.receipt.exitCode).toBe(0);
    expect(second.ok && second.receipt.exitCode).toBe(3);
    expect(checkReceiptText(key, text, "e-3")).toEqual({
      ok: false,
      reason: "receipt holds 2 records, none of attempt e-3",
    });

    // A shared journal file planted under a third attempt's name is damaged for that attempt.
    await Promise.all(
      ["e-1", "e-2"].map((id) =>
        createRecordFile(journalPath(layout, id), layout.tmpDir, record(id), 16_384),
      ),
    );
    const { link } = await import("node:fs/promises");
    await link(journalPath(layout, "e-1"), journalPath(layout, "e-3"));
    await expect(readJournalRecord(layout, "e-3")).rejects.toThrow(
      /journal .*e-3.* is damaged: it holds 2 records, none of attempt e-3/,
    );
  });
});

describe("temporary names", () => {
  it("differ for files of one name in two directories written in one group", async () => {
    // A journal record and a receipt are both `<attempt id>.json`, and may share a group.
    const { mkdir } = await import("node:fs/promises");
    await mkdir(join(dir, "tmp"));
    await mkdir(join(dir, "journal"));
    await mkdir(join(dir, "receipts"));
    await Promise.all(
      ["journal", "receipts"].map((folder) =>
        createFileExclusiveDurable(
          join(dir, folder, "same.json"),
          join(dir, "tmp"),
          `${folder}\n`,
          nodeDurableFs,
        ),
      ),
    );
    expect(await readFile(join(dir, "journal", "same.json"), "utf8")).toBe("journal\n");
    expect(await readFile(join(dir, "receipts", "same.json"), "utf8")).toBe("receipts\n");
    expect(await readdir(join(dir, "tmp"))).toEqual([]);
  });
});

describe("the directory flush of the launcher's records", () => {
  const openDescriptors = async (): Promise<number> => (await readdir("/proc/self/fd")).length;

  it("flushes a directory and closes what it opened", async () => {
    const before = await openDescriptors();
    await fsyncDirectory(dir);
    expect(await openDescriptors()).toBe(before);
  });

  it("rejects what is not a directory, as every record's acknowledgement depends on it", async () => {
    await writeFile(join(dir, "plain"), "x");
    const missing = await fsyncDirectory(join(dir, "missing")).catch((error: unknown) => error);
    expect(errorCode(missing)).toBe("ENOENT");
    const plain = await fsyncDirectory(join(dir, "plain")).catch((error: unknown) => error);
    expect(errorCode(plain)).toBe("ENOTDIR");
  });
});
