/// <reference lib="dom" />
import { TERMINAL_ATTEMPT_STATUSES } from "../../../src/model.ts";
import { ApiError, isUnauthorized, type QlrClient } from "../../http/client.ts";
import type { LogStream, RunDetail } from "../../http/contract.ts";
import { h, type Child } from "../shared/dom.ts";
import { appendToTail, emptyTail, LOG_TAIL_CHARS, logText } from "../shared/log-tail.ts";
import { describe, state, type LogState } from "./state.ts";

/**
 * The run page's live log: the step's latest attempt, both streams read by byte offset
 * (`GET …/log?offset=N`), each new chunk appended to what the page already has. Only the last
 * `LOG_TAIL_CHARS` of each stream stay in memory (a note offers the whole log as a download),
 * and once the attempt ended and both streams were read to their end no more log requests are
 * made. A new attempt of the step (a retry) starts a new log from offset 0.
 */

/** Chunks read per stream in one refresh: a burst of output is caught up over a few refreshes. */
const MAX_CHUNKS_PER_REFRESH = 4;

let loading: { key: string; done: Promise<void> } | null = null;

/**
 * Brings the log of `step` up to date. Two refreshes never read the same offsets at once: a
 * second caller waits for the read under way, so no chunk is appended twice.
 */
export async function loadLiveLog(
  client: QlrClient,
  detail: RunDetail,
  step: string,
): Promise<void> {
  const key = `${detail.run.id}/${step}`;
  while (loading !== null) {
    const current = loading;
    await current.done;
    if (loading === current) loading = null;
    if (current.key === key) return;
  }
  const done = readNewChunks(client, detail, step, key);
  loading = { key, done };
  try {
    await done;
  } finally {
    if (loading?.done === done) loading = null;
  }
}

async function readNewChunks(
  client: QlrClient,
  detail: RunDetail,
  step: string,
  key: string,
): Promise<void> {
  const stepRunId =
    detail.run.kind === "workflow"
      ? (detail.steps.find((candidate) => candidate.name === step)?.id ?? null)
      : null;
  const attempt =
    detail.run.kind === "workflow" && stepRunId === null
      ? undefined
      : detail.attempts.filter((candidate) => candidate.stepRunId === stepRunId).at(-1);
  if (attempt === undefined) {
    state.logState = {
      key,
      attemptId: null,
      stdout: emptyTail(),
      stderr: emptyTail(),
      note:
        detail.run.kind === "workflow" && stepRunId === null
          ? `This run has no step ${step}.`
          : "No log yet: the step has not started.",
      version: (state.logState?.version ?? 0) + 1,
    };
    return;
  }
  let log = state.logState;
  if (log === null || log.key !== key || log.attemptId !== attempt.id) {
    log = {
      key,
      attemptId: attempt.id,
      stdout: emptyTail(),
      stderr: emptyTail(),
      note: null,
      version: (log?.version ?? 0) + 1,
    };
    state.logState = log;
  }
  const attemptEnded = TERMINAL_ATTEMPT_STATUSES.has(attempt.status);
  for (const stream of ["stdout", "stderr"] as const satisfies readonly LogStream[]) {
    const tail = log[stream];
    for (let read = 0; read < MAX_CHUNKS_PER_REFRESH && !tail.finished; read += 1) {
      let chunk;
      try {
        chunk = await client.logChunk(detail.run.id, step, {
          offset: tail.offset,
          stream,
          attempt: attempt.id,
        });
      } catch (error) {
        if (isUnauthorized(error)) throw error;
        log.note =
          error instanceof ApiError && error.status === 404
            ? `No log: ${error.message}.`
            : `Could not load the log: ${describe(error)}`;
        // A runtime that keeps no logs answers the same every time: stop asking once the attempt ended.
        if (attemptEnded && error instanceof ApiError && error.status === 404) tail.finished = true;
        log.version += 1;
        break;
      }
      if (log.note !== null) {
        log.note = null;
        log.version += 1;
      }
      if (chunk.text !== "") {
        appendToTail(tail, chunk.text);
        log.version += 1;
      }
      tail.offset = chunk.nextOffset;
      if (chunk.finished) {
        tail.finished = true;
        log.version += 1;
      }
      if (chunk.nextOffset >= chunk.sizeBytes) break;
    }
  }
}

/** Whether the log of the attempt on screen is complete: no more log requests will be made. */
export function logFinished(log: LogState | null): boolean {
  return log !== null && log.stdout.finished && log.stderr.finished;
}

/** Downloads the whole log (as the runtime answers it, capped by the runtime) as a text file. */
async function downloadFullLog(runId: string, step: string): Promise<void> {
  if (state.api === null) return;
  try {
    const text = await state.api.log(runId, step);
    const url = URL.createObjectURL(new Blob([text], { type: "text/plain;charset=utf-8" }));
    const link = h("a", { href: url, download: `${runId}-${step}.log`, hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
  } catch (error) {
    if (state.logState !== null) {
      state.logState.note = `Could not download the log: ${describe(error)}`;
      state.logState.version += 1;
    }
  }
}

/** The log's part of the run page: a trimmed-output note when the front was cut, then the text. */
export function renderLiveLog(runId: string, step: string): Child[] {
  const log = state.logState;
  const trimmed = log !== null && (log.stdout.trimmedChars > 0 || log.stderr.trimmedChars > 0);
  const text = log === null ? null : logText(log);
  return [
    trimmed
      ? h(
          "p",
          { class: "muted small", id: "log-trimmed" },
          `Earlier output trimmed: the page keeps the last ${LOG_TAIL_CHARS / 1024} KiB of each stream. `,
          h(
            "button",
            {
              type: "button",
              id: "download-log",
              "data-key": "download-log",
              onclick: () => void downloadFullLog(runId, step),
            },
            "Download full log",
          ),
        )
      : null,
    log?.note === null || log?.note === undefined
      ? null
      : h("p", { class: "empty", id: "log-note" }, log.note),
    text === null || (text === "" && log?.note !== null)
      ? h("p", { class: "empty", id: "log" }, log === null ? "Loading…" : "")
      : h(
          "pre",
          {
            class: "log",
            id: "log",
            tabindex: "0",
            "aria-label": `Log of ${step}`,
            "data-finished": logFinished(log) ? "true" : "false",
          },
          text === "" ? (logFinished(log) ? "(empty)" : "") : text,
        ),
  ];
}
