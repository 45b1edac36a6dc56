-- A workflow step that ends failed or timed out fires its task's notifiers: the outbox takes
-- step events and names the step. SQLite cannot change a CHECK in place, so the table is
-- rebuilt with the same rows (a step event never existed before this migration).
CREATE TABLE notifications_next (
  id TEXT PRIMARY KEY,
  run_id TEXT NOT NULL,
  package TEXT NOT NULL,
  event TEXT NOT NULL CHECK (event IN ('run.failed', 'run.timed_out', 'run.lost', 'step.failed', 'step.timed_out')),
  notifier TEXT NOT NULL,
  payload TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
  attempts INTEGER NOT NULL,
  next_attempt_at_ms INTEGER NOT NULL,
  last_error TEXT,
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL,
  delivered_at_ms INTEGER,
  version INTEGER NOT NULL,
  step_name TEXT
);
INSERT INTO notifications_next (id, run_id, package, event, notifier, payload, state, attempts, next_attempt_at_ms, last_error, created_at_ms, updated_at_ms, delivered_at_ms, version)
  SELECT id, run_id, package, event, notifier, payload, state, attempts, next_attempt_at_ms, last_error, created_at_ms, updated_at_ms, delivered_at_ms, version FROM notifications;
DROP TABLE notifications;
ALTER TABLE notifications_next RENAME TO notifications;
CREATE INDEX notifications_due ON notifications (next_attempt_at_ms, id) WHERE state = 'pending';
CREATE INDEX notifications_by_run ON notifications (run_id, id);
