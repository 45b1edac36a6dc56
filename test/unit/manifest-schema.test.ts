import { describe, expect, it } from "vitest";
import {
  MANIFEST_LIMITS,
  type Manifest,
  type ManifestIssue,
  validateManifest,
} from "../../src/manifest/index.ts";
import { executionForTask, renormalize } from "../../src/packages.ts";

type Document = Record<string, unknown>;

function withTask(task: Record<string, unknown>, extra: Document = {}): Document {
  return { package: "demo", tasks: { hello: task }, ...extra };
}

function accepted(document: unknown): Manifest {
  const result = validateManifest(document);
  if (!result.ok)
    throw new Error(
      `expected the manifest to be accepted, got ${JSON.stringify(result.issues, null, 2)}`,
    );
  return result.manifest;
}

function rejected(document: unknown): ManifestIssue[] {
  const result = validateManifest(document);
  if (result.ok) throw new Error("expected the manifest to be rejected");
  return result.issues;
}

function messageAt(issues: readonly ManifestIssue[], path: string): string {
  const found = issues.filter((issue) => issue.path === path);
  if (found.length === 0)
    throw new Error(`no issue at ${path}; issues: ${JSON.stringify(issues, null, 2)}`);
  return found.map((issue) => issue.message).join(" | ");
}

