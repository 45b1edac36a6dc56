/**
 * Group commit of the launcher's exclusive durable creates (journal records, spawn records,
 * receipts, stop intents): creates that overlap share their fsyncs, yet each file keeps the
 * single create's order (written and fsynced → linked → its directory fsynced → acknowledged)
 * and a taken name refuses that file alone. Runs on the real file system through a
 * `DurableFs` that logs every call.
 */
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { errorCode } from "../../src/errors.ts";
import { createFileExclusiveDurable } from "../../runtimes/node/launcher/durable-file.ts";
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
