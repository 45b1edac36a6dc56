/**
 * Bad input is rejected at the boundary with the contract's status and error body, and with
 * nothing written: every rejection is checked against a dump of every table taken before it.
 * On sql.js and on PGlite.
 *
 * Identity rule for `/runs/:id` routes: a segment that reaches `:id` but is not a portable
 * identity (`%2F`, spaces, a leading dot, over 36 characters, invalid escapes) is
 * `400 invalid_request` with detail path `id`; a path that is not a route at all (`/runs/a/b`,
 * or `..` segments, which URL parsing resolves before the app sees them) is `404 not_found`;
 * a portable id naming no run is `404 not_found`.
 */
import { describe, expect, it } from "vitest";
import { MAX_BODY_BYTES, MAX_LIST_LIMIT } from "../../runtimes/http/app.ts";
import { MANIFEST_LIMITS } from "../../src/manifest/limits.ts";
import { chain, stepLines } from "../support/workflow-shapes.ts";
import {
  STORE_FACTORIES,
  TOKEN,
  WORKER_TOKEN,
  diamondYaml,
  errorOf,
  harnessForBlock,
  yamlManifest,
  type CallOptions,
  type ErrorBody,
  type Harness,
  type RunView,
} from "./support.ts";

const SEED = "seed";
const SEED_KEY = "seed-key";

