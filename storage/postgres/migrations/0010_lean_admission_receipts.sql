-- Fewer bytes per step. An admission receipt stored its attempt id, event id and digest as
-- columns (each with a unique index) and again in the JSON body. Now the row keeps its key and
-- a body without what the key determines: the run, step and epoch are the key's columns, the
-- attempt and event ids derive from them, and the step's digest is read from the step mutation
-- of the receipt's epoch. The receipt's own digest stays in the body and is checked on replay.
-- The attempt and event ids stay unique where they are stored (run_attempts, run_events).
-- Rows written before keep their whole bodies, which the store reads as they are.
ALTER TABLE admission_receipts
  DROP COLUMN attempt_id,
  DROP COLUMN event_id,
  DROP COLUMN digest;
