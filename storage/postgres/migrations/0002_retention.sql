-- Retention (bounded history). The purge stage walks terminal runs by finish time, then id; the
-- index holds only terminal runs, so its size follows the retained history, and queries repeat
-- the same status predicate so both dialects use it.
CREATE INDEX runs_terminal_by_finish ON runs (finished_at_ms, id) WHERE status IN ('succeeded', 'failed', 'timed_out', 'cancelled', 'lost') AND finished_at_ms IS NOT NULL;
-- A schedule's last run is never purged (its overlap rule reads it); the check is by run id.
CREATE INDEX schedules_last_run ON schedules (last_run_id) WHERE last_run_id IS NOT NULL;
-- The purge deletes a run's admission receipts and events by run id (both primary keys start
-- with run_id); attempts, steps and mutations by run id too (their indexes above start with it).
