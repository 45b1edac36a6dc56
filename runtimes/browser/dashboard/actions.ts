/// <reference lib="dom" />
import { isUnauthorized, type QlrClient } from "../../http/client.ts";
import type { RunStatus } from "../../../src/model.ts";
import { runHref } from "./router.ts";
import { renderTokenForm } from "./shell.ts";
import { describe, RUNS_PAGE, setMessage, state, type Loop, type ViewHandlers } from "./state.ts";

/**
 * What a button or a link does: each action changes the state, then asks the loop it is given
 * to refresh the view. The views get them bound to the loop (`viewHandlers`), never this file.
 */

export async function startRun(
  loop: Loop,
  packageName: string,
  kind: "workflow" | "task",
  name: string,
): Promise<void> {
  if (state.api === null || state.busy) return;
  state.busy = true;
  try {
    const { run } = await state.api.startRun({ package: packageName, [kind]: name });
    setMessage({ kind: "info", text: `Started ${packageName}/${name}: run ${run.id}.` });
    location.hash = runHref(run.id);
  } catch (error) {
    if (isUnauthorized(error)) return renderTokenForm(loop, "rejected");
    setMessage({
      kind: "error",
      text: `Could not start ${packageName}/${name}: ${describe(error)}`,
    });
    await loop.refresh(false);
  } finally {
    state.busy = false;
  }
}

/** A finished run again (same generation and input); `fromFailed` keeps its succeeded steps and their outputs. */
export async function rerunRun(loop: Loop, id: string, fromFailed: boolean): Promise<void> {
  if (state.api === null || state.busy) return;
  state.busy = true;
  try {
    const { run } = await state.api.rerun(id, { fromFailed });
    setMessage({
      kind: "info",
      text: `Rerun of ${id}${fromFailed ? " from its failed steps" : ""}: run ${run.id}.`,
    });
    location.hash = runHref(run.id);
  } catch (error) {
    if (isUnauthorized(error)) return renderTokenForm(loop, "rejected");
    setMessage({ kind: "error", text: `Could not rerun ${id}: ${describe(error)}` });
    await loop.refresh(false);
  } finally {
    state.busy = false;
  }
}

export async function cancelRun(loop: Loop, id: string, button: HTMLButtonElement): Promise<void> {
  if (state.api === null) return;
  button.disabled = true;
  button.textContent = "Cancelling…";
  try {
    await state.api.cancel(id);
    setMessage({
      kind: "info",
      text: `Cancel requested for run ${id}: its processes are being stopped.`,
    });
  } catch (error) {
    if (isUnauthorized(error)) return renderTokenForm(loop, "rejected");
    setMessage({ kind: "error", text: `Could not cancel: ${describe(error)}` });
  }
  await loop.refresh(false);
}

export async function loadMore(
  loop: Loop,
  client: QlrClient,
  status: RunStatus | null,
  cursor: string,
): Promise<void> {
  try {
    const page = await client.listRuns({ status, cursor, limit: RUNS_PAGE });
    const previous =
      state.extraRuns !== null && state.extraRuns.status === status ? state.extraRuns.runs : [];
    state.extraRuns = { status, runs: [...previous, ...page.runs], nextCursor: page.nextCursor };
  } catch (error) {
    setMessage({ kind: "error", text: `Could not load more runs: ${describe(error)}` });
  }
  await loop.refresh(false);
}

export function reloadLog(loop: Loop): void {
  state.logState = null;
  void loop.refresh(false);
}

export function dismissMessage(loop: Loop): void {
  setMessage(null);
  void loop.refresh(false);
}

/** The actions bound to the loop: what refresh.ts hands every view. */
export function viewHandlers(loop: Loop): ViewHandlers {
  return {
    startRun: (packageName, kind, name) => startRun(loop, packageName, kind, name),
    rerunRun: (id, fromFailed) => rerunRun(loop, id, fromFailed),
    cancelRun: (id, button) => cancelRun(loop, id, button),
    loadMore: (client, status, cursor) => loadMore(loop, client, status, cursor),
    reloadLog: () => reloadLog(loop),
    dismissMessage: () => dismissMessage(loop),
  };
}
