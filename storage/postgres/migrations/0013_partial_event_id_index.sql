-- The events' unique index on their stored id holds only the ids that are stored. Since 0009 an
-- event whose id derives from its run and sequence (every `evt:` id, most events) is stored with
-- id NULL, and the column's UNIQUE constraint still wrote an index entry for each NULL: about
-- six index insertions per workflow step that guarded nothing. Ids that are stored (an admitted
-- attempt's `wte:` event) stay unique; nothing reads events by id.
ALTER TABLE run_events DROP CONSTRAINT run_events_id_key;
CREATE UNIQUE INDEX run_events_stored_id ON run_events (id) WHERE id IS NOT NULL;
