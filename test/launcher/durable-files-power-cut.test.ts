/**
 * The launcher's durable files under simulated power loss. The launcher and its supervisor
 * are separate processes; what a power cut can break is their file operations, which go
 * through `DurableFs` (runtimes/node/launcher/durable-file.ts). So the very functions they call
 * (journal before spawn, spawn record, stop intent, receipt) run here in-process on the
 * simulated machine of test/storage/fixtures/power-cut-fs.ts, which drops, keeps or tears every
 * unsynced write and directory entry at a cut.
 *
 * The workload launches attempts two at a time: journal, then the spawn (an event recorded
 * only once the journal write returned, i.e. after its fsync and its directory's fsync), the
 * supervisor's spawn record, a stop intent for some, and the signed receipt (acknowledged once
 * its write returned). The two attempts' records go out together and share files (one file
 * under two names), as a dispatch page's do. Half the seeds run on a file system without hard links (vfat, exfat),
 * where the files are written in place and a cut can tear them. Each seed cuts the power
 * before one mutating file call, then checks on the machine that remains:
 *
 * - no attempt was spawned whose journal did not survive whole;
 * - no acknowledged receipt or stop intent is lost;
 * - every receipt file either authenticates to exactly the receipt that was signed, or is
 *   refused (a torn write never passes the MAC);
 * - every stop intent file reads as the intent written, or is refused with `storage_corrupt`
 *   naming the file; a journal file reads whole, or is refused the same way.
 *
 * Scale: QLR_POWERCUT_SEEDS (default 1000, a few seconds; no sql.js here), QLR_POWERCUT_SEED=<n>
 * replays one seed.
 */
import { describe, expect, it } from "vitest";
import { digestOf } from "../../src/digest.ts";
import { errorMessage, isQlrError } from "../../src/errors.ts";
import {
  ensureDurableDirectories,
  readSmallFile,
} from "../../runtimes/node/launcher/durable-file.ts";
import {
  readJournalRecord,
  writeJournalRecord,
  type JournalRecord,
} from "../../runtimes/node/launcher/journal.ts";
import {
  RECEIPT_MAX_BYTES,
  checkReceiptText,
  signReceipt,
  writeReceiptExclusive,
  type CompletionReceipt,
} from "../../runtimes/node/launcher/receipt.ts";
import { readSpawnRecord, writeSpawnRecord } from "../../runtimes/node/launcher/spawn-record.ts";
import { readStopIntent, recordStopIntent } from "../../runtimes/node/launcher/stop-intent.ts";
import {
  receiptPath,
  stateLayout,
  stopIntentPath,
  type StateLayout,
} from "../../runtimes/node/launcher/state-layout.ts";
import {
  PowerCutFs,
  fsError,
  seededRandom,
  powerCutSeeds,
} from "../storage/fixtures/power-cut-fs.ts";

const SEEDS = { base: 0x4c_41_00_00, defaultCount: 1000 } as const;
const ATTEMPTS = 8;
const STATE_DIR = "/machine/state/launcher";
const KEY = Uint8Array.from({ length: 32 }, (_, index) => (index * 37 + 11) & 0xff);

function attemptIdOf(index: number): string {
  return `attempt-${String(index).padStart(3, "0")}`;
}

function journalOf(index: number): JournalRecord {
  return {
    version: 1,
    attemptId: attemptIdOf(index),
    startedAtMs: 1_800_000_000_000 + index * 1000,
    bootId: "simulated-boot-1",
    argvDigest: digestOf(["/bin/task", String(index)]),
    cwd: index % 2 === 0 ? null : "/srv/work",
    logMaxBytes: 65_536,
  };
}

function receiptOf(index: number, stopped: boolean): CompletionReceipt {
  return signReceipt(KEY, {
    attemptId: attemptIdOf(index),
    startedAtMs: journalOf(index).startedAtMs,
    finishedAtMs: journalOf(index).startedAtMs + 500 + index,
    exitCode: stopped ? null : index % 4,
    signal: stopped ? "SIGTERM" : null,
    stopReason: stopped ? "cancel" : null,
    spawnError: null,
    // Long enough that a receipt spans two 4 KiB pages, so a cut can tear it in the middle.
    output: { index, note: "x".repeat(5000) },
    outputError: null,
  });
}

/** What the workload saw returned before the power went. */
interface Observed {
  readonly spawned: Set<number>;
  readonly receipts: Map<number, CompletionReceipt>;
  readonly stopIntents: Set<number>;
}

/**
 * The launcher's and the supervisor's file operations, in the order they make them, for
 * attempts launched two at a time as a dispatch page launches them: the records of both go
 * out together, so each pair's journals, spawn records and receipts share files.
 */
