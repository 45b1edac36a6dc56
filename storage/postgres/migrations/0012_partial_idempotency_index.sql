-- The idempotency key's unique index holds only the runs that have a key. The column's UNIQUE
-- constraint indexed every run, most of them with a NULL key, and PostgreSQL writes an entry
-- into each index of a row at every update that is not HOT, which every status change of a run
-- is (the status is indexed): one index insertion saved per run update. A lookup by key
-- (`idempotency_key = $1`) implies the key is not NULL, so it uses this index as before.
ALTER TABLE runs DROP CONSTRAINT runs_idempotency_key_key;
CREATE UNIQUE INDEX runs_idempotency_key ON runs (idempotency_key) WHERE idempotency_key IS NOT NULL;