describe("manifest schema", () => {
  it("a minimal manifest is normalized with every default filled", () => {
    const manifest = accepted(withTask({ run: ["echo", "hi"] }));
    expect(manifest).toEqual({
      package: "demo",
      description: null,
      tasks: [
        {
          name: "hello",
          argv: ["echo", "hi"],
          shell: false,
          timeoutMs: MANIFEST_LIMITS.defaultTimeoutMs,
          env: {},
          cwd: null,
          executor: "local_process",
          pool: null,
          retry: { max: 0, backoffMs: 0, idempotent: false },
        },
      ],
      workflows: [],
      schedules: [],
    });
  });

  it("unknown fields are errors with their path", () => {
    const issues = rejected({
      package: "demo",
      tasks: { hello: { run: ["true"], timout: "5s", retry: { max: 1, backof: "1s" } } },
      extra: 1,
    });
    expect(messageAt(issues, "extra")).toBe("unknown field");
    expect(messageAt(issues, "tasks.hello.timout")).toBe("unknown field");
    expect(messageAt(issues, "tasks.hello.retry.backof")).toBe("unknown field");
  });

  it("a missing package is reported as required", () => {
    expect(messageAt(rejected({ tasks: {} }), "package")).toBe("is required");
  });

  it("a package name must be lower-case portable", () => {
    expect(messageAt(rejected({ package: "Demo" }), "package")).toMatch(/a-z/);
    expect(messageAt(rejected({ package: "-demo" }), "package")).toMatch(/starting with/);
    accepted({ package: "a".repeat(MANIFEST_LIMITS.maxNameLength) });
    rejected({ package: "a".repeat(MANIFEST_LIMITS.maxNameLength + 1) });
  });

  it("resource names are at most MANIFEST_LIMITS.maxNameLength characters of letters, digits, _ and -", () => {
    accepted({
      package: "demo",
      tasks: { ["t".repeat(MANIFEST_LIMITS.maxNameLength)]: { run: ["true"] } },
    });
    const long = "t".repeat(MANIFEST_LIMITS.maxNameLength + 1);
    expect(
      messageAt(
        rejected({ package: "demo", tasks: { [long]: { run: ["true"] } } }),
        `tasks.${long}`,
      ),
    ).toMatch(/1 to 32 characters/);
    expect(
      messageAt(rejected({ package: "demo", tasks: { "a b": { run: ["true"] } } }), 'tasks["a b"]'),
    ).toMatch(/letters, digits/);
  });

  it("a task named __proto__ is rejected instead of silently dropped", () => {
    const issues = rejected(
      JSON.parse('{"package":"demo","tasks":{"__proto__":{"run":["true"]}}}'),
    );
    expect(messageAt(issues, "tasks.__proto__")).toMatch(/reserved/);
  });

  it("a task needs exactly one of run or shell", () => {
    expect(messageAt(rejected(withTask({ timeout: "5s" })), "tasks.hello.run")).toMatch(
      /is required/,
    );
    expect(
      messageAt(rejected(withTask({ run: ["true"], shell: "true" })), "tasks.hello.shell"),
    ).toMatch(/not both/);
  });

  it("shell becomes /bin/sh -c SCRIPT and is recorded as shell", () => {
    const [task] = accepted(withTask({ shell: "echo $HOME | wc -c" })).tasks;
    expect(task?.argv).toEqual(["/bin/sh", "-c", "echo $HOME | wc -c"]);
    expect(task?.shell).toBe(true);
  });

  it("a blank shell script is rejected", () => {
    expect(messageAt(rejected(withTask({ shell: "   " })), "tasks.hello.shell")).toMatch(/blank/);
  });

  it("argv must be a non-empty array of strings whose program is not empty", () => {
    expect(messageAt(rejected(withTask({ run: "echo hi" })), "tasks.hello.run")).toMatch(
      /argv array/,
    );
    expect(messageAt(rejected(withTask({ run: [] })), "tasks.hello.run")).toMatch(/program/);
    expect(messageAt(rejected(withTask({ run: [""] })), "tasks.hello.run[0]")).toMatch(/program/);
    expect(messageAt(rejected(withTask({ run: ["echo", 5] })), "tasks.hello.run[1]")).toMatch(
      /string/,
    );
    expect(accepted(withTask({ run: ["printf", ""] })).tasks[0]?.argv).toEqual(["printf", ""]);
  });

  it("a NUL character in an argument is rejected at its index", () => {
    expect(
      messageAt(rejected(withTask({ run: ["echo", "a\u0000b"] })), "tasks.hello.run[1]"),
    ).toMatch(/NUL/);
  });

  it("a lone surrogate in an argument is rejected", () => {
    expect(
      messageAt(rejected(withTask({ run: ["echo", "\ud800"] })), "tasks.hello.run[1]"),
    ).toMatch(/Unicode/);
  });

  it("argv is bounded in items and in total bytes", () => {
    const tooMany = Array.from({ length: MANIFEST_LIMITS.maxArgvItems + 1 }, () => "x");
    expect(messageAt(rejected(withTask({ run: tooMany })), "tasks.hello.run")).toMatch(
      String(MANIFEST_LIMITS.maxArgvItems),
    );
    const tooBig = ["echo", "x".repeat(MANIFEST_LIMITS.maxArgvBytes)];
    expect(messageAt(rejected(withTask({ run: tooBig })), "tasks.hello.run")).toMatch(/bytes/);
  });

  it("timeout takes milliseconds or a duration string and stays within bounds", () => {
    expect(accepted(withTask({ run: ["true"], timeout: 2500 })).tasks[0]?.timeoutMs).toBe(2500);
    expect(accepted(withTask({ run: ["true"], timeout: "1m30s" })).tasks[0]?.timeoutMs).toBe(
      90_000,
    );
    expect(
      messageAt(rejected(withTask({ run: ["true"], timeout: 50 })), "tasks.hello.timeout"),
    ).toMatch(/between 100ms and 7d/);
    expect(
      messageAt(
        rejected(withTask({ run: ["true"], timeout: MANIFEST_LIMITS.maxTimeoutMs + 1 })),
        "tasks.hello.timeout",
      ),
    ).toMatch(/between/);
    expect(
      messageAt(rejected(withTask({ run: ["true"], timeout: "soon" })), "tasks.hello.timeout"),
    ).toMatch(/30s/);
    expect(
      messageAt(rejected(withTask({ run: ["true"], timeout: true })), "tasks.hello.timeout"),
    ).toMatch(/milliseconds/);
  });

  it("env names must be shell identifiers and values strings without NUL", () => {
    const env = { GOOD_1: "x", "1BAD": "x", "BAD-NAME": "x", NUMBER: 5, NUL: "a\u0000" };
    const issues = rejected(withTask({ run: ["true"], env }));
    expect(messageAt(issues, "tasks.hello.env.1BAD")).toMatch(/variable name/);
    expect(messageAt(issues, "tasks.hello.env.BAD-NAME")).toMatch(/variable name/);
    expect(messageAt(issues, "tasks.hello.env.NUMBER")).toMatch(/quote numbers/);
    expect(messageAt(issues, "tasks.hello.env.NUL")).toMatch(/NUL/);
    expect(issues.some((issue) => issue.path === "tasks.hello.env.GOOD_1")).toBe(false);
  });

  it("env is bounded in entries and normalized in name order", () => {
    const many = Object.fromEntries(
      Array.from({ length: MANIFEST_LIMITS.maxEnvEntries + 1 }, (_, index) => [`V${index}`, "x"]),
    );
    expect(messageAt(rejected(withTask({ run: ["true"], env: many })), "tasks.hello.env")).toMatch(
      String(MANIFEST_LIMITS.maxEnvEntries),
    );
    const env =
      accepted(withTask({ run: ["true"], env: { ZED: "1", ALPHA: "2" } })).tasks[0]?.env ?? {};
    expect(Object.keys(env)).toEqual(["ALPHA", "ZED"]);
  });

  it("remote_worker without pool is rejected", () => {
    expect(
      messageAt(
        rejected(withTask({ run: ["true"], executor: "remote_worker" })),
        "tasks.hello.pool",
      ),
    ).toMatch(/required when executor is remote_worker/);
  });

  it("pool without remote_worker is rejected", () => {
    expect(
      messageAt(rejected(withTask({ run: ["true"], pool: "gpu" })), "tasks.hello.pool"),
    ).toMatch(/only when executor is remote_worker/);
  });

  it("user: a name, a uid or uid:gid on a local task; present in the execution revision only when given", () => {
    for (const user of ["nobody", "backup_1", "65534", "1000:1000"])
      expect(accepted(withTask({ run: ["true"], user })).tasks[0]?.user).toBe(user);
    expect(accepted(withTask({ run: ["true"] })).tasks[0]).not.toHaveProperty("user");
    for (const user of ["", "Root", "a b", "../x", "1000:", ":1000", "x".repeat(33), "1:2:3", 7]) {
      expect(
        messageAt(rejected(withTask({ run: ["true"], user })), "tasks.hello.user"),
        JSON.stringify(user),
      ).toMatch(/user name|uid/);
    }
    expect(
      messageAt(
        rejected(
          withTask({ run: ["true"], executor: "remote_worker", pool: "gpu", user: "nobody" }),
        ),
        "tasks.hello.user",
      ),
    ).toMatch(/local_process/);
    const withUser = executionForTask(
      accepted(withTask({ run: ["true"], user: "nobody" })).tasks[0]!,
    );
    const without = executionForTask(accepted(withTask({ run: ["true"] })).tasks[0]!);
    expect(withUser.revision).toMatchObject({ user: "nobody" });
    expect(without.revision).not.toHaveProperty("user");
    expect(withUser.digest).not.toBe(without.digest);
    // A stored revision re-normalizes to the same digest, user included.
    expect(renormalize(withUser.revision).digest).toBe(withUser.digest);
  });

  it("cwd is rejected on a remote_worker task", () => {
    expect(
      messageAt(
        rejected(withTask({ run: ["true"], executor: "remote_worker", pool: "gpu", cwd: "/tmp" })),
        "tasks.hello.cwd",
      ),
    ).toMatch(/local_process/);
  });

  it("a remote_worker task with a portable pool name is accepted", () => {
    const [task] = accepted(
      withTask({ run: ["true"], executor: "remote_worker", pool: "gpu.eu-1" }),
    ).tasks;
    expect(task?.executor).toBe("remote_worker");
    expect(task?.pool).toBe("gpu.eu-1");
    expect(
      messageAt(
        rejected(withTask({ run: ["true"], executor: "remote_worker", pool: "../etc" })),
        "tasks.hello.pool",
      ),
    ).toMatch(/portable/);
  });

  it("an unknown executor is rejected", () => {
    expect(
      messageAt(rejected(withTask({ run: ["true"], executor: "docker" })), "tasks.hello.executor"),
    ).toMatch(/local_process or remote_worker/);
  });

  it("retry is bounded and normalized to backoffMs", () => {
    const [task] = accepted(
      withTask({ run: ["true"], retry: { max: 2, backoff: "5s", idempotent: true } }),
    ).tasks;
    expect(task?.retry).toEqual({ max: 2, backoffMs: 5000, idempotent: true });
    expect(
      messageAt(
        rejected(withTask({ run: ["true"], retry: { max: MANIFEST_LIMITS.maxRetry + 1 } })),
        "tasks.hello.retry.max",
      ),
    ).toMatch(String(MANIFEST_LIMITS.maxRetry));
    expect(
      messageAt(
        rejected(withTask({ run: ["true"], retry: { max: 1.5 } })),
        "tasks.hello.retry.max",
      ),
    ).toMatch(/whole/);
    expect(
      messageAt(
        rejected(withTask({ run: ["true"], retry: { backoff: "2d" } })),
        "tasks.hello.retry.backoff",
      ),
    ).toMatch(/between/);
  });

  it("too many tasks are rejected with the limit", () => {
    const tasks = Object.fromEntries(
      Array.from({ length: MANIFEST_LIMITS.maxTasksPerPackage + 1 }, (_, index) => [
        `t${index}`,
        { run: ["true"] },
      ]),
    );
    expect(messageAt(rejected({ package: "demo", tasks }), "tasks")).toMatch(
      String(MANIFEST_LIMITS.maxTasksPerPackage),
    );
  });

  it("a workflow needs at least one step", () => {
    expect(
      messageAt(
        rejected({ package: "demo", workflows: { empty: { steps: {} } } }),
        "workflows.empty.steps",
      ),
    ).toMatch(/at least 1 step/);
  });

  it("a description longer than its limit is rejected", () => {
    expect(
      messageAt(rejected({ package: "demo", description: "x".repeat(1025) }), "description"),
    ).toMatch(/1024/);
  });

  it("a schedule is normalized with its defaults: UTC, overlap skip, missed skip, enabled", () => {
    const manifest = accepted(
      withTask({ run: ["true"] }, { schedules: { hourly: { cron: "0 * * * *", task: "hello" } } }),
    );
    const defaults = { timezone: "UTC", overlap: "skip", missed: "skip", enabled: true };
    expect(manifest.schedules).toEqual([
      { name: "hourly", cron: "0 * * * *", target: { kind: "task", name: "hello" }, ...defaults },
    ]);
  });

  it("a cron expression must have five fields, or six with seconds", () => {
    const schedule = (cron: string) =>
      withTask({ run: ["true"] }, { schedules: { s: { cron, task: "hello" } } });
    accepted(schedule("*/10 * * * * *"));
    accepted(schedule("0 3 * * MON-FRI"));
    expect(messageAt(rejected(schedule("0 3 * * * * 2030")), "schedules.s.cron")).toMatch(
      /not a valid cron expression/,
    );
    expect(messageAt(rejected(schedule("0 3 * *")), "schedules.s.cron")).toMatch(
      /not a valid cron expression/,
    );
    expect(messageAt(rejected(schedule("61 * * * *")), "schedules.s.cron")).toMatch(/minute/);
    expect(messageAt(rejected(schedule("2030-01-01T00:00:00")), "schedules.s.cron")).toMatch(
      /not a valid cron expression/,
    );
  });

  it("a cron expression that never fires is rejected", () => {
    const issues = rejected(
      withTask({ run: ["true"] }, { schedules: { never: { cron: "0 0 30 2 *", task: "hello" } } }),
    );
    expect(messageAt(issues, "schedules.never.cron")).toMatch(/never fires/);
  });

  it("an unknown time zone is rejected and a real one accepted", () => {
    const schedule = (timezone: string) =>
      withTask(
        { run: ["true"] },
        { schedules: { s: { cron: "0 3 * * *", timezone, task: "hello" } } },
      );
    expect(accepted(schedule("Europe/Berlin")).schedules[0]?.timezone).toBe("Europe/Berlin");
    expect(messageAt(rejected(schedule("Mars/Olympus_Mons")), "schedules.s.timezone")).toMatch(
      /not a known IANA time zone/,
    );
    expect(messageAt(rejected(schedule("+05:00")), "schedules.s.timezone")).toMatch(
      /IANA time zone name/,
    );
  });

  it("a schedule starts exactly one of a workflow or a task", () => {
    const both = withTask(
      { run: ["true"] },
      {
        workflows: { w: { steps: { a: { task: "hello" } } } },
        schedules: { s: { cron: "0 3 * * *", workflow: "w", task: "hello" } },
      },
    );
    expect(messageAt(rejected(both), "schedules.s.task")).toMatch(/not both/);
    const neither = withTask({ run: ["true"] }, { schedules: { s: { cron: "0 3 * * *" } } });
    expect(messageAt(rejected(neither), "schedules.s.workflow")).toMatch(/is required/);
  });

  it("a schedule naming an unknown workflow or task is rejected", () => {
    const issues = rejected(
      withTask(
        { run: ["true"] },
        {
          schedules: {
            s: { cron: "0 3 * * *", workflow: "missing" },
            t: { cron: "0 3 * * *", task: "gone" },
          },
        },
      ),
    );
    expect(messageAt(issues, "schedules.s.workflow")).toBe('unknown workflow "missing"');
    expect(messageAt(issues, "schedules.t.task")).toBe('unknown task "gone"');
  });

  it("a document that is not a mapping is rejected at $", () => {
    expect(messageAt(rejected([]), "$")).toMatch(/mapping/);
    expect(messageAt(rejected(null), "$")).toMatch(/mapping/);
  });
});
