/**
 * Receipts under a full disk, with a real ENOSPC: the state directory lives on a small tmpfs
 * mounted for this file (needs root; skipped with that reason otherwise), which is then filled.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, open, rm } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isQlrError } from "../../src/errors.ts";
import type { PosixLauncher } from "../../runtimes/node/launcher/index.ts";
import { useScratch, newLauncher, shellSpec, waitFor, waitForReceipt } from "./support.ts";

const scratch = useScratch("full-disk");
let mountPoint: string;
let mounted = false;

function canMount(): boolean {
  return process.getuid?.() === 0 && existsSync("/proc/filesystems");
}

beforeAll(async () => {
  mountPoint = join(scratch.dir, "small-disk");
  await mkdir(mountPoint);
  if (!canMount()) return;
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", mountPoint]);
    mounted = true;
  } catch {
    mounted = false;
  }
});

afterAll(() => {
  if (mounted) execFileSync("umount", ["-l", mountPoint]);
});

/** Writes zeros until the file system answers ENOSPC; returns what frees the space again. */
async function fillDisk(name: string): Promise<() => Promise<void>> {
  const path = join(mountPoint, name);
  const handle = await open(path, "w");
  const block = Buffer.alloc(64 * 1024);
  try {
    for (let written = 0; written < 64 * 1024 * 1024; written += block.length)
      await handle.write(block);
    throw new Error("the small disk never filled up");
  } catch (error) {
    if ((error as { code?: string }).code !== "ENOSPC") throw error;
  } finally {
    await handle.close();
  }
  // Small writes may still fit in the last partial page; fill those too.
  const tail = await open(`${path}.tail`, "w");
  try {
    for (let index = 0; index < 4096; index += 1) await tail.write(Buffer.alloc(512));
  } catch (error) {
    if ((error as { code?: string }).code !== "ENOSPC") throw error;
  } finally {
    await tail.close();
  }
  return async () => {
    await rm(path);
    await rm(`${path}.tail`);
  };
}

/** A launcher whose state dir lies on the small disk (which this file must have mounted). */
async function launcherOnSmallDisk(
  stateName: string,
  options: { supervisorUp?: boolean } = {},
): Promise<PosixLauncher> {
  expect(mounted).toBe(true);
  const stateDir = join(mountPoint, stateName);
  return (await newLauncher(scratch, { ...options, stateDir })).launcher;
}

describe(
  "a full disk (needs root to mount a small tmpfs)",
  { skip: !canMount(), timeout: 60_000 },
  () => {
    it("keeps supervising a task whose receipt cannot be written, and records it once space returns", async () => {
      const launcher = await launcherOnSmallDisk("state-receipt");
      const gate = join(scratch.dir, "gate-receipt");
      const spec = shellSpec(`while [ ! -e ${gate} ]; do sleep 0.05; done; echo finished`);
      const handle = await launcher.launch(spec);
      const freeDisk = await fillDisk("filler-receipt");
      await open(gate, "w").then((file) => file.close());
      await waitFor("the task to end", async () =>
        (await launcher.inspect(handle)).state === "not_running" ? true : null,
      );
      // The task is over, but its receipt cannot land: the supervisor keeps it pending.
      expect(await launcher.readReceipt(spec.attemptId)).toEqual({ status: "none" });
      expect(await launcher.supervision(spec.attemptId)).toBe("live");
      await freeDisk();
      const reading = await waitForReceipt(launcher, spec.attemptId, 30_000);
      expect(reading.status === "valid" && reading.receipt).toMatchObject({
        attemptId: spec.attemptId,
        exitCode: 0,
        signal: null,
        spawnError: null,
        startedAtMs: handle.startedAtMs,
      });
      launcher.close();
    });

    it("refuses to start a task when its journal cannot be written: a clear error and nothing spawned", async () => {
      const launcher = await launcherOnSmallDisk("state-journal", { supervisorUp: true });
      const freeDisk = await fillDisk("filler-journal");
      const marker = join(scratch.dir, "ran-journal");
      const spec = shellSpec(`touch ${marker}`);
      await expect(launcher.launch(spec)).rejects.toSatisfy(
        (error: unknown) =>
          isQlrError(error, "storage_unavailable") &&
          /cannot write the journal record .*ENOSPC/.test((error as Error).message),
      );
      expect(await launcher.readJournal(spec.attemptId)).toBeNull();
      expect(existsSync(marker)).toBe(false);
      await freeDisk();
      launcher.close();
    });
  },
);
