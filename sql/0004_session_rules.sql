-- The session rules (inactivity gap, maximum length) sessions are built with. Each batch records
-- the rules it used; `session_rules` holds every change, the newest row being the rules the stored
-- sessions follow. A run with other rules is refused unless it rebuilds every session first.
ALTER TABLE ledger_batches
    ADD COLUMN session_gap_seconds double precision CHECK (session_gap_seconds > 0),
    ADD COLUMN session_max_seconds double precision CHECK (session_max_seconds > 0);

CREATE TABLE session_rules (
    changed_at          timestamptz      PRIMARY KEY DEFAULT clock_timestamp(),
    gap_seconds         double precision NOT NULL CHECK (gap_seconds > 0),
    max_length_seconds  double precision NOT NULL CHECK (max_length_seconds >= gap_seconds),
    reason              text             NOT NULL
);
