import { describe, expect, it } from "vitest";
import { digestOf } from "../../src/digest.ts";
import {
  executionForTask,
  manifestDigest,
  materializePlans,
  nextGeneration,
  normalizeLocalProcess,
  normalizeRemoteWorker,
  reconcileTasks,
  renormalize,
  runtimeTaskId,
  verifyPlan,
  verifyReconciliationReceipt,
  verifyTaskDefinition,
  type ExecutionRevision,
  type TaskDefinition,
} from "../../src/packages.ts";
import { createWorkflowRun } from "../../src/runs.ts";
import { diamondManifest, task } from "../support/fixtures.ts";
import {
  applyManifest,
  definitionOf,
  planOf,
  T0,
  thrownCode,
  twoDiamondGenerations,
} from "./core-fixtures.ts";

/**
 * Generations, task reconciliation, execution revisions and plans (DESIGN.md §3, ADR-0227
 * background and §1): immutable, digest-addressed, and always recomputed rather than trusted.
 */

const localInput = {
  argv: ["sh", "-c", "echo hi"],
  env: { B: "2", A: "1" },
  cwd: "/srv",
  timeoutMs: 30_000,
  shell: false,
};
const remoteInput = {
  pool: "gpu",
  argv: ["run"],
  env: { K: "v" },
  timeoutMs: 10_000,
  shell: false,
};

describe("package generations", () => {
  it("the first apply of a package is generation 1", () => {
    const decision = nextGeneration(null, diamondManifest("demo"), T0);
    expect(decision.changed).toBe(true);
    if (decision.changed) {
      expect(decision.generation.generation).toBe(1);
      expect(decision.generation.manifestDigest).toBe(manifestDigest(diamondManifest("demo")));
      expect(decision.generation.createdAtMs).toBe(T0);
    }
  });

  it("the same manifest digest yields no new generation", () => {
    const head = { generation: 4, manifestDigest: manifestDigest(diamondManifest("demo")) };
    expect(nextGeneration(head, diamondManifest("demo"), T0 + 1)).toEqual({
      changed: false,
      generation: 4,
    });
  });

  it("a changed manifest yields the next generation", () => {
    const head = { generation: 4, manifestDigest: manifestDigest(diamondManifest("demo")) };
    const changed = diamondManifest("demo", { tasks: [task("work", ["false"])] });
    const decision = nextGeneration(head, changed, T0 + 1);
    expect(decision.changed && decision.generation.generation).toBe(5);
  });

  it("the manifest digest is the digest of the canonical manifest, independent of key order", () => {
    const manifest = diamondManifest("demo");
    const reordered = Object.fromEntries(Object.entries(manifest).reverse()) as typeof manifest;
    expect(manifestDigest(reordered)).toBe(manifestDigest(manifest));
    expect(manifestDigest(manifest)).toBe(digestOf(manifest));
  });
});

