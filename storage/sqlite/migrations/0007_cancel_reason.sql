-- Why a run's cancel intent was recorded: 'user' (an explicit cancel) or 'shutdown' (the run is
-- cancelled because the runtime shuts down). Convergence projects it onto every live attempt's
-- stop intent, so remote workers are told `stop_requested(cancel)` or `stop_requested(shutdown)`.
-- NULL exactly when there is no cancel intent; intents recorded before this column were users'.
ALTER TABLE runs ADD COLUMN cancel_reason TEXT CHECK (cancel_reason IN ('user', 'shutdown'));
UPDATE runs SET cancel_reason = 'user' WHERE cancel_requested_at_ms IS NOT NULL;
