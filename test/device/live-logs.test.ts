/**
 * Live logs against a real `qlr serve`: a step that writes over time (each part released by a
 * gate file the test opens, never by sleeping) is followed by `qlr logs -f` and by the chunk
 * route (`GET …/log?offset=N`), which answers bounded chunks, a next offset, and `finished`
 * only once the attempt ended and its log was read to the end.
 */
import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { useDeviceHarness } from "../support/device-harness.ts";
import { Scratch } from "../support/scratch.ts";
import { childEnv } from "../support/serve-child.ts";
import { chain } from "../support/workflow-shapes.ts";
import { waitFor } from "../support/wait.ts";

const harness = useDeviceHarness();

interface Chunk {
  attemptId: string;
  attemptStatus: string;
  stream: string;
  offset: number;
  nextOffset: number;
  sizeBytes: number;
  text: string;
  finished: boolean;
}

describe("live logs", { timeout: 120_000 }, () => {
  it("qlr logs -f and the chunk route follow a step's output while it runs, until the attempt ends", async () => {
    const script = (dir: Scratch): string =>
      [
        "echo 'line 1'",
        Scratch.untilGate(dir.gate("first")),
        "printf 'line 2 \\342\\234\\223\\n'",
        "echo 'oops' >&2",
        Scratch.untilGate(dir.gate("second")),
        "echo 'line 3'",
      ].join("\n");
    const { dir, served } = await harness.deploy("live-logs", {
      packageName: "live",
      tasks: (dir) => ({ talk: dir.task({ label: "talk", then: script(dir) }) }),
      workflows: { chatty: chain({ talk: "talk" }) },
    });
    const first = dir.gate("first");
    const second = dir.gate("second");
    const run = await served.api.startWorkflow("live", "chatty");
    const chunk = async (query: string): Promise<{ status: number; body: Chunk }> =>
      served.api.call<Chunk>("GET", `/runs/${run.id}/steps/talk/log?${query}`);

    const early = await waitFor(
      "the first line through the chunk route",
      async () => {
        const answer = await chunk("offset=0");
        return answer.status === 200 && answer.body.text.includes("line 1") ? answer.body : null;
      },
      30_000,
    );
    expect(early).toMatchObject({
      stream: "stdout",
      offset: 0,
      finished: false,
      text: "line 1\n",
      nextOffset: 7,
    });
    // The process writes as soon as it exists, possibly before its attempt is recorded running.
    expect(["starting", "running"]).toContain(early.attemptStatus);

    const follower = spawn(
      process.execPath,
      [
        harness.bundle.qlr,
        "logs",
        "-f",
        run.id,
        "talk",
        "--state-dir",
        dir.stateDir,
        "--url",
        served.url,
      ],
      { env: childEnv(), stdio: ["ignore", "pipe", "pipe"] },
    );
    let stdout = "";
    let stderr = "";
    follower.stdout.setEncoding("utf8");
    follower.stderr.setEncoding("utf8");
    follower.stdout.on("data", (data: string) => (stdout += data));
    follower.stderr.on("data", (data: string) => (stderr += data));
    const exited = new Promise<number | null>((resolveExit) =>
      follower.once("exit", (code) => resolveExit(code)),
    );
    try {
      await waitFor("logs -f to print the first line", () => stdout === "line 1\n", 30_000);
      await dir.open(first);
      await waitFor(
        "logs -f to print the second line and the stderr line",
        () => stdout === "line 1\nline 2 ✓\n" && stderr === "oops\n",
        30_000,
      );
      expect(follower.exitCode).toBeNull();
      // From an offset: only what came after it; the check mark is 3 bytes.
      expect((await chunk("offset=7")).body).toMatchObject({
        text: "line 2 ✓\n",
        nextOffset: 7 + Buffer.byteLength("line 2 ✓\n"),
        finished: false,
      });
      expect((await chunk("offset=0&stream=stderr")).body).toMatchObject({
        text: "oops\n",
        finished: false,
      });
      await dir.open(second);
      expect(await exited).toBe(0);
    } finally {
      if (follower.exitCode === null) follower.kill("SIGKILL");
    }
    expect(stdout).toBe("line 1\nline 2 ✓\nline 3\n");
    expect(stderr).toBe("oops\n");

    // Once the attempt ended, a read to the end says finished; a small limit pages without
    // splitting the check mark.
    const whole = (await chunk("offset=0")).body;
    expect(whole).toMatchObject({
      attemptStatus: "succeeded",
      text: "line 1\nline 2 ✓\nline 3\n",
      finished: true,
    });
    const paged = (await chunk("offset=0&limit=1024")).body;
    expect(paged.finished).toBe(true);
    const pinned = (await chunk(`offset=0&attempt=${whole.attemptId}`)).body;
    expect(pinned.text).toBe(whole.text);

    // Bad input: a clear 400 naming the field.
    for (const [query, field] of [
      ["offset=-1", "offset"],
      ["offset=x", "offset"],
      ["offset=0&limit=10", "limit"],
      ["offset=0&limit=99999999", "limit"],
      ["offset=0&stream=both", "stream"],
      ["offset=0&attempt=..", "attempt"],
      ["offset=0&color=1", "color"],
    ] as const) {
      const answer = await served.api.call<{
        error: { code: string; details: { path: string }[] };
      }>("GET", `/runs/${run.id}/steps/talk/log?${query}`);
      expect(answer.status, query).toBe(400);
      expect(answer.body.error.code).toBe("invalid_request");
      expect(answer.body.error.details.map((detail) => detail.path).join(","), query).toContain(
        field,
      );
    }
    expect((await served.api.call("GET", `/runs/${run.id}/steps/nope/log?offset=0`)).status).toBe(
      404,
    );
    // Without an offset the route still answers the whole log as text.
    expect((await served.api.call<string>("GET", `/runs/${run.id}/steps/talk/log`)).body).toBe(
      "line 1\nline 2 ✓\nline 3\n--- stderr ---\noops\n",
    );
  });
});
