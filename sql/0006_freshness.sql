-- Freshness (docs/design.md, "Reconciliation"): per reconcile run and partition, how far the sinks
-- are behind Kafka. A run whose lag passes TIDEMARK_LAG_ALERT_MINUTES is 'lagging' (alerted on);
-- data findings still make it 'mismatch'.
CREATE TABLE reconcile_lag (
    run_id             text        NOT NULL REFERENCES reconcile_runs (run_id) ON DELETE CASCADE,
    topic              text        NOT NULL,
    kafka_partition    integer     NOT NULL,
    high_watermark     bigint      NOT NULL,  -- the next offset Kafka will write
    processed_to       bigint      NOT NULL,  -- the end of the furthest ledger range
    behind_records     bigint      NOT NULL,  -- offsets in [processed_to, high_watermark)
    oldest_unprocessed timestamptz,           -- arrival time of the record at processed_to
    behind_seconds     double precision NOT NULL,
    PRIMARY KEY (run_id, topic, kafka_partition)
);

ALTER TABLE reconcile_runs DROP CONSTRAINT reconcile_runs_status_check;
ALTER TABLE reconcile_runs ADD CONSTRAINT reconcile_runs_status_check
    CHECK (status IN ('counted', 'ok', 'mismatch', 'lagging'));

-- How long the run held the lake lock (writers wait at most that long, plus one batch), and Delta
-- sessions' rows and checksum per entity bucket, which the next run updates from the files that
-- changed instead of reading the whole table.
ALTER TABLE reconcile_runs
    ADD COLUMN snapshot_seconds      double precision,
    ADD COLUMN delta_session_buckets jsonb;
