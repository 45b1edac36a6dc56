-- Fewer bytes per event. An event whose id is the one derived from its run and sequence (every
-- `evt:` id) is stored with id NULL; the store derives it again when it reads the row, so the
-- API answers the same id. Ids that cannot be derived (an admitted attempt's `wte:` event)
-- are stored and stay unique (a unique constraint ignores NULLs). Rows written before keep
-- their stored ids.
ALTER TABLE run_events ALTER COLUMN id DROP NOT NULL;