describe("execution revisions", () => {
  it("normalizers recompute the digest: changing any field changes it", () => {
    const base = normalizeLocalProcess(localInput).digest;
    const variants = [
      { ...localInput, argv: ["sh", "-c", "echo ho"] },
      { ...localInput, env: { ...localInput.env, C: "3" } },
      { ...localInput, env: { A: "1", B: "3" } },
      { ...localInput, cwd: null },
      { ...localInput, timeoutMs: 30_001 },
      { ...localInput, shell: true },
    ];
    const digests = variants.map((variant) => normalizeLocalProcess(variant).digest);
    expect(new Set([base, ...digests]).size).toBe(variants.length + 1);

    const remoteBase = normalizeRemoteWorker(remoteInput).digest;
    const remoteVariants = [
      { ...remoteInput, pool: "cpu" },
      { ...remoteInput, argv: ["run", "x"] },
      { ...remoteInput, env: {} },
      { ...remoteInput, timeoutMs: 1 },
      { ...remoteInput, shell: true },
    ];
    expect(
      new Set([
        remoteBase,
        ...remoteVariants.map((variant) => normalizeRemoteWorker(variant).digest),
      ]).size,
    ).toBe(remoteVariants.length + 1);
  });

  it("a local_process revision is argv, env, cwd, timeout and stdin none; a remote_worker revision names its pool", () => {
    const local = normalizeLocalProcess(localInput);
    expect(local.revision).toEqual({
      executor: "local_process",
      argv: localInput.argv,
      env: { A: "1", B: "2" },
      cwd: "/srv",
      timeoutMs: 30_000,
      stdin: "none",
      shell: false,
    });
    expect(local.digest).toBe(digestOf(local.revision));
    const remote = normalizeRemoteWorker(remoteInput);
    // A remote worker's revision is its input as given, naming its executor.
    expect(remote.revision).toEqual({ executor: "remote_worker", ...remoteInput });
  });

  it("env order does not change an execution digest", () => {
    expect(normalizeLocalProcess({ ...localInput, env: { A: "1", B: "2" } }).digest).toBe(
      normalizeLocalProcess(localInput).digest,
    );
  });

  it("a normalizer drops fields it does not know and never trusts a claimed digest or executor type", () => {
    const claimed = {
      ...localInput,
      digest: "sha256:" + "0".repeat(64),
      executor: "remote_worker",
      stdin: "pipe",
    };
    const normalized = normalizeLocalProcess(claimed);
    expect(normalized.revision).toEqual(normalizeLocalProcess(localInput).revision);
    expect(normalized.digest).toBe(normalizeLocalProcess(localInput).digest);
  });

  it("renormalizing a stored revision reproduces its digest, and a tampered field changes it", () => {
    const local = normalizeLocalProcess(localInput);
    expect(renormalize(local.revision).digest).toBe(local.digest);
    const tampered: ExecutionRevision = { ...local.revision, argv: ["rm", "-rf", "/"] };
    expect(renormalize(tampered).digest).not.toBe(local.digest);
    const remote = normalizeRemoteWorker(remoteInput);
    expect(renormalize(remote.revision).digest).toBe(remote.digest);
  });

  it("a task's executor decides its revision, and a remote_worker task without a pool is an invalid manifest", () => {
    expect(executionForTask(task("t")).revision.executor).toBe("local_process");
    expect(
      executionForTask(task("t", ["x"], { executor: "remote_worker", pool: "p" })).revision
        .executor,
    ).toBe("remote_worker");
    expect(
      thrownCode(() =>
        executionForTask(task("t", ["x"], { executor: "remote_worker", pool: null })),
      ),
    ).toBe("invalid_manifest");
  });
});

describe("task reconciliation", () => {
  it("reconciliation yields pkg:<package>:<task> and qltd:v1:<generation>:<definition digest>", () => {
    const pkg = applyManifest(diamondManifest("demo"));
    const definition = definitionOf(pkg, "work");
    expect(definition.id).toBe("pkg:demo:work");
    expect(runtimeTaskId("demo", "work")).toBe("pkg:demo:work");
    expect(definition.revision).toBe(`qltd:v1:1:${definition.definitionDigest}`);
    expect(definition.definitionDigest).toBe(
      digestOf({
        package: "demo",
        task: "work",
        execution: definition.execution,
        executionDigest: definition.executionDigest,
        retry: definition.retry,
      }),
    );
    expect(verifyTaskDefinition(definition)).toBe(true);
  });

  it("the reconciliation receipt binds generation, package, manifest digest and a lock digest over its items", () => {
    const pkg = applyManifest(
      diamondManifest("demo", { tasks: [task("work"), task("alpha", ["echo"])] }),
    );
    const receipt = pkg.reconciliation.receipt;
    expect(receipt.package).toBe("demo");
    expect(receipt.generation).toBe(1);
    expect(receipt.manifestDigest).toBe(pkg.generation.manifestDigest);
    expect(receipt.items.map((item) => item.task)).toEqual(["alpha", "work"]);
    expect(receipt.lockDigest).toBe(digestOf(receipt.items));
    const { digest, ...body } = receipt;
    expect(digest).toBe(digestOf(body));
    expect(verifyReconciliationReceipt(receipt)).toBe(true);
  });

  it("a tampered reconciliation receipt fails verification", () => {
    const receipt = applyManifest(diamondManifest("demo")).reconciliation.receipt;
    const item = receipt.items[0]!;
    expect(verifyReconciliationReceipt({ ...receipt, generation: 2 })).toBe(false);
    expect(
      verifyReconciliationReceipt({
        ...receipt,
        items: [{ ...item, runtimeTaskRevision: "qltd:v1:9:x" }],
      }),
    ).toBe(false);
    expect(verifyReconciliationReceipt({ ...receipt, lockDigest: digestOf([]) })).toBe(false);
  });

  it("the same task in a later generation keeps its definition digest but gets a new revision", () => {
    const { first, second } = twoDiamondGenerations([task("work"), task("extra")]);
    const a = definitionOf(first, "work");
    const b = definitionOf(second, "work");
    expect(b.definitionDigest).toBe(a.definitionDigest);
    expect(b.revision).not.toBe(a.revision);
    expect(b.revision).toBe(`qltd:v1:2:${a.definitionDigest}`);
  });

  it("verifyTaskDefinition rejects a tampered execution, retry policy, id, executor type or revision", () => {
    const definition = definitionOf(applyManifest(diamondManifest("demo")), "work");
    const tampered: TaskDefinition[] = [
      { ...definition, execution: { ...definition.execution, argv: ["false"] } },
      { ...definition, retry: { ...definition.retry, max: 9 } },
      { ...definition, id: "pkg:other:work" },
      { ...definition, executor: "remote_worker" },
      { ...definition, revision: `qltd:v1:2:${definition.definitionDigest}` },
      { ...definition, executionDigest: digestOf("claimed") },
    ];
    for (const candidate of tampered) expect(verifyTaskDefinition(candidate)).toBe(false);
  });
});

