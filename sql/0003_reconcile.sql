-- Reconciliation history (DESIGN invariants 1 and 6). One row per reconcile run, and one row per
-- ledger range that run checked. A range counts as verified once a run found it matching; later
-- runs skip it. Mismatched ranges stay unverified and are checked (and alerted on) again.
CREATE TABLE reconcile_runs (
    run_id                      text        PRIMARY KEY,
    counted_at                  timestamptz NOT NULL DEFAULT now(),
    finished_at                 timestamptz,
    status                      text        NOT NULL DEFAULT 'counted'
                                            CHECK (status IN ('counted', 'ok', 'mismatch')),
    delta_sessions              bigint      NOT NULL,
    delta_sessions_checksum     numeric     NOT NULL,
    postgres_sessions           bigint      NOT NULL,
    postgres_sessions_checksum  numeric     NOT NULL,
    ranges_checked              integer,
    ranges_mismatched           integer,
    gaps                        jsonb,
    report                      text
);

CREATE TABLE reconcile_ranges (
    run_id          text    NOT NULL REFERENCES reconcile_runs (run_id) ON DELETE CASCADE,
    pipeline        text    NOT NULL,
    batch_id        bigint  NOT NULL,
    topic           text    NOT NULL,
    kafka_partition integer NOT NULL,
    start_offset    bigint  NOT NULL,
    end_offset      bigint  NOT NULL,
    sink_records    bigint  NOT NULL,  -- events + duplicates + quarantine rows in the range
    kafka_records   bigint,            -- committed records in the range, counted by reading
    matches         boolean,
    PRIMARY KEY (run_id, pipeline, batch_id, topic, kafka_partition)
);

CREATE INDEX reconcile_ranges_verified ON reconcile_ranges (pipeline, batch_id, topic, kafka_partition)
    WHERE matches;