async function runWorkload(fs: PowerCutFs, layout: StateLayout, observed: Observed): Promise<void> {
  await ensureDurableDirectories(
    layout.stateDir,
    [layout.journalDir, layout.receiptsDir, layout.stopsDir, layout.spawnsDir, layout.tmpDir],
    fs,
  );
  for (let index = 0; index < ATTEMPTS; index += 2) {
    const outcomes = await Promise.allSettled([
      launchAttempt(fs, layout, observed, index),
      launchAttempt(fs, layout, observed, index + 1),
    ]);
    for (const outcome of outcomes) if (outcome.status === "rejected") throw outcome.reason;
  }
}

async function launchAttempt(
  fs: PowerCutFs,
  layout: StateLayout,
  observed: Observed,
  index: number,
): Promise<void> {
  await writeJournalRecord(layout, journalOf(index), fs);
  // The barrier: a process exists only once its journal write returned.
  observed.spawned.add(index);
  await writeSpawnRecord(
    layout,
    {
      attemptId: attemptIdOf(index),
      supervisorPid: 4242,
      supervisorStartTicks: "123456",
      bootId: "simulated-boot-1",
    },
    fs,
  );
  const stopped = index % 3 === 1;
  if (stopped) {
    await recordStopIntent(layout, attemptIdOf(index), "cancel", 1_900_000_000_000 + index, fs);
    observed.stopIntents.add(index);
  }
  await writeReceiptExclusive(layout, receiptOf(index, stopped), fs);
  observed.receipts.set(index, receiptOf(index, stopped));
}

function newMachine(withoutLinks: boolean, onCall?: (mutationIndex: number) => void): PowerCutFs {
  return new PowerCutFs({
    inject: (call) =>
      withoutLinks && call.name === "link"
        ? fsError("EPERM", "this file system cannot make hard links")
        : undefined,
    onCall: (call) => {
      if (call.mutationIndex >= 0) onCall?.(call.mutationIndex);
    },
  });
}

interface SeedOutcome {
  readonly tornReceiptsRefused: number;
  readonly tornIntentsRefused: number;
  readonly tornJournalsRefused: number;
}

async function checkSeed(seed: number, totalMutations: number): Promise<SeedOutcome> {
  const random = seededRandom(seed);
  const cutAt = Math.floor(random() * (totalMutations + 1));
  const withoutLinks = random() < 0.5;
  const layout = stateLayout(STATE_DIR);
  const observed: Observed = { spawned: new Set(), receipts: new Map(), stopIntents: new Set() };
  let afterCut: PowerCutFs | undefined;
  const machine: PowerCutFs = newMachine(withoutLinks, (mutationIndex) => {
    // Nothing succeeds once the power is gone: the other attempt of a pair may still be going.
    if (afterCut !== undefined) throw fsError("EIO", "the machine has no power");
    if (mutationIndex !== cutAt) return;
    afterCut = machine.powerCut(random);
    throw fsError("EIO", "the machine lost power");
  });
  try {
    await runWorkload(machine, layout, observed);
  } catch (error) {
    if (afterCut === undefined) throw error;
  }
  const disk = afterCut ?? machine.materialise(random);
  const outcome = { tornReceiptsRefused: 0, tornIntentsRefused: 0, tornJournalsRefused: 0 };
  for (let index = 0; index < ATTEMPTS; index += 1) {
    const attemptId = attemptIdOf(index);
    let journal: JournalRecord | null;
    try {
      journal = await readJournalRecord(layout, attemptId, disk);
    } catch (error) {
      if (observed.spawned.has(index))
        throw new Error(
          `attempt ${index} was spawned, yet its journal is refused: ${errorMessage(error)}`,
          { cause: error },
        );
      if (!isQlrError(error, "storage_corrupt") || !errorMessage(error).includes(attemptId))
        throw new Error(`a torn journal was not refused clearly: ${errorMessage(error)}`, {
          cause: error,
        });
      journal = null;
      outcome.tornJournalsRefused += 1;
    }
    if (journal === null && observed.spawned.has(index))
      throw new Error(`attempt ${index} was spawned without its journal surviving the cut`);
    if (journal !== null) expect(journal).toEqual(journalOf(index));

    const receiptFile = await readSmallFile(
      receiptPath(layout, attemptId),
      RECEIPT_MAX_BYTES,
      disk,
    );
    const acknowledged = observed.receipts.get(index);
    if (receiptFile === null) {
      if (acknowledged !== undefined)
        throw new Error(`the acknowledged receipt of attempt ${index} was lost`);
    } else {
      if (!receiptFile.ok) throw new Error(`receipt of attempt ${index} ${receiptFile.reason}`);
      const checked = checkReceiptText(KEY, receiptFile.text, attemptId);
      if (checked.ok) {
        expect(checked.receipt).toEqual(receiptOf(index, index % 3 === 1));
      } else {
        if (acknowledged !== undefined)
          throw new Error(
            `the acknowledged receipt of attempt ${index} no longer verifies: ${checked.reason}`,
          );
        outcome.tornReceiptsRefused += 1;
      }
    }

    try {
      const intent = await readStopIntent(layout, attemptId, disk);
      if (intent === null && observed.stopIntents.has(index))
        throw new Error(`the recorded stop intent of attempt ${index} was lost`);
      if (intent !== null)
        expect(intent).toEqual({ reason: "cancel", requestedAtMs: 1_900_000_000_000 + index });
    } catch (error) {
      if (observed.stopIntents.has(index) || !isQlrError(error, "storage_corrupt")) throw error;
      expect(errorMessage(error)).toContain(stopIntentPath(layout, attemptId));
      outcome.tornIntentsRefused += 1;
    }
    // A spawn record is evidence, never trusted blindly: whole, absent, or reported invalid.
    const spawn = await readSpawnRecord(layout, attemptId, disk);
    if (spawn !== null && "invalid" in spawn) expect(spawn.invalid).toMatch(/spawn record/);
  }
  return outcome;
}

