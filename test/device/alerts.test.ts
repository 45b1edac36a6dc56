/**
 * Alerts end to end against a real `qlr serve` and a real HTTP receiver on 127.0.0.1: a task
 * that fails sends a signed webhook with an idempotency key (retried with backoff after a
 * 503) and runs a command notifier with the alert on stdin; `GET /notifications` and
 * `qlr notifications` show the delivery. A SIGKILL right after the failing transition
 * commits (before any delivery) loses nothing: the restarted runtime delivers it, once.
 */
import { createHmac } from "node:crypto";
import { createServer, type Server } from "node:http";
import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { runCli } from "../support/cli-runner.ts";
import { useDeviceHarness } from "../support/device-harness.ts";
import type { Scratch } from "../support/scratch.ts";
import { waitFor } from "../support/wait.ts";
import type { Api } from "../support/api-client.ts";

interface Received {
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: string;
  readonly answered: number;
}

interface Receiver {
  readonly url: string;
  readonly received: Received[];
  close(): Promise<void>;
}

/** A webhook receiver that answers each request with the next status of `answers` (then 200). */
async function startReceiver(answers: number[]): Promise<Receiver> {
  const received: Received[] = [];
  const server: Server = createServer((request, response) => {
    let body = "";
    request.setEncoding("utf8");
    request.on("data", (chunk: string) => (body += chunk));
    request.on("end", () => {
      const status = answers.shift() ?? 200;
      received.push({ headers: request.headers, body, answered: status });
      response.writeHead(status).end();
    });
  });
  await new Promise<void>((resolveListen) => server.listen(0, "127.0.0.1", resolveListen));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    received,
    close: () => new Promise((resolveClose) => server.close(() => resolveClose())),
  };
}

const receivers: Receiver[] = [];

const device = useDeviceHarness({
  beforeCleanup: async () => {
    for (const receiver of receivers.splice(0)) await receiver.close();
  },
});

const SECRET = "alert-secret-0123456789";

interface NotificationView {
  id: string;
  runId: string;
  event: string;
  state: string;
  attempts: number;
  notifier: { kind: string; url?: string; signed?: boolean; secret?: string };
}

async function notificationsOf(api: Api, runId: string): Promise<NotificationView[]> {
  const answer = await api.call<{ notifications: NotificationView[] }>(
    "GET",
    `/notifications?run=${runId}`,
  );
  expect(answer.status).toBe(200);
  return answer.body.notifications;
}

/** Waits until the run has `count` notifications, every one delivered, and answers them. */
function waitDelivered(api: Api, runId: string, count: number): Promise<NotificationView[]> {
  return waitFor(
    `${count} notification(s) of run ${runId} to be delivered`,
    async () => {
      const entries = await notificationsOf(api, runId);
      return entries.length === count && entries.every((entry) => entry.state === "delivered")
        ? entries
        : null;
    },
    60_000,
  );
}

/** Starts a run of a task or a workflow through POST /runs and answers its id. */
async function postRun(
  api: Api,
  target: { package: string; task: string } | { package: string; workflow: string },
): Promise<string> {
  const answer = await api.call<{ run: { id: string } }>("POST", "/runs", {
    text: JSON.stringify(target),
    contentType: "application/json",
  });
  expect(answer.status).toBe(201);
  return answer.body.run.id;
}

