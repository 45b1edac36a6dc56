/**
 * `qlr start PKG/WF --input k=v` and `qlr rerun RUN --from-failed` through the real CLI against
 * a real `qlr serve` with real processes, on the state dir's SQLite file and on PostgreSQL.
 * Every task appends `<step> <pid>` to the scratch's marker file when it starts and writes the
 * environment it was given to a file named after its run and step, so what ran, how often and
 * with what is read from what the processes left, never from timing.
 */
import { readFile, writeFile } from "node:fs/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RunView } from "../../runtimes/http/contract.ts";
import { attemptsOf, stepNamed, type Api } from "../support/api-client.ts";
import { runCli, type CliResult } from "../support/cli-runner.ts";
import { useDeviceHarness } from "../support/device-harness.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import type { Scratch } from "../support/scratch.ts";
import type { Served } from "../support/serve-child.ts";

const device = useDeviceHarness();

/** The variables a task writes down, one `NAME=value` line each. */
const RECORDED = [
  "QLR_INPUT_region",
  "QLR_INPUT_limit",
  "QLR_INPUT_dry",
  "QLR_INPUTS",
  "QLR_RUN_ID",
  "QLR_STEP",
  "QLR_PACKAGE",
  "QLR_GENERATION",
  "QLR_ATTEMPT_ID",
  "QLR_ATTEMPT_NUMBER",
];

/** A task that records its spawn and environment, then runs `then`. */
function recordingTask(dir: Scratch, label: string, then = "exit 0"): Record<string, unknown> {
  const base = dir.task({ label, then: "" }) as { shell: string; env: Record<string, string> };
  const record = `printf '%s\\n' ${RECORDED.map((name) => `"${name}=$${name}"`).join(" ")} > "$ENV_DIR/$QLR_RUN_ID.$QLR_STEP"`;
  return {
    ...base,
    shell: `${base.shell}${record}\n${then}\n`,
    env: { ...base.env, ENV_DIR: dir.root },
    timeout: "60s",
  };
}

async function recordedEnv(
  dir: Scratch,
  runId: string,
  step: string,
): Promise<Map<string, string>> {
  const text = await readFile(dir.path(`${runId}.${step}`), "utf8");
  return new Map(
    text
      .split("\n")
      .filter((line) => line.length > 0)
      .map((line) => {
        const equals = line.indexOf("=");
        return [line.slice(0, equals), line.slice(equals + 1)] as [string, string];
      }),
  );
}

async function runIds(api: Api): Promise<string[]> {
  const answer = await api.call<{ runs: RunView[]; nextCursor: string | null }>(
    "GET",
    "runs?limit=200",
  );
  expect(answer.status).toBe(200);
  expect(answer.body.nextCursor).toBeNull();
  return answer.body.runs.map((run) => run.id);
}

