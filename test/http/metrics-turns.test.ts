import { describe, expect, it } from "vitest";
import { Metrics, type StoreTurnCounts } from "../../runtimes/http/metrics.ts";

const RUNS = {
  queued: 0,
  dispatching: 0,
  running: 0,
  succeeded: 0,
  failed: 0,
  timed_out: 0,
  cancelled: 0,
  lost: 0,
} as const;

describe("GET /metrics and the store's turns", () => {
  it("shows the driver's turns by outcome, read at each scrape", () => {
    let turns: StoreTurnCounts = { granted: 3, waitsRunOut: 1, skipped: 0 };
    const metrics = new Metrics(undefined, () => turns);
    const first = metrics.render(RUNS);
    expect(first).toContain("# TYPE qlr_store_turns_total counter\n");
    expect(first).toContain('\nqlr_store_turns_total{outcome="granted"} 3\n');
    expect(first).toContain('\nqlr_store_turns_total{outcome="wait_ran_out"} 1\n');
    expect(first).toContain('\nqlr_store_turns_total{outcome="skipped"} 0\n');
    turns = { granted: 5, waitsRunOut: 2, skipped: 40 };
    const second = metrics.render(RUNS);
    expect(second).toContain('\nqlr_store_turns_total{outcome="granted"} 5\n');
    expect(second).toContain('\nqlr_store_turns_total{outcome="skipped"} 40\n');
    for (const line of second.trimEnd().split("\n"))
      expect(line).toMatch(
        /^(# (HELP|TYPE) \w+ .+|\w+(\{\w+="[^"]*"(,\w+="[^"]*")*\})? -?[\d.e+-]+)$/,
      );
  });

  it("shows no turns for a store whose driver takes none", () => {
    expect(new Metrics().render(RUNS)).not.toContain("qlr_store_turns_total");
    expect(new Metrics(undefined, () => undefined).render(RUNS)).not.toContain("turns");
  });
});
