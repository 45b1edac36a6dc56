-- Fewer bytes per event. An event whose id is the one derived from its run and sequence (every
-- `evt:` id) is stored with id NULL; the store derives it again when it reads the row, so the
-- API answers the same id. Each such id was 36 bytes in the row and again in the unique index,
-- random-looking to compression: the largest part of what a step adds to a snapshot. Ids that
-- cannot be derived (an admitted attempt's `wte:` event) are stored and stay unique.
-- The table is also keyed by its primary key (WITHOUT ROWID), which drops the separate
-- (run_id, seq) index a rowid table keeps beside it. SQLite cannot relax NOT NULL in place,
-- so the table is rebuilt with the same rows; rows written before keep their stored ids.
CREATE TABLE run_events_next (
  run_id TEXT NOT NULL REFERENCES runs (id),
  seq INTEGER NOT NULL,
  id TEXT UNIQUE,
  type TEXT NOT NULL,
  at_ms INTEGER NOT NULL,
  step_run_id TEXT,
  attempt_id TEXT,
  data TEXT NOT NULL,
  PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
INSERT INTO run_events_next (run_id, seq, id, type, at_ms, step_run_id, attempt_id, data)
  SELECT run_id, seq, id, type, at_ms, step_run_id, attempt_id, data FROM run_events;
DROP TABLE run_events;
ALTER TABLE run_events_next RENAME TO run_events;
-- Step mutations keyed by their primary key (WITHOUT ROWID): a step's mutations then sit side
-- by side, so each from_digest follows the to_digest it repeats and compresses to a reference
-- in a snapshot, and the separate (step_run_id, version) index a rowid table keeps is gone.
CREATE TABLE step_mutations_next (
  run_id TEXT NOT NULL REFERENCES runs (id),
  step_run_id TEXT NOT NULL REFERENCES step_runs (id),
  version INTEGER NOT NULL,
  from_status TEXT,
  to_status TEXT NOT NULL,
  from_digest TEXT,
  to_digest TEXT NOT NULL,
  event_seq INTEGER NOT NULL,
  at_ms INTEGER NOT NULL,
  PRIMARY KEY (step_run_id, version)
) WITHOUT ROWID;
INSERT INTO step_mutations_next (run_id, step_run_id, version, from_status, to_status, from_digest, to_digest, event_seq, at_ms)
  SELECT run_id, step_run_id, version, from_status, to_status, from_digest, to_digest, event_seq, at_ms FROM step_mutations;
DROP TABLE step_mutations;
ALTER TABLE step_mutations_next RENAME TO step_mutations;
CREATE INDEX step_mutations_by_run ON step_mutations (run_id, event_seq);
