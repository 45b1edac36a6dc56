-- Alerts: the notification outbox. The store writes one row per notifier in the same
-- transaction as a run's failed, timed-out or lost transition; the cadence's notifications
-- stage claims due rows (next_attempt_at_ms doubles as the claim's expiry), sends them and
-- records the outcome under a version CAS. The payload is fixed at insert, so every attempt
-- sends the same body with the same idempotency key (the id).
CREATE TABLE notifications (
  id TEXT PRIMARY KEY,
  run_id TEXT NOT NULL,
  package TEXT NOT NULL,
  event TEXT NOT NULL CHECK (event IN ('run.failed', 'run.timed_out', 'run.lost')),
  notifier TEXT NOT NULL,
  payload TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
  attempts INTEGER NOT NULL,
  next_attempt_at_ms BIGINT NOT NULL,
  last_error TEXT,
  created_at_ms BIGINT NOT NULL,
  updated_at_ms BIGINT NOT NULL,
  delivered_at_ms BIGINT,
  version INTEGER NOT NULL
);
-- The drain reads due pending rows in time order; delivered and failed rows leave the index.
CREATE INDEX notifications_due ON notifications (next_attempt_at_ms, id) WHERE state = 'pending';
-- The API lists a run's notifications, and retention deletes them with the run.
CREATE INDEX notifications_by_run ON notifications (run_id, id);