describe("workflow plans", () => {
  it("a plan is bound to its generation and reconciliation", () => {
    const pkg = applyManifest(diamondManifest("demo"));
    const plan = planOf(pkg, "diamond");
    expect(plan.package).toBe("demo");
    expect(plan.generation).toBe(pkg.generation.generation);
    expect(plan.manifestDigest).toBe(pkg.generation.manifestDigest);
    expect(plan.reconciliationDigest).toBe(pkg.reconciliation.receipt.digest);
    const { digest, ...body } = plan;
    expect(digest).toBe(digestOf(body));
    expect(verifyPlan(plan)).toBe(true);
    expect(verifyPlan({ ...plan, generation: 2 })).toBe(false);
  });

  it("plan steps are in topological order with sorted needs and the source task digest of the same generation", () => {
    const pkg = applyManifest(diamondManifest("demo"));
    const plan = planOf(pkg, "diamond");
    expect(plan.steps.map((step) => step.name)).toEqual(["a", "b", "c", "d"]);
    expect(plan.steps.find((step) => step.name === "d")?.needs).toEqual(["b", "c"]);
    for (const step of plan.steps)
      expect(step.sourceTaskDigest).toBe(definitionOf(pkg, step.task).definitionDigest);
  });

  it("the same workflow in a later generation is a different plan", () => {
    const { first, second } = twoDiamondGenerations([task("work"), task("extra")]);
    expect(planOf(second, "diamond").digest).not.toBe(planOf(first, "diamond").digest);
  });

  it("a step naming a task the generation does not reconcile is an invalid manifest", () => {
    const manifest = diamondManifest("demo");
    const broken = {
      ...manifest,
      workflows: [
        { ...manifest.workflows[0]!, steps: [{ name: "a", task: "missing", needs: [] }] },
      ],
    };
    const decision = nextGeneration(null, broken, T0);
    if (!decision.changed) throw new Error("a first apply always changes");
    expect(
      thrownCode(() => materializePlans(decision.generation, reconcileTasks(decision.generation))),
    ).toBe("invalid_manifest");
  });

  it("a workflow run is refused a plan and reconciliation receipt of different generations", () => {
    const { first, second } = twoDiamondGenerations([task("work"), task("extra")]);
    expect(
      thrownCode(() =>
        createWorkflowRun(planOf(first, "diamond"), second.reconciliation.receipt, {
          runId: "run-1",
          nowMs: T0 + 2,
          idempotencyKey: null,
          scheduleName: null,
        }),
      ),
    ).toBe("integrity");
  });
});
