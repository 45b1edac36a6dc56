/**
 * A task run as another user (`user:`) keeps the task contract: it reads the outputs it needs
 * from `$QLR_NEEDS` and leaves its own at `$QLR_OUTPUT`, which the run records, while the state
 * dir, the receipt key and every other attempt's needs and outputs stay closed to it. Real
 * processes under a root runtime; skipped, with the reason, when the tests do not run as root.
 */
import { spawnSync } from "node:child_process";
import { rm, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { describe, expect, it, onTestFinished, type TestContext } from "vitest";
import { attemptsOf, stepNamed } from "../support/api-client.ts";
import { useDeviceHarness } from "../support/device-harness.ts";

const device = useDeviceHarness();
const NOBODY_UID = 65534;

function skipUnlessRoot(context: TestContext, why: string): void {
  const uid = process.getuid?.() ?? -1;
  if (uid === 0) return;
  console.log("skipped: %s, and this test runs as uid %d", why, uid);
  context.skip();
}

/** Runs `sh -c script` as nobody and answers what it printed. */
function asNobody(script: string): string {
  const result = spawnSync("sh", ["-c", script], {
    uid: NOBODY_UID,
    gid: NOBODY_UID,
    cwd: "/",
    encoding: "utf8",
  });
  return `${result.stdout}${result.stderr === "" ? "" : "(stderr)"}`;
}

/** A line of sh that prints `READABLE` when the file can be read, `refused` when not. */
function readsAs(path: string): string {
  return `if cat '${path}' >/dev/null 2>&1; then echo READABLE; else echo refused; fi`;
}

describe(
  "a task run as another user reads its needs and leaves its output",
  { timeout: 90_000 },
  () => {
    it("user: steps read $QLR_NEEDS, write $QLR_OUTPUT, and cannot read another attempt's files", async (context) => {
      skipUnlessRoot(context, "`user:` needs the runtime to run as root");
      const { served } = await device.deploy("user-files", {
        packageName: "userfiles",
        tasks: () => ({
          count: { shell: `echo '{"rows":3}' > "$QLR_OUTPUT"`, timeout: "10s" },
          // As nobody: the needs of step count, and its own output naming where its needs were.
          summarize: {
            user: "nobody",
            timeout: "10s",
            shell: [
              `echo "needs=$QLR_NEEDS"`,
              `echo "output=$QLR_OUTPUT"`,
              `if ls "$(dirname "$(dirname "$QLR_NEEDS")")" >/dev/null 2>&1; then echo ROOT-LISTABLE; else echo root-unlistable; fi`,
              `printf '{"needs":%s,"needsPath":"%s","uid":%s}\\n' "$(cat "$QLR_NEEDS")" "$QLR_NEEDS" "$(id -u)" > "$QLR_OUTPUT"`,
            ].join("\n"),
          },
          // As nobody too: tries the needs file of step summarize, whose attempt has ended.
          snoop: {
            user: "nobody",
            timeout: "10s",
            shell: [
              `path=$(sed -n 's/.*"needsPath":"\\([^"]*\\)".*/\\1/p' "$QLR_NEEDS")`,
              `if cat "$path" >/dev/null 2>&1; then seen=READABLE; else seen=refused; fi`,
              `printf '{"found":%s,"other":"%s"}\\n' "$([ -n "$path" ] && echo true || echo false)" "$seen" > "$QLR_OUTPUT"`,
            ].join("\n"),
          },
          // As the runtime's user: what the user: step left reaches the next step as any output.
          collect: { shell: `cat "$QLR_NEEDS" > "$QLR_OUTPUT"`, timeout: "10s" },
        }),
        workflows: {
          flow: {
            steps: {
              count: { task: "count" },
              summarize: { task: "summarize", needs: ["count"] },
              snoop: { task: "snoop", needs: ["summarize"] },
              collect: { task: "collect", needs: ["summarize"] },
            },
          },
        },
      });
      const run = await served.api.startWorkflow("userfiles", "flow");
      const detail = await served.api.waitTerminal(run.id);
      const log = await served.api.call<string>("GET", `/runs/${run.id}/steps/summarize/log`);
      const summarizeLog = String(log.body);
      const needsPath = /^needs=(.*)$/m.exec(summarizeLog)?.[1] ?? "";
      const outputPath = /^output=(.*)$/m.exec(summarizeLog)?.[1] ?? "";
      // The folder of this state dir's user: tasks lives in the temporary folder, not the scratch.
      if (needsPath !== "")
        onTestFinished(() => rm(dirname(dirname(needsPath)), { recursive: true, force: true }));
      expect(detail.run.status, `${JSON.stringify(detail.attempts)}\n${summarizeLog}`).toBe(
        "succeeded",
      );

      expect(summarizeLog).toContain("root-unlistable\n");
      // Outside the state dir, which stays closed to the task's user.
      expect(needsPath.startsWith(served.stateDir)).toBe(false);
      expect(dirname(needsPath)).toBe(dirname(outputPath));

      const summarized = {
        needs: { count: { rows: 3 } },
        needsPath,
        uid: NOBODY_UID,
      };
      expect(stepNamed(detail, "summarize").output).toEqual(summarized);
      expect(attemptsOf(detail, "summarize")[0]?.output).toEqual(summarized);
      expect(stepNamed(detail, "collect").output).toEqual({ summarize: summarized });
      // Another user: task, after that attempt ended, cannot read its needs.
      expect(stepNamed(detail, "snoop").output).toEqual({ found: true, other: "refused" });

      // Once the attempt ended its folder is the runtime's again, closed to every task user.
      const folder = await stat(dirname(needsPath));
      expect(folder.uid).toBe(0);
      expect(folder.mode & 0o777).toBe(0o700);
      expect((await stat(dirname(dirname(needsPath)))).mode & 0o777).toBe(0o711);
      const countAttempt = attemptsOf(detail, "count")[0]?.id ?? "";
      const collectAttempt = attemptsOf(detail, "collect")[0]?.id ?? "";
      expect(
        asNobody(
          [
            readsAs(needsPath),
            readsAs(outputPath),
            readsAs(join(served.stateDir, "outputs", `${collectAttempt}.needs.json`)),
            readsAs(join(served.stateDir, "outputs", `${countAttempt}.output.json`)),
            readsAs(join(served.stateDir, "receipt.key")),
            `if ls '${dirname(dirname(needsPath))}' >/dev/null 2>&1; then echo LISTABLE; else echo refused; fi`,
          ].join("\n"),
        ),
      ).toBe("refused\nrefused\nrefused\nrefused\nrefused\nrefused\n");
    });
  },
);
