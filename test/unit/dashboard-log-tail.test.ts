import { describe, expect, it } from "vitest";
import {
  appendToTail,
  emptyTail,
  LOG_TAIL_CHARS,
  logText,
} from "../../runtimes/browser/shared/log-tail.ts";

describe("the dashboard's live log tail", () => {
  it("appends chunks as they come while they fit", () => {
    const tail = emptyTail();
    appendToTail(tail, "line 1\n");
    appendToTail(tail, "line 2\nline");
    appendToTail(tail, " 3\n");
    expect(tail.text).toBe("line 1\nline 2\nline 3\n");
    expect(tail.trimmedChars).toBe(0);
  });

  it("keeps at most the last LOG_TAIL_CHARS, cut at a line start, and counts what it cut", () => {
    const tail = emptyTail();
    const line = `${"x".repeat(99)}\n`;
    let written = "";
    for (let chunk = 0; chunk < 40; chunk += 1) {
      const text = line.repeat(100);
      written += text;
      appendToTail(tail, text);
      expect(tail.text.length).toBeLessThanOrEqual(LOG_TAIL_CHARS);
    }
    expect(written.length).toBeGreaterThan(LOG_TAIL_CHARS);
    expect(tail.trimmedChars + tail.text.length).toBe(written.length);
    expect(written.endsWith(tail.text)).toBe(true);
    expect(tail.text.startsWith("x")).toBe(true);
    expect(tail.text.length).toBeGreaterThan(LOG_TAIL_CHARS - line.length);
  });

  it("a single line longer than the tail is cut inside the line", () => {
    const tail = emptyTail();
    appendToTail(tail, "y".repeat(LOG_TAIL_CHARS + 5000));
    expect(tail.text.length).toBe(LOG_TAIL_CHARS);
    expect(tail.trimmedChars).toBe(5000);
  });

  it("shows the streams as the whole log answer does: stdout, then the separator and stderr", () => {
    const stdout = emptyTail();
    const stderr = emptyTail();
    appendToTail(stdout, "out without newline");
    expect(logText({ stdout, stderr })).toBe("out without newline");
    appendToTail(stderr, "a warning\n");
    expect(logText({ stdout, stderr })).toBe("out without newline\n--- stderr ---\na warning\n");
    appendToTail(stdout, "\n");
    expect(logText({ stdout, stderr })).toBe("out without newline\n--- stderr ---\na warning\n");
  });
});
