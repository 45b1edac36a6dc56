import { Hono } from "hono";
import { PACKAGE_NAME_PATTERN } from "../../../src/identity.ts";
import { parseManifest } from "../../../src/manifest/index.ts";
import { isOversizeManifest, MANIFEST_LIMITS } from "../../../src/manifest/limits.ts";
import { applyPackage } from "../../../src/operations.ts";
import {
  scheduleView,
  taskSummaryView,
  workflowSummaryView,
  type ApplyView,
  type PackageDetailView,
  type PackageList,
} from "../contract.ts";
import { writeTransaction, type AppDeps } from "../deps.ts";
import { fail, mediaType, paramsOf } from "../validation.ts";
import { MAX_LIST_LIMIT } from "./runs.ts";

const YAML_MEDIA_TYPES = new Set(["application/yaml", "application/x-yaml", "text/yaml"]);
/** How many generations of a package one answer lists, newest first. */
const MAX_GENERATIONS_LISTED = 50;

const packageParam = paramsOf((params) => {
  const name = params.name ?? "";
  if (!PACKAGE_NAME_PATTERN.test(name))
    fail("invalid_request", "package name is not valid", [{ path: "name", message: "invalid" }]);
  return { name };
});

/** Packages: apply a manifest (YAML or JSON), list the applied ones, read one with its schedules. */
export function packageRoutes(deps: AppDeps): Hono {
  const { store } = deps;
  return new Hono()
    .post("/packages", async (c) => {
      const contentType = mediaType(c);
      // Decoded from bytes rather than `text()`: some runtimes (workerd) warn when a YAML body is
      // read as text, and a manifest is UTF-8 whatever its media type says.
      const text = new TextDecoder("utf-8").decode(await c.req.arrayBuffer());
      // The body is the manifest: one over the manifest limit is a payload too large, whatever its format.
      if (isOversizeManifest(text))
        fail("payload_too_large", `the manifest exceeds ${MANIFEST_LIMITS.maxManifestBytes} bytes`);
      let result;
      if (YAML_MEDIA_TYPES.has(contentType)) {
        result = parseManifest(text, "yaml");
      } else if (contentType === "application/json" || contentType === "") {
        result = parseManifest(text, "json");
      } else {
        fail(
          "invalid_request",
          `unsupported content-type ${contentType}; use application/json or application/yaml`,
          [{ path: "content-type", message: "unsupported" }],
        );
      }
      if (!result.ok)
        fail(
          "invalid_manifest",
          `the manifest has ${result.issues.length} problem(s)`,
          result.issues,
        );
      const supported = deps.supportedExecutors ?? ["local_process", "remote_worker"];
      const unsupported = result.manifest.tasks.filter(
        (task) => !supported.includes(task.executor),
      );
      if (unsupported.length > 0) {
        fail(
          "invalid_manifest",
          `this runtime cannot run ${unsupported[0]?.executor ?? ""} tasks`,
          unsupported.map((task) => ({
            path: `tasks.${task.name}.executor`,
            message: `${task.executor} is not available here; use one of ${supported.join(", ")}`,
          })),
        );
      }
      // A command notifier runs on the runtime's own host, like a local_process task.
      if (!supported.includes("local_process")) {
        const sections = [
          ...result.manifest.tasks.map((item) => ["tasks", item] as const),
          ...result.manifest.workflows.map((item) => ["workflows", item] as const),
          ...result.manifest.schedules.map((item) => ["schedules", item] as const),
        ];
        const commands = sections.flatMap(([section, item]) =>
          (item.notify ?? []).flatMap((notifier, index) =>
            notifier.kind === "command"
              ? [
                  {
                    path: `${section}.${item.name}.notify[${index}].command`,
                    message:
                      "a command notifier runs only on a device (qlr serve); use a webhook here",
                  },
                ]
              : [],
          ),
        );
        if (commands.length > 0)
          fail("invalid_manifest", "this runtime cannot run command notifiers", commands);
      }
      const manifest = result.manifest;
      const applied = await writeTransaction(deps, (tx, nowMs) =>
        applyPackage(tx, manifest, nowMs),
      );
      return c.json(applied satisfies ApplyView, applied.changed ? 201 : 200);
    })
    .get("/packages", async (c) => {
      const packages = await store.read(async (tx) => tx.listPackageHeads(MAX_LIST_LIMIT));
      return c.json({ packages } satisfies PackageList);
    })
    .get("/packages/:name", packageParam, async (c) => {
      const { name } = c.req.valid("param");
      const found = await store.read(async (tx) => {
        const head = await tx.getPackageHead(name);
        if (head === null) return null;
        const generations = await tx.listGenerations(name, MAX_GENERATIONS_LISTED);
        const current = await tx.getGeneration(name, head.generation);
        const schedules = await tx.getSchedules(name);
        return { head, generations, manifest: current?.manifest ?? null, schedules };
      });
      if (found === null) fail("not_found", `package ${name} is not applied`);
      return c.json({
        package: found.head,
        generations: found.generations,
        workflows: (found.manifest?.workflows ?? []).map(workflowSummaryView),
        tasks: (found.manifest?.tasks ?? []).map(taskSummaryView),
        schedules: found.schedules.map(scheduleView),
      } satisfies PackageDetailView);
    });
}
