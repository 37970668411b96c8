-- The fenced single writer (docs/design.md, "One fenced writer").
--
-- One run at a time writes the lake and PostgreSQL's sessions: it holds a session-level advisory
-- lock. Taking the lock increments `epoch`; every batch proves, in the transaction that commits its
-- ledger row, that the epoch is still its own and that its lock's backend still holds the lock,
-- holding this row FOR SHARE until it commits. A run that lost its lock (idle timeout, failover,
-- pooler, pg_terminate_backend) therefore cannot commit once another run took over, and the run
-- taking over waits for a batch in flight.
CREATE TABLE writer_epochs (
    name        text        PRIMARY KEY,
    epoch       bigint      NOT NULL CHECK (epoch >= 0),
    holder      text,                                  -- e.g. "ingest:events on host (pid 123)"
    acquired_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO writer_epochs (name, epoch) VALUES ('lake', 0);
