import { parseArgs } from "node:util";
import type { CommonConfig } from "./config.ts";

/** The `qlr` command line: its usage text, its options, and what a command's handler is given. */

export const USAGE = `qlr — durable workflows and tasks

Usage:
  qlr serve [--apply FILE]...        run the runtime: store, cadence, launcher, HTTP API
            [--tick-interval D]      cadence interval when nothing wakes it (QLR_TICK_INTERVAL;
                                     default per profile: edge 1s, standalone 500ms, cluster 250ms)
            [--max-running N]        live local tasks at once; more wait as ready (QLR_MAX_RUNNING;
                                     default per profile: edge 4, standalone 32, cluster 128)
            [--retention D]          purge runs that ended longer ago (QLR_RETENTION, default 7d)
            [--retention-runs N]     keep at most N ended runs (QLR_RETENTION_RUNS, default 10000)
  qlr apply FILE                     apply a package manifest (YAML or JSON)
  qlr start PACKAGE/NAME [--wait]    start a workflow (or a task) run; --wait follows it
            [--input KEY=VALUE]...   the run's input (checked against the workflow's inputs:)
  qlr rerun RUN [--from-failed] [--wait]
                                     run a finished run again (same generation and input);
                                     --from-failed reuses its succeeded steps and their outputs
  qlr cancel RUN                     cancel a run (stops its processes)
  qlr resolve ATTEMPT --as lost --reason TEXT
                                     settle an attempt that failed closed, after checking
                                     its process is gone (its step fails, never re-run)
  qlr runs [--status S]              list runs, newest first
  qlr status RUN                     a run with its steps and attempts
  qlr logs RUN STEP [-f]             the latest attempt log of a step; -f follows it live
                                     until the attempt ends
  qlr notifications [--run RUN] [--state pending|delivered|failed]
                                     alerts sent for failed, timed-out and lost runs
  qlr tick                           run one cadence cycle now
  qlr worker --coordinator URL --pool P [--capacity N] [--insecure]
                                     run remote_worker tasks leased from a coordinator
            [--poll-interval D]      how often it asks for work (QLR_POLL_INTERVAL, default 1s);
                                     a task's exit and a reported completion wake it sooner

Options:
  --state-dir DIR   (QLR_STATE_DIR, default ./.qlr)     --port N (QLR_PORT, default 8787)
  --host H          (default 127.0.0.1)                  --url URL of a running runtime
  --token-file PATH the admin token (else QLR_TOKEN, else the state dir's token file)
  --worker-token-file PATH
                    the token remote workers use, valid on /worker/* only (else QLR_WORKER_TOKEN)
  --token T, --worker-token T
                    the same on the command line: every local user can read it there
  --profile edge|standalone|cluster                      --store sqlite|pglite|postgres
  --database-url URL (QLR_DATABASE_URL)                  --json machine-readable output
  --insecure        qlr worker: allow plain http to a coordinator that is not on loopback
`;

const OPTIONS = {
  "state-dir": { type: "string" },
  port: { type: "string" },
  host: { type: "string" },
  token: { type: "string" },
  "token-file": { type: "string" },
  "worker-token": { type: "string" },
  "worker-token-file": { type: "string" },
  insecure: { type: "boolean" },
  profile: { type: "string" },
  store: { type: "string" },
  "database-url": { type: "string" },
  url: { type: "string" },
  apply: { type: "string", multiple: true },
  "tick-interval": { type: "string" },
  "max-running": { type: "string" },
  as: { type: "string" },
  reason: { type: "string" },
  wait: { type: "boolean" },
  status: { type: "string" },
  limit: { type: "string" },
  "idempotency-key": { type: "string" },
  input: { type: "string", multiple: true },
  "from-failed": { type: "boolean" },
  json: { type: "boolean" },
  coordinator: { type: "string" },
  pool: { type: "string" },
  capacity: { type: "string" },
  "poll-interval": { type: "string" },
  retention: { type: "string" },
  "retention-runs": { type: "string" },
  follow: { type: "boolean", short: "f" },
  run: { type: "string" },
  state: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

/** The command line parsed strictly: an unknown option or a missing value throws. */
export function parseCommandLine(argv: readonly string[]) {
  return parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: true, strict: true });
}

export type CommandLineValues = ReturnType<typeof parseCommandLine>["values"];

/** What each command is handed: the common config, every option, and the words after its name. */
export interface CommandInput {
  readonly config: CommonConfig;
  readonly values: CommandLineValues;
  readonly args: readonly string[];
}

/** A command: its exit code, or a thrown `UsageError` or `ApiError` that `main` reports. */
export type CommandHandler = (input: CommandInput) => Promise<number>;
