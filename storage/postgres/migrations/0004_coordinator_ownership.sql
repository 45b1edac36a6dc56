-- Several coordinators on one database. Each registers its node (a stable identity kept in its
-- state dir, so a restart on the same host is the same node) with a lease in store time; every
-- local attempt records the node that dispatched it. Recovery and execution control act only
-- on their own node's attempts: another node's journal, receipts and processes are on another
-- host and are never guessed at.
CREATE TABLE coordinators (
  node_id TEXT PRIMARY KEY,
  incarnation INTEGER NOT NULL CHECK (incarnation >= 1),
  host TEXT NOT NULL,
  boot_id TEXT,
  started_at_ms BIGINT NOT NULL,
  heartbeat_at_ms BIGINT NOT NULL,
  lease_expires_at_ms BIGINT NOT NULL
);
ALTER TABLE run_attempts ADD COLUMN owner_node_id TEXT;
-- Execution control and recovery walk live attempts of one owner.
CREATE INDEX run_attempts_live_by_owner ON run_attempts (owner_node_id, executor, status, id) WHERE status IN ('claimed', 'starting', 'running');
-- With store time from the database server, the fail-closed watermark lives in a sequence:
-- reading or setting a sequence takes no serializable read lock and is never rolled back, so
-- the one value every write transaction reads cannot make concurrent coordinators conflict.
-- It starts at whatever the host-clock era observed.
CREATE SEQUENCE qlr_store_clock_watermark MINVALUE 0 START WITH 0;
SELECT setval('qlr_store_clock_watermark', (SELECT last_observed_ms FROM qlr_store_clock WHERE id = 1));
