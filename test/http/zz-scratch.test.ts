import { it } from "vitest";
import { Harness, STORE_FACTORIES, diamondYaml, yamlManifest } from "./support.ts";
import { nextFireAfter } from "../../src/schedules.ts";

it("probe", async () => {
  const h = await Harness.open(STORE_FACTORIES[0]!);
  const t = Date.UTC(2030,0,1);
  console.log("next", nextFireAfter({cron: "*/10 * * * * *", timezone: "UTC"}, t) - t);
  console.log((await h.applyYaml(diamondYaml("demo"))).text);
  for (const p of ["/runs/a%2Fb", "/runs/a%20b", "/runs/..", "/runs/%2e%2e", "/runs/a..b", "/runs/.x", "/runs/" + "x".repeat(37), "/runs/a/b", "/runs/%ZZ", "/runs/a%00b"]) {
    const r = await h.call("GET", p); console.log(p, r.status, r.text);
  }
  const cyc = await h.applyYaml(yamlManifest("cyc", "tasks:\n  t: { run: [sim, ok] }\nworkflows:\n  w:\n    steps:\n      a: { task: t, needs: [b] }\n      b: { task: t, needs: [a] }\n"));
  console.log(cyc.status, cyc.text);
  const bad = await h.applyYaml("package: x\ntasks: [unclosed\n");
  console.log(bad.status, bad.text);
  const r = await h.call("POST", "/runs", { json: { package: "demo", workflow: "diamond", extra: 1, more: 2 } });
  console.log(r.status, r.text);
  const r2 = await h.call("POST", "/runs", { body: "{}" });
  console.log(r2.status, r2.text);
  console.log((await h.call("GET", "/runs?limit=0&status=bogus")).text);
  await h.close();
});
