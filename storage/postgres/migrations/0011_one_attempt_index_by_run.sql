-- One index fewer to write per attempt. run_attempts_by_run (run_id, number) repeated, column
-- for column, the index of the UNIQUE (run_id, number) constraint: every attempt inserted, and
-- every update of an attempt's status (never a HOT update on PostgreSQL, since the status is
-- indexed), wrote an entry into both. A run's attempts are read through the constraint's index.
DROP INDEX run_attempts_by_run;
