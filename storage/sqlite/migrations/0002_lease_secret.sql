-- The lease secret: a worker proves it holds a lease with the random secret it got at claim,
-- not with its worker id and lease version alone (both appear in events and answers). Only
-- the secret's sha256 is stored. A lease granted before this migration has none and is
-- refused; its attempt is settled by lease expiry like any lease whose worker went away.
ALTER TABLE run_attempts ADD COLUMN lease_secret_digest TEXT CHECK (lease_secret_digest IS NULL OR length(lease_secret_digest) = 64);
