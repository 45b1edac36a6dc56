import { describe, expect, it } from "vitest";
import { parseInputOptions } from "../../runtimes/node/cli-commands.ts";

/** `qlr start --input KEY=VALUE`: the command line's own checks, before anything is sent. */
describe("qlr start --input", () => {
  it("splits at the first '=', keeps values as text (the runtime applies declared types) and allows empty values", () => {
    expect(parseInputOptions(["region=eu", "query=a=b", "limit=5", "empty="])).toEqual({
      region: "eu",
      query: "a=b",
      limit: "5",
      empty: "",
    });
    expect(parseInputOptions([])).toEqual({});
  });

  it("refuses a missing '=', an empty or non-portable key and a key given twice", () => {
    expect(() => parseInputOptions(["region"])).toThrow(/KEY=VALUE/);
    expect(() => parseInputOptions(["=eu"])).toThrow(/KEY=VALUE/);
    expect(() => parseInputOptions(["bad-key=1"])).toThrow(/must match/);
    expect(() => parseInputOptions(["a=1", "a=2"])).toThrow(/given twice/);
  });
});
