-- A workflow step that ends failed or timed out fires its task's notifiers: the outbox takes
-- step events and names the step.
ALTER TABLE notifications DROP CONSTRAINT notifications_event_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_event_check
  CHECK (event IN ('run.failed', 'run.timed_out', 'run.lost', 'step.failed', 'step.timed_out'));
ALTER TABLE notifications ADD COLUMN step_name TEXT;