for (const store of ["sqlite", "postgres"] as const) {
  describe(`qlr start --input and qlr rerun --from-failed on ${store}`, () => {
    let database: TestDatabase | null = null;
    beforeAll(async () => {
      if (store === "postgres") database = await createTestDatabase();
    });
    afterAll(async () => {
      await database?.drop();
    });

    it(
      "steps see their input and context, defaults apply, bad input makes no run, and the rerun runs only the failed steps",
      { timeout: 180_000 },
      async () => {
        const dir = await device.scratch(`inputs-${store}`);
        const fixed = dir.path("fixed");
        const { text } = await dir.manifest(
          "io",
          {
            extract: recordingTask(dir, "extract"),
            load: recordingTask(
              dir,
              "load",
              `[ -e '${fixed}' ] || { echo "the target is not ready" >&2; exit 3; }`,
            ),
            publish: recordingTask(dir, "publish"),
          },
          {
            pipeline: {
              inputs: {
                region: { type: "string", required: true },
                limit: { type: "number", default: 10 },
                dry: { type: "boolean", default: false },
              },
              steps: {
                extract: { task: "extract" },
                load: { task: "load", needs: ["extract"] },
                publish: { task: "publish", needs: ["load"] },
              },
            },
          },
        );
        const served: Served = await device.serve(dir, {
          ...(store === "postgres"
            ? { store: "postgres", databaseUrl: database?.url ?? "" }
            : { store: "sqlite" }),
        });
        const qlr = (...args: string[]): Promise<CliResult> =>
          runCli(device.bundle, [...args, "--state-dir", dir.stateDir, "--url", served.url]);
        await served.api.apply(text);

        // Start with two of the three inputs: `limit` takes its declared default, `dry` is typed.
        const started = await qlr(
          "start",
          "io/pipeline",
          "--input",
          "region=eu-west",
          "--input",
          "dry=true",
          "--json",
        );
        expect(started.code, started.stderr).toBe(0);
        const first = (JSON.parse(started.stdout) as { run: RunView }).run;
        expect(first.input).toEqual({ region: "eu-west", limit: 10, dry: true });
        const failed = await served.api.waitTerminal(first.id, 60_000);
        expect(failed.run.status).toBe("failed");
        expect(
          failed.steps.map((step) => [step.name, step.status]),
          JSON.stringify(failed.attempts),
        ).toEqual([
          ["extract", "succeeded"],
          ["load", "failed"],
          ["publish", "skipped"],
        ]);
        const extractAttempt = attemptsOf(failed, "extract")[0];
        expect(Object.fromEntries(await recordedEnv(dir, first.id, "extract"))).toEqual({
          QLR_INPUT_region: "eu-west",
          QLR_INPUT_limit: "10",
          QLR_INPUT_dry: "true",
          QLR_INPUTS: '{"dry":true,"limit":10,"region":"eu-west"}',
          QLR_RUN_ID: first.id,
          QLR_STEP: "extract",
          QLR_PACKAGE: "io",
          QLR_GENERATION: "1",
          QLR_ATTEMPT_ID: extractAttempt?.id,
          QLR_ATTEMPT_NUMBER: String(extractAttempt?.number),
        });
        expect((await recordedEnv(dir, first.id, "load")).get("QLR_STEP")).toBe("load");
        const status = await qlr("status", first.id);
        expect(status.code).toBe(0);
        expect(status.stdout).toContain('input {"dry":true,"limit":10,"region":"eu-west"}');

        // Bad input: a clear error naming each key, exit 2, and no run made or process spawned.
        const runsBefore = await runIds(served.api);
        const spawnsBefore = await dir.spawns();
        for (const [args, problems] of [
          [["--input", "limit=5"], ["input.region"]],
          [
            ["--input", "region=eu", "--input", "limit=many"],
            ["input.limit", "a number"],
          ],
          [["--input", "region=eu", "--input", "extra=1"], ["input.extra"]],
        ] as const) {
          const refused = await qlr("start", "io/pipeline", ...args);
          expect(refused.code, refused.stdout).toBe(2);
          expect(refused.stderr).toMatch(/^invalid_request: /);
          for (const problem of problems) expect(refused.stderr).toContain(problem);
        }
        const usage = await qlr("start", "io/pipeline", "--input", "region");
        expect(usage.code).toBe(64);
        expect(usage.stderr).toContain("--input expects KEY=VALUE");
        expect(await runIds(served.api)).toEqual(runsBefore);
        expect(await dir.spawns()).toEqual(spawnsBefore);

        // Rerun from the failed step once the cause is fixed: extract is reused, never spawned again.
        await writeFile(fixed, "");
        const rerun = await qlr("rerun", first.id, "--from-failed", "--wait");
        expect(rerun.code, rerun.stderr).toBe(0);
        const rerunId = /^run (\S+) started \(rerun of /m.exec(rerun.stdout)?.[1] ?? "";
        expect(rerun.stdout).toContain(`rerun of ${first.id}`);
        const second = await served.api.run(rerunId);
        expect(second.run).toMatchObject({
          status: "succeeded",
          rerunOf: first.id,
          generation: 1,
          input: first.input,
        });
        expect(second.steps.map((step) => [step.name, step.status])).toEqual([
          ["extract", "succeeded"],
          ["load", "succeeded"],
          ["publish", "succeeded"],
        ]);
        expect(attemptsOf(second, "extract")).toEqual([]);
        expect(stepNamed(second, "extract").attemptCount).toBe(0);
        const spawned = (await dir.spawns()).map((spawn) => spawn.label);
        expect(spawned.filter((label) => label === "extract")).toHaveLength(1);
        expect(spawned.filter((label) => label === "load")).toHaveLength(2);
        expect(spawned.filter((label) => label === "publish")).toHaveLength(1);
        // The rerun's steps see the same input under the new run's id.
        const loadEnv = await recordedEnv(dir, rerunId, "load");
        expect(loadEnv.get("QLR_RUN_ID")).toBe(rerunId);
        expect(loadEnv.get("QLR_INPUT_region")).toBe("eu-west");
        expect(loadEnv.get("QLR_INPUT_limit")).toBe("10");
        const rerunStatus = await qlr("status", rerunId);
        expect(rerunStatus.stdout).toContain(`rerun of ${first.id}`);
        // The old run is as it was.
        expect((await served.api.run(first.id)).run.status).toBe("failed");
      },
    );
  });
}
