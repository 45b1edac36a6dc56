/**
 * The runtime's HTTP API views as the tests read them: the contract itself
 * (runtimes/http/contract.ts), declared once for the app, the client, the dashboard and the tests;
 * and a workflow run's view as a test expects or forges it.
 */
import type { RunView } from "../../runtimes/http/contract.ts";

export type * from "../../runtimes/http/contract.ts";

/**
 * A workflow run's view as `POST /runs` first answers it (generation 1, running, nothing
 * finished, cancelled, keyed, scheduled, given or rerun), with `fields` over it.
 */
export function workflowRunView(
  fields: Pick<RunView, "id" | "package" | "target" | "createdAtMs"> & Partial<RunView>,
): RunView {
  return {
    kind: "workflow",
    status: "running",
    generation: 1,
    finishedAtMs: null,
    cancelRequestedAtMs: null,
    cancelReason: null,
    idempotencyKey: null,
    scheduleName: null,
    input: {},
    rerunOf: null,
    ...fields,
  };
}
