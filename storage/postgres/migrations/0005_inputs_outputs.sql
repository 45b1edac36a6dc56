-- Run inputs, step outputs and reruns. A run keeps its resolved input (canonical JSON, '{}' when
-- none) and the run it reruns; an attempt keeps the JSON result its task left (canonical JSON,
-- NULL for none), recorded once with its completion; a step keeps the output the steps that
-- need it receive (its succeeded attempt's, or the one a rerun reused).
ALTER TABLE runs ADD COLUMN input TEXT NOT NULL DEFAULT '{}';
ALTER TABLE runs ADD COLUMN rerun_of TEXT;
ALTER TABLE step_runs ADD COLUMN output TEXT;
ALTER TABLE run_attempts ADD COLUMN output TEXT;
