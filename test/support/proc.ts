/** What /proc says about a pid: its state, whether it still runs, waiting until it is gone. */
import { readFile } from "node:fs/promises";
import { waitFor } from "./wait.ts";

/** The state letter of /proc/<pid>/stat (R, S, Z, …), or null when the pid has no entry. */
export async function procState(pid: number): Promise<string | null> {
  try {
    const text = await readFile(`/proc/${pid}/stat`, "utf8");
    const fields = text
      .slice(text.lastIndexOf(")") + 1)
      .trim()
      .split(/\s+/);
    return fields[0] ?? null;
  } catch {
    return null;
  }
}

/** True while the pid exists and is not a zombie. */
export async function isRunning(pid: number): Promise<boolean> {
  const state = await procState(pid);
  return state !== null && state !== "Z" && state !== "X";
}

export async function waitUntilGone(pid: number, timeoutMs = 20_000): Promise<void> {
  await waitFor(
    `pid ${pid} to be gone or a zombie`,
    async () => !(await isRunning(pid)),
    timeoutMs,
  );
}
