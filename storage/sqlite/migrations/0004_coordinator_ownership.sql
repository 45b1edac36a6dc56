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
  started_at_ms INTEGER NOT NULL,
  heartbeat_at_ms INTEGER NOT NULL,
  lease_expires_at_ms INTEGER NOT NULL
);
ALTER TABLE run_attempts ADD COLUMN owner_node_id TEXT;
-- Execution control and recovery walk live attempts of one owner.
CREATE INDEX run_attempts_live_by_owner ON run_attempts (owner_node_id, executor, status, id) WHERE status IN ('claimed', 'starting', 'running');
