-- Retention (bounded history). The purge stage walks finished runs by finish time, then id. Only
-- terminal runs have a finish time (a retry back to queued clears it), so the index holds the
-- retained history and nothing else. Its predicate is the finish time alone, not the status:
-- SQLite's planner otherwise prefers runs_by_status and sorts, which costs tens of ms per pass
-- over 10 000 runs; the core still checks the status of every candidate.
CREATE INDEX runs_terminal_by_finish ON runs (finished_at_ms, id) WHERE finished_at_ms IS NOT NULL;
-- A schedule's last run is never purged (its overlap rule reads it); the check is by run id.
CREATE INDEX schedules_last_run ON schedules (last_run_id) WHERE last_run_id IS NOT NULL;
-- The purge deletes a run's admission receipts and events by run id (both primary keys start
-- with run_id); attempts, steps and mutations by run id too (their indexes above start with it).
