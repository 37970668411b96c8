-- Records Kafka's retention removed before tidemark read them (docs/design.md, "Retention").
--
-- Where a scheduled pipeline started reading each partition: its first run (or the first run
-- after the partition was added) records the offset it started from and the broker's low
-- watermark at that moment. A partition whose first retained offset is above 0 lost records before
-- tidemark could read them: the run fails unless the loss is acknowledged.
CREATE TABLE pipeline_starts (
    pipeline        text        NOT NULL,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL CHECK (kafka_partition >= 0),
    start_offset    bigint      NOT NULL CHECK (start_offset >= 0),
    low_watermark   bigint      NOT NULL CHECK (low_watermark >= 0),
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, topic, kafka_partition)
);

-- Offsets [start_offset, end_offset) the broker no longer held when a pipeline needed them, which
-- an operator acknowledged (--allow-data-loss): before the pipeline's first run of the partition,
-- or between two runs. Reconcile reports them every run; they are not gaps and not mismatches.
CREATE TABLE retention_losses (
    pipeline         text        NOT NULL,
    topic            text        NOT NULL,
    kafka_partition  integer     NOT NULL CHECK (kafka_partition >= 0),
    start_offset     bigint      NOT NULL CHECK (start_offset >= 0),
    end_offset       bigint      NOT NULL,
    before_first_run boolean     NOT NULL,
    acknowledged_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, topic, kafka_partition, start_offset),
    CHECK (end_offset > start_offset)
);
