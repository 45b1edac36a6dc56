-- A run's rows reference their run (and step) through the store's rule instead of foreign keys.
-- On PostgreSQL each foreign key is a trigger that runs a lookup for every inserted row and
-- locks the referenced row (FOR KEY SHARE): about seventeen of them per workflow step, 11-20 %
-- of the server's CPU per step (docs/PERFORMANCE.md). The store already refuses any change that writes a step, attempt,
-- receipt, event or mutation of a run without moving that run's version by compare-and-set in
-- the same transaction (change-writer.ts), so the run exists when its rows are written and a
-- concurrent delete of it (retention's, the only one, children first) fails one of the two.
-- SQLite keeps its foreign keys: a check there is an index probe, with no lock.
ALTER TABLE step_runs DROP CONSTRAINT step_runs_run_id_fkey;
ALTER TABLE run_attempts DROP CONSTRAINT run_attempts_run_id_fkey;
ALTER TABLE run_attempts DROP CONSTRAINT run_attempts_step_run_id_fkey;
ALTER TABLE admission_receipts DROP CONSTRAINT admission_receipts_run_id_fkey;
ALTER TABLE admission_receipts DROP CONSTRAINT admission_receipts_step_run_id_fkey;
ALTER TABLE run_events DROP CONSTRAINT run_events_run_id_fkey;
ALTER TABLE step_mutations DROP CONSTRAINT step_mutations_run_id_fkey;
ALTER TABLE step_mutations DROP CONSTRAINT step_mutations_step_run_id_fkey;
