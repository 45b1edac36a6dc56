/**
 * The start-up sweep of durable creates' temporary files (runtimes/node/launcher/
 * temporary-files.ts), on the real file system with real processes: only a dead writer's old
 * regular file of the right shape goes; everything else stays, whatever it is.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, readdir, rm, symlink, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  TEMPORARY_FILE_STALE_AFTER_MS,
  processExists,
  sweepTemporaryFiles,
  temporaryName,
} from "../../runtimes/node/launcher/temporary-files.ts";

const dirs: string[] = [];
const children: ChildProcess[] = [];

afterEach(async () => {
  for (const child of children.splice(0)) child.kill("SIGKILL");
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

async function scratch(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "qlr-tmp-sweep-"));
  dirs.push(dir);
  return dir;
}

/** The pid of a process that has exited and been reaped. */
async function deadPid(): Promise<number> {
  const child = spawn("true", { stdio: "ignore" });
  await new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const pid = child.pid;
  if (pid === undefined || processExists(pid)) throw new Error("no dead pid to use");
  return pid;
}

/** The pid of a process that lives until the test ends. */
async function livePid(): Promise<number> {
  const child = spawn("sleep", ["60"], { stdio: "ignore" });
  children.push(child);
  await new Promise<void>((resolve, reject) => {
    child.once("spawn", () => resolve());
    child.once("error", reject);
  });
  if (child.pid === undefined) throw new Error("sleep has no pid");
  return child.pid;
}

/** A name of `temporaryName`'s shape with another writer's pid. */
function nameOf(pid: number, final = "wta:0001.json"): string {
  return temporaryName(final).replace(`.${process.pid}.`, `.${pid}.`);
}

async function plant(dir: string, name: string, ageMs: number, nowMs: number): Promise<void> {
  const path = join(dir, name);
  await writeFile(path, "{}\n");
  const atSeconds = (nowMs - ageMs) / 1000;
  await utimes(path, atSeconds, atSeconds);
}

describe("the sweep of temporary files", () => {
  it("removes a dead writer's old file and keeps a live writer's, its own, a recent one and anything else", async () => {
    const dir = await scratch();
    const nowMs = Date.now();
    const old = TEMPORARY_FILE_STALE_AFTER_MS + 5_000;
    const dead = await deadPid();
    const live = await livePid();
    const deadOld = nameOf(dead, "wta:0001.json");
    const deadOld2 = nameOf(dead, "wta:0002.json");
    const deadRecent = nameOf(dead, "wta:0003.json");
    const liveOld = nameOf(live, "wta:0004.json");
    const ownOld = temporaryName(join(dir, "wta:0005.json"));
    const foreign = "wta:0006.json.tmp";
    await plant(dir, deadOld, old, nowMs);
    await plant(dir, deadOld2, old * 100, nowMs);
    await plant(dir, deadRecent, 1_000, nowMs);
    await plant(dir, liveOld, old, nowMs);
    await plant(dir, ownOld, old, nowMs);
    await plant(dir, foreign, old, nowMs);
    // Of the right shape but not regular files: never removed, never followed.
    const target = join(await scratch(), "target");
    await writeFile(target, "kept\n");
    const link = nameOf(dead, "wta:0007.json");
    await symlink(target, join(dir, link));
    const directory = nameOf(dead, "wta:0008.json");
    await mkdir(join(dir, directory));

    const sweep = await sweepTemporaryFiles(dir, nowMs);

    expect(sweep).toEqual({ removed: 2, kept: 6 });
    expect((await readdir(dir)).sort()).toEqual(
      [deadRecent, liveOld, ownOld, foreign, link, directory].sort(),
    );
    expect((await readdir(join(target, ".."))).includes("target")).toBe(true);
  });

  it("asks about each writer's pid, so a pid that still lives keeps its file", async () => {
    const dir = await scratch();
    const nowMs = Date.now();
    const old = TEMPORARY_FILE_STALE_AFTER_MS * 2;
    const gone = nameOf(4_000_001);
    const living = nameOf(4_000_002);
    await plant(dir, gone, old, nowMs);
    await plant(dir, living, old, nowMs);
    const asked: number[] = [];
    const sweep = await sweepTemporaryFiles(dir, nowMs, (pid) => {
      asked.push(pid);
      return pid === 4_000_002;
    });
    expect(asked.sort()).toEqual([4_000_001, 4_000_002]);
    expect(sweep).toEqual({ removed: 1, kept: 1 });
    expect(await readdir(dir)).toEqual([living]);
  });

  it("answers nothing to sweep when tmp/ does not exist", async () => {
    const dir = await scratch();
    expect(await sweepTemporaryFiles(join(dir, "absent"), Date.now())).toEqual({
      removed: 0,
      kept: 0,
    });
  });
});