describe("the launcher's durable files under simulated power loss", () => {
  it(
    "spawns nothing without a surviving journal, loses no acknowledged receipt or stop intent, and refuses torn ones",
    async () => {
      let temporaryFiles = 0;
      let links = 0;
      const recording = new PowerCutFs({
        onCall: (call) => {
          if (call.name === "open" && call.path.startsWith(`${STATE_DIR}/tmp/`))
            temporaryFiles += 1;
          if (call.name === "link") links += 1;
        },
      });
      await runWorkload(recording, stateLayout(STATE_DIR), {
        spawned: new Set(),
        receipts: new Map(),
        stopIntents: new Set(),
      });
      // Each pair's journals and spawn records shared a file: at least one temporary file
      // fewer per attempt than names linked.
      expect(links).toBe(ATTEMPTS * 3 + 3);
      expect(temporaryFiles).toBeLessThanOrEqual(links - ATTEMPTS);
      const totalMutations = recording.mutationCount;
      expect(totalMutations).toBeGreaterThan(ATTEMPTS * 15);
      const seeds = powerCutSeeds(SEEDS);
      const failures: string[] = [];
      const refused = { receipts: 0, intents: 0, journals: 0 };
      for (const seed of seeds) {
        try {
          const outcome = await checkSeed(seed, totalMutations);
          refused.receipts += outcome.tornReceiptsRefused;
          refused.intents += outcome.tornIntentsRefused;
          refused.journals += outcome.tornJournalsRefused;
        } catch (error) {
          failures.push(`seed ${seed} (QLR_POWERCUT_SEED=${seed}): ${errorMessage(error)}`);
          if (failures.length <= 5) console.error(failures[failures.length - 1]);
        }
      }
      console.log(
        `launcher power cut: ${seeds.length} seeds over ${totalMutations + 1} cut points, ${failures.length} failed; torn files refused: ${refused.receipts} receipts, ${refused.intents} stop intents, ${refused.journals} journals`,
      );
      expect(failures.slice(0, 10), `${failures.length} of ${seeds.length} seeds failed`).toEqual(
        [],
      );
      // The exploration reaches the torn cases it claims to check (at the default scale).
      if (seeds.length >= SEEDS.defaultCount) {
        expect(refused.receipts).toBeGreaterThan(0);
        expect(refused.intents + refused.journals).toBeGreaterThan(0);
      }
    },
    10 * 60_000,
  );

  it("refuses to record over a torn stop intent, naming the file, and writes nothing", async () => {
    const layout = stateLayout(STATE_DIR);
    const machine = newMachine(false);
    await ensureDurableDirectories(layout.stateDir, [layout.stopsDir, layout.tmpDir], machine);
    const path = stopIntentPath(layout, attemptIdOf(1));
    const handle = machine.open(path, "exclusive");
    machine.append(handle, Buffer.from('{"attemptId":"attempt-001","reas', "utf8"));
    machine.fsync(handle);
    machine.close(handle);
    const files = machine.list();
    const outcome = await recordStopIntent(layout, attemptIdOf(1), "shutdown", 1, machine).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(isQlrError(outcome, "storage_corrupt")).toBe(true);
    expect(errorMessage(outcome)).toContain(path);
    expect(errorMessage(outcome)).toContain("not valid JSON");
    // The temporary file of the refused write is gone again; the torn intent is left as found.
    expect(machine.list()).toEqual(files);
    expect(Buffer.from(machine.peek(path) ?? []).toString("utf8")).toBe(
      '{"attemptId":"attempt-001","reas',
    );
  });
});
