/**
 * Tampered evidence fails closed (ADR-0229 §3: "unknown … 一律失败关闭"; §4: the portable identity
 * of journal and receipt files). A receipt edited while the runtime was down is never accepted
 * as a completion: the attempt stays unresolved and is reported (its `error` in GET /runs/:id,
 * and GET /recovery lists it as fail_closed). A journal file whose name is not a portable
 * identity is rejected and reported at start-up, and never treated as an attempt.
 */
import { readFile, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { waitFor } from "../support/wait.ts";
import { waitUntilGone } from "../support/proc.ts";
import { ensureDir } from "../support/scratch.ts";
import { journalNames, readJournal, receiptPath } from "../support/state-files.ts";
import { attemptsOf, stepNamed } from "../support/api-client.ts";
import { useDeviceHarness } from "../support/device-harness.ts";
import { chain } from "../support/workflow-shapes.ts";

const device = useDeviceHarness();

interface Tamper {
  readonly name: string;
  /** Rewrites the receipt text. */
  readonly edit: (receipt: Record<string, unknown>) => Record<string, unknown>;
  readonly reason: string;
}

const TAMPERS: readonly Tamper[] = [
  {
    name: "exit code turned from failure into success (MAC kept)",
    edit: (receipt) => ({ ...receipt, exitCode: 0 }),
    reason: "receipt rejected: receipt MAC does not verify",
  },
  {
    name: "MAC corrupted (fields kept)",
    edit: (receipt) => {
      const mac = String(receipt.mac);
      return { ...receipt, mac: `${mac[0] === "0" ? "1" : "0"}${mac.slice(1)}` };
    },
    reason: "receipt rejected: receipt MAC does not verify",
  },
];

describe("tampered evidence fails closed", { timeout: 90_000 }, () => {
  for (const tamper of TAMPERS) {
    it(`a receipt edited while the runtime is down is never accepted: ${tamper.name}`, async () => {
      const { dir, served: first } = await device.deploy("tamper", {
        tasks: (dir) => ({
          ta: dir.task({ label: "a", then: "sleep 1; exit 3" }),
          tb: dir.task({ label: "b" }),
        }),
        workflows: { pipeline: chain({ a: "ta", b: "tb" }) },
        applyAt: "start-up",
      });
      const runId = (await first.api.startWorkflow("tamper", "pipeline")).id;
      const { attempt } = await first.api.waitStepRunning(runId, "a");
      expect(await first.kill9()).toEqual({ code: null, signal: "SIGKILL" });

      // The task finishes while the runtime is down; its authentic receipt says exit 3.
      const path = receiptPath(dir.stateDir, attempt.id);
      await waitFor("the receipt written while the runtime is down", () => existsSync(path));
      await waitUntilGone(attempt.pid);
      const original = JSON.parse(await readFile(path, "utf8")) as Record<string, unknown>;
      expect(original.exitCode).toBe(3);
      await writeFile(path, `${JSON.stringify(tamper.edit(original))}\n`);

      const second = await device.serve(dir);
      const api = second.api;
      expect((await api.recovery()).filter((entry) => entry.attemptId === attempt.id)).toEqual([
        { attemptId: attempt.id, decision: "fail_closed", reason: tamper.reason },
      ]);
      expect(second.stderr).toContain(
        `recovery failed closed for attempt ${attempt.id}: ${tamper.reason}`,
      );
      // Cycles keep refusing it: the attempt stays unresolved, nothing is completed from the receipt.
      const before = await api.events(runId);
      await api.tick();
      await api.tick();
      const detail = await api.run(runId);
      expect(attemptsOf(detail, "a")).toEqual([
        expect.objectContaining({
          id: attempt.id,
          status: "running",
          exitCode: null,
          finishedAtMs: null,
          error: tamper.reason,
        }),
      ]);
      expect(stepNamed(detail, "a").status).toBe("running");
      expect(stepNamed(detail, "b").status).toBe("pending");
      expect(detail.run.status).toBe("running");
      const after = await api.events(runId);
      expect(after).toEqual(before);
      expect(after.filter((event) => event.type === "attempt.recovery_failed_closed")).toHaveLength(
        1,
      );
      // Never re-run either: one spawn, one attempt.
      expect(await dir.spawnCount("a")).toBe(1);
      expect(await dir.spawnCount("b")).toBe(0);
    });
  }

  it("a journal file with a bad name is rejected and reported at start-up, never treated as an attempt", async () => {
    const { dir, served: first } = await device.deploy("bad-journal", {
      packageName: "journal",
      tasks: (dir) => ({ ta: dir.task({ label: "a" }), tb: dir.task({ label: "b" }) }),
      workflows: { pipeline: chain({ a: "ta", b: "tb" }) },
      applyAt: "start-up",
    });
    const firstRun = await first.api.startWorkflow("journal", "pipeline");
    const done = await first.api.waitTerminal(firstRun.id);
    expect(done.run.status).toBe("succeeded");
    expect(await first.terminate()).toEqual({ code: 0, signal: null });

    // Plant files that are not `<portable id>.json`, one of them a copy of a real record.
    const journalDir = join(dir.stateDir, "journal");
    await ensureDir(journalDir);
    const real = await readJournal(dir.stateDir, done.attempts[0]?.id ?? "");
    const planted = [".hidden.json", "bad name.json", `${"x".repeat(37)}.json`, "wta:not-json.txt"];
    for (const name of planted)
      await writeFile(
        join(journalDir, name),
        `${JSON.stringify({ ...real, attemptId: name.replace(/\.json$/, "") })}\n`,
      );

    const second = await device.serve(dir);
    const api = second.api;
    for (const name of planted)
      expect(second.stderr).toContain(`journal file ${JSON.stringify(name)} rejected`);
    expect(second.stderr).toContain(
      `journal file ".hidden.json" rejected: name is not a portable identity`,
    );
    expect(second.stderr).toContain(
      `journal file "wta:not-json.txt" rejected: name does not end in .json`,
    );
    // Recovery saw no attempt in them: GET /recovery reports each file as rejected, nothing else.
    const report = await api.recovery();
    expect(report.map((entry) => entry.decision)).toEqual(planted.map(() => "journal_rejected"));
    expect(report.map((entry) => entry.attemptId).sort()).toEqual([...planted].sort());
    const secondRun = await api.startWorkflow("journal", "pipeline");
    const detail = await api.waitTerminal(secondRun.id);
    expect(detail.run.status).toBe("succeeded");
    expect(detail.attempts).toHaveLength(2);
    for (const attempt of detail.attempts) expect(attempt.id).toMatch(/^wta:[0-9a-f]{32}$/);
    expect((await api.run(firstRun.id)).attempts).toEqual(done.attempts);
    // The planted files are left for the operator, untouched.
    const names = await journalNames(dir.stateDir);
    for (const name of planted) expect(names).toContain(name);
    expect(await dir.spawns()).toHaveLength(4);
  });
});
