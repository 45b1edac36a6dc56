-- The first schema of the PostgreSQL dialect. Time columns hold epoch milliseconds passed in by
-- the core (never the database clock); JSON columns hold canonical JSON text.
CREATE TABLE qlr_store_clock (
  id SMALLINT PRIMARY KEY CHECK (id = 1),
  last_observed_ms BIGINT NOT NULL
);
INSERT INTO qlr_store_clock (id, last_observed_ms) VALUES (1, 0);
CREATE TABLE packages (
  name TEXT PRIMARY KEY,
  generation INTEGER NOT NULL,
  manifest_digest TEXT NOT NULL,
  reconciliation_digest TEXT NOT NULL,
  updated_at_ms BIGINT NOT NULL
);
CREATE TABLE generations (
  package TEXT NOT NULL,
  generation INTEGER NOT NULL,
  manifest_digest TEXT NOT NULL,
  reconciliation_digest TEXT NOT NULL,
  manifest TEXT NOT NULL,
  created_at_ms BIGINT NOT NULL,
  PRIMARY KEY (package, generation)
);
CREATE TABLE reconciliation_receipts (
  digest TEXT PRIMARY KEY,
  package TEXT NOT NULL,
  generation INTEGER NOT NULL,
  body TEXT NOT NULL
);
CREATE TABLE task_definitions (
  revision TEXT PRIMARY KEY,
  reconciliation_digest TEXT NOT NULL,
  task TEXT NOT NULL,
  body TEXT NOT NULL,
  UNIQUE (reconciliation_digest, task)
);
CREATE TABLE workflow_plans (
  digest TEXT PRIMARY KEY,
  package TEXT NOT NULL,
  generation INTEGER NOT NULL,
  workflow TEXT NOT NULL,
  body TEXT NOT NULL,
  UNIQUE (package, generation, workflow)
);
CREATE TABLE schedules (
  package TEXT NOT NULL,
  name TEXT NOT NULL,
  generation INTEGER NOT NULL,
  spec TEXT NOT NULL,
  next_fire_at_ms BIGINT,
  last_fire_at_ms BIGINT,
  last_run_id TEXT,
  missed_fires INTEGER NOT NULL,
  skipped_overlaps INTEGER NOT NULL,
  version INTEGER NOT NULL,
  PRIMARY KEY (package, name)
);
CREATE INDEX schedules_due ON schedules (next_fire_at_ms) WHERE next_fire_at_ms IS NOT NULL;
CREATE TABLE runs (
  id TEXT PRIMARY KEY,
  kind TEXT NOT NULL CHECK (kind IN ('ordinary', 'workflow')),
  package TEXT NOT NULL,
  generation INTEGER NOT NULL,
  target TEXT NOT NULL,
  plan_digest TEXT,
  reconciliation_digest TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('queued', 'dispatching', 'running', 'succeeded', 'failed', 'timed_out', 'cancelled', 'lost')),
  version INTEGER NOT NULL,
  event_seq INTEGER NOT NULL,
  attempt_seq INTEGER NOT NULL,
  idempotency_key TEXT UNIQUE,
  schedule_name TEXT,
  cancel_requested_at_ms BIGINT,
  not_before_ms BIGINT,
  created_at_ms BIGINT NOT NULL,
  updated_at_ms BIGINT NOT NULL,
  finished_at_ms BIGINT,
  frontier_due INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_by_status ON runs (status, id);
