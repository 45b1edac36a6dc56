-- Fewer bytes per step. An admission receipt stored each of its values two or three times: the
-- attempt id, event id and digest as columns (each with a unique index) and again in the JSON
-- body, and the step's ready digest, which the step's mutation of that version already holds.
-- Now the row keeps its key and a body without what the key determines: the run, step and
-- epoch are the key's columns, the attempt and event ids derive from them, and the step's
-- digest is read from the step mutation of the receipt's epoch (the primary key of
-- step_mutations). The receipt's own digest stays in the body and is checked on replay, so a
-- value read back wrong fails it. The attempt and event ids stay unique where they are stored
-- (run_attempts, run_events) and follow from the key here. Keyed by its primary key
-- (WITHOUT ROWID), the table has no separate key index. Rows written before keep their whole
-- bodies, which the store reads as they are.
CREATE TABLE admission_receipts_next (
  run_id TEXT NOT NULL REFERENCES runs (id),
  step_run_id TEXT NOT NULL REFERENCES step_runs (id),
  step_run_version INTEGER NOT NULL,
  body TEXT NOT NULL,
  PRIMARY KEY (run_id, step_run_id, step_run_version)
) WITHOUT ROWID;
INSERT INTO admission_receipts_next (run_id, step_run_id, step_run_version, body)
  SELECT run_id, step_run_id, step_run_version, body FROM admission_receipts;
DROP TABLE admission_receipts;
ALTER TABLE admission_receipts_next RENAME TO admission_receipts;