describe.each(STORE_FACTORIES)("bad input on $name", (factory) => {
  let h: Harness;
  let finished: RunView;
  let live: RunView;

  harnessForBlock(factory, async (opened) => {
    h = opened;
    // Something in every table, so "unchanged" means something.
    finished = (await h.succeededDiamond(SEED, SEED_KEY)).run;
    live = await h.startRun({ package: SEED, task: "work" });
  });

  /** The call must answer `status` with an error body of `code`, and write nothing. */
  async function rejects(
    status: number,
    code: string,
    method: string,
    path: string,
    options: CallOptions = {},
  ): Promise<ErrorBody["error"]> {
    const before = await h.dump();
    const result = await h.call(method, path, options);
    expect(result.status, `${method} ${path}: ${result.text}`).toBe(status);
    expect(result.contentType).toMatch(/^application\/json/);
    const error = errorOf(result);
    expect(error.code).toBe(code);
    expect(await h.dump()).toBe(before);
    return error;
  }

  describe("authentication", () => {
    it.each([
      ["no Authorization header", null],
      ["a wrong token", "Bearer not-the-token"],
      ["Bearer with an empty token", "Bearer "],
      ["Bearer without a space or token", "Bearer"],
      ["the token without the Bearer scheme", TOKEN],
      ["another scheme", `Basic ${TOKEN}`],
      ["the token with trailing text", `Bearer ${TOKEN} extra`],
    ])("%s is 401 unauthorized on every route", async (_label, authorization) => {
      for (const [method, path] of [
        ["POST", "/tick"],
        ["GET", "/packages"],
        ["GET", `/runs/${finished.id}`],
        ["POST", `/runs/${live.id}/cancel`],
        ["GET", "/metrics"],
        ["GET", "/no-such-route"],
      ] as const) {
        const error = await rejects(401, "unauthorized", method, path, { authorization });
        expect(error.details).toEqual([]);
      }
      const apply = await rejects(401, "unauthorized", "POST", "/packages", {
        authorization,
        body: diamondYaml("intruder"),
        contentType: "application/yaml",
      });
      expect(apply.message).toContain("bearer token");
    });

    it("the worker token is 401 on every route outside /worker/, and opens the lease routes", async () => {
      const authorization = `Bearer ${WORKER_TOKEN}`;
      for (const [method, path] of [
        ["POST", "/tick"],
        ["GET", "/packages"],
        ["GET", `/packages/${SEED}`],
        ["GET", "/runs"],
        ["POST", "/runs"],
        ["GET", `/runs/${finished.id}`],
        ["GET", `/runs/${finished.id}/events`],
        ["GET", `/runs/${finished.id}/steps/a/log`],
        ["POST", `/runs/${live.id}/cancel`],
        ["GET", "/recovery"],
        ["GET", "/metrics"],
        ["GET", "/no-such-route"],
        ["GET", "/workers/claim"],
        ["GET", "/worker"],
      ] as const) {
        await rejects(401, "unauthorized", method, path, {
          authorization,
          ...(method === "POST" ? { json: { package: SEED, task: "work" } } : {}),
        });
      }
      await rejects(401, "unauthorized", "POST", "/packages", {
        authorization,
        body: diamondYaml("by-worker"),
        contentType: "application/yaml",
      });
      const claim = await h.call("POST", "/worker/claim", {
        authorization,
        json: { workerId: "w-1", pool: "no-such-pool", capacity: 1 },
      });
      expect(claim.status, claim.text).toBe(200);
      expect(claim.json()).toEqual({ leases: [] });
      // The admin token keeps working on the lease routes.
      expect(
        (
          await h.call("POST", "/worker/claim", {
            json: { workerId: "w-1", pool: "no-such-pool", capacity: 1 },
          })
        ).status,
      ).toBe(200);
    });

    it("GET /healthz needs no token", async () => {
      for (const authorization of [null, "Bearer wrong"]) {
        const result = await h.call("GET", "/healthz", { authorization });
        expect(result.status).toBe(200);
        expect(result.json()).toEqual({ ok: true });
      }
    });
  });

  describe("POST /packages", () => {
    it("malformed JSON is 400 invalid_manifest at $", async () => {
      const error = await rejects(400, "invalid_manifest", "POST", "/packages", {
        body: '{"package": "x", "tasks": ',
        contentType: "application/json",
      });
      expect(error.details).toHaveLength(1);
      expect(error.details[0]?.path).toBe("$");
      expect(error.details[0]?.message).toMatch(/^JSON: /);
    });

    it("malformed YAML is 400 invalid_manifest with the position", async () => {
      const error = await rejects(400, "invalid_manifest", "POST", "/packages", {
        body: "package: x\ntasks: [unclosed\n  - more\n",
        contentType: "application/yaml",
      });
      expect(error.details.length).toBeGreaterThan(0);
      for (const detail of error.details) {
        expect(detail.path).toBe("$");
        expect(detail.message).toMatch(/^YAML: .* at line \d+, column \d+$/);
      }
    });

    it("schema problems are 400 invalid_manifest, one detail per path", async () => {
      const yaml = yamlManifest(
        "schema-problems",
        `tasks:
  hello: { run: [sim, ok], timeout: soon }
  other: { shell: "echo hi", retry: { max: -1 } }
`,
      );
      const error = await rejects(400, "invalid_manifest", "POST", "/packages", {
        body: yaml,
        contentType: "application/yaml",
      });
      expect(error.details.map((detail) => detail.path)).toEqual([
        "tasks.hello.timeout",
        "tasks.other.retry.max",
      ]);
    });

    it("a cyclic DAG is 400 invalid_manifest naming the cycle", async () => {
      // The chain a → b → c, closed by a needing c.
      const loop = chain({ a: "t", b: "t", c: "t" });
      const steps = stepLines({ steps: { ...loop.steps, a: { task: "t", needs: ["c"] } } });
      const yaml = yamlManifest(
        "cyclic",
        `tasks:
  t: { run: [sim, ok] }
workflows:
  loop:
    steps:
${steps}
`,
      );
      const error = await rejects(400, "invalid_manifest", "POST", "/packages", {
        body: yaml,
        contentType: "application/yaml",
      });
      expect(error.details).toEqual([
        { path: "workflows.loop.steps.a.needs", message: "cycle: a → b → c → a" },
      ]);
    });

    it("an unknown step in needs is 400 invalid_manifest", async () => {
      const json = {
        package: "unknown-need",
        tasks: { t: { run: ["sim", "ok"] } },
        workflows: { w: { steps: { a: { task: "t", needs: ["ghost"] } } } },
      };
      const error = await rejects(400, "invalid_manifest", "POST", "/packages", { json });
      expect(error.details).toHaveLength(1);
      expect(error.details[0]?.path).toBe("workflows.w.steps.a.needs[0]");
    });

    it("unknown fields are 400 invalid_manifest, each named by its path", async () => {
      const json = {
        package: "unknown-fields",
        version: 2,
        tasks: { hello: { run: ["sim", "ok"], timout: "30s" } },
      };
      const error = await rejects(400, "invalid_manifest", "POST", "/packages", { json });
      expect(error.details).toEqual([
        { path: "tasks.hello.timout", message: "unknown field" },
        { path: "version", message: "unknown field" },
      ]);
      const yaml = yamlManifest(
        "unknown-fields",
        "tasks:\n  hello: { run: [sim, ok] }\nworkflows:\n  w:\n    stepz: {}\n    steps: { a: { task: hello } }\n",
      );
      const yamlError = await rejects(400, "invalid_manifest", "POST", "/packages", {
        body: yaml,
        contentType: "application/yaml",
      });
      expect(yamlError.details).toEqual([{ path: "workflows.w.stepz", message: "unknown field" }]);
    });

    it("an unsupported content-type is 400 invalid_request", async () => {
      for (const contentType of [
        "text/plain",
        "multipart/form-data; boundary=x",
        "application/x-www-form-urlencoded",
        "application/xml",
      ]) {
        const error = await rejects(400, "invalid_request", "POST", "/packages", {
          body: diamondYaml("wrong-type"),
          contentType,
        });
        expect(error.details).toEqual([{ path: "content-type", message: "unsupported" }]);
      }
    });

    it("an oversize body is 413 payload_too_large, JSON or YAML, with or without content-length", async () => {
      const yaml = `package: huge\n# ${"x".repeat(MAX_BODY_BYTES)}\n`;
      const json = JSON.stringify({ package: "huge", description: "x".repeat(MAX_BODY_BYTES) });
      for (const [body, contentType] of [
        [yaml, "application/yaml"],
        [json, "application/json"],
      ] as const) {
        await rejects(413, "payload_too_large", "POST", "/packages", { body, contentType });
        await rejects(413, "payload_too_large", "POST", "/packages", {
          body,
          contentType,
          headers: { "content-length": String(Buffer.byteLength(body)) },
        });
      }
    });

    it("a manifest over the manifest limit is 413 too; one exactly at the limit is accepted", async () => {
      const prefix = yamlManifest("at-limit", "tasks:\n  hello: { run: [sim, ok] }\n# ");
      const over = `${prefix}${"x".repeat(MANIFEST_LIMITS.maxManifestBytes - prefix.length)}\n`;
      expect(Buffer.byteLength(over)).toBe(MANIFEST_LIMITS.maxManifestBytes + 1);
      expect(Buffer.byteLength(over)).toBeLessThan(MAX_BODY_BYTES);
      const error = await rejects(413, "payload_too_large", "POST", "/packages", {
        body: over,
        contentType: "application/yaml",
      });
      expect(error.message).toContain(String(MANIFEST_LIMITS.maxManifestBytes));
      // A multi-byte character counts by its UTF-8 bytes.
      const overByBytes = `${prefix}${"é".repeat(Math.ceil((MANIFEST_LIMITS.maxManifestBytes - prefix.length) / 2))}\n`;
      expect(Buffer.byteLength(overByBytes)).toBeGreaterThan(MANIFEST_LIMITS.maxManifestBytes);
      expect(overByBytes.length).toBeLessThan(MANIFEST_LIMITS.maxManifestBytes);
      await rejects(413, "payload_too_large", "POST", "/packages", {
        body: overByBytes,
        contentType: "application/yaml",
      });

      const exact = over.slice(0, -2) + "\n";
      expect(Buffer.byteLength(exact)).toBe(MANIFEST_LIMITS.maxManifestBytes);
      const accepted = await h.applyYaml(exact);
      expect(accepted.status, accepted.text).toBe(201);
    });
  });

  describe("POST /runs", () => {
    it("malformed JSON is 400 invalid_request", async () => {
      for (const body of ['{"package": "seed", ', "", "not json", '{"package": "seed"}}']) {
        const error = await rejects(400, "invalid_request", "POST", "/runs", {
          body,
          contentType: "application/json",
        });
        expect(error.details).toEqual([{ path: "$", message: "malformed JSON" }]);
      }
    });

    it("a body that is not a run request is 400 invalid_request with paths", async () => {
      const cases: [unknown, string[]][] = [
        [[], ["$"]],
        [null, ["$"]],
        ["seed", ["$"]],
        [{ workflow: "diamond" }, ["package"]],
        [{ package: "Seed!", workflow: "diamond" }, ["package"]],
        [{ package: SEED }, ["workflow"]],
        [{ package: SEED, workflow: "diamond", task: "work" }, ["workflow"]],
        [{ package: SEED, workflow: "dia mond" }, ["workflow"]],
        [{ package: SEED, task: 7 }, ["task"]],
        [{ package: SEED, workflow: "diamond", idempotencyKey: "" }, ["idempotencyKey"]],
        [
          { package: SEED, workflow: "diamond", idempotencyKey: "k".repeat(129) },
          ["idempotencyKey"],
        ],
        [{ package: SEED, workflow: "diamond", idempotencyKey: "tab\there" }, ["idempotencyKey"]],
      ];
      for (const [json, paths] of cases) {
        const error = await rejects(400, "invalid_request", "POST", "/runs", { json });
        expect(
          [...new Set(error.details.map((detail) => detail.path))],
          JSON.stringify(json),
        ).toEqual(paths);
      }
    });

    it("unknown fields are 400 invalid_request, each named by its path", async () => {
      const error = await rejects(400, "invalid_request", "POST", "/runs", {
        json: { package: SEED, workflow: "diamond", priority: 1, runId: "mine" },
      });
      expect(error.details).toEqual([
        { path: "priority", message: "unknown field" },
        { path: "runId", message: "unknown field" },
      ]);
    });

    it("an unsupported content-type is 400 invalid_request", async () => {
      const body = JSON.stringify({ package: SEED, workflow: "diamond" });
      for (const contentType of [
        "application/yaml",
        "text/plain",
        "application/x-www-form-urlencoded",
      ]) {
        const error = await rejects(400, "invalid_request", "POST", "/runs", { body, contentType });
        expect(error.details).toEqual([{ path: "content-type", message: "unsupported" }]);
      }
    });

    it("an unknown package, workflow or task is 404 not_found", async () => {
      await rejects(404, "not_found", "POST", "/runs", {
        json: { package: "no-such-package", workflow: "diamond" },
      });
      await rejects(404, "not_found", "POST", "/runs", {
        json: { package: SEED, workflow: "nope" },
      });
      await rejects(404, "not_found", "POST", "/runs", { json: { package: SEED, task: "nope" } });
    });

    it("a repeated idempotency key for another target is 409 conflict", async () => {
      await rejects(409, "conflict", "POST", "/runs", {
        json: { package: SEED, task: "work", idempotencyKey: SEED_KEY },
      });
      await rejects(409, "conflict", "POST", "/runs", {
        json: { package: "other", workflow: "diamond", idempotencyKey: SEED_KEY },
      });
    });

    it("an oversize body is 413 payload_too_large", async () => {
      const body = JSON.stringify({
        package: SEED,
        workflow: "diamond",
        idempotencyKey: "x".repeat(MAX_BODY_BYTES),
      });
      await rejects(413, "payload_too_large", "POST", "/runs", {
        body,
        contentType: "application/json",
      });
      await rejects(413, "payload_too_large", "POST", "/runs", {
        body,
        contentType: "application/json",
        headers: { "content-length": String(body.length) },
      });
    });
  });

  describe("run ids in paths", () => {
    const routes = (id: string): [string, string][] => [
      ["GET", `/runs/${id}`],
      ["GET", `/runs/${id}/events`],
      ["POST", `/runs/${id}/cancel`],
      ["GET", `/runs/${id}/steps/a/log`],
    ];

    it.each([
      ["an encoded slash", "a%2Fb"],
      ["an encoded backslash", "a%5Cb"],
      ["a space", "a%20b"],
      ["a NUL", "a%00b"],
      ["a leading dot", ".hidden"],
      ["an encoded leading dot", "%2Ehidden"],
      ["37 characters", "r".repeat(37)],
      ["an invalid escape", "%ZZ"],
      ["non-ASCII", "r%C3%A9"],
    ])("%s is 400 invalid_request on every /runs/:id route", async (_label, id) => {
      for (const [method, path] of routes(id)) {
        const error = await rejects(400, "invalid_request", method, path);
        expect(error.details).toEqual([{ path: "id", message: "not a portable identity" }]);
      }
    });

    it.each([
      ["a slash", "a/b"],
      ["a dot-dot segment", ".."],
      ["an encoded dot-dot segment", "%2e%2e"],
    ])("%s is no route: 404 not_found", async (_label, id) => {
      for (const [method, path] of routes(id)) await rejects(404, "not_found", method, path);
    });

    it("a portable id naming no run is 404 not_found on every route", async () => {
      for (const id of ["no-such-run", "r".repeat(36), "a..b"]) {
        for (const [method, path] of routes(id)) {
          const error = await rejects(404, "not_found", method, path);
          expect(error.message).toContain(id);
        }
      }
    });

    it("a step name that is not a name is 400; an unknown step is 404", async () => {
      const error = await rejects(
        400,
        "invalid_request",
        "GET",
        `/runs/${finished.id}/steps/a%2Fb/log`,
      );
      expect(error.details).toEqual([{ path: "name", message: "invalid" }]);
      await rejects(404, "not_found", "GET", `/runs/${finished.id}/steps/zz/log`);
    });

    it("a package name that is not a name is 400; an unknown package is 404", async () => {
      for (const name of ["Bad%20Name", "UPPER", "p".repeat(33), "a%2Fb"])
        await rejects(400, "invalid_request", "GET", `/packages/${name}`);
      await rejects(404, "not_found", "GET", "/packages/no-such-package");
    });

    it("an unknown route or method is 404 not_found", async () => {
      await rejects(404, "not_found", "GET", "/nope");
      await rejects(404, "not_found", "DELETE", `/runs/${finished.id}`);
      await rejects(404, "not_found", "GET", "/tick");
    });
  });

  describe("query parameters", () => {
    it.each([
      ["limit=0", "limit"],
      ["limit=100000", "limit"],
      [`limit=${MAX_LIST_LIMIT + 1}`, "limit"],
      ["limit=-1", "limit"],
      ["limit=1.5", "limit"],
      ["limit=abc", "limit"],
      ["limit=", "limit"],
      ["status=bogus", "status"],
      ["status=", "status"],
      ["status=RUNNING", "status"],
      ["cursor=a%2Fb", "cursor"],
      ["cursor=", "cursor"],
      ["color=red", "color"],
    ])("GET /runs?%s is 400 invalid_request at %s", async (query, path) => {
      const error = await rejects(400, "invalid_request", "GET", `/runs?${query}`);
      expect(error.details.map((detail) => detail.path)).toEqual([path]);
    });

    it("limits at the bounds are accepted", async () => {
      for (const query of ["limit=1", `limit=${MAX_LIST_LIMIT}`, "status=queued&limit=1"]) {
        expect((await h.call("GET", `/runs?${query}`)).status).toBe(200);
      }
    });

    it.each([
      ["after=-1", "after"],
      ["after=abc", "after"],
      ["after=1.5", "after"],
      ["after=", "after"],
      ["after=%205", "after"],
      ["limit=0", "limit"],
      ["limit=501", "limit"],
      ["since=3", "since"],
    ])("GET /runs/:id/events?%s is 400 invalid_request at %s", async (query, path) => {
      const error = await rejects(
        400,
        "invalid_request",
        "GET",
        `/runs/${finished.id}/events?${query}`,
      );
      expect(error.details.map((detail) => detail.path)).toEqual([path]);
    });
  });
});
