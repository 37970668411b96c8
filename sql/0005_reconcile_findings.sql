-- Reconciliation that names what is wrong and re-checks what it verified (docs/design.md,
-- "Reconciliation"). A run now records the snapshot it checked (Delta versions), whether it needed
-- Spark, and its findings as structured rows; verified ranges keep the count and checksum they
-- were verified with, so later runs can re-check them after Kafka's retention removed the records.
ALTER TABLE reconcile_runs
    ADD COLUMN delta_versions   jsonb,             -- {"events": 12, ...}: the table versions checked
    ADD COLUMN used_spark       boolean,           -- false: nothing new to check, PostgreSQL only
    ADD COLUMN entities_checked integer,           -- entities whose sessions were recomputed from events
    ADD COLUMN findings         jsonb,             -- [{"kind": ..., ...}], see spark_jobs/findings.py
    ADD COLUMN alert            text,              -- the short alert text (the report has everything)
    ADD COLUMN repair_of        text;              -- set on the re-check a repair runs: the run it repaired

ALTER TABLE reconcile_ranges
    ADD COLUMN sink_checksum numeric,              -- order-independent checksum of the range's rows
    ADD COLUMN reason        text NOT NULL DEFAULT 'new'
                             CHECK (reason IN ('new', 'changed', 'rotation')),
    ADD COLUMN outcome       text CHECK (outcome IN ('ok', 'missing', 'extra', 'changed', 'expired'));

-- The ranges a run found matching Kafka, with what the sinks held then. A range stays here; a
-- later run re-checks it against these numbers (rotation, or a commit that touched its rows).
CREATE TABLE verified_ranges (
    pipeline        text        NOT NULL,
    batch_id        bigint      NOT NULL,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    start_offset    bigint      NOT NULL,
    end_offset      bigint      NOT NULL,
    sink_records    bigint      NOT NULL,
    sink_checksum   numeric     NOT NULL,
    verified_by     text        NOT NULL,      -- the reconcile run that first found it matching
    verified_at     timestamptz NOT NULL DEFAULT now(),
    checked_at      timestamptz NOT NULL DEFAULT now(),  -- the last run that found it unchanged
    PRIMARY KEY (pipeline, batch_id, topic, kafka_partition),
    FOREIGN KEY (pipeline, batch_id) REFERENCES ledger_batches (pipeline, batch_id) ON DELETE CASCADE
);

CREATE INDEX verified_ranges_by_check ON verified_ranges (checked_at);

-- What `tidemark repair` did about a run's findings, and the re-check that followed.
CREATE TABLE repairs (
    repair_id       text        PRIMARY KEY,
    reconcile_run   text        NOT NULL REFERENCES reconcile_runs (run_id) ON DELETE CASCADE,
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    actions         jsonb       NOT NULL DEFAULT '[]',
    recheck_run     text,
    status          text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'ok', 'mismatch', 'failed'))
);

-- Ranges verified before this migration carry no checksum: the next run checks them once more
-- against Kafka (or reports them expired) and records one.