describe("alerts", { timeout: 120_000 }, () => {
  it("a failed run sends a signed webhook with an idempotency key, retried after a 503, and runs a command notifier", async () => {
    const receiver = await startReceiver([503]);
    receivers.push(receiver);
    const alertFileOf = (dir: Scratch): string => dir.path("alert.json");
    const { dir, served } = await device.deploy("alerts", {
      tasks: (dir) => ({
        boom: {
          ...dir.task({ label: "boom", then: "echo failing; exit 3" }),
          notify: [
            { webhook: receiver.url, secret: SECRET },
            {
              command: [
                "sh",
                "-c",
                `cat > '${alertFileOf(dir)}'; echo "$QLR_EVENT $QLR_RUN_ID" >> '${alertFileOf(dir)}.env'`,
              ],
            },
          ],
        },
        fine: { ...dir.task({ label: "fine" }), notify: { webhook: receiver.url } },
      }),
      workflows: {},
    });
    const alertFile = alertFileOf(dir);

    // A run that succeeds alerts nobody.
    const fineRun = await postRun(served.api, { package: "alerts", task: "fine" });
    await waitFor(
      "the fine run to succeed",
      async () => (await served.api.run(fineRun)).run.status === "succeeded",
      30_000,
    );

    const runId = await postRun(served.api, { package: "alerts", task: "boom" });
    await waitFor(
      "the run to fail",
      async () => (await served.api.run(runId)).run.status === "failed",
      30_000,
    );
    // Both notifiers delivered.
    const delivered = await waitDelivered(served.api, runId, 2);
    const webhook = delivered.find((entry) => entry.notifier.kind === "webhook");
    expect(webhook).toMatchObject({
      event: "run.failed",
      attempts: 2,
      notifier: { kind: "webhook", url: receiver.url, signed: true },
    });
    // The secret never leaves the store.
    expect(JSON.stringify(delivered)).not.toContain(SECRET);

    // Two requests for the one event: the 503, then the retry; same body, same idempotency key.
    expect(receiver.received.map((request) => request.answered)).toEqual([503, 200]);
    const [first, second] = receiver.received;
    expect(first?.headers["idempotency-key"]).toBe(webhook?.id);
    expect(second?.headers["idempotency-key"]).toBe(webhook?.id);
    expect(second?.body).toBe(first?.body);
    const payload = JSON.parse(second?.body ?? "{}") as {
      id: string;
      event: string;
      run: { id: string; status: string; target: string };
    };
    expect(payload).toMatchObject({
      id: webhook?.id,
      event: "run.failed",
      run: { id: runId, status: "failed", target: "boom" },
    });
    expect(second?.headers["x-qlr-signature"]).toBe(
      `sha256=${createHmac("sha256", SECRET)
        .update(second?.body ?? "")
        .digest("hex")}`,
    );

    // The command notifier got the same alert (under its own entry id) on stdin, and its variables.
    const command = delivered.find((entry) => entry.notifier.kind === "command");
    expect(command?.attempts).toBe(1);
    expect(JSON.parse(await readFile(alertFile, "utf8"))).toEqual({
      ...payload,
      id: command?.id,
    });
    expect((await readFile(`${alertFile}.env`, "utf8")).trim()).toBe(`run.failed ${runId}`);

    // The CLI shows the deliveries.
    const listed = await runCli(device.bundle, [
      "notifications",
      "--run",
      runId,
      ...served.cliTarget,
    ]);
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain(
      `delivered run.failed     run ${runId}  ${receiver.url}  attempts 2`,
    );
    const bad = await runCli(device.bundle, [
      "notifications",
      "--state",
      "lost",
      ...served.cliTarget,
    ]);
    expect(bad.code).toBe(64);
    const badQuery = await served.api.call<{ error: { code: string } }>(
      "GET",
      "/notifications?state=lost",
    );
    expect(badQuery).toMatchObject({ status: 400, body: { error: { code: "invalid_request" } } });
  });

  it("a SIGKILL right after the failing transition commits loses no alert: the restarted runtime delivers it once", async () => {
    const receiver = await startReceiver([]);
    receivers.push(receiver);
    const { dir, served: first } = await device.deploy("alerts-crash", {
      packageName: "crash",
      tasks: (dir) => ({
        boom: {
          ...dir.task({ label: "boom", then: "exit 7" }),
          notify: { webhook: receiver.url },
        },
      }),
      workflows: {},
      serve: { fault: "completion.after_commit" },
    });
    const runId = await postRun(first.api, { package: "crash", task: "boom" });
    expect(await first.exited).toEqual({ code: null, signal: "SIGKILL" });
    expect(receiver.received).toEqual([]);

    const second = await device.serve(dir);
    // The alert is delivered after the restart.
    const entries = await waitDelivered(second.api, runId, 1);
    expect((await second.api.run(runId)).run.status).toBe("failed");
    expect(entries[0]?.attempts).toBe(1);
    expect(receiver.received).toHaveLength(1);
    expect(receiver.received[0]?.headers["idempotency-key"]).toBe(entries[0]?.id);
  });
  it("a workflow step that fails fires its task's command notifier (step event) and the workflow's own (run event); qlr status lists both", async () => {
    const dir = await device.scratch("step-alerts");
    const taskAlerts = dir.path("task-alerts");
    const runAlerts = dir.path("run-alerts");
    const record = (file: string) => ({
      command: ["sh", "-c", `{ cat; echo; echo "$QLR_EVENT $QLR_STEP"; } >> '${file}'`],
    });
    const { text } = await dir.manifest(
      "steps",
      {
        fine: { ...dir.task({ label: "fine" }), notify: record(taskAlerts) },
        boom: { ...dir.task({ label: "boom", then: "exit 4" }), notify: record(taskAlerts) },
      },
      {
        pipeline: {
          steps: { first: { task: "fine" }, second: { task: "boom", needs: ["first"] } },
          notify: record(runAlerts),
        },
      },
    );
    const served = await device.serve(dir);
    await served.api.apply(text);
    const runId = await postRun(served.api, { package: "steps", workflow: "pipeline" });
    // The step's and the run's alerts delivered.
    const delivered = await waitDelivered(served.api, runId, 2);
    expect((await served.api.run(runId)).run.status).toBe("failed");
    expect(delivered.map((entry) => entry.event).sort()).toEqual(["run.failed", "step.failed"]);
    // The task's notifier heard once, of the failed step only (the succeeded one is silent).
    const taskLines = (await readFile(taskAlerts, "utf8")).trim().split("\n");
    expect(taskLines).toHaveLength(2);
    expect(JSON.parse(taskLines[0] ?? "{}")).toMatchObject({
      event: "step.failed",
      run: { id: runId, target: "pipeline" },
      step: { name: "second", task: "boom", status: "failed" },
    });
    expect(taskLines[1]).toBe("step.failed second");
    const runLines = (await readFile(runAlerts, "utf8")).trim().split("\n");
    expect(runLines).toHaveLength(2);
    expect(JSON.parse(runLines[0] ?? "{}")).toMatchObject({
      event: "run.failed",
      run: { id: runId, status: "failed" },
    });
    expect(runLines[1]).toBe("run.failed");

    // qlr status shows the run's notifications, sent, with their attempts.
    const status = await runCli(device.bundle, ["status", runId, ...served.cliTarget]);
    expect(status.code).toBe(0);
    expect(status.stdout).toContain("  notifications");
    expect(status.stdout).toMatch(/step\.failed step second {2}sh -c .* {2}sent .* {2}attempts 1/);
    expect(status.stdout).toMatch(/run\.failed {2}sh -c .* {2}sent .* {2}attempts 1/);
    const json = await runCli(device.bundle, ["status", runId, "--json", ...served.cliTarget]);
    expect(
      (
        JSON.parse(json.stdout) as { notifications: { event: string; step: string | null }[] }
      ).notifications
        .map((entry) => [entry.event, entry.step])
        .sort(),
    ).toEqual([
      ["run.failed", null],
      ["step.failed", "second"],
    ]);
  });
});
