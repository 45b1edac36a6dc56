import { access, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { describe, expect, it } from "vitest";
import { canonicalJson } from "../../src/canonical-json.ts";
import type { RunAttempt } from "../../src/model.ts";
import type { TaskContext } from "../../src/task-context.ts";
import { MAX_OUTPUT_BYTES } from "../../src/task-output.ts";
import { receiptMac } from "../../runtimes/node/launcher/receipt.ts";
import { LocalProcessExecutor } from "../../runtimes/node/local-executor.ts";
import {
  noNeedsPath,
  prepareTaskEnvironment,
  taskNeedsPath,
  taskOutputPath,
} from "../../runtimes/node/task-env.ts";
import { useScratch, newAttemptId, newLauncher, shellSpec, waitForReceipt } from "./support.ts";

/**
 * The task environment and the output file with real processes: a shell task reads its
 * context, its input and its needs from the variables the runtime sets, writes its output to
 * `QLR_OUTPUT`, and the supervisor signs what it wrote into the receipt.
 */

const scratch = useScratch("task-env");

function contextFor(attemptId: string): TaskContext {
  return {
    runId: "run-1",
    package: "etl",
    generation: 3,
    step: "publish",
    task: "work",
    attemptId,
    attemptNumber: 2,
    input: { count: 5, dry_run: false, region: "eu west" },
    needs: { extract: { rows: 7 }, report: null },
  };
}

/** Launches `script` with the environment the runtime builds and returns its receipt. */
async function runWithContext(script: string) {
  const { launcher, stateDir } = await newLauncher(scratch);
  const attemptId = newAttemptId();
  const env = await prepareTaskEnvironment(stateDir, contextFor(attemptId), {
    OWN: "declared",
    QLR_RUN_ID: "spoofed",
  });
  await launcher.launch(shellSpec(script, { attemptId, env }));
  const reading = await waitForReceipt(launcher, attemptId);
  if (reading.status !== "valid")
    throw new Error(`expected a valid receipt, got ${reading.reason}`);
  return { launcher, stateDir, attemptId, receipt: reading.receipt };
}

describe("task environment", () => {
  it("a task sees its context, input and needs, and its output is signed into the receipt", async () => {
    const script = [
      'needs=$(cat "$QLR_NEEDS")',
      'printf \'{"run":"%s","package":"%s","generation":%s,"step":"%s","task":"%s","attempt":"%s","number":%s,"region":"%s","count":%s,"dry":%s,"inputs":%s,"needs":%s,"own":"%s"}\' "$QLR_RUN_ID" "$QLR_PACKAGE" "$QLR_GENERATION" "$QLR_STEP" "$QLR_TASK" "$QLR_ATTEMPT_ID" "$QLR_ATTEMPT_NUMBER" "$QLR_INPUT_region" "$QLR_INPUT_count" "$QLR_INPUT_dry_run" "$QLR_INPUTS" "$needs" "$OWN" > "$QLR_OUTPUT"',
    ].join("\n");
    const { attemptId, receipt } = await runWithContext(script);
    expect(receipt.exitCode).toBe(0);
    expect(receipt.outputError).toBeNull();
    expect(receipt.output).toEqual({
      run: "run-1",
      package: "etl",
      generation: 3,
      step: "publish",
      task: "work",
      attempt: attemptId,
      number: 2,
      region: "eu west",
      count: 5,
      dry: false,
      inputs: { count: 5, dry_run: false, region: "eu west" },
      needs: { extract: { rows: 7 }, report: null },
      own: "declared",
    });
  });

  it("no output file is no output; text that is not JSON, an oversize file and a symbolic link are refused with a reason", async () => {
    expect((await runWithContext("true")).receipt).toMatchObject({
      output: null,
      outputError: null,
    });
    expect((await runWithContext('printf "{oops" > "$QLR_OUTPUT"')).receipt.outputError).toMatch(
      /not valid JSON/,
    );
    const big = await runWithContext(
      `head -c ${MAX_OUTPUT_BYTES * 5} /dev/zero | tr '\\0' ' ' > "$QLR_OUTPUT"`,
    );
    expect(big.receipt.outputError).toMatch(/is 327680 bytes, more than the \d+ allowed/);
    const linked = await runWithContext('ln -s /etc/hostname "$QLR_OUTPUT"');
    expect(linked.receipt.outputError).toMatch(/symbolic link/);
  });

  it("an edited output fails the receipt's MAC; a receipt written before outputs existed still verifies", async () => {
    const { launcher, stateDir, attemptId, receipt } = await runWithContext(
      'echo \'{"ok":true}\' > "$QLR_OUTPUT"',
    );
    expect(receipt.output).toEqual({ ok: true });
    const receiptFile = join(stateDir, "receipts", `${attemptId}.json`);
    const stored = JSON.parse(await readFile(receiptFile, "utf8")) as Record<string, unknown>;
    await writeFile(receiptFile, JSON.stringify({ ...stored, output: { ok: false } }));
    expect(await launcher.readReceipt(attemptId)).toMatchObject({ status: "invalid" });

    // The legacy shape: no output fields, MAC over the original fields only.
    const { output: _output, outputError: _outputError, mac: _mac, ...legacy } = stored;
    const hmacKey = Uint8Array.from(
      Buffer.from((await readFile(join(stateDir, "receipt.key"), "utf8")).trim(), "hex"),
    );
    const legacyReceipt = { ...legacy, mac: receiptMac(hmacKey, legacy as never) };
    await writeFile(receiptFile, canonicalJson(legacyReceipt));
    expect(await launcher.readReceipt(attemptId)).toMatchObject({ status: "valid" });
  });

  it("the local executor turns the receipt's output into completion facts, and retention discards the task files", async () => {
    const { launcher, stateDir } = await newLauncher(scratch);
    const executor = new LocalProcessExecutor(launcher, {
      logMaxBytes: 1 << 20,
      onStopError: () => undefined,
    });
    const attemptId = newAttemptId();
    const attempt = { id: attemptId } as RunAttempt;
    const definition = {
      execution: {
        executor: "local_process",
        argv: ["sh", "-c", 'echo "[1,2,3]" > "$QLR_OUTPUT"'],
        env: {},
        cwd: null,
        timeoutMs: 60_000,
        stdin: "none",
        shell: false,
      },
    } as never;
    await executor.launch({ attempt, definition, context: contextFor(attemptId) });
    await waitForReceipt(launcher, attemptId);
    const evidence = await executor.readReceipt(attempt);
    expect(evidence).toMatchObject({
      status: "valid",
      facts: { exitCode: 0, output: [1, 2, 3], outputError: null },
    });
    expect(JSON.parse(await readFile(taskNeedsPath(stateDir, attemptId), "utf8"))).toEqual({
      extract: { rows: 7 },
      report: null,
    });
    await executor.discard([attemptId]);
    await expect(access(taskOutputPath(stateDir, attemptId))).rejects.toThrow();
    await expect(access(taskNeedsPath(stateDir, attemptId))).rejects.toThrow();
  });

  it("a symbolic link planted at the output path before the launch is removed, not followed", async () => {
    const { stateDir } = await newLauncher(scratch);
    const attemptId = newAttemptId();
    await prepareTaskEnvironment(stateDir, contextFor(attemptId), {});
    await symlink("/etc/hostname", taskOutputPath(stateDir, attemptId));
    await prepareTaskEnvironment(stateDir, contextFor(attemptId), {});
    await expect(access(taskOutputPath(stateDir, attemptId))).rejects.toThrow();
  });

  it("a step that needs nothing reads {} from one shared file, made again when it is missing", async () => {
    const { stateDir } = await newLauncher(scratch);
    const noNeeds = (attemptId: string): TaskContext => ({ ...contextFor(attemptId), needs: {} });
    const first = newAttemptId();
    const env = await prepareTaskEnvironment(stateDir, noNeeds(first), {});
    expect(env.QLR_NEEDS).toBe(noNeedsPath(stateDir));
    expect(JSON.parse(await readFile(noNeedsPath(stateDir), "utf8"))).toEqual({});
    // No file of its own was made for it.
    await expect(access(taskNeedsPath(stateDir, first))).rejects.toThrow();
    await rm(noNeedsPath(stateDir));
    const second = newAttemptId();
    expect((await prepareTaskEnvironment(stateDir, noNeeds(second), {})).QLR_NEEDS).toBe(
      noNeedsPath(stateDir),
    );
    expect(JSON.parse(await readFile(noNeedsPath(stateDir), "utf8"))).toEqual({});
    // A step with needs still gets its own file.
    const third = newAttemptId();
    expect((await prepareTaskEnvironment(stateDir, contextFor(third), {})).QLR_NEEDS).toBe(
      taskNeedsPath(stateDir, third),
    );
  });

  it("the task files folder is made when missing: at the first launch and after it was removed", async () => {
    const { stateDir } = await newLauncher(scratch);
    const folder = dirname(taskNeedsPath(stateDir, newAttemptId()));
    await rm(folder, { recursive: true, force: true });
    for (const round of [1, 2]) {
      const attemptId = newAttemptId();
      const env = await prepareTaskEnvironment(stateDir, contextFor(attemptId), {});
      expect(env.QLR_NEEDS).toBe(taskNeedsPath(stateDir, attemptId));
      expect(JSON.parse(await readFile(taskNeedsPath(stateDir, attemptId), "utf8"))).toEqual(
        contextFor(attemptId).needs,
      );
      expect((await stat(folder)).mode & 0o777).toBe(0o700);
      if (round === 1) await rm(folder, { recursive: true });
    }
  });
});
