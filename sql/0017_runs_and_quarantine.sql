-- What the tidemark page shows about runs (docs/design.md, "Runs, lag and quarantine").
--
-- One row per ingest or backfill run that finished: what its batches did, how long it took, and
-- who started it. A run that found nothing new is a row too (it says when the pipeline last ran).
CREATE TABLE ingest_runs (
    run_id            text        PRIMARY KEY,  -- a UUID per run of the job
    pipeline          text        NOT NULL,     -- ingest:<topic>, backfill:<topic>
    topic             text        NOT NULL,
    started_by        text        NOT NULL,     -- "airflow <dag_id> <run_id>", or "cli"
    started_at        timestamptz NOT NULL,
    finished_at       timestamptz NOT NULL,
    batches           integer     NOT NULL CHECK (batches >= 0),  -- committed by this run
    records_read      bigint      NOT NULL CHECK (records_read >= 0),
    accepted          bigint      NOT NULL CHECK (accepted >= 0),
    duplicates        bigint      NOT NULL CHECK (duplicates >= 0),
    quarantined       bigint      NOT NULL CHECK (quarantined >= 0),
    sessions_written  bigint      NOT NULL CHECK (sessions_written >= 0),
    sessions_removed  bigint      NOT NULL CHECK (sessions_removed >= 0),
    CHECK (finished_at >= started_at)
);

CREATE INDEX ingest_runs_by_time ON ingest_runs (finished_at);

-- Lag as each scheduled run left it (reconcile_lag has it as each reconcile run measured it).
CREATE TABLE ingest_lag (
    run_id             text        NOT NULL REFERENCES ingest_runs (run_id) ON DELETE CASCADE,
    topic              text        NOT NULL,
    kafka_partition    integer     NOT NULL,
    high_watermark     bigint      NOT NULL,
    processed_to       bigint      NOT NULL,
    behind_records     bigint      NOT NULL,
    oldest_unprocessed timestamptz,
    behind_seconds     double precision NOT NULL,
    PRIMARY KEY (run_id, topic, kafka_partition)
);

-- Per committed batch and quarantine reason: how many records, and a few of them (coordinates,
-- key and value cut short), written in the batch's own ledger transaction. The quarantine Delta
-- table has every record; this is what the page and `tidemark quarantine` show without Spark.
CREATE TABLE quarantine_reasons (
    pipeline  text   NOT NULL,
    batch_id  bigint NOT NULL,
    reason    text   NOT NULL,
    records   bigint NOT NULL CHECK (records > 0),
    samples   jsonb  NOT NULL,  -- [{"topic", "partition", "offset", "arrival_time", "key", "value"}, ...]
    PRIMARY KEY (pipeline, batch_id, reason),
    FOREIGN KEY (pipeline, batch_id) REFERENCES ledger_batches (pipeline, batch_id) ON DELETE CASCADE
);