CREATE INDEX runs_cancelling ON runs (id) WHERE cancel_requested_at_ms IS NOT NULL AND status IN ('queued', 'dispatching', 'running');
CREATE INDEX runs_frontier_due ON runs (id) WHERE frontier_due = 1;
CREATE INDEX runs_queued_ordinary ON runs (id) WHERE status = 'queued';
CREATE TABLE step_runs (
  id TEXT PRIMARY KEY,
  run_id TEXT NOT NULL REFERENCES runs (id),
  position INTEGER NOT NULL,
  name TEXT NOT NULL,
  task TEXT NOT NULL,
  needs TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pending', 'ready', 'running', 'succeeded', 'failed', 'timed_out', 'cancelled', 'skipped')),
  version INTEGER NOT NULL,
  digest TEXT NOT NULL,
  attempt_count INTEGER NOT NULL,
  ready_at_ms BIGINT,
  not_before_ms BIGINT,
  started_at_ms BIGINT,
  finished_at_ms BIGINT,
  created_at_ms BIGINT NOT NULL,
  UNIQUE (run_id, name)
);
CREATE INDEX step_runs_ready ON step_runs (run_id, id) WHERE status = 'ready';
CREATE TABLE run_attempts (
  id TEXT PRIMARY KEY,
  run_id TEXT NOT NULL REFERENCES runs (id),
  step_run_id TEXT REFERENCES step_runs (id),
  step_run_version INTEGER,
  number INTEGER NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('claimed', 'starting', 'running', 'succeeded', 'failed', 'timed_out', 'cancelled', 'lost')),
  executor TEXT NOT NULL CHECK (executor IN ('local_process', 'remote_worker')),
  pool TEXT,
  version INTEGER NOT NULL,
  created_at_ms BIGINT NOT NULL,
  started_at_ms BIGINT,
  finished_at_ms BIGINT,
  deadline_at_ms BIGINT,
  timeout_ms BIGINT NOT NULL,
  exit_code INTEGER,
  signal TEXT,
  pid INTEGER,
  process_start_ticks TEXT,
  boot_id TEXT,
  stop_reason TEXT CHECK (stop_reason IN ('cancel', 'timeout', 'shutdown')),
  stop_requested_at_ms BIGINT,
  error TEXT,
  lease_worker_id TEXT,
  lease_version INTEGER NOT NULL,
  lease_expires_at_ms BIGINT,
  UNIQUE (run_id, number)
);
CREATE INDEX run_attempts_live ON run_attempts (executor, status, id) WHERE status IN ('claimed', 'starting', 'running');
CREATE INDEX run_attempts_lease_expiry ON run_attempts (lease_expires_at_ms) WHERE executor = 'remote_worker' AND lease_expires_at_ms IS NOT NULL AND status IN ('claimed', 'starting', 'running');
CREATE INDEX run_attempts_by_run ON run_attempts (run_id, number);
CREATE INDEX run_attempts_remote_claimable ON run_attempts (pool, id) WHERE executor = 'remote_worker' AND status = 'claimed';
CREATE TABLE admission_receipts (
  run_id TEXT NOT NULL REFERENCES runs (id),
  step_run_id TEXT NOT NULL REFERENCES step_runs (id),
  step_run_version INTEGER NOT NULL,
  attempt_id TEXT NOT NULL UNIQUE,
  event_id TEXT NOT NULL UNIQUE,
  digest TEXT NOT NULL,
  body TEXT NOT NULL,
  PRIMARY KEY (run_id, step_run_id, step_run_version)
);
CREATE TABLE run_events (
  run_id TEXT NOT NULL REFERENCES runs (id),
  seq INTEGER NOT NULL,
  id TEXT NOT NULL UNIQUE,
  type TEXT NOT NULL,
  at_ms BIGINT NOT NULL,
  step_run_id TEXT,
  attempt_id TEXT,
  data TEXT NOT NULL,
  PRIMARY KEY (run_id, seq)
);
CREATE TABLE step_mutations (
  run_id TEXT NOT NULL REFERENCES runs (id),
  step_run_id TEXT NOT NULL REFERENCES step_runs (id),
  version INTEGER NOT NULL,
  from_status TEXT,
  to_status TEXT NOT NULL,
  from_digest TEXT,
  to_digest TEXT NOT NULL,
  event_seq INTEGER NOT NULL,
  at_ms BIGINT NOT NULL,
  PRIMARY KEY (step_run_id, version)
);
-- Foreign-key checks and per-run listings look mutations up by run.
CREATE INDEX step_mutations_by_run ON step_mutations (run_id, event_seq);
